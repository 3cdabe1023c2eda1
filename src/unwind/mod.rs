//! User-stack unwinding without frame pointers, from the binaries' own call
//! frame information (`docs/unwinding.md`).
//!
//! Stages: an ELF file → [`cfi`] (gimli reads `.eh_frame`/`.debug_frame`) →
//! [`table`] (sorted, merged [`rules::Row`]s) → [`manager`] (one table per
//! build id, placed in the BPF maps of [`maps`], process mappings from
//! [`proc_maps`]) → [`bpf`], the BPF functions that walk a stack with them
//! (a task's last walk reused by [`walk_cache_bpf`] while it holds, code
//! mapped since the last read found through the kernel by [`vma_bpf`]);
//! [`snapshot`] walks a stack copied where no table was loaded yet.
//!
//! Kernel stacks: the kernel's own ORC tables, copied out by [`orc_read`]
//! and built by [`orc`], placed in the maps of [`orc_maps`], walked by
//! [`orc_bpf`] (proved against `bpf_get_stack` with [`orc_oracle`]).

mod alloc;
pub mod bpf;
pub mod builder;
pub mod cfi;
pub mod layout;
pub mod loader_search;
pub mod manager;
pub mod maps;
pub mod orc;
pub mod orc_bpf;
pub mod orc_maps;
pub mod orc_oracle;
pub mod orc_read;
pub mod proc_maps;
pub mod program_files;
pub mod rules;
pub mod sampler;
pub mod snapshot;
pub mod table;
mod vma_bpf;
mod walk_cache_bpf;
