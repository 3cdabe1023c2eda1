//! Runtime: find attach targets, load and attach compiled programs, collect messages.

pub mod child;
pub mod elf;
mod elf_object;
pub mod environment;
pub mod features;
pub mod loader;
pub mod maps_read;
mod perf_event;
pub mod session;
mod teardown;
pub mod tracefs;
pub mod usdt;
