//! Stacks through pending uretprobes: while a uretprobe'd function runs,
//! its return address on the stack is the `[uprobes]` trampoline, and the
//! kernel keeps the real one in the task's list of return instances.
//! `uretprobe_nest.c` recurses `main → nest → nest → nest` (three
//! instances pending at once) and spins and sleeps in the innermost; under
//! `-S` with a uretprobe on `nest`, its timer and off-CPU stacks go
//! through every `nest` frame to `main`, no frame in `[uprobes]`: with the
//! table unwinder (program without frame pointers), and with the kernel's
//! frame-pointer walk (`-S unwind=fp`, built with frame pointers), which
//! puts the return addresses back itself for the current task.

use super::super::path_str;
use super::captures::{Sample, assert_reach_main, capture, capture_keeping, samples};
use super::kernel::{spawn, wait_until_mapped};
use super::workloads::c_uretprobe_nest;
use crate::require_bpf;

/// Rounds, milliseconds spun and slept per round, recursion depth: about
/// 1 s, up to 500 timer samples at 1 kHz (50–150 under load: the spin is
/// timed by the clock) and 50 naps.
const WORKLOAD_ARGS: &str = "50 10 2";
/// `nest` frames of a stack in the innermost call (depth 2).
const NEST_FRAMES: usize = 3;

/// Checks the stacks of one capture of the workload (`unwind`: extra `-S`
/// words) and returns how many showed the trampoline.
#[track_caller]
fn check(test: &str, frame_pointers: bool, unwind: &[&str]) -> usize {
    let program = path_str(&c_uretprobe_nest(frame_pointers));
    let comm = program.rsplit('/').next().unwrap_or_default().to_owned();
    let script = format!("uretprobe:{program}:nest /pid == cpid/ {{ @returns = count(); }}");
    let command = format!("{program} {WORKLOAD_ARGS}");
    let args = [
        &["-S", "timer=1000hz", "-e", &script][..],
        unwind,
        &["-c", &command],
    ];
    let json = capture(test, &comm, &args.concat());
    assert_through_nest(&samples(&json, &comm), &format!("{unwind:?}"))
}

/// Kernel functions (this kernel inlines `prepare_uretprobe` into the
/// first) between the breakpoint handler replacing a return address with
/// the trampoline and its listing the instance that holds the real one: a
/// sample taken there keeps the trampoline, nothing on the user stack or in
/// the task saying where the function returns (docs/unwinding.md, "Limits").
const HIJACKING_A_RETURN: &[&str] = &["handler_chain", "arch_uretprobe_hijack_return_addr"];

/// Asserts that the timer and off-CPU stacks reach `main` through every
/// `nest` frame; returns how many showed the trampoline outside the
/// kernel's hijacking of a return address.
#[track_caller]
fn assert_through_nest(all: &[Sample], what: &str) -> usize {
    let (hijacking, in_trampoline): (Vec<&Sample>, Vec<&Sample>) = (all.iter())
        .filter(|s| s.frames.iter().any(|f| f.contains("[uprobes]")))
        .partition(|s| (s.kernel_functions().iter()).any(|f| HIJACKING_A_RETURN.contains(f)));
    let copies = (all.iter())
        .filter(|s| s.unwinder == Some("snapshot"))
        .count();
    println!(
        "{what}: {} of {} stacks show [uprobes] ({} more taken while the kernel hijacked a \
         return address), {copies} walked from copies",
        in_trampoline.len(),
        all.len(),
        hijacking.len()
    );
    for sample in in_trampoline.iter().take(3) {
        println!("{}: {:#?}", sample.kind, sample.frames);
    }
    assert_reach_main(all, &["timer"], "main", 25);
    assert_reach_main(all, &["switch"], "main", 20);
    assert_every_nest_frame(all);
    in_trampoline.len()
}

/// ≥ 95% of the stacks in the innermost call (in `spin_until` or
/// `nanosleep`) have one `nest` frame per pending uretprobe: each took
/// its own instance's return address.
#[track_caller]
fn assert_every_nest_frame(all: &[Sample]) {
    let innermost: Vec<Vec<&str>> = (all.iter())
        .map(Sample::user_functions)
        .filter(|f| {
            f.iter()
                .any(|n| *n == "spin_until" || n.contains("nanosleep"))
        })
        .collect();
    let whole = (innermost.iter())
        .filter(|f| f.iter().filter(|n| **n == "nest").count() == NEST_FRAMES)
        .count();
    let wrong: Vec<&Vec<&str>> = (innermost.iter())
        .filter(|f| f.iter().filter(|n| **n == "nest").count() != NEST_FRAMES)
        .take(3)
        .collect();
    assert!(
        innermost.len() >= 40 && whole * 100 >= innermost.len() * 95,
        "{whole} of {} innermost stacks have {NEST_FRAMES} nest frames; e.g. {wrong:#?}",
        innermost.len()
    );
}

/// The table unwinder takes each trampoline's return address from the
/// kernel's list: no stack shows `[uprobes]`.
#[test]
fn table_walks_go_through_pending_uretprobes() {
    require_bpf!();
    let in_trampoline = check("uretprobe-tables", false, &[]);
    assert_eq!(in_trampoline, 0, "stacks show the trampoline");
}

/// The kernel's frame-pointer walk (`bpf_get_stack`) replaces the
/// trampolines on the stack itself (`perf` callchains do, since Linux
/// 6.11); only a task stopped in the trampoline keeps it as its first
/// frame, and its callers are then one instance off (not asserted: a few
/// samples per run).
#[test]
fn kernel_walks_go_through_pending_uretprobes() {
    require_bpf!();
    check("uretprobe-kernel", true, &["-S", "unwind=fp"]);
}

/// `-p` of a running workload: its stacks are walked from copies until its
/// tables load, and the copies get the trampolines' return addresses back
/// (`codegen::lower_snapshot`); every walk goes through them.
#[test]
fn followed_process_copies_go_through_pending_uretprobes() {
    require_bpf!();
    let program = c_uretprobe_nest(false);
    let workload = spawn(&program, &["1000", "10", "2"]);
    let pid = workload.0.id();
    wait_until_mapped(pid, "libc");
    let script = format!(
        "uretprobe:{}:nest /pid == {pid}/ {{ @returns = count(); }}",
        path_str(&program)
    );
    let pid = pid.to_string();
    let args = ["-S", "timer=1000hz", "-e", &script, "-p", &pid, "-d", "1s"];
    let (json, data) = capture_keeping("uretprobe-pid", "uretprobe_nest", &args);
    drop(workload);
    let all = samples(&json, "uretprobe_nest");
    let in_trampoline = assert_through_nest(&all, "-p");
    assert_eq!(in_trampoline, 0, "stacks show the trampoline");
    let _ = std::fs::remove_file(data);
}
