//! Runtime: find attach targets, load and attach compiled programs, collect messages.

pub mod elf;
pub mod environment;
pub mod features;
pub mod loader;
pub mod tracefs;
pub mod usdt;
pub mod child;
pub mod session;
