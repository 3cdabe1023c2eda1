//! BTF features against the running kernel: `tp_btf` probes with typed
//! arguments, kernel struct members, `curtask`, task-local storage, `ksym`,
//! and `selected()` compiled from task filters.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use wprof::frontend::options::{CompileOptions, TaskFilter};
use wprof::frontend::{check, parse};
use wprof::runtime::bpf::loader::{AttachOptions, load};
use wprof::runtime::targets::environment::SystemEnvironment;
use wprof::vocab::ProbeState;

use super::{map_lines, workload, wprof_ok};
use crate::require_bpf;

/// The count printed for map entry `key`, 0 when absent.
fn count(maps: &BTreeMap<String, String>, key: &str) -> u64 {
    maps.get(key).map_or(0, |v| v.parse().expect("a count"))
}

/// Kernel BTF is read only for a script that needs it: a plain tracepoint
/// script starts without it, a `tp_btf` one reads it once.
#[test]
fn kernel_btf_is_read_only_when_a_probe_needs_it() {
    require_bpf!();
    let steps = |probe: &str| {
        let script = format!("{probe} {{ @ = count(); exit(); }}");
        let mut wprof = Command::new(crate::common::wprof_bin());
        wprof.env("WPROF_TIMINGS", "1").args(["-e", &script]);
        let out = crate::common::run_with_timeout(&mut wprof, super::RUN_TIMEOUT)
            .unwrap_or_else(|e| panic!("cannot run wprof: {e}"));
        assert!(out.success(), "{probe}: {}", out.stderr);
        out.stderr.matches("timing: kernel BTF mapped").count()
    };
    assert_eq!(steps("tracepoint:sched:sched_switch"), 0);
    assert_eq!(steps("tp_btf:sched_switch"), 1);
}

/// sched_switch sees the sleeping child leave the CPU in a sleep state
/// (prev_state != 0) under its own comm, and come back as `next`.
#[test]
fn tp_btf_sched_switch_sees_sleeper() {
    require_bpf!();
    let t = workload("sleeper");
    let script = "tp_btf:sched_switch /args.prev->tgid == cpid/ {
                      @out[args.prev->comm, args.prev_state != 0] = count(); }
                  tp_btf:sched_switch /args.next->pid == cpid/ { @in = count(); }
                  tp_btf:sched_switch { @switches = count(); }";
    let out = wprof_ok(&["-e", script, "-c", &format!("{t} 6 10")]);
    let maps = map_lines(&out.stdout);
    assert!(count(&maps, "@out[sleeper, 1]") >= 6, "{}", out.stdout);
    assert!(count(&maps, "@in") >= 6, "{}", out.stdout);
    assert!(
        count(&maps, "@switches") >= count(&maps, "@in"),
        "{}",
        out.stdout
    );
}

/// A BTF pointer to an integer (`ktime_t *now` of `hrtimer_expire_entry`)
/// is a plain number to the verifier: `*args.now` is probe-read (a direct
/// load was refused), and reads the timer base's monotonic clock.
#[test]
fn tp_btf_pointer_to_an_integer_is_read() {
    require_bpf!();
    let script = "tp_btf:hrtimer_expire_entry {
                      @recent[*args.now <= nsecs && nsecs - *args.now < 1000000000] = count();
                      if (@n++ == 20) { exit(); } }";
    let out = wprof_ok(&["-e", script, "-d", "5s"]);
    let maps = map_lines(&out.stdout);
    assert!(count(&maps, "@recent[1]") >= 20, "{}", out.stdout);
    assert_eq!(count(&maps, "@recent[0]"), 0, "{}", out.stdout);
}

/// A value stored in task-local storage by one probe is read by another,
/// and `curtask` keys the same storage.
#[test]
fn task_storage_across_probes() {
    require_bpf!();
    let t = workload("sleeper");
    let script = "tp_btf:sched_switch /args.next->tgid == cpid/ { @on[args.next] = nsecs; }
                  tp_btf:sched_switch /args.prev->tgid == cpid/ {
                      if (@on[args.prev] != 0) { @seen = count(); }
                      @n[curtask] += 1;
                      if (@n[curtask] == 3) { @third = count(); delete(@n[curtask]); }
                  }";
    let out = wprof_ok(&["-e", script, "-c", &format!("{t} 9 10")]);
    let maps = map_lines(&out.stdout);
    assert!(count(&maps, "@seen") >= 8, "{}", out.stdout);
    assert!(count(&maps, "@third") >= 3, "{}", out.stdout);
    assert!(!out.stdout.contains("@on["), "task storage is not printed");
}

/// `curtask` is the current task: with direct loads in tp_btf and through
/// bpf_probe_read_kernel in a tracepoint.
#[test]
fn curtask_is_the_current_task() {
    require_bpf!();
    let t = workload("syscalls");
    let script = "tracepoint:syscalls:sys_enter_getppid /pid == cpid/ {
                      @tp[curtask->pid == tid, curtask->tgid == pid, curtask->comm] = count(); }
                  tp_btf:sched_switch /pid == cpid/ { @btf[curtask->pid == tid] = count(); }";
    let out = wprof_ok(&["-e", script, "-c", &format!("{t} 7")]);
    let maps = map_lines(&out.stdout);
    assert_eq!(count(&maps, "@tp[1, 1, syscalls]"), 7, "{}", out.stdout);
    assert_eq!(count(&maps, "@btf[0]"), 0, "{}", out.stdout);
}

/// A task pointer walked through a task (`real_parent`, `group_leader`)
/// and read through is loaded through an untrusted view
/// (`bpf_rdonly_cast`): it reads what probe reads of the same fields read.
#[test]
fn walked_task_pointers_read_through_a_view() {
    require_bpf!();
    let t = workload("syscalls");
    // 110 is getppid on x86-64.
    let script = "tp_btf:sys_enter /pid == cpid && args.id == 110/ {
          @same[curtask->real_parent->tgid ==
                ((struct task_struct *)curtask)->real_parent->tgid,
                curtask->group_leader->comm] = count(); }";
    let listing = wprof_ok(&["--dump-bpf", "-e", script]);
    assert!(
        listing.stdout.contains("call kernel-function#"),
        "no bpf_rdonly_cast call:\n{}",
        listing.stdout
    );
    let out = wprof_ok(&["-e", script, "-c", &format!("{t} 7")]);
    let maps = map_lines(&out.stdout);
    assert_eq!(count(&maps, "@same[1, syscalls]"), 7, "{}", out.stdout);
}

/// `ksym()` prints the function's name without offset, and unknown
/// addresses in hex, as bpftrace 0.17 does.
#[test]
fn ksym_prints_like_bpftrace() {
    require_bpf!();
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").expect("kallsyms");
    let schedule = kallsyms
        .lines()
        .find_map(|l| l.strip_suffix(" T schedule"))
        .expect("schedule in kallsyms");
    let script = format!(
        "BEGIN {{ printf(\"%s %s\\n\", ksym(0x{schedule} + 5), ksym(1)); @[ksym(0x{schedule})] = count(); exit(); }}"
    );
    let out = wprof_ok(&["-e", &script]);
    assert!(out.stdout.contains("schedule 0x1\n"), "{}", out.stdout);
    assert!(out.stdout.contains("@[schedule]: 1"), "{}", out.stdout);
}

/// A running `sleeper` child, killed on drop.
struct Sleeper(Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `selected()` values for the sleeper in tp_btf (args.prev) and a
/// syscall tracepoint (curtask through bpf_probe_read_kernel), compiled
/// with `filter` through the library API.
fn selected_for_sleeper(filter: TaskFilter, sleeper: &Sleeper) -> (Vec<u64>, Vec<u64>) {
    let pid = sleeper.0.id();
    let text = format!(
        "tp_btf:sched_switch /args.prev->tgid == {pid}/ {{ printf(\"%d %d\", 1, selected(args.prev)); }}
         tracepoint:syscalls:sys_enter_nanosleep /pid == {pid}/ {{ printf(\"%d %d\", 2, selected(curtask)); }}"
    );
    let script = parse::parse(&text, "selected.bt").expect("parses");
    let options = CompileOptions {
        filter,
        ..CompileOptions::default()
    };
    let checked = check::check(&script, &SystemEnvironment::default(), &options).expect("checks");
    let task_fields = wprof::codegen::TaskFields::resolve(&SystemEnvironment::default());
    let compiled = wprof::codegen::compile(&checked, task_fields).expect("compiles");
    let mut loaded = load(&compiled).expect("loads");
    let globals = compiled.globals.expect("a globals map");
    loaded
        .set_state(globals, ProbeState::Active)
        .expect("opens the gate");
    loaded
        .attach_all(AttachOptions::default())
        .expect("attaches");
    let (mut btf, mut traced) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(5);
    while (btf.len() < 3 || traced.len() < 3) && Instant::now() < deadline {
        let _ = loaded
            .poll(Duration::from_millis(50), |record| {
                let word = |i: usize| {
                    u64::from_ne_bytes(record[8 * i..8 * i + 8].try_into().expect("u64"))
                };
                if word(1) == 1 { &mut btf } else { &mut traced }.push(word(2));
                ControlFlow::Continue(())
            })
            .expect("poll");
    }
    (btf, traced)
}

/// Name globs (on comm and the process name), pid lists, exclusions and
/// kernel-thread filters decide `selected()` in the kernel.
#[test]
fn selected_applies_task_filters() {
    require_bpf!();
    let sleeper = Sleeper(
        Command::new(workload("sleeper"))
            .args(["6000", "5"]) // outlives every case (killed on drop)
            .spawn()
            .expect("spawn sleeper"),
    );
    let pid = sleeper.0.id();
    let names = |globs: &[&str]| globs.iter().map(|g| g.to_string()).collect::<Vec<_>>();
    let cases = [
        (
            TaskFilter {
                names: names(&["sle?p*"]),
                ..TaskFilter::default()
            },
            1,
        ),
        (
            TaskFilter {
                names: names(&["kworker*", "*eper"]),
                ..TaskFilter::default()
            },
            1,
        ),
        (
            TaskFilter {
                names: names(&["sleep"]),
                ..TaskFilter::default()
            },
            0,
        ),
        (
            TaskFilter {
                pids: vec![pid],
                ..TaskFilter::default()
            },
            1,
        ),
        (
            TaskFilter {
                pids: vec![1],
                ..TaskFilter::default()
            },
            0,
        ),
        (
            TaskFilter {
                pids: vec![pid],
                no_names: names(&["*eep*"]),
                ..TaskFilter::default()
            },
            0,
        ),
        (
            TaskFilter {
                kthread: Some(true),
                ..TaskFilter::default()
            },
            0,
        ),
        (
            TaskFilter {
                kthread: Some(false),
                idle: Some(false),
                ..TaskFilter::default()
            },
            1,
        ),
        (
            TaskFilter {
                no_tids: vec![pid],
                ..TaskFilter::default()
            },
            0,
        ),
    ];
    for (filter, expected) in cases {
        let description = format!("{filter:?}");
        let (btf, traced) = selected_for_sleeper(filter, &sleeper);
        assert!(
            !btf.is_empty() && !traced.is_empty(),
            "no events for {description}"
        );
        assert!(
            btf.iter().all(|v| *v == expected),
            "tp_btf {btf:?} for {description}"
        );
        assert!(
            traced.iter().all(|v| *v == expected),
            "tracepoint {traced:?} for {description}"
        );
    }
}
