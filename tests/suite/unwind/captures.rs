//! `-S` captures of the unwinding workloads through the `wprof` binary on
//! the real kernel: kernel stacks start at the traced event (no tracer
//! frames), the sleep path is whole, and user stacks of code
//! without frame pointers (C, a Rust release binary, a library dlopened
//! during the capture) reach `main`, frame for frame as `perf record
//! --call-graph dwarf` finds them.
//!
//! The `-c` command's tables are in place before its first instruction
//! (built before it runs, its mappings read while it is held at the end
//! of its `exec`), so the shares below are of all its stacks but those
//! taken outside its `main` (in the `exec`, in the loader's start-up, in
//! the exit handlers). A library dlopened later has its first stacks
//! walked from copies once its table loads (`snapshots.rs`); here the
//! shares count from the first stack its table walked.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::super::capture::{Ndjson, fresh_dir};
use super::super::{path_str, wprof_ok};
use super::kernel::{modal, perf_dwarf_stacks, spawn};
use super::workloads::{c_chain, c_spin_sleep, dlopen_main, rust_spin_sleep, spin_lib};
use crate::common::wprof_bin;
use crate::require_bpf;

/// Whether a frame is the tracer's own: a BPF program (`bpf_prog_TAG_NAME`,
/// TAG 16 hex digits; not the kernel's `bpf_prog_load`), the raw
/// tracepoint runner `bpf_trace_runN`, a tracepoint iterator `__traceiter_*`.
fn is_tracer_frame(frame: &str) -> bool {
    let Some(function) = frame.strip_prefix("[K] ").map(function_name) else {
        return false;
    };
    let program = (function.strip_prefix("bpf_prog_"))
        .and_then(|rest| rest.get(..16))
        .is_some_and(|tag| tag.bytes().all(|b| b.is_ascii_hexdigit()));
    program || function.starts_with("bpf_trace_run") || function.starts_with("__traceiter_")
}

/// One event's stack from the NDJSON output.
pub(super) struct Sample<'a> {
    /// The tracker record: `timer`, `switch`, ...
    pub(super) kind: &'a str,
    pub(super) event: &'a Value,
    pub(super) unwinder: Option<&'a str>,
    pub(super) ending: Option<&'a str>,
    /// The kernel part reached the kernel's depth limit.
    pub(super) kernel_truncated: bool,
    pub(super) frames: &'a [String],
}

impl Sample<'_> {
    /// Function names of the user frames, innermost first.
    pub(super) fn user_functions(&self) -> Vec<&str> {
        (self.frames.iter())
            .filter_map(|f| f.strip_prefix("[U] "))
            .map(function_name)
            .collect()
    }

    /// Function names of the kernel frames, innermost first.
    pub(super) fn kernel_functions(&self) -> Vec<&str> {
        (self.frames.iter())
            .filter_map(|f| f.strip_prefix("[K] "))
            .map(function_name)
            .collect()
    }
}

/// `c+0x1f (file.c:3) chain` → `c`; `a::b (inlined) x` → `a::b`.
fn function_name(frame: &str) -> &str {
    let end = [frame.find('+'), frame.find(" (")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(frame.len());
    &frame[..end]
}

/// Runs `wprof -S -n NAME -D … -J … args` and reads its NDJSON. The name
/// filter keeps the capture to the workload: system-wide, symbolizing the
/// stacks of every process on a busy machine takes longer than the test.
#[track_caller]
pub(super) fn capture(test: &str, name: &str, args: &[&str]) -> Ndjson {
    let (json, data) = capture_keeping(test, name, args);
    let _ = std::fs::remove_file(&data);
    json
}

/// [`capture`], keeping the capture file (returned) for replays.
#[track_caller]
pub(super) fn capture_keeping(test: &str, name: &str, args: &[&str]) -> (Ndjson, PathBuf) {
    let dir = fresh_dir(test);
    let (data, json) = (dir.join("c.data"), dir.join("c.json"));
    let mut all = vec![
        "-S",
        "-n",
        name,
        "-D",
        &path_str(&data),
        "-J",
        &path_str(&json),
    ]
    .into_iter()
    .map(str::to_owned)
    .collect::<Vec<_>>();
    all.extend(args.iter().map(|a| a.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    wprof_ok(&all);
    let text = std::fs::read_to_string(&json).expect("NDJSON written");
    (Ndjson::parse(&text), data)
}

/// The stacks of the events of process `comm` (timer and switch-out), in time order.
pub(super) fn samples<'a>(json: &'a Ndjson, comm: &str) -> Vec<Sample<'a>> {
    (json.events.iter())
        .filter(|e| e["task"]["pcomm"] == comm && e.get("stack").is_some())
        .filter(|e| e["t"] == "timer" || e["t"] == "switch")
        .map(|e| Sample {
            kind: e["t"].as_str().unwrap_or(""),
            event: e,
            unwinder: e["unwind"]["unwinder"].as_str(),
            ending: e["unwind"]["ending"].as_str(),
            kernel_truncated: e["unwind"]["kernel"] == "truncated",
            frames: json.stack_of(e),
        })
        .collect()
}

/// The samples from the first one the tables walked through `main` to the
/// outermost frame: the tables of the program and of the C library were
/// loaded by then.
fn after_tables_loaded<'s, 'a>(samples: &'s [Sample<'a>], main: &str) -> &'s [Sample<'a>] {
    let first = (samples.iter()).position(|s| {
        s.unwinder == Some("table")
            && s.ending == Some("outermost")
            && s.user_functions().contains(&main)
    });
    &samples[first.unwrap_or(samples.len())..]
}

/// The path of `dlopen_main`'s stacks through `libspin.so`, innermost first.
pub(super) const LIBRARY_PATH: [&[&str]; 5] = [
    &["lib_spin"],
    &["lib_middle"],
    &["lib_entry"],
    &["run_library"],
    &["main"],
];

/// Whether `names` holds one of each of `path`'s alternatives, in order.
pub(super) fn in_order(names: &[&str], path: &[&[&str]]) -> bool {
    let at: Vec<Option<usize>> = (path.iter())
        .map(|alts| names.iter().position(|n| alts.contains(n)))
        .collect();
    at.iter().all(Option::is_some) && at.is_sorted()
}

/// Whether a sample was taken outside the program's `main`: in its `exec`
/// (the kernel part runs `bprm_execve`: the user registers are the old
/// program's, or the command is held at the end of its `exec`), in the
/// loader's start-up (its outermost user frame is the loader's), or in the
/// exit handlers after `main` returned.
pub(super) fn outside_main(sample: &Sample) -> bool {
    let in_exec = sample.kernel_functions().contains(&"bprm_execve");
    let outermost = (sample.frames.iter().rev()).find(|f| f.starts_with("[U] "));
    let in_loader = outermost.is_some_and(|f| f.ends_with(" ld-linux-x86-64.so.2"));
    in_exec || in_loader || sample.user_functions().contains(&"__run_exit_handlers")
}

/// Asserts that ≥ 95% of the samples of `kinds` with user frames reach
/// `main` (a user frame named `main`), all but those taken outside it,
/// and that there are at least `least` of them.
#[track_caller]
pub(super) fn assert_reach_main(samples: &[Sample], kinds: &[&str], main: &str, least: usize) {
    let kind = kinds.join(" and ");
    let with_user =
        (samples.iter()).filter(|s| kinds.contains(&s.kind) && !s.user_functions().is_empty());
    let (early, program): (Vec<&Sample>, Vec<&Sample>) = with_user.partition(|s| outside_main(s));
    let reach = (program.iter())
        .filter(|s| s.user_functions().contains(&main))
        .count();
    eprintln!(
        "{kind}: {reach} of {} stacks reach {main} ({} more outside it)",
        program.len(),
        early.len()
    );
    assert!(
        program.len() >= least,
        "only {} {kind} stacks",
        program.len()
    );
    let missing: Vec<(Option<&str>, Vec<&str>)> = (program.iter())
        .filter(|s| !s.user_functions().contains(&main))
        .map(|s| (s.unwinder, s.user_functions()))
        .take(3)
        .collect();
    assert!(
        reach * 100 >= program.len() * 95,
        "{reach} of {} {kind} stacks reach {main}; e.g. {missing:#?}",
        program.len()
    );
}

/// In a `-S` capture of the workload (built with frame pointers),
/// no kernel stack of any process but a timer sample's shows the tracer (`bpf_prog_`,
/// `bpf_trace_run`, `__traceiter`), and the sleep's off-CPU stacks read
/// `schedule … do_nanosleep … __x64_sys_clock_nanosleep →
/// clock_nanosleep → nanosleep → sleep_here → main`, every kind of walk
/// saying so in the NDJSON; only a kernel stack near the depth limit says
/// it was cut.
#[test]
fn kernel_stacks_and_the_sleep_path() {
    require_bpf!();
    let workload = c_spin_sleep(true);
    let command = format!("{} 100 10", path_str(&workload));
    let json = capture("unwind-sleep-path", "spin_sleep_fp", &["-c", &command]);
    // A timer sample can land in one of wprof's own programs (a clean-clone
    // CI's landed in the softirq tracker's, in `htab_map_update_elem`):
    // that CPU time is the tracer's, taken from the task, and the sample's
    // stack says so truthfully. Every other stack starts at its event.
    let outside_timer_samples = |id: u64| {
        (json.events.iter())
            .filter(|e| e["t"] != "timer")
            .filter_map(|e| e.as_object())
            .flatten()
            .any(|(key, v)| key.contains("stack") && *v == id)
    };
    let tracer: Vec<&String> = (json.stacks.iter())
        .filter(|(id, _)| outside_timer_samples(**id))
        .flat_map(|(_, frames)| frames)
        .filter(|f| is_tracer_frame(f))
        .collect();
    assert!(tracer.is_empty(), "tracer frames in stacks: {tracer:?}");
    let all = samples(&json, "spin_sleep_fp");
    let sleeps: Vec<&Sample> = (after_tables_loaded(&all, "main").iter())
        .filter(|s| s.kind == "switch" && s.event["prev_state"] == "S")
        .collect();
    let whole = |s: &Sample| {
        let kernel = s.kernel_functions();
        let user = s.user_functions();
        kernel.first() == Some(&"schedule")
            && in_order(
                &kernel,
                &[
                    &["do_nanosleep"],
                    &["hrtimer_nanosleep"],
                    &["__x64_sys_clock_nanosleep"],
                ],
            )
            && in_order(
                &user,
                &[
                    &["__GI___clock_nanosleep", "clock_nanosleep"],
                    &["__GI___nanosleep", "__nanosleep", "nanosleep"],
                    &["sleep_here"],
                    &["main"],
                ],
            )
    };
    let good = sleeps.iter().filter(|s| whole(s)).count();
    eprintln!("{good} of {} sleeps have the whole path", sleeps.len());
    assert!(
        sleeps.len() >= 20,
        "only {} sleeps after the tables loaded",
        sleeps.len()
    );
    let bad: Vec<&[String]> = (sleeps.iter().filter(|s| !whole(s)))
        .map(|s| s.frames)
        .take(2)
        .collect();
    assert!(
        good * 100 >= sleeps.len() * 95,
        "{good} of {}: {bad:#?}",
        sleeps.len()
    );
    assert!(
        (all.iter())
            .filter(|s| !s.user_functions().is_empty())
            .all(|s| s.unwinder.is_some()),
        "every stack with user frames says how it was walked"
    );
    // These kernel stacks are a few dozen frames deep: none reached the
    // kernel's depth limit (127 frames with the tracer's few skipped ones).
    let cut: Vec<usize> = (all.iter())
        .filter(|s| s.kernel_truncated)
        .map(|s| s.kernel_functions().len())
        .collect();
    assert!(cut.is_empty(), "kernel stacks said cut, by depth: {cut:?}");
}

/// `spin_sleep.c` built `-O2 -fomit-frame-pointer`: timer and off-CPU
/// stacks reach `main` in ≥ 95%, from its first (issue 12: they were lost
/// until its tables loaded, 0.1–1 s after exec under load).
#[test]
fn c_without_frame_pointers_reaches_main() {
    require_bpf!();
    spin_sleep_reaches_main("unwind-c-no-fp", &c_spin_sleep(false), "main");
}

/// `wprof -S -c "PROGRAM 150 10"` of a `spin_sleep` build: its timer and
/// off-CPU stacks reach `main` in ≥ 95%.
#[track_caller]
fn spin_sleep_reaches_main(test: &str, program: &std::path::Path, main: &str) {
    let command = format!("{} 150 10", path_str(program));
    let comm = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let comm = comm.unwrap_or_default();
    let json = capture(test, &comm, &["-c", &command]);
    let all = samples(&json, &comm);
    assert_reach_main(&all, &["timer"], main, 10);
    assert_reach_main(&all, &["switch"], main, 10);
}

/// The same program doing its work in its first 20 ms (10 ms on the CPU,
/// 10 ms asleep) and exiting, sampled at 1 kHz, three times: ≥ 95% of
/// its timer and off-CPU stacks reach `main`, its first ones included.
#[test]
fn short_lived_command_reaches_main() {
    require_bpf!();
    let command = format!("{} 1 10", path_str(&c_spin_sleep(false)));
    let args = ["-S", "timer=1000hz", "-c", &command];
    let captures: Vec<Ndjson> = (0..3)
        .map(|run| capture(&format!("unwind-short-{run}"), "spin_sleep", &args))
        .collect();
    let all: Vec<Sample> = (captures.iter())
        .flat_map(|json| samples(json, "spin_sleep"))
        .collect();
    assert_reach_main(&all, &["timer", "switch"], "main", 10);
}

/// A Rust release binary (`rustc -C opt-level=3`, no frame pointers):
/// timer and off-CPU stacks reach its `main` in ≥ 95%, from its first.
#[test]
fn rust_release_binary_reaches_main() {
    require_bpf!();
    spin_sleep_reaches_main("unwind-rust", &rust_spin_sleep(), "spin_sleep::main");
}

/// A program that dlopens a library (no frame pointers) a second after
/// the capture started: its stacks in the library reach `main` through
/// it in ≥ 95% once the library's table is loaded.
#[test]
fn library_dlopened_during_the_capture() {
    require_bpf!();
    let script = format!(
        "(sleep 1; echo go) | {} {} 3000",
        path_str(&dlopen_main()),
        path_str(&spin_lib())
    );
    let json = capture("unwind-dlopen", "dlopen_main", &["--", "sh", "-c", &script]);
    let all = samples(&json, "dlopen_main");
    let in_library: Vec<Sample> = (all.into_iter())
        .filter(|s| s.kind == "timer" && s.user_functions().contains(&"lib_spin"))
        .collect();
    let path = LIBRARY_PATH;
    let loaded = after_tables_loaded(&in_library, "main");
    let through = (loaded.iter())
        .filter(|s| in_order(&s.user_functions(), &path))
        .count();
    let other: Vec<Vec<&str>> = (loaded.iter())
        .map(Sample::user_functions)
        .filter(|f| !in_order(f, &path))
        .take(2)
        .collect();
    eprintln!(
        "{through} of {} stacks in the library go {path:?} ({} before its table loaded)",
        loaded.len(),
        in_library.len() - loaded.len()
    );
    assert!(
        in_library.len() >= 10,
        "only {} stacks in the library",
        in_library.len()
    );
    assert!(
        loaded.len() * 2 >= in_library.len(),
        "the library's table came late"
    );
    assert!(
        through * 100 >= loaded.len() * 95,
        "{through} of {}: {other:#?}",
        loaded.len()
    );
}

/// `chain.c` (`-O2 -fomit-frame-pointer`) sampled by wprof `-S` and by
/// `perf record --call-graph dwarf` at once: the most common stack is the
/// same, frame for frame, from the leaf to `main`.
#[test]
fn matches_perf_dwarf_stacks() {
    require_bpf!();
    let chain = spawn(&c_chain(), &["8000"]);
    let pid = chain.0.id();
    let dir = fresh_dir("unwind-perf");
    let json_path = dir.join("c.json");
    let mut wprof = Command::new(wprof_bin())
        .args([
            "-S",
            "timer=499hz",
            "-p",
            &pid.to_string(),
            "-d",
            "4s",
            "-J",
        ])
        .arg(&json_path)
        .spawn()
        .expect("start wprof");
    // Let the capture attach and the tables load before perf starts.
    std::thread::sleep(Duration::from_secs(1));
    let perf = perf_dwarf_stacks(pid, Duration::from_secs(2));
    let status = wprof.wait().expect("wait for wprof");
    drop(chain);
    assert!(status.success(), "wprof failed: {status:?}");
    let Some(perf) = perf else {
        eprintln!("SKIPPED matches_perf_dwarf_stacks: perf record could not record here");
        return;
    };
    let json = Ndjson::parse(&std::fs::read_to_string(&json_path).expect("NDJSON"));
    let samples = samples(&json, "chain");
    let physical = |s: &Sample| -> Vec<String> {
        (s.frames.iter())
            .filter_map(|f| f.strip_prefix("[U] "))
            .filter(|f| !f.contains(" (inlined)"))
            .map(|f| function_name(f).to_owned())
            .collect()
    };
    let ours = modal(samples.iter().filter(|s| s.kind == "timer").map(physical));
    let theirs = modal(perf.into_iter());
    let to_main = |stack: &[String]| -> Vec<String> {
        let end = stack
            .iter()
            .position(|f| f == "main")
            .map_or(0, |at| at + 1);
        stack[..end].to_vec()
    };
    eprintln!("wprof: {ours:?}\nperf:  {theirs:?}");
    assert_eq!(to_main(&ours), ["c", "b", "a", "main"]);
    assert_eq!(to_main(&ours), to_main(&theirs));
}

/// `-S unwind=fp`: no tables, every user stack is the kernel's
/// frame-pointer walk, which reaches `main` in the program built with
/// frame pointers (the capture's settings say it was asked).
#[test]
fn frame_pointers_only_on_request() {
    require_bpf!();
    let command = format!("{} 150 10", path_str(&c_spin_sleep(true)));
    let args = ["-S", "unwind=fp", "-c", &command];
    let json = capture("unwind-fp-only", "spin_sleep_fp", &args);
    assert_eq!(json.header["stacks"][2], "unwind=fp");
    let all = samples(&json, "spin_sleep_fp");
    let user: Vec<&Sample> = (all.iter())
        .filter(|s| !s.user_functions().is_empty())
        .collect();
    assert!(user.len() >= 20, "only {} user stacks", user.len());
    let unwinders: Vec<_> = user.iter().map(|s| s.unwinder).collect();
    assert!(
        unwinders.iter().all(|u| *u == Some("kernel-walk")),
        "{unwinders:?}"
    );
    let main = (user.iter())
        .filter(|s| s.user_functions().contains(&"main"))
        .count();
    assert!(
        main * 100 >= user.len() * 90,
        "{main} of {} reach main",
        user.len()
    );
}
