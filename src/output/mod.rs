//! Output: turn decoded messages and map contents into bpftrace-compatible text.

pub mod agg;
mod cvalue;
pub mod helper_error;
pub mod hist;
pub mod json;
pub mod lookup;
pub mod maps;
pub mod printer;
pub mod printf;
pub mod text;
pub mod time;
pub mod value;
