//! Drop accounting against the real kernel: each record kind's lost events
//! are counted apart, by reason, so that under overload a probe's kept and
//! dropped events add up to its calls exactly, with the trackers on; and
//! stacks are not lost in ordinary use.

use serde_json::Value;

use super::capture::{fresh_dir, summary_events};
use super::{path_str, workload, wprof_ok};
use crate::require_bpf;

/// The script's probe in the overload test.
const FLOODED: &str = "sys_enter_getppid";

/// wprof stopped (by the workload) while 500,000 getppid calls fire its
/// tracepoint: the ring buffer fills, the script's probe loses events, and
/// kept + dropped is exactly the calls the workload counted; the trackers'
/// drops are counted apart, and the global counts are the sums of the
/// per-kind ones in `-I`, NDJSON and the end-of-capture warning.
#[test]
fn kept_plus_dropped_is_calls_under_overload() {
    require_bpf!();
    let dir = fresh_dir("drops_overload");
    let data = path_str(&dir.join("flood.data"));
    let flood = workload("capture_flood");
    let script = format!("tracepoint:syscalls:{FLOODED} /pid == cpid/ < >");
    let out = wprof_ok(&["-e", &script, "-D", &data, "-c", &flood]);
    let calls: u64 = (out.stdout.lines())
        .find_map(|l| l.strip_prefix("calls="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the workload counts its calls:\n{}", out.stdout));

    let header = ndjson_header(&data);
    let probes = header["probes"].as_array().expect("probes");
    let flooded = (probes.iter())
        .find(|p| p["name"] == FLOODED)
        .unwrap_or_else(|| panic!("no {FLOODED} probe in {header}"));
    let dropped = flooded["dropped"]["ring_buffer_full"].as_u64().unwrap_or(0);
    let summary = wprof_ok(&["-R", "-I", "-D", &data]).stdout;
    let kept = summary_events(&summary, FLOODED);
    assert!(dropped > 0, "the ring buffer never filled:\n{summary}");
    assert_eq!(kept + dropped, calls, "kept + dropped != calls:\n{summary}");
    assert_eq!(summary_dropped(&summary, FLOODED), dropped, "{summary}");
    assert_global_drops_are_sums(&header);
    let warning = format!("of `{FLOODED}` (ring buffer full)");
    assert!(
        out.stderr.contains("wprof: warning: dropped ") && out.stderr.contains(&warning),
        "{}",
        out.stderr
    );
}

/// The NDJSON header of capture `data`.
#[track_caller]
fn ndjson_header(data: &str) -> Value {
    let out = wprof_ok(&["-R", "-J", "-", "-D", data]);
    let line = out.stdout.lines().next().expect("a header line");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("bad header {line}: {e}"))
}

/// The `dropped` column of probe `name` in a `-I` summary.
#[track_caller]
fn summary_dropped(summary: &str, name: &str) -> u64 {
    let row = (summary.lines())
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.len() >= 5 && w[1] == name && (w[2] == "instant" || w[2] == "span"))
        .unwrap_or_else(|| panic!("no probe row for {name} in:\n{summary}"));
    row[4].parse().expect("dropped column")
}

/// The header's drops by reason are the sums of every probe's `dropped`.
#[track_caller]
fn assert_global_drops_are_sums(header: &Value) {
    let global = header["drops"].as_object().expect("a finished capture");
    let probes = header["probes"].as_array().expect("probes");
    for reason in ["ring_buffer_full", "stack_lost", "unmatched_span_end"] {
        let sum: u64 = (probes.iter())
            .filter_map(|p| p["dropped"][reason].as_u64())
            .sum();
        let total = global.get(reason).and_then(Value::as_u64).unwrap_or(0);
        assert_eq!(sum, total, "{reason}: {header}");
    }
}
