//! Runtime: find attach targets, load and attach compiled programs, collect messages.

pub mod elf;
pub mod elf_object;
pub mod features;
pub mod loader;
pub mod maps_read;
pub mod perf_event;
pub mod tracefs;
