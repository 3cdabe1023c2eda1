//! Integration tests: the `wprof` binary against the real kernel. Real BPF,
//! real attach, trigger programs built from `tests/data/*.c`; a kernel feature
//! this machine lacks skips its test with a printed reason.
//!
//! One test binary (as in blazesym): the tests live in `tests/suite/`.

mod common;
mod suite;
