//! `-S offcpu=DUR` on the real kernel: a workload mixing many 10 µs blocks
//! and a few 5 ms blocks (`tests/data/offcpu_mix.c`, which measures its own
//! time off the CPU) keeps a stack for exactly the blocks of at least DUR,
//! those stacks go through the sleeping function to `main`, and every
//! block's time is still accounted — in the report, the folded stacks and
//! pprof alike.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde_json::Value;

use super::capture::{Ndjson, fresh_dir};
use super::profiles::{assert_near, field, folded, go_pprof_total, numbers, weight};
use super::{machine_lock, path_str, workload, wprof, wprof_ok};
use crate::require_bpf;

const THRESHOLD_NS: u64 = 1_000_000;
const SHORT_FRAME: &str = "[no stack: block < 1ms]";

/// One off-CPU block of a thread, from its switch-out to its switch-in.
#[derive(Debug)]
pub(super) struct Block {
    pub(super) duration_ns: u64,
    /// The frames the switch-in recorded (innermost first), if any.
    pub(super) frames: Option<Vec<String>>,
    /// The unwinder that walked them (`frame-pointer`, `table`, `snapshot`).
    pub(super) unwinder: Option<String>,
    /// Switched out runnable (`R`, `R+`: preempted), not blocked.
    pub(super) preempted: bool,
}

/// An NDJSON timestamp (seconds with 9 decimals) in ns.
fn ts_ns(event: &Value) -> u64 {
    let seconds = event["ts"].as_f64().expect("a timestamp");
    (seconds * 1e9).round() as u64
}

/// The blocks of thread `tid`, each with the stack of the switch that ended it.
pub(super) fn blocks_of(nd: &Ndjson, tid: u64) -> Vec<Block> {
    let mut out_at = None;
    let mut blocks = Vec::new();
    for event in nd.events.iter().filter(|e| e["t"] == "switch") {
        if event["task"]["tid"] == tid {
            let runnable = event["prev_state"]
                .as_str()
                .is_some_and(|s| s.starts_with('R'));
            out_at = Some((ts_ns(event), runnable));
        } else if event["next"]["tid"] == tid
            && let Some((out, preempted)) = out_at.take()
        {
            let frames = event["stack"].is_u64().then(|| nd.stack_of(event).to_vec());
            let duration_ns = ts_ns(event) - out;
            let unwinder = event["unwind"]["unwinder"].as_str().map(str::to_string);
            blocks.push(Block {
                duration_ns,
                frames,
                unwinder,
                preempted,
            });
        }
    }
    blocks
}

/// The index of the first frame naming `function`.
pub(super) fn frame_index(frames: &[String], function: &str) -> Option<usize> {
    frames
        .iter()
        .position(|f| f.contains(&format!(" {function}+")))
}

/// Short blocks have no stack, long ones have one; the long sleeps' stacks
/// run from the kernel's nanosleep through `long_block` to `main`.
fn check_blocks(blocks: &[Block], measured: &BTreeMap<String, BTreeMap<String, f64>>) {
    let wrong: Vec<&Block> = (blocks.iter())
        .filter(|b| b.frames.is_some() != (b.duration_ns >= THRESHOLD_NS))
        .collect();
    assert!(
        wrong.is_empty(),
        "stacks kept against the threshold: {wrong:?}"
    );
    let short = blocks
        .iter()
        .filter(|b| b.duration_ns < THRESHOLD_NS)
        .count();
    // Short sleeps must show up as short blocks, but on a loaded machine the
    // wait for a CPU after most of them makes their blocks longer than the
    // threshold (a clean-clone CI: 44 of 2000 stayed under it; 8 with the
    // other off-CPU tests running beside this one on 2 CPUs).
    let short_count = measured["short"]["count"];
    assert!(
        short >= 1,
        "{short} blocks under 1ms of {short_count} short sleeps"
    );
    // The thread is also preempted under `long_block` (on the way out of
    // its system call, by another test or the recorder): such a block has
    // the preemption point's kernel frames, not the sleep's.
    let long_sleeps: Vec<&Vec<String>> = (blocks.iter())
        .filter(|b| !b.preempted)
        .filter_map(|b| b.frames.as_ref())
        .filter(|frames| frame_index(frames, "long_block").is_some())
        .collect();
    let others: Vec<&Block> = (blocks.iter())
        .filter(|b| {
            b.frames
                .as_ref()
                .is_some_and(|f| frame_index(f, "long_block").is_none())
        })
        .collect();
    assert!(
        long_sleeps.len() as f64 >= measured["long"]["count"],
        "{} stacks through long_block; the other stacks: {others:#?}",
        long_sleeps.len()
    );
    for frames in long_sleeps {
        // libc's frames are left out: they are not always symbolized (see
        // the report of the `offcpu` branch).
        let order = ["hrtimer_nanosleep", "long_block", "main"];
        let at: Vec<Option<usize>> = order.iter().map(|f| frame_index(frames, f)).collect();
        assert!(
            at.iter().all(Option::is_some) && at.is_sorted(),
            "{order:?} at {at:?} in {frames:#?}"
        );
    }
}

/// The folded off-CPU stacks hold the report's off-CPU time exactly, the
/// long sleeps under `long_block` and the short ones (most without a stack)
/// under `short_block` or the short-block frame, at least the short sleeps'
/// own measure.
fn check_totals(
    lines: &[(String, u64)],
    report_row: &Value,
    measured: &BTreeMap<String, BTreeMap<String, f64>>,
) {
    let all = weight(lines, |_| true);
    assert_eq!(
        all as f64,
        field(report_row, "offcpu_ns"),
        "folded against report"
    );
    let measured_ns = |kind: &str| measured[kind]["off_ns"];
    let long = weight(lines, |s| s.contains(";long_block;"));
    assert_near(long as f64, measured_ns("long"), 0.10, "long_block off-CPU");
    let short = weight(lines, |s| {
        s.contains(";short_block;") || s.contains(SHORT_FRAME)
    });
    assert!(
        weight(lines, |s| s.contains(SHORT_FRAME)) > 0,
        "short blocks show as {SHORT_FRAME}"
    );
    // Switch-out to switch-in is longer than a short sleep's own wall time
    // minus CPU time: the scheduler charges a woken thread CPU time from
    // the moment it is picked, before the switch tracepoint fires. bpftrace
    // summing the same switches agrees with wprof (55.9 ms where the
    // workload measured 37.1 ms for 2000 × 10 µs), so the bound allows
    // 25 µs per short block on top of the measure. The workload counts only
    // calls that left the CPU: under CI load 778 of 2000 timers expired
    // before the thread reached the scheduler (no block, nothing off-CPU).
    // And the other way: interrupts taken while the thread runs are not its
    // CPU time (in this VM a timer interrupt costs ~30 µs), so wall minus
    // CPU time also holds time on the CPU: wprof read 0.86–0.87 of the
    // measure in two runs, hence 0.8 below.
    // A thread preempted in the measuring code (the return of its CPU-time
    // `clock_gettime` system call, with another test busy on its CPU) is
    // off the CPU inside the workload's measure, under `measured` but not
    // under `short_block`: which kind of call it measured, no frame tells.
    let in_measure = weight(lines, |s| {
        s.contains(";measured;") && !s.contains("_block;")
    });
    let (short_ns, blocks) = (measured_ns("short"), measured["short"]["blocked"]);
    let short_range = short_ns * 0.8 - in_measure as f64..=short_ns + blocks * 25_000.0;
    assert!(
        short_range.contains(&(short as f64)),
        "short blocks off-CPU {short} outside {short_range:?}"
    );
}

/// The workload's own `short`/`long` lines.
fn measured(stderr: &str) -> BTreeMap<String, BTreeMap<String, f64>> {
    ["short", "long"]
        .map(|kind| (kind.to_owned(), numbers(stderr, &format!("{kind} "))))
        .into()
}

/// 2000 × 10 µs and 20 × 5 ms sleeps under `-S offcpu=1ms`: stacks for
/// exactly the blocks of at least 1 ms (durations from the capture's own
/// switches), through `long_block` to `main` for the long sleeps; off-CPU
/// totals equal between report, folded stacks and `go tool pprof`, and
/// within 10% of the workload's own measure for each kind of block; the
/// threshold is shown by `-I` (with the user stacks joined at the sleeps'
/// returns), the report, NDJSON and the flame graph; replay folds the same.
#[test]
fn threshold_keeps_stacks_of_long_blocks_only() {
    require_bpf!();
    let _machine = machine_lock();
    let dir = fresh_dir("offcpu-threshold");
    let at = |name: &str| path_str(&dir.join(name));
    #[rustfmt::skip]
    let out = wprof_ok(&[
        "-S", "offcpu=1ms", "-D", &at("o.data"), "-J", &at("o.ndjson"),
        "--profile", "offcpu", "--folded", &at("o.folded"), "--pprof", &at("o.pb.gz"),
        "--flamegraph", &at("o.svg"), "--report-json", &at("r.json"), "--only-command",
        "--", &workload("offcpu_mix"),
    ]);
    let measured = measured(&out.stderr);
    let report: Value = serde_json::from_slice(&fs::read(dir.join("r.json")).expect("report"))
        .expect("JSON report");
    assert_eq!(report["offcpu_stacks"], "blocks of at least 1ms");
    let threads = report["threads"].as_array().expect("threads");
    let row = threads.iter().find(|t| t["thread"] == "offcpu_mix");
    let row = row.unwrap_or_else(|| panic!("no offcpu_mix thread in {threads:?}"));
    let tid = row["tid"].as_u64().expect("a tid");

    let text = fs::read_to_string(dir.join("o.ndjson")).expect("NDJSON");
    let nd = Ndjson::parse(&text);
    assert_eq!(nd.header["stacks"], serde_json::json!(["offcpu=1ms"]));
    check_blocks(&blocks_of(&nd, tid), &measured);

    let prefix = format!("offcpu_mix-{tid}/{tid};");
    let lines: Vec<(String, u64)> = (folded(&dir.join("o.folded")).into_iter())
        .filter(|(stack, _)| stack.starts_with(&prefix))
        .collect();
    check_totals(&lines, row, &measured);
    check_pprof_total(
        &dir.join("o.pb.gz"),
        weight(&folded(&dir.join("o.folded")), |_| true),
    );

    let svg = fs::read_to_string(dir.join("o.svg")).expect("SVG");
    assert!(
        svg.contains("blocks under 1ms without stacks"),
        "SVG subtitle"
    );
    let info = wprof_ok(&["-R", "-D", &at("o.data"), "-I"]).stdout;
    assert!(info.contains("stacks      offcpu=1ms"), "{info}");
    assert!(info.contains("stacks of blocks of at least 1ms"), "{info}");
    assert!(
        stack_count(&info, "off-CPU user stacks joined at syscall return")
            >= measured["long"]["count"],
        "{info}"
    );
    assert!(
        info.contains("off-CPU user stacks lost (no syscall return)"),
        "{info}"
    );

    #[rustfmt::skip]
    wprof_ok(&[
        "-R", "-D", &at("o.data"), "--profile", "offcpu", "--folded", &at("r.folded"),
    ]);
    let [live, replayed] = ["o.folded", "r.folded"].map(|f| fs::read_to_string(dir.join(f)));
    assert_eq!(live.expect("folded"), replayed.expect("replayed folded"));
}

/// The count on the `-I` line labelled `label`.
pub(super) fn stack_count(info: &str, label: &str) -> f64 {
    let line = info.lines().find(|l| l.contains(label));
    let count = line.and_then(|l| l.split_whitespace().last()?.parse().ok());
    count.unwrap_or_else(|| panic!("no `{label}` count in {info}"))
}

/// `go tool pprof` reads the folded off-CPU total from the pprof file.
fn check_pprof_total(path: &Path, folded_total: u64) {
    match go_pprof_total(path, "off_cpu", Some("ns")) {
        Some(total) => assert_eq!(total, folded_total as i64, "pprof off_cpu total"),
        None => eprintln!("pprof check skipped: `go` is not installed (apt-get install golang-go)"),
    }
}

/// Thresholds that are not durations with a unit fail before anything is
/// loaded, naming the option and the value.
#[test]
fn bad_thresholds_fail_clearly() {
    for (value, why) in [
        (
            "abc",
            "the off-CPU threshold `abc` is not a duration (examples: 1ms, 500us)",
        ),
        (
            "-1",
            "the off-CPU threshold `-1` is not a duration (examples: 1ms, 500us)",
        ),
        (
            "5",
            "the off-CPU threshold `5` needs a unit (examples: 1ms, 500us)",
        ),
        (
            "0us",
            "the off-CPU threshold is a positive duration (examples: 1ms, 500us)",
        ),
    ] {
        let arg = format!("offcpu={value}");
        let out = wprof(&["-S", &arg, "-d", "10ms"]);
        assert!(!out.success(), "-S {arg} was accepted");
        let expected =
            format!("invalid value '{arg}' for '-S [<KIND>]': bad stack kind `{arg}`: {why}");
        assert!(out.stderr.contains(&expected), "-S {arg}: {}", out.stderr);
    }
}
