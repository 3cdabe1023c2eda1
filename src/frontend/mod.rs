//! Front end: script text → syntax tree → checked program, with diagnostics.

pub mod ast;
pub mod diag;
pub mod parse;
