//! Runtime: find attach targets, load and attach compiled programs, collect messages.

pub mod activation;
mod attach;
pub mod child;
pub mod elf;
mod elf_object;
pub mod environment;
pub mod features;
pub mod kallsyms;
mod libbpf_log;
pub mod loader;
pub mod maps_read;
mod perf_event;
pub mod recorder;
pub mod session;
mod teardown;
#[cfg(test)]
mod test_support;
pub mod threads;
pub mod tracefs;
pub mod usdt;
