//! wprof: a system tracer whose probe language compiles straight to BPF.
//!
//! Stages, each with one input and one output (docs/architecture.md):
//! - [`frontend`]: script text → `ast::Script` (parse) → `CheckedProgram`
//!   (check), asking the probe [`providers`] to resolve specs and the
//!   [`builtins`] to check their uses, and the machine through
//!   `vocab::Environment`;
//! - [`codegen`]: `CheckedProgram` → `Compiled` (BPF programs, maps, message
//!   layouts, record schemas), built-ins lowering their own uses;
//! - [`runtime`]: `Compiled` → loaded and attached programs → ring buffer
//!   messages, printed by [`output`] and recorded into a [`capture`] file;
//! - [`render`]: a capture → Perfetto, NDJSON or a summary.
//!
//! [`driver`] chains parse, check and compile; [`tracking`] turns the command
//! line ([`cli`]) into the built-in trackers' sources and compile options;
//! [`vocab`] holds the types the stages share.

pub mod analysis;
pub mod bpftrace_env;
pub mod builtins;
pub mod capture;
pub mod cli;
pub mod cli_bpftrace;
pub mod cli_compare;
pub mod cli_profile;
pub mod codegen;
pub mod compile_cache;
pub mod driver;
pub mod front_door;
pub mod frontend;
pub mod listing;
pub mod output;
pub mod providers;
pub mod render;
pub mod runtime;
pub mod symbols;
pub mod sys;
pub mod timings;
pub mod tracking;
pub mod unwind;
pub mod vocab;
