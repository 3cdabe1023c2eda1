//! Runtime: find what probes attach to on this machine ([`targets`]), load
//! and attach compiled programs and read their maps ([`bpf`]), and run a
//! tracing session that turns their messages into output and captures
//! ([`session`]).

pub mod bpf;
pub mod kallsyms;
mod ksym;
pub mod recorder;
pub mod session;
pub mod targets;
pub mod threads;
