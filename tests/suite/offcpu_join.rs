//! Which stack a block gets under `-S offcpu=DUR`, on the real kernel: the
//! user stack of a block in a system call is taken at the call's return
//! and joined to the block by the recorder. Two callers of the same depth
//! that block alternately each keep their own caller (the case a per-task
//! stack cache got wrong), a thread killed while blocked keeps its own
//! stack or none, and the `sys_exit` program returns at once when no block
//! waits (`bpf_stats`).

use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use libbpf_rs::query::ProgInfoIter;

use super::capture::{Ndjson, fresh_dir};
use super::offcpu::{blocks_of, frame_index, stack_count};
use super::unwind::StatsOn;
use super::{path_str, workload, wprof_ok};
use crate::common::wprof_bin;
use crate::require_bpf;

const ROUNDS: usize = 10;

/// The tids of the workload's process: its main thread and the other one.
fn threads_of(nd: &Ndjson, comm: &str) -> (u64, u64) {
    let mut tids: Vec<(u64, u64)> = (nd.events.iter())
        .filter(|e| e["t"] == "switch" && e["next"]["comm"] == comm)
        .map(|e| (e["next"]["tid"].as_u64(), e["next"]["pid"].as_u64()))
        .filter_map(|(tid, pid)| Some((tid?, pid?)))
        .collect();
    tids.sort_unstable();
    tids.dedup();
    let main = tids.iter().find(|(tid, pid)| tid == pid).map(|t| t.0);
    let main = main.unwrap_or_else(|| panic!("no main thread of {comm} in {tids:?}"));
    let other = tids.iter().find(|(tid, pid)| *pid == main && *tid != main);
    (
        main,
        other
            .unwrap_or_else(|| panic!("no second thread in {tids:?}"))
            .0,
    )
}

/// `caller_a` and `caller_b` block alternately in the same `block_here`:
/// the long blocks' stacks name them in exactly that order, each through
/// `block_here` to `main` (or, if lost under load, no user part, counted by
/// `-I`); the thread killed while blocked in
/// `doomed_sleep` never shows their frames, and its last block keeps its
/// own stack (joined at the killed call's return) or no user part; `-I`
/// counts the joined stacks.
#[test]
fn each_block_keeps_its_own_caller() {
    require_bpf!();
    let dir = fresh_dir("offcpu-callers");
    let at = |name: &str| path_str(&dir.join(name));
    let rounds = ROUNDS.to_string();
    #[rustfmt::skip]
    let out = wprof_ok(&[
        "-S", "offcpu=1ms", "-D", &at("o.data"), "-J", &at("o.ndjson"), "--only-command",
        "--", &workload("offcpu_callers"), &rounds,
    ]);
    assert!(out.stderr.contains(&format!("alternated rounds={ROUNDS}")));
    let text = std::fs::read_to_string(dir.join("o.ndjson")).expect("NDJSON");
    let nd = Ndjson::parse(&text);
    let (main, doomed) = threads_of(&nd, "offcpu_callers");

    // The naps, in order, by their kernel frames; a nap whose user stack was
    // lost (counted by `-I`) has none, but never another nap's.
    let naps: Vec<Vec<String>> = (blocks_of(&nd, main).into_iter())
        .filter_map(|b| b.frames)
        .filter(|frames| frame_index(frames, "hrtimer_nanosleep").is_some())
        .collect();
    let callers: Vec<Option<&str>> = (naps.iter())
        .map(|frames| {
            let order = |f: &str| frame_index(frames, f);
            match (order("caller_a"), order("caller_b")) {
                (Some(_), None) => Some("caller_a"),
                (None, Some(_)) => Some("caller_b"),
                (None, None) if frames.iter().all(|f| f.starts_with("[K]")) => None,
                _ => panic!("not one caller in {frames:#?}"),
            }
        })
        .collect();
    // A nap whose switch-in the kernel delivered to no tracer (seen under
    // load, bpftrace missing the same one) has no block: the report counts
    // it among the thread's missing events. The others keep their order.
    let missing = missing_events(&at("o.data"), main);
    let expected = ["caller_a", "caller_b"].repeat(ROUNDS);
    let skipped = skipped_in_order(&callers, &expected);
    assert!(
        skipped.is_some_and(|n| n as f64 <= missing),
        "{callers:?}: {skipped:?} naps skipped, {missing} events missing"
    );
    let info = wprof_ok(&["-R", "-D", &at("o.data"), "-I"]).stdout;
    let lost = stack_count(&info, "off-CPU user stacks lost (no syscall return)");
    let without = callers.iter().filter(|c| c.is_none()).count();
    assert!(
        without as f64 <= lost,
        "{without} naps without a user stack: {info}"
    );
    let stacks = naps
        .iter()
        .filter(|f| frame_index(f, "block_here").is_some());
    for frames in stacks {
        let at: Vec<Option<usize>> = ["hrtimer_nanosleep", "block_here", "main"]
            .iter()
            .map(|f| frame_index(frames, f))
            .collect();
        assert!(
            at.iter().all(Option::is_some) && at.is_sorted(),
            "{frames:#?}"
        );
    }

    let doomed_blocks = blocks_of(&nd, doomed);
    for frames in doomed_blocks.iter().filter_map(|b| b.frames.as_ref()) {
        let foreign = ["caller_a", "caller_b", "block_here"];
        assert!(
            foreign.iter().all(|f| frame_index(frames, f).is_none()),
            "the killed thread's block took the main thread's stack: {frames:#?}"
        );
    }
    // Its last long block: on its way out after the kill the thread can
    // still be switched out for microseconds (seen: 8.8 us, no stack).
    let last = (doomed_blocks.iter().rev())
        .find(|b| b.duration_ns >= 1_000_000)
        .unwrap_or_else(|| panic!("the killed thread's long block ends: {doomed_blocks:?}"));
    let frames = last.frames.as_ref().expect("a long block has a stack");
    let user_part = frames.iter().any(|f| !f.starts_with("[K]"));
    assert!(
        !user_part || frame_index(frames, "doomed_sleep").is_some(),
        "{frames:#?}"
    );
    let joined = stack_count(&info, "off-CPU user stacks joined at syscall return");
    assert!(joined + lost >= (2 * ROUNDS) as f64, "{info}");
}

/// The events the wall-clock report found missing for thread `tid` of the
/// capture at `data` (its `anomalies`).
pub(super) fn missing_events(data: &str, tid: u64) -> f64 {
    let report = format!("{data}.report.json");
    wprof_ok(&["-R", "-D", data, "--report-json", &report, "--top", "0"]);
    let text = std::fs::read_to_string(&report).expect("the report");
    let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let threads = json["threads"].as_array().expect("threads");
    let row = threads.iter().find(|t| t["tid"] == tid);
    let row = row.unwrap_or_else(|| panic!("no row of thread {tid} in {text}"));
    row["anomalies"].as_f64().expect("anomalies")
}

/// How many of `expected` `got` leaves out when it is `expected` in order
/// with some left out (a `None` matching any one); `None` when it is not.
fn skipped_in_order(got: &[Option<&str>], expected: &[&str]) -> Option<usize> {
    let mut rest = expected.iter();
    let mut skipped = 0;
    for caller in got {
        loop {
            let want = rest.next()?;
            if caller.is_none_or(|c| c == *want) {
                break;
            }
            skipped += 1;
        }
    }
    Some(skipped + rest.count())
}

#[cfg(test)]
mod order_tests {
    use super::skipped_in_order;

    /// Naps left out are counted; a nap out of order or one too many is not
    /// the expected order.
    #[test]
    fn skipped_naps_are_counted() {
        let expected = ["a", "b", "a", "b"];
        assert_eq!(
            skipped_in_order(&[Some("a"), Some("b"), Some("a"), Some("b")], &expected),
            Some(0)
        );
        assert_eq!(
            skipped_in_order(&[Some("a"), Some("a"), Some("b")], &expected),
            Some(1)
        );
        assert_eq!(skipped_in_order(&[Some("a"), None], &expected), Some(2));
        assert_eq!(
            skipped_in_order(&[Some("b"), Some("b"), Some("a")], &expected),
            None
        );
        assert_eq!(skipped_in_order(&[None; 5], &expected), None);
    }
}

/// Run time and runs of the live `tp_btf:sys_exit` programs.
fn sys_exit_stats() -> (u64, u64) {
    (ProgInfoIter::default())
        .filter(|p| p.name.to_string_lossy().ends_with("_sys_exit"))
        .fold((0, 0), |(ns, runs), p| {
            (ns + p.run_time_ns, runs + p.run_cnt)
        })
}

/// Under `-S offcpu=1ms` forced to its `sys_exit` program (the fallback of
/// kernels without the task-work kfunc, `WPROF_OFFCPU_SYS_EXIT`), 5000
/// short sleeps (each a `sys_exit` with no long block waiting) cost the
/// program well under a stack walk per run on average (`bpf_stats`): it
/// returns before walking.
#[test]
fn sys_exit_returns_early_without_pending_blocks() {
    require_bpf!();
    let dir = fresh_dir("offcpu-sys-exit");
    let stats = StatsOn::new();
    #[rustfmt::skip]
    let args = [
        "-S", "offcpu=1ms", "-D", &path_str(&dir.join("o.data")), "--only-command",
        "--", &workload("offcpu_mix"), "5000", "10", "20", "5",
    ];
    let mut child = (Command::new(wprof_bin()).args(args))
        .env("WPROF_OFFCPU_SYS_EXIT", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("wprof runs");
    let started = Instant::now();
    let mut seen = (0, 0);
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > super::RUN_TIMEOUT {
            let _ = child.kill();
            panic!("wprof did not finish within {:?}", super::RUN_TIMEOUT);
        }
        let now = sys_exit_stats();
        if now.1 > seen.1 {
            seen = now;
        }
        sleep(Duration::from_millis(20));
    }
    drop(stats);
    let (ns, runs) = seen;
    let per_run = ns as f64 / runs.max(1) as f64;
    println!("sys_exit program: {runs} runs, {per_run:.0} ns per run (bpf_stats)");
    assert!(runs >= 5_000, "{runs} runs of the sys_exit program");
    assert!(
        per_run < 1000.0,
        "{per_run:.0} ns per run: the program walks"
    );
}
