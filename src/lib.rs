//! wprof: a system tracer whose probe language compiles straight to BPF.
//!
//! Stages, each with one input and one output:
//! script text → [`frontend`] → checked program → [`codegen`] → BPF programs →
//! [`runtime`] → messages → [`output`].

pub mod codegen;
pub mod frontend;
pub mod output;
pub mod runtime;
pub mod sys;
