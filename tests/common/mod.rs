//! Shared helpers for wprof's integration tests: workload programs built from
//! `tests/data/*.c`, the binaries under test, privilege checks, running a
//! command with a timeout, and a unified line diff for readable failures.
//!
//! Each integration test binary includes this module with `mod common;` and
//! uses only part of it.
#![allow(dead_code)]

use std::fs;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

/// Compiler flags for workloads: frame pointers and no inlining keep every
/// traced function a real, probe-able symbol.
pub const WORKLOAD_CFLAGS: &[&str] = &["-O1", "-g", "-fno-omit-frame-pointer", "-fno-inline"];

/// The wprof binary built by cargo for this test run.
pub fn wprof_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_wprof"))
}

/// Directory holding the C workload sources.
pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// A per-test-run scratch directory under `target/tmp`, created on demand.
pub fn scratch_dir(sub: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(sub);
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// Names (file stems) of every workload in `tests/data/*.c` and `*.cc` (C++), sorted.
pub fn workload_names() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(data_dir())
        .expect("tests/data must exist")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "c" || x == "cc"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    names.sort();
    names
}

/// Serialises workload builds between threads of one test binary.
static BUILD_LOCK: Mutex<()> = Mutex::new(());

/// Builds `tests/data/<name>.c` with `cc` (or `<name>.cc` with `c++`; only when the source is newer than the
/// binary) and returns the absolute path of the executable.
#[track_caller]
pub fn workload(name: &str) -> PathBuf {
    let c_source = data_dir().join(format!("{name}.c"));
    let (src, compiler) = match c_source.exists() {
        true => (c_source, "cc"),
        false => (data_dir().join(format!("{name}.cc")), "c++"),
    };
    assert!(src.exists(), "no workload source {}", src.display());
    let out = scratch_dir("workloads").join(name);
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    if is_fresh(&out, &src) {
        return out;
    }
    // Build to a private name and rename, so concurrent test binaries never see a partial file.
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    let result = Command::new(compiler)
        .args(WORKLOAD_CFLAGS)
        .arg("-o")
        .arg(&tmp)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {compiler} for {name} (tools/setup.sh installs it): {e}")
        });
    assert!(
        result.status.success(),
        "{compiler} failed for {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&result.stderr)
    );
    fs::rename(&tmp, &out).unwrap_or_else(|e| panic!("rename {}: {e}", tmp.display()));
    out
}

fn is_fresh(out: &Path, src: &Path) -> bool {
    let modified = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    matches!((modified(out), modified(src)), (Some(o), Some(s)) if o >= s)
}

/// Why BPF tests cannot run here, or `None` when they can (root and tracefs present).
pub fn bpf_unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Some(format!("needs root to load BPF programs (euid is {euid})"));
    }
    if !Path::new("/sys/kernel/tracing/events").is_dir() {
        return Some("tracefs is not mounted at /sys/kernel/tracing".to_string());
    }
    None
}

/// Returns early from a test, printing why, when BPF is unavailable.
#[macro_export]
macro_rules! require_bpf {
    () => {
        if let Some(reason) = $crate::common::bpf_unavailable() {
            eprintln!("SKIPPED {}: {reason}", module_path!());
            return;
        }
    };
}

/// Finds an executable in `$PATH`.
pub fn find_in_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

/// What a command did when run by [`run_with_timeout`].
#[derive(Debug)]
pub struct RunOutput {
    /// Everything written to stdout.
    pub stdout: String,
    /// Everything written to stderr.
    pub stderr: String,
    /// Exit status; `None` when the command timed out and was killed.
    pub status: Option<ExitStatus>,
    /// Wall-clock time until exit (or until the kill).
    pub elapsed: Duration,
}

impl RunOutput {
    /// True when the command exited on its own with status 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

/// Runs `cmd` in its own process group with stdin closed, capturing output. After
/// `timeout` the whole group (the tool and any `-c` child) gets SIGTERM, then SIGKILL.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> std::io::Result<RunOutput> {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let stdout = drain(child.stdout.take().expect("stdout is piped"));
    let stderr = drain(child.stderr.take().expect("stderr is piped"));
    let pgid = child.id() as libc::pid_t;
    let mut status = None;
    while start.elapsed() < timeout {
        if let Some(s) = child.try_wait()? {
            status = Some(s);
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    let elapsed = start.elapsed();
    if status.is_none() {
        kill_group(pgid, libc::SIGTERM);
        let grace = Instant::now();
        while child.try_wait()?.is_none() && grace.elapsed() < Duration::from_secs(2) {
            thread::sleep(Duration::from_millis(10));
        }
        kill_group(pgid, libc::SIGKILL);
        child.wait()?;
    }
    Ok(RunOutput {
        stdout: stdout.join().expect("stdout reader panicked"),
        stderr: stderr.join().expect("stderr reader panicked"),
        status,
        elapsed,
    })
}

fn kill_group(pgid: libc::pid_t, signal: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions; the group is our own child's.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

fn drain(mut pipe: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        // A read error just ends the capture; what was read so far is still reported.
        let _ = pipe.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// A unified diff (`---`/`+++`, `@@` hunks, 3 lines of context) from `expected` to
/// `actual`, or `None` when they are equal.
pub fn unified_diff(expected: &str, actual: &str, from: &str, to: &str) -> Option<String> {
    if expected == actual {
        return None;
    }
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let ops = diff_ops(&a, &b);
    let mut out = format!("--- {from}\n+++ {to}\n");
    for hunk in hunks(&ops, 3) {
        out.push_str(&render_hunk(&ops[hunk.0..hunk.1], &a, &b));
    }
    if a == b {
        // Same lines, different line endings (e.g. a trailing newline).
        out.push_str("@@ line endings differ @@\n");
    }
    Some(out)
}

/// One step of an edit script: keep line (i, j), delete a[i], or insert b[j].
#[derive(Clone, Copy, PartialEq, Debug)]
enum Op {
    Keep(usize, usize),
    Del(usize),
    Ins(usize),
}

/// Longest-common-subsequence edit script; outputs are small, so O(n*m) is fine.
fn diff_ops(a: &[&str], b: &[&str]) -> Vec<Op> {
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut ops) = (0, 0, Vec::new());
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push(Op::Keep(i, j));
            (i, j) = (i + 1, j + 1);
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            // Deletions before insertions, as diff(1) prints them.
            ops.push(Op::Del(i));
            i += 1;
        } else {
            ops.push(Op::Ins(j));
            j += 1;
        }
    }
    ops
}

/// Ranges of `ops` to print: every change plus `context` kept lines around it.
fn hunks(ops: &[Op], context: usize) -> Vec<(usize, usize)> {
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for (k, op) in ops.iter().enumerate() {
        if matches!(op, Op::Keep(..)) {
            continue;
        }
        let (lo, hi) = (k.saturating_sub(context), (k + context + 1).min(ops.len()));
        match ranges.last_mut() {
            Some(last) if lo <= last.1 => last.1 = hi,
            _ => ranges.push((lo, hi)),
        }
    }
    ranges
}

fn render_hunk(ops: &[Op], a: &[&str], b: &[&str]) -> String {
    let old_start = ops.iter().find_map(|op| match op {
        Op::Keep(i, _) | Op::Del(i) => Some(*i),
        Op::Ins(_) => None,
    });
    let new_start = ops.iter().find_map(|op| match op {
        Op::Keep(_, j) | Op::Ins(j) => Some(*j),
        Op::Del(_) => None,
    });
    let old_len = ops.iter().filter(|op| !matches!(op, Op::Ins(_))).count();
    let new_len = ops.iter().filter(|op| !matches!(op, Op::Del(_))).count();
    let mut out = format!(
        "@@ -{},{old_len} +{},{new_len} @@\n",
        old_start.map_or(0, |s| s + 1),
        new_start.map_or(0, |s| s + 1)
    );
    for op in ops {
        let line = match *op {
            Op::Keep(i, _) => format!(" {}", a[i]),
            Op::Del(i) => format!("-{}", a[i]),
            Op::Ins(j) => format!("+{}", b[j]),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}
