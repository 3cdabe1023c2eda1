//! Runtime, BPF objects: takes codegen's `Compiled`, creates its maps, loads
//! its programs, attaches them, opens the `--pmu` counters, and reads the
//! ring buffer and maps back. Output: a [`loader::Loaded`] that owns every
//! kernel object.

mod attach;
pub mod counters;
mod direct;
mod elf_functions;
mod elf_object;
pub mod ksym_range;
mod libbpf_log;
pub mod loader;
mod map_btf;
mod maps_create;
pub mod maps_read;
pub(crate) mod perf_event;
pub mod stack_skip;
pub mod syscall_program;
#[cfg(test)]
pub(crate) mod test_support;
