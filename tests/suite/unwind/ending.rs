//! The end of a capture waits for no unwind table build
//! (`docs/unwinding.md`, "End"): the builds left are abandoned and counted.

use std::time::Instant;

use super::super::machine_lock;
use super::super::offcpu::stack_count;
use super::super::{path_str, wprof_ok};
use super::workloads::large_binary;
use crate::require_bpf;

/// A `-S` capture whose command compiles a program with rustc (its driver
/// library's table takes seconds to build, longer than the capture) ends
/// without waiting for the builds left: `-I` counts them abandoned.
#[test]
fn capture_end_abandons_table_builds() {
    require_bpf!();
    if large_binary().is_none() {
        eprintln!("skipped: no rustc driver library in the Rust toolchain");
        return;
    }
    let _machine = machine_lock();
    let dir = crate::common::scratch_dir("unwind-ending");
    let source = dir.join("empty.rs");
    std::fs::write(&source, "fn main() {}\n").expect("write the program");
    let command = format!(
        "rustc --edition 2021 -o {} {}",
        path_str(&dir.join("empty")),
        path_str(&source)
    );
    let data = path_str(&dir.join("ending.data"));
    let started = Instant::now();
    wprof_ok(&["-S", "-D", &data, "-c", &command]);
    let took = started.elapsed();
    let info = wprof_ok(&["-R", "-D", &data, "-I"]).stdout;
    let abandoned = stack_count(&info, "unwind table builds abandoned");
    eprintln!("capture of `{command}` took {took:?}; {abandoned} table builds abandoned");
    assert!(abandoned >= 1.0, "nothing was left to build:\n{info}");
}
