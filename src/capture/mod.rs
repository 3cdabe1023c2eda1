//! Captures: the `wprof.data` file. `model` is what a capture holds,
//! `writer`/`reader` store and load it, `files` creates and opens the
//! files safely.

pub mod files;
pub mod format;
pub mod model;
pub mod reader;
pub mod walk;
pub mod writer;
