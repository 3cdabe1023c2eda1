//! Code in anonymous executable memory (JIT code) is marked `[anon]`, and
//! named from the process's perf map (`/tmp/perf-PID.map`) when it writes
//! one: timer samples of `jit.c`, which runs a loop it copied there.

use super::super::path_str;
use super::captures::capture;
use super::workloads::c_jit;
use crate::require_bpf;

/// The innermost user frames of the timer samples of `jit` run with
/// `args`, and the pid of the workload.
fn innermost_frames(test: &str, args: &str) -> (Vec<String>, Option<u64>) {
    let command = format!("{} {args}", path_str(&c_jit()));
    let ndjson = capture(test, "jit", &["-S", "timer=997hz", "-c", &command]);
    let timer: Vec<_> = (ndjson.events.iter())
        .filter(|e| e["t"] == "timer" && e["task"]["pcomm"] == "jit")
        .collect();
    let pid = timer.first().and_then(|e| e["task"]["pid"].as_u64());
    let frames = (timer.iter())
        .filter_map(|e| ndjson.stack_of(e).iter().find(|f| f.starts_with("[U] ")))
        .cloned()
        .collect();
    (frames, pid)
}

/// Without a perf map the JIT code's frames say `[anon]` and their address
/// (`[anon]+0x7f…`); with one they carry its name and the map as their
/// module. (The first samples, before the recorder reads the mappings
/// again after the `mmap`, are bare addresses.)
#[test]
fn jit_code_is_marked_and_named_from_perf_maps() {
    require_bpf!();
    let (frames, _) = innermost_frames("unwind-jit-anon", "400");
    let anon = (frames.iter())
        .filter(|f| f.starts_with("[U] [anon]+0x7"))
        .count();
    eprintln!("{anon} of {} innermost frames in [anon]", frames.len());
    assert!(anon * 2 >= frames.len() && anon >= 10, "{frames:?}");

    let (frames, pid) = innermost_frames("unwind-jit-map", "400 map");
    let map = format!("perf-{}.map", pid.expect("the workload's samples"));
    let _ = std::fs::remove_file(format!("/tmp/{map}"));
    let named = (frames.iter())
        .filter(|f| f.starts_with("[U] jit_spin+0x") && f.ends_with(&map))
        .count();
    eprintln!(
        "{named} of {} innermost frames named jit_spin ({map})",
        frames.len()
    );
    assert!(named * 2 >= frames.len() && named >= 10, "{frames:?}");
}
