//! Runtime, BPF objects: takes codegen's `Compiled`, creates its maps, loads
//! its programs, attaches them, opens the `--pmu` counters, and reads the
//! ring buffer and maps back. Output: a [`loader::Loaded`] that owns every
//! kernel object.

mod attach;
pub mod counters;
mod elf_object;
mod libbpf_log;
pub mod loader;
mod map_btf;
pub mod maps_read;
mod perf_event;
#[cfg(test)]
mod test_support;
