//! Off-CPU stacks of long blocks keep the frame-pointer-less system call
//! wrapper and its caller (issue 12, item 2): `naps.c`, built without
//! frame pointers, sleeps in `nap → nanosleep → clock_nanosleep` from its
//! start, and ≥ 95% of its blocks' user stacks must read `clock_nanosleep`,
//! libc's `nanosleep`, `nap`, `main`, under `-S offcpu` (walked at the
//! switch-out) and under `-S offcpu=1ms` (walked at the system call's
//! return). The `-c` command's mappings are read at the end of its `exec`,
//! before the loader maps libc: the first return's walk found libc in no
//! known mapping and went on by frame pointers, past both frames (1 of 10
//! blocks); it now carries a copy of the stack, walked once the mappings
//! are read again.

use super::super::capture::{Ndjson, fresh_dir};
use super::super::{path_str, wprof_ok};
use super::captures::{Sample, in_order};
use super::workloads::c_naps;
use crate::require_bpf;

/// The workload's process name.
const COMM: &str = "naps";

/// Naps of 20 ms: few, so one without the frames is over the 5% allowed.
const ROUNDS: &str = "10";

/// The user path of a sleep, innermost first.
const SLEEP_PATH: [&[&str]; 4] = [
    &["__GI___clock_nanosleep", "clock_nanosleep"],
    &["__GI___nanosleep", "__nanosleep", "nanosleep"],
    &["nap"],
    &["main"],
];

/// Records `naps` with `-S stacks`; returns the NDJSON.
fn record(test: &str, stacks: &str) -> Ndjson {
    let dir = fresh_dir(test);
    let (data, json) = (dir.join("c.data"), dir.join("c.json"));
    let command = format!("{} {ROUNDS} 20", path_str(&c_naps()));
    wprof_ok(&[
        "-S",
        stacks,
        // Not `-n`: the other test runs the same program at the same time.
        "--only-command",
        "-D",
        &path_str(&data),
        "-J",
        &path_str(&json),
        "-c",
        &command,
    ]);
    let text = std::fs::read_to_string(&json).expect("NDJSON written");
    let _ = std::fs::remove_file(&data);
    Ndjson::parse(&text)
}

/// The stacks of the workload's blocks in `clock_nanosleep`: on the
/// switch-out of the task (`-S offcpu`) or, with a threshold, on its
/// switch-in after a long block (`next`).
fn sleeps<'a>(json: &'a Ndjson, side: &str) -> Vec<Sample<'a>> {
    (json.events.iter())
        .filter(|e| e["t"] == "switch" && e[side]["pcomm"] == COMM)
        .filter(|e| e.get("stack").is_some())
        .map(|e| Sample {
            kind: "switch",
            event: e,
            unwinder: e["unwind"]["unwinder"].as_str(),
            ending: e["unwind"]["ending"].as_str(),
            kernel_truncated: e["unwind"]["kernel"] == "truncated",
            frames: json.stack_of(e),
        })
        .filter(|s| s.kernel_functions().contains(&"__x64_sys_clock_nanosleep"))
        .collect()
}

/// Asserts that ≥ 95% of the sleeps have the whole user path.
#[track_caller]
fn assert_whole(sleeps: &[Sample], what: &str) {
    let whole = |s: &&Sample| in_order(&s.user_functions(), &SLEEP_PATH);
    let good = sleeps.iter().filter(whole).count();
    eprintln!(
        "{what}: {good} of {} sleeps have the whole path",
        sleeps.len()
    );
    assert!(sleeps.len() >= 8, "{what}: only {} sleeps", sleeps.len());
    let bad: Vec<(Option<&str>, Vec<&str>)> = (sleeps.iter())
        .filter(|s| !whole(s))
        .map(|s| (s.unwinder, s.user_functions()))
        .take(3)
        .collect();
    assert!(
        good * 100 >= sleeps.len() * 95,
        "{what}: {good} of {} sleeps have the path: {bad:#?}",
        sleeps.len()
    );
}

/// Walked at the system call's return (`-S offcpu=1ms`), the first
/// block's stack too.
#[test]
fn long_blocks_keep_the_wrapper_at_the_return() {
    require_bpf!();
    let json = record("unwind-leaves-return", "offcpu=1ms");
    assert_whole(&sleeps(&json, "next"), "-S offcpu=1ms");
}

/// Walked at the switch-out (`-S offcpu`).
#[test]
fn long_blocks_keep_the_wrapper_at_the_switch() {
    require_bpf!();
    let json = record("unwind-leaves-switch", "offcpu");
    assert_whole(&sleeps(&json, "task"), "-S offcpu");
}
