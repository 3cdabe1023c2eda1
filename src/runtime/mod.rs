//! Runtime: find attach targets, load and attach compiled programs, collect messages.

pub mod activation;
mod attach;
pub mod child;
pub mod counters;
pub mod elf;
mod elf_functions;
mod elf_object;
pub mod environment;
pub mod features;
mod kernel_btf;
mod libbpf_log;
pub mod loader;
mod map_btf;
pub mod maps_read;
mod perf_event;
pub mod recording;
pub mod session;
mod teardown;
#[cfg(test)]
mod test_support;
pub mod tracefs;
pub mod usdt;
