//! `debugf()`: `bpf_trace_printk` lines in the kernel's trace buffer, as
//! bpftrace writes them.

use std::time::{SystemTime, UNIX_EPOCH};

use super::wprof_ok;
use crate::require_bpf;

/// The trace buffer, where tracefs is mounted (bpftrace reads either).
fn trace_buffer() -> String {
    [
        "/sys/kernel/tracing/trace",
        "/sys/kernel/debug/tracing/trace",
    ]
    .iter()
    .find_map(|path| std::fs::read_to_string(path).ok())
    .unwrap_or_default()
}

/// `debugf()` writes its integers and strings, formatted by the kernel, to
/// the trace buffer (a run-unique marker finds this run's line among other
/// writers').
#[test]
fn debugf_writes_kernel_formatted_lines() {
    require_bpf!();
    let marker = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_nanos()
        % 1_000_000_000;
    let script = format!(
        "BEGIN {{ $s = \"str\"; debugf(\"wprof-debugf {marker} %s %x %5d\", $s, 255, -3); exit(); }}"
    );
    let run = wprof_ok(&["-e", &script]);
    assert!(
        run.stderr.contains("debugf() builtin is not recommended"),
        "{}",
        run.stderr
    );
    let wanted = format!("bpf_trace_printk: wprof-debugf {marker} str ff    -3");
    let trace = trace_buffer();
    assert!(
        trace.lines().any(|line| line.ends_with(&wanted)),
        "no `{wanted}` in the trace buffer:\n{}",
        trace.lines().rev().take(10).collect::<Vec<_>>().join("\n")
    );
}
