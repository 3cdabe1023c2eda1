//! Code generation: checked program → BPF programs, map specs and message layouts.

pub mod asm;
pub mod disasm;
pub mod listing;
pub mod program;
