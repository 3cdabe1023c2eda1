//! Runtime, attach targets: what this machine offers probes. Resolves
//! binaries and their functions and USDT notes, reads tracepoint formats and
//! kernel BTF, and detects the kernel's tracing features. Output: the
//! answers of [`environment::SystemEnvironment`] to the checker, and
//! [`features::KernelFeatures`].

mod binary_glob;
mod debug_info;
pub mod elf;
pub mod environment;
pub mod features;
pub mod info;
mod kallsyms;
pub(crate) mod kernel_btf;
pub mod kernel_functions;
pub mod library_search;
pub mod probe_load;
pub mod tracefs;
pub mod usdt;
