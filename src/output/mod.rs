//! Output: turn decoded messages and map contents into bpftrace-compatible text.

pub mod agg;
mod cvalue;
pub mod hist;
pub mod maps;
pub mod printer;
pub mod printf;
pub mod time;
pub mod value;
