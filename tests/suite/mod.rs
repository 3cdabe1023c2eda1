//! Helpers shared by the suite: running wprof with a timeout, checking that it
//! never panics, and reading the maps it prints at exit.

mod as_bpftrace;
mod attach;
mod btf;
mod capture;
mod command_line;
mod compile_cache;
mod drops;
mod dump;
mod errors;
mod filters;
mod helper_checks;
mod hostile;
mod load;
mod offcpu;
mod offcpu_join;
mod offcpu_paths;
mod probe_forms;
mod profiles;
mod records;
mod regress;
mod replay;
mod sampling;
mod session;
mod system;
mod tools;
mod tools_run;
mod trace_pipe;
mod unwind;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::common::{RunOutput, run_with_timeout, wprof_bin};

/// Longest any single wprof run may take before the test fails.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Serialises the tests that load the machine on purpose (the CI recipe's
/// real-time benchmark, a parallel build, a syscall flood) with the tests
/// that assert a workload's timings: on two CPUs the load starves the
/// recorder and the workload, and the timings then measure the other test.
static MACHINE_LOCK: Mutex<()> = Mutex::new(());

/// Holds [`MACHINE_LOCK`] (a failed test leaves it usable).
pub fn machine_lock() -> MutexGuard<'static, ()> {
    MACHINE_LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs wprof with `args` (stdin closed) and fails the test if it panicked or hung.
#[track_caller]
pub fn wprof(args: &[&str]) -> RunOutput {
    let out = run_with_timeout(Command::new(wprof_bin()).args(args), RUN_TIMEOUT)
        .unwrap_or_else(|e| panic!("cannot run wprof {args:?}: {e}"));
    assert!(
        !out.stderr.contains("panicked"),
        "wprof {args:?} panicked:\n{}",
        out.stderr
    );
    assert!(
        out.status.is_some(),
        "wprof {args:?} did not finish within {RUN_TIMEOUT:?}\nstdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    out
}

/// Runs wprof and expects it to succeed.
#[track_caller]
pub fn wprof_ok(args: &[&str]) -> RunOutput {
    let out = wprof(args);
    assert!(
        out.success(),
        "wprof {args:?} failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    out
}

/// Runs wprof and expects it to fail with exit code 1.
#[track_caller]
pub fn wprof_fails(args: &[&str]) -> RunOutput {
    let out = wprof(args);
    assert_eq!(
        out.status.and_then(|s| s.code()),
        Some(1),
        "wprof {args:?} should fail with exit code 1\nstdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    out
}

/// The text wprof prints on stderr for one script error: `body` is the
/// error's own rendering (message, snippet, caret, help).
pub fn one_error(body: &str) -> String {
    format!("  × the script has an error\n\nError: \n{body}\n\n")
}

/// The absolute path of workload `name` (built from `tests/data/NAME.c`) as a string.
#[track_caller]
pub fn workload(name: &str) -> String {
    path_str(&crate::common::workload(name))
}

/// A path as UTF-8 text, for building scripts and command lines.
#[track_caller]
pub fn path_str(path: &Path) -> String {
    path.to_str()
        .unwrap_or_else(|| panic!("non-UTF-8 path {}", path.display()))
        .to_string()
}

/// Entries of the maps wprof printed: `@name[key]: value` lines as
/// `"@name[key]" → "value"`. Histograms and other multi-line values are left out.
pub fn map_lines(stdout: &str) -> BTreeMap<String, String> {
    stdout
        .lines()
        .filter(|line| line.starts_with('@'))
        .filter_map(|line| line.split_once(": "))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

/// `(name, value)` pairs as a map, for comparing with [`map_lines`].
pub fn entries<N: ToString, V: ToString>(
    pairs: impl IntoIterator<Item = (N, V)>,
) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}
