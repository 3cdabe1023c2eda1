//! Captures: the `wprof.data` file. `model` is what a capture holds,
//! `writer`/`reader` store and load it, `stacks` makes user stacks outlive
//! their processes (normalize while they live, symbolize at the end).

pub mod format;
pub mod model;
pub mod reader;
pub mod stacks;
pub mod writer;
