//! Task filters in the kernel on real captures: name, pid and tid filters
//! together with off-CPU stacks (whose `sched_switch` program has the least
//! BPF stack to spare) record exactly the tasks they select; `--only-command`
//! records the command's process tree alone, in trackers and user probes,
//! and not a process that got the pid of one that exited.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::Value;
use wprof::capture::reader::CaptureReader;

use super::capture::{Ndjson, fresh_dir};
use super::system::{capture, involves, tid_named};
use super::{RUN_TIMEOUT, map_lines, path_str, workload, wprof_ok};
use crate::common::{run_with_timeout, wprof_bin};
use crate::require_bpf;

/// A workload process, killed and reaped when dropped (a failed test
/// leaves nothing running).
struct Background(Child);

impl Background {
    fn start(name: &str, args: &[&str]) -> Background {
        let child = Command::new(workload(name))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Background(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// The tid of this process's thread named `comm`, once it exists.
    fn thread_named(&self, comm: &str) -> u64 {
        let started = Instant::now();
        loop {
            let tasks = fs::read_dir(format!("/proc/{}/task", self.pid())).expect("/proc");
            for task in tasks.flatten() {
                let name = fs::read_to_string(task.path().join("comm")).unwrap_or_default();
                if name.trim_end() == comm {
                    return task.file_name().to_string_lossy().parse().expect("a tid");
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "no thread {comm}"
            );
            sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `-S offcpu=1ms -n NAME -p PID --tid TID` loads (its `sched_switch`
/// program once needed more than the 512 bytes of BPF stack) and records
/// exactly the selected tasks: the command named NAME, every thread of
/// process PID, thread TID but not the rest of its process, nothing of an
/// unrelated process; long blocks of the selected threads have stacks.
#[test]
fn offcpu_stacks_with_name_pid_and_tid_filters() {
    require_bpf!();
    let dir = fresh_dir("filters-offcpu-name-pid-tid");
    // The sleepers outlive the capture, which ends with the command (or
    // with process PID, `-p` being followed).
    let by_pid = Background::start("sys_sleeper", &["5000", "10"]);
    let by_tid = Background::start("sys_sleeper", &["5000", "10"]);
    let _unrelated = Background::start("sys_sleeper", &["5000", "10"]);
    let (of_pid, napper) = (by_pid.thread_named("napper"), by_tid.thread_named("napper"));
    let (pid, tid) = (by_pid.pid().to_string(), napper.to_string());
    let spin = format!("{} 300", workload("sys_spin"));
    let args = [
        "-S",
        "offcpu=1ms",
        "-n",
        "sys_spin",
        "-p",
        &pid,
        "--tid",
        &tid,
        "-c",
        &spin,
    ];
    let (json, _) = capture(&dir, &args);
    let selected =
        |t: &Value| t["comm"] == "sys_spin" || t["pid"] == by_pid.pid() || t["tid"] == napper;
    // A switch between a selected and an unselected task is recorded; an
    // event of unselected tasks only (the unrelated process's many
    // switches) never is.
    for event in &json.events {
        assert!(involves(event, selected), "not selected: {event}");
    }
    tid_named(&json, "sys_spin");
    let switches = |pick: &dyn Fn(&Value) -> bool| {
        (json.events.iter())
            .filter(|e| e["t"] == "switch" && pick(&e["next"]))
            .collect::<Vec<_>>()
    };
    let of_pid = switches(&|t| t["tid"] == of_pid);
    let of_tid = switches(&|t| t["tid"] == napper);
    for (what, switch_ins) in [("-p", of_pid), ("--tid", of_tid)] {
        assert!(
            switch_ins.len() >= 5,
            "{what}: {} switch-ins",
            switch_ins.len()
        );
        let stacks = switch_ins.iter().filter(|e| e["stack"].is_u64()).count();
        assert!(stacks >= 5, "{what}: {stacks} switch-ins with stacks");
    }
}

/// `--only-command` selects in the kernel the command's process and its
/// descendants (a child and a grandchild forked without exec, the
/// grandchild's exec included) while unrelated processes keep busy and
/// make system calls: every recorded event involves the tree, every process
/// of the tree has switch-ins, the user's system-call probe counted only
/// the tree's processes, and the capture says `--only-command`.
#[test]
fn only_command_records_the_command_tree_in_the_kernel() {
    require_bpf!();
    let dir = fresh_dir("filters-command-tree");
    let _busy = Background::start("sys_spin", &["100000"]);
    let _sleeper = Background::start("sys_sleeper", &["5000", "5"]);
    let command = format!("{} 5", workload("tree_fork"));
    let script = "tracepoint:raw_syscalls:sys_enter { @calls[pid] = count(); }";
    let (data, json) = (path_str(&dir.join("c.data")), dir.join("c.json"));
    let args = [
        "--only-command",
        "-e",
        script,
        "-D",
        &data,
        "-J",
        &path_str(&json),
    ];
    let run = wprof_ok(&[&args[..], &["-c", &command]].concat());
    let json = Ndjson::parse(&fs::read_to_string(&json).expect("NDJSON"));
    let printed = &run.stdout;
    let tree: BTreeSet<u64> = ["parent", "child", "grandchild"]
        .iter()
        .map(|who| pid_printed(printed, who))
        .collect();
    let in_tree = |t: &Value| t["pid"].as_u64().is_some_and(|p| tree.contains(&p));
    for event in &json.events {
        assert!(
            involves(event, in_tree),
            "not of the command's tree: {event}"
        );
    }
    for pid in &tree {
        let switch_ins = (json.events.iter())
            .filter(|e| e["t"] == "switch" && e["next"]["pid"] == *pid)
            .count();
        assert!(switch_ins >= 3, "process {pid}: {switch_ins} switch-ins");
    }
    let exec = json.events.iter().find(|e| e["t"] == "exec");
    assert!(
        exec.is_some_and(|e| in_tree(&e["task"])),
        "the grandchild's exec"
    );
    let calls = map_lines(printed);
    let counted: BTreeSet<u64> = (calls.keys())
        .filter_map(|k| k.strip_prefix("@calls[")?.strip_suffix(']')?.parse().ok())
        .collect();
    assert!(!counted.is_empty() && counted.is_subset(&tree), "{calls:?}");
    assert!(
        json.header["filters"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == "--only-command")),
        "{}",
        json.header
    );
}

/// A command tree larger than its map (`BPFTRACE_MAP_KEYS_MAX=2`: the
/// command and its child fit, the grandchild does not) is not followed past
/// the map's size, and the capture says so: a `command_tree_full` record
/// names the process left out and its parent; the user's probe recorded the
/// system calls of the two others and none of the grandchild's.
#[test]
fn only_command_records_processes_the_full_tree_left_out() {
    require_bpf!();
    let dir = fresh_dir("filters-command-tree-full");
    let command = format!("{} 5", workload("tree_fork"));
    let json = dir.join("c.json");
    let mut wprof = Command::new(wprof_bin());
    wprof.env("BPFTRACE_MAP_KEYS_MAX", "2").args([
        "--only-command",
        "-e",
        "tracepoint:raw_syscalls:sys_enter { record call < nr = args.id > }",
        "-D",
        &path_str(&dir.join("c.data")),
        "-J",
        &path_str(&json),
        "-c",
        &command,
    ]);
    let run = run_with_timeout(&mut wprof, RUN_TIMEOUT).expect("wprof runs");
    assert!(run.success(), "{}", run.stderr);
    let json = Ndjson::parse(&fs::read_to_string(&json).expect("NDJSON"));
    let pid = |who| pid_printed(&run.stdout, who);
    let (parent, child, grandchild) = (pid("parent"), pid("child"), pid("grandchild"));
    let of_probe = |probe: &'static str| {
        (json.events.iter())
            .filter(move |e| e["probe"] == probe)
            .collect::<Vec<_>>()
    };
    let full = of_probe("command_tree_full");
    assert_eq!(full.len(), 1, "{full:?}");
    assert_eq!(full[0]["fields"]["pid"], grandchild);
    assert_eq!(full[0]["fields"]["parent"], child);
    let callers: BTreeSet<u64> = (of_probe("call").iter())
        .filter_map(|e| e["task"]["pid"].as_u64())
        .collect();
    assert_eq!(callers, BTreeSet::from([parent, child]));
}

/// `--only-command` follows processes, not pids: a member of the tree
/// exits and is reaped, and an unrelated process (forked by a spawner
/// outside the tree, `/proc/sys/kernel/ns_last_pid` set so that it gets the
/// member's pid) makes system calls while the member's entry is still in
/// the tree (it leaves when the member's task is freed, an RCU grace period
/// later: the capture's `free` of the pid comes after the newcomer's first
/// call). Neither the user's probe, whose gate compares the task's leader
/// start time with the entry's, counted a system call of such a newcomer,
/// nor did the trackers (`selected()` compares the same) record an event of
/// it but those with a member (a switch to the command).
#[test]
fn only_command_does_not_follow_a_reused_pid() {
    require_bpf!();
    use std::io::Read;
    let dir = fresh_dir("filters-pid-reuse");
    let fifo = path_str(&dir.join("pids"));
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo {fifo}");
    let spawner = Command::new(workload("pid_reuse"))
        .args(["spawn", &fifo])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the spawner starts");
    let mut spawner = Background(spawner);
    let (data, json) = (dir.join("r.data"), dir.join("r.json"));
    let command = format!("{} member {fifo} 10", workload("pid_reuse"));
    let run = wprof_ok(&[
        "--only-command",
        "-e",
        "tracepoint:raw_syscalls:sys_enter { @calls[pid, comm] = count(); }",
        "-D",
        &path_str(&data),
        "-J",
        &path_str(&json),
        "-c",
        &command,
    ]);
    let mut spawned = String::new();
    let stdout = spawner.0.stdout.as_mut().expect("the spawner's stdout");
    stdout
        .read_to_string(&mut spawned)
        .expect("the spawner's output");
    let reused = newcomers(&spawned);
    let json = Ndjson::parse(&fs::read_to_string(&json).expect("NDJSON"));
    let start_ns = (CaptureReader::open(&data).expect("the capture opens"))
        .info()
        .start_monotonic_ns;
    let freed_ns = |pid: u64| {
        (json.events.iter())
            .filter(|e| e["t"] == "free" && e["target"]["tid"] == pid)
            .filter_map(|e| e["ts"].as_f64())
            .map(|ts| start_ns + (ts * 1e9).round() as u64)
            .min()
    };
    let in_window: Vec<u64> = (reused.iter())
        .filter(|(pid, first_call_ns)| freed_ns(**pid).is_some_and(|free| **first_call_ns < free))
        .map(|(pid, _)| *pid)
        .collect();
    assert!(
        !in_window.is_empty(),
        "no process got a member's pid and made a system call before the member's free: \
         spawner:\n{spawned}"
    );
    let calls = map_lines(&run.stdout);
    let counted: Vec<&u64> = (reused.keys())
        .filter(|pid| calls.contains_key(&format!("@calls[{pid}, impostor]")))
        .collect();
    assert!(
        counted.is_empty(),
        "the user's probe counted newcomers {counted:?} (in the window: {in_window:?}): {calls:?}"
    );
    let impostor = |t: &Value| {
        t["comm"] == "impostor" && t["pid"].as_u64().is_some_and(|p| reused.contains_key(&p))
    };
    // The command and its members keep the command's name. A `free` is
    // the member's (the newcomer runs before it), though the capture names
    // its tid after the newcomer's identity, the latest it saw.
    let member = |t: &Value| t["comm"] == "pid_reuse";
    let selected: Vec<&Value> = (json.events.iter())
        .filter(|e| e["t"] != "free" && involves(e, impostor) && !involves(e, member))
        .collect();
    assert!(
        selected.is_empty(),
        "{} events: {:?}",
        selected.len(),
        selected.first()
    );
}

/// The spawner's children that got the member's pid they aimed at
/// ("impostor CHILD WANTED" with CHILD = WANTED), each with the
/// `CLOCK_MONOTONIC` time after its first system call ("ran CHILD NS").
fn newcomers(spawned: &str) -> BTreeMap<u64, u64> {
    let words = |line: &str, tag: &str| -> Option<(u64, u64)> {
        let mut words = line.strip_prefix(tag)?.split(' ');
        Some((words.next()?.parse().ok()?, words.next()?.parse().ok()?))
    };
    let first_calls: BTreeMap<u64, u64> =
        spawned.lines().filter_map(|l| words(l, "ran ")).collect();
    (spawned.lines())
        .filter_map(|l| words(l, "impostor "))
        .filter(|(child, wanted)| child == wanted)
        .filter_map(|(child, _)| Some((child, *first_calls.get(&child)?)))
        .collect()
}

/// The pid the workload printed as `WHO PID`.
#[track_caller]
fn pid_printed(stdout: &str, who: &str) -> u64 {
    (stdout.lines())
        .find_map(|l| l.strip_prefix(who)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {who} pid in:\n{stdout}"))
}
