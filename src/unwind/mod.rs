//! User-stack unwinding without frame pointers, from the binaries' own call
//! frame information (`docs/unwinding.md`).
//!
//! Stages: an ELF file → [`cfi`] (gimli reads `.eh_frame`/`.debug_frame`) →
//! [`table`] (sorted, merged [`rules::Row`]s) → the BPF maps filled by the
//! table manager → the BPF unwinder that walks a stack with them.

pub mod cfi;
pub mod rules;
pub mod table;
