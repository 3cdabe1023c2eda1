//! Stacks of processes wprof did not start, walked from copies of their
//! stacks (`docs/unwinding.md`, "Stack snapshots"): the `-c` command's
//! child that execs a program without frame pointers, a library it
//! dlopens and runs at once, and a process followed with `-p`. Their first
//! stacks come before their tables; the records carry the user registers
//! and stack, and the recorder walks them once the tables are placed, so
//! every stack counts, from the first (none is left out as taken "before
//! the tables loaded").

use super::super::capture::Ndjson;
use super::super::machine_lock;
use super::super::{path_str, wprof_ok};
use super::captures::{
    LIBRARY_PATH, Sample, assert_reach_main, capture_keeping, in_order, samples,
};
use super::kernel::{spawn, wait_until_mapped};
use super::workloads::{c_spin_sleep, dlopen_main, spin_lib};
use crate::require_bpf;

/// How many of `samples` were walked from a stack copy.
fn from_copies(samples: &[Sample]) -> usize {
    (samples.iter())
        .filter(|s| s.unwinder == Some("snapshot"))
        .count()
}

/// The stacks of `comm` in the capture kept at `data`, replayed: the
/// replay gives every event the same stack as the live output.
#[track_caller]
fn assert_replay_agrees(live: &Ndjson, data: &std::path::Path, comm: &str) {
    let replay = wprof_ok(&["-R", "-J", "-", "-D", &path_str(data)]);
    let replayed = Ndjson::parse(&replay.stdout);
    let stacks = |json: &Ndjson| -> Vec<(Option<String>, Vec<String>)> {
        (samples(json, comm).iter())
            .map(|s| (s.unwinder.map(str::to_owned), s.frames.to_vec()))
            .collect()
    };
    assert_eq!(stacks(live), stacks(&replayed), "replay of {comm} differs");
    let _ = std::fs::remove_file(data);
}

/// `wprof -S -c "sh -c 'spin_sleep 1 10; true'"`, three times: the shell's
/// child execs `spin_sleep` (`-O2 -fomit-frame-pointer`), which works for
/// 20 ms (10 on the CPU, 10 asleep) and exits. ≥ 95% of its timer and
/// off-CPU stacks walked with tables or from copies reach `main` (all but
/// those outside it: its `exec`, the loader's start-up), some walked from
/// copies, and a replay of the capture shows the same stacks. A copy is
/// walked only if the recorder read the process while it lived: under
/// load the 20 ms program can exit first, its copies are given up and its
/// stacks stay the kernel's walk, which is only counted here.
#[test]
fn child_of_the_command_reaches_main() {
    require_bpf!();
    let _machine = machine_lock();
    let program = path_str(&c_spin_sleep(false));
    let command = format!("sh -c '{program} 1 10; true'");
    let args = ["-S", "timer=1000hz", "-c", &command];
    let captures: Vec<(Ndjson, std::path::PathBuf)> = (0..3)
        .map(|run| capture_keeping(&format!("snapshot-child-{run}"), "spin_sleep", &args))
        .collect();
    let all: Vec<Sample> = (captures.iter())
        .flat_map(|(json, _)| samples(json, "spin_sleep"))
        .collect();
    let copies = from_copies(&all);
    let (kernel_walks, walked): (Vec<Sample>, Vec<Sample>) =
        (all.into_iter()).partition(|s| s.unwinder == Some("kernel-walk"));
    eprintln!(
        "{copies} of {} stacks walked from copies, {} left to the kernel's walk",
        walked.len() + kernel_walks.len(),
        kernel_walks.len()
    );
    assert!(copies > 0, "no stack of the child was copied");
    assert_reach_main(&walked, &["timer", "switch"], "main", 10);
    for (json, data) in &captures {
        assert_replay_agrees(json, data, "spin_sleep");
    }
}

/// The command's child dlopens `libspin.so` (no frame pointers) at once
/// and spins in it for 200 ms: ≥ 95% of its stacks in the library go
/// `lib_spin → lib_middle → lib_entry → run_library → main`, its first
/// ones included (the library's table is built after they are taken).
#[test]
fn library_run_at_once_reaches_main() {
    require_bpf!();
    let script = format!(
        "echo go | {} {} 200; true",
        path_str(&dlopen_main()),
        path_str(&spin_lib())
    );
    let args = ["-S", "timer=1000hz", "--", "sh", "-c", &script];
    let (json, data) = capture_keeping("snapshot-dlopen", "dlopen_main", &args);
    let all = samples(&json, "dlopen_main");
    let in_library: Vec<&Sample> = (all.iter())
        .filter(|s| s.kind == "timer" && s.user_functions().contains(&"lib_spin"))
        .collect();
    let path = LIBRARY_PATH;
    let through = (in_library.iter())
        .filter(|s| in_order(&s.user_functions(), &path))
        .count();
    let other: Vec<(Option<&str>, Vec<&str>)> = (in_library.iter())
        .filter(|s| !in_order(&s.user_functions(), &path))
        .map(|s| (s.unwinder, s.user_functions()))
        .take(3)
        .collect();
    eprintln!(
        "{through} of {} stacks in the library go {path:?}; {} of the process's {} walked from copies",
        in_library.len(),
        from_copies(&all),
        all.len()
    );
    assert!(
        in_library.len() >= 10,
        "only {} stacks in the library",
        in_library.len()
    );
    assert!(
        through * 100 >= in_library.len() * 95,
        "{through} of {}: {other:#?}",
        in_library.len()
    );
    assert_replay_agrees(&json, &data, "dlopen_main");
}

/// `wprof -S -p PID -d 1s` of a running `spin_sleep` (no frame pointers, its
/// tables read when the capture starts): ≥ 95% of its timer and off-CPU
/// stacks reach `main`, from the first.
#[test]
fn followed_process_reaches_main() {
    require_bpf!();
    let workload = spawn(&c_spin_sleep(false), &["1000", "10"]);
    let pid = workload.0.id();
    wait_until_mapped(pid, "libc");
    let pid = pid.to_string();
    let args = ["-S", "timer=1000hz", "-p", &pid, "-d", "1s"];
    let (json, data) = capture_keeping("snapshot-pid", "spin_sleep", &args);
    drop(workload);
    let all = samples(&json, "spin_sleep");
    eprintln!(
        "{} of {} stacks walked from copies",
        from_copies(&all),
        all.len()
    );
    assert_reach_main(&all, &["timer", "switch"], "main", 10);
    let _ = std::fs::remove_file(data);
}
