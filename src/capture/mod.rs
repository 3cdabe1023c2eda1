//! Captures: the `wprof.data` file. `model` is what a capture holds,
//! `writer`/`reader` store and load it.

pub mod format;
pub mod model;
pub mod reader;
pub mod writer;
