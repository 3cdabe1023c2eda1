//! wprof: a system tracer whose probe language compiles straight to BPF.
//!
//! Stages, each with one input and one output:
//! script text → [`frontend`] → checked program → [`codegen`] → BPF programs →
//! [`runtime`] → messages → [`output`]. [`driver`] runs them in order.

pub mod builtins;
pub mod capture;
pub mod cli;
pub mod codegen;
pub mod driver;
pub mod frontend;
pub mod output;
pub mod providers;
pub mod render;
pub mod runtime;
pub mod sys;
pub mod tracking;
pub mod vocab;
