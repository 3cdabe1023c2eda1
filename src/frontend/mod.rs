//! Front end: script text → syntax tree → checked program, with diagnostics.

pub mod ast;
pub mod check;
pub mod check_expr;
mod check_kernel;
mod check_place;
pub(crate) mod check_record;
mod check_types;
mod check_update;
pub mod checked;
pub mod ctypes;
pub mod diag;
// Fuzz targets (`fuzz/`, built with `--cfg fuzzing`) compile on it too.
#[cfg(any(test, fuzzing))]
pub mod fake_machine;
pub mod limits;
pub mod options;
pub mod parse;
pub mod pmu;
pub mod positional;
pub mod preprocess;
pub mod shift;
pub mod types;
