//! The paths of a long block's user stack under `-S offcpu=DUR` that a
//! SCHED_FIFO hog makes happen on demand (`tests/data/offcpu_fifo.c`): a
//! block inside `execve` (the call returns into another program, whose
//! stack is not the block's), and a preemption in user mode (no system
//! call: the stack is walked at the switch-out); and that the recorder's
//! internal records stay out of every listing of the capture.

use serde_json::Value;

use super::capture::{Ndjson, fresh_dir, perfetto_events};
use super::offcpu::{Block, blocks_of, frame_index, stack_count};
use super::offcpu_join::missing_events;
use super::{machine_lock, path_str, workload, wprof_ok};
use crate::require_bpf;

/// The shortest block the hog causes: it spins 30 ms.
const HOG_BLOCK_NS: u64 = 20_000_000;

/// One capture of `offcpu_fifo MODE` under `-S offcpu=1ms`.
struct FifoRun {
    /// The `-I` text.
    info: String,
    /// The blocks of each of its threads (the hog's too), by thread id.
    threads: Vec<(u64, Vec<Block>)>,
    data: String,
}

impl FifoRun {
    fn blocks(&self) -> impl Iterator<Item = &Block> {
        self.threads.iter().flat_map(|(_, blocks)| blocks)
    }

    /// The events the report found missing for its threads: a switch the
    /// kernel never delivered (`docs/metrics.md`) hides the block it ends.
    fn missing_events(&self) -> f64 {
        (self.threads.iter())
            .map(|(tid, _)| missing_events(&self.data, *tid))
            .sum()
    }
}

fn capture_fifo(mode: &str) -> FifoRun {
    let dir = fresh_dir(&format!("offcpu-fifo-{mode}"));
    let at = |name: &str| path_str(&dir.join(name));
    let _machine = machine_lock();
    #[rustfmt::skip]
    wprof_ok(&[
        "-S", "offcpu=1ms", "-D", &at("o.data"), "-J", &at("o.ndjson"), "--only-command",
        "--", &workload("offcpu_fifo"), mode,
    ]);
    let text = std::fs::read_to_string(dir.join("o.ndjson")).expect("NDJSON");
    let nd = Ndjson::parse(&text);
    let info = wprof_ok(&["-R", "-D", &at("o.data"), "-I"]).stdout;
    let mut tids: Vec<u64> = (nd.events.iter())
        .filter(|e| e["t"] == "switch" && e["next"]["comm"] == "offcpu_fifo")
        .filter_map(|e| e["next"]["tid"].as_u64())
        .collect();
    tids.sort_unstable();
    tids.dedup();
    let threads = tids.into_iter().map(|tid| (tid, blocks_of(&nd, tid)));
    FifoRun {
        info,
        threads: threads.collect(),
        data: at("o.data"),
    }
}

fn is_kernel(frame: &str) -> bool {
    frame.starts_with("[K]")
}

/// A block inside `execve` (behind the hog, the call cannot end the
/// program's other thread) keeps its kernel stack alone — never the new
/// program's first user frames — and `-I` counts it dropped by exec; the
/// new program's own long block still gets its user stack, through
/// `after_exec` when named.
#[test]
fn a_block_in_execve_keeps_its_kernel_stack_only() {
    require_bpf!();
    let run = capture_fifo("exec");
    let (info, threads) = (&run.info, &run.threads);
    let in_execve = |b: &Block| {
        let frames = b.frames.as_ref();
        frames.is_some_and(|f| frame_index(f, "__x64_sys_execve").is_some())
    };
    let blocks = (threads.iter().map(|(_, blocks)| blocks))
        .find(|blocks| {
            blocks
                .iter()
                .any(|b| in_execve(b) && b.duration_ns >= HOG_BLOCK_NS)
        })
        .unwrap_or_else(|| panic!("no long block in execve: {threads:#?}"));
    // wprof holds the `-c` command at the end of its exec (the exec event's
    // `ptrace_notify` under `bprm_execve`, `ptrace_stop` below it unless the
    // block ended in a task work run there) to read its mappings: the new
    // program is in place by then, and its first frame (the loader's
    // `_start`, found through the kernel's memory area when the mappings
    // were not read yet) is where the task resumes.
    let held_by_wprof = |f: &[String]| {
        frame_index(f, "ptrace_stop").is_some() || frame_index(f, "ptrace_notify").is_some()
    };
    for frames in blocks
        .iter()
        .filter(|b| in_execve(b))
        .filter_map(|b| b.frames.as_ref())
        .filter(|f| !held_by_wprof(f))
    {
        assert!(
            frames.iter().all(|f| is_kernel(f)),
            "a block in execve took user frames: {frames:#?}"
        );
    }
    assert!(
        stack_count(info, "off-CPU user stacks dropped (exec in the call)") >= 1.0,
        "{info}"
    );
    // The new program's nap: joined from its own return. Its frames are
    // named only if the recorder read the new program's mappings before
    // it exited (under load it may lag behind: bare addresses then).
    let execve = blocks.iter().rposition(in_execve).expect("found above");
    let after = (blocks[execve + 1..]
        .iter()
        .filter_map(|b| b.frames.as_ref()))
    .find(|f| frame_index(f, "hrtimer_nanosleep").is_some())
    .unwrap_or_else(|| panic!("the new program's nap has no stack: {blocks:#?}"));
    assert!(after.iter().any(|f| !is_kernel(f)), "{after:#?}");
    if frame_index(after, "main").is_some() {
        let order = ["hrtimer_nanosleep", "after_exec", "main"].map(|f| frame_index(after, f));
        assert!(
            order.iter().all(Option::is_some) && order.is_sorted(),
            "{after:#?}"
        );
    }
}

/// A thread preempted in user mode (no system call) by the hog has its
/// stack walked at the switch-out: the block's stack goes from the
/// interrupt's return to user mode through `spin_in_user` to `main`.
/// Where libc's table was not yet placed the walk falls back to frame
/// pointers, which lose the caller of a function preempted in its prologue
/// (before `push rbp`): such a stack must still reach `main` through
/// `preempt`. When the kernel never delivered the preemption's switch-in
/// (the VM agent's threads, `docs/metrics.md`), the block has no end and
/// no stack: the report counts the missing event, and the capture is
/// taken again.
#[test]
fn a_preemption_in_user_mode_is_walked_at_switch_out() {
    require_bpf!();
    for attempt in 1..=3 {
        let run = capture_fifo("preempt");
        let long: Vec<&Block> = (run.blocks())
            .filter(|b| b.duration_ns >= HOG_BLOCK_NS)
            .collect();
        // Switched out runnable, under `preempt` but not the hog's
        // `start_hog`: the main thread's other long blocks (its `waitpid`,
        // under load) went to sleep in a system call.
        let of_main = |f: &Vec<String>| {
            frame_index(f, "preempt").is_some() && frame_index(f, "start_hog").is_none()
        };
        let preempted =
            (long.iter()).find(|b| b.preempted && b.frames.as_ref().is_some_and(of_main));
        let Some(block) = preempted else {
            let missing = run.missing_events();
            assert!(missing > 0.0, "no preemption under preempt: {long:#?}");
            eprintln!("capture {attempt}: {missing} switches never delivered, no preemption seen");
            continue;
        };
        check_preemption_stack(block, &long);
        return;
    }
    panic!("three captures lost the preemption's switch-in");
}

/// The preempted block's stack: user mode, through `spin_in_user` (or
/// its callee, after a frame-pointer walk from a prologue) to `main`.
fn check_preemption_stack(block: &Block, long: &[&Block]) {
    let frames = block.frames.as_ref().expect("a block with frames");
    assert!(
        frames.iter().all(|f| !f.contains("entry_SYSCALL")),
        "not a preemption in user mode: {long:#?}"
    );
    let first_user = frames.iter().position(|f| !is_kernel(f));
    let spin = frame_index(frames, "spin_in_user");
    let by_frame_pointers = block.unwinder.as_deref() == Some("frame-pointer");
    let inner = if by_frame_pointers && spin.is_none() {
        eprintln!("frame-pointer walk from a prologue, spin_in_user lost: {frames:#?}");
        first_user
    } else {
        spin
    };
    let order = [
        first_user,
        inner,
        frame_index(frames, "preempt"),
        frame_index(frames, "main"),
    ];
    assert!(
        order.iter().all(Option::is_some) && order.is_sorted(),
        "{block:#?}"
    );
}

/// The names of the probes the NDJSON header lists.
fn header_probes(header: &Value) -> Vec<&str> {
    let probes = header["probes"].as_array().expect("header probes");
    probes.iter().filter_map(|p| p["name"].as_str()).collect()
}

/// The recorder's internal records (`offcpu_pending`, `task`) appear in
/// none of `-I`'s records, the NDJSON header's probes, the metrics or the
/// Perfetto trace, live or replayed; the user's and trackers' records do.
#[test]
fn internal_records_are_not_listed() {
    require_bpf!();
    let dir = fresh_dir("offcpu-internal-records");
    let at = |name: &str| path_str(&dir.join(name));
    #[rustfmt::skip]
    let live = wprof_ok(&[
        "-S", "offcpu=1ms", "-D", &at("o.data"), "-J", &at("o.ndjson"), "-T", &at("o.pb"),
        "--metrics", &at("m.json"), "-I", "-e", "tracepoint:syscalls:sys_enter_nanosleep < >",
        "-c", "sleep 0.05",
    ]);
    let replayed = wprof_ok(&["-R", "-D", &at("o.data"), "-I"]).stdout;
    for info in [&live.stdout, &replayed] {
        let records: Vec<&str> = (info.lines())
            .skip_while(|l| !l.starts_with("records"))
            .take_while(|l| !l.starts_with("threads"))
            .collect();
        let names: Vec<&str> = (records.iter().skip(2))
            .filter_map(|l| l.split_whitespace().nth(1))
            .collect();
        assert!(names.contains(&"switch") && names.contains(&"sys_enter_nanosleep"));
        assert!(
            !names.contains(&"offcpu_pending") && !names.contains(&"task"),
            "{records:#?}"
        );
        let count = records[0].split_whitespace().nth(1);
        assert_eq!(
            count,
            Some(names.len().to_string().as_str()),
            "{records:#?}"
        );
    }
    let text = std::fs::read_to_string(dir.join("o.ndjson")).expect("NDJSON");
    let nd = Ndjson::parse(&text);
    let names = header_probes(&nd.header);
    assert!(names.contains(&"switch"), "{names:?}");
    assert!(
        !names.contains(&"offcpu_pending") && !names.contains(&"task"),
        "{names:?}"
    );
    let metrics = std::fs::read_to_string(dir.join("m.json")).expect("metrics");
    assert!(metrics.contains("record:sys_enter_nanosleep.count"));
    assert!(metrics.contains("record:switch.count"));
    assert!(!metrics.contains("record:offcpu_pending") && !metrics.contains("record:task."));
    if let Some(events) = perfetto_events(&dir.join("o.pb"), &[]) {
        let named = |name: &str| events.iter().any(|e| e["name"] == name);
        assert!(!named("offcpu_pending") && !named("task"));
    }
}
