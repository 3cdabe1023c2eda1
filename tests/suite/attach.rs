//! Attaching to real events: uprobes and uretprobes on our own workloads,
//! library uprobes, `-p` scoping, and syscall and scheduler tracepoints. Every
//! count is exact: workloads make a known number of calls and system-wide
//! probes filter on `cpid` (or attach to one process).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use super::{RUN_TIMEOUT, entries, map_lines, workload, wprof_ok};
use crate::common::{scratch_dir, wprof_bin};
use crate::require_bpf;

/// Each traced function of `uprobe_target` fires exactly as often as it is called.
#[test]
fn uprobe_counts_every_call() {
    require_bpf!();
    let t = workload("uprobe_target");
    let script = [
        "add",
        "mul3",
        "greet",
        "answer",
        "alloc_block",
        "fib",
        "negate",
    ]
    .map(|f| format!("uprobe:{t}:{f}"))
    .join(",\n")
        + " /pid == cpid/ { @[func] = count(); }";
    let out = wprof_ok(&["-e", &script, "-c", &format!("{t} 6")]);
    assert!(
        out.stdout.starts_with("Attaching 7 probes...\n"),
        "{}",
        out.stdout
    );
    let expected = entries([
        ("@[add]", 6),
        ("@[mul3]", 6),
        ("@[greet]", 21),
        ("@[answer]", 1),
        ("@[alloc_block]", 12),
        ("@[fib]", 177),
        ("@[negate]", 2),
    ]);
    assert_eq!(map_lines(&out.stdout), expected, "{}", out.stdout);
}

/// `arg0`..`arg2`, signed casts and `str(argN)` read the values the workload passed.
#[test]
fn uprobe_reads_arguments() {
    require_bpf!();
    let t = workload("uprobe_target");
    let script = format!(
        "uprobe:{t}:add /pid == cpid/ {{ @add[arg0, arg1] = count(); }}
         uprobe:{t}:mul3 /pid == cpid/ {{ @mul[(int64)arg1] = sum(arg2); }}
         uprobe:{t}:greet /pid == cpid/ {{ @greet[str(arg0)] = count(); }}
         uprobe:{t}:alloc_block /pid == cpid/ {{ @block = sum(arg0); }}"
    );
    let out = wprof_ok(&["-e", &script, "-c", &format!("{t} 6")]);
    let mut expected = entries((0..6).map(|i| (format!("@add[{i}, {}]", 2 * i), 1)));
    expected.extend(entries((0..6).map(|i| (format!("@mul[{}]", -i), 1000 + i))));
    // greet(WORDS[i % 4]) i + 1 times for i in 0..6.
    expected.extend(entries([
        ("@greet[alpha]", 1 + 5),
        ("@greet[bravo]", 2 + 6),
        ("@greet[charlie]", 3),
        ("@greet[delta]", 4),
    ]));
    // alloc_block(64 * (i + 1)) for i in 0..12.
    expected.extend(entries([("@block", (1..=12).map(|i| 64 * i).sum::<i64>())]));
    assert_eq!(map_lines(&out.stdout), expected, "{}", out.stdout);
}

/// `retval` in uretprobes is the function's return value, signed when cast.
#[test]
fn uretprobe_reads_retval() {
    require_bpf!();
    let t = workload("uprobe_target");
    let script = format!(
        "uretprobe:{t}:answer /pid == cpid/ {{ @answer = retval; }}
         uretprobe:{t}:add /pid == cpid/ {{ @add[retval] = count(); }}
         uretprobe:{t}:negate /pid == cpid/ {{ @negate[(int32)retval] = count(); }}
         uretprobe:{t}:greet /pid == cpid/ {{ @len = sum(retval); }}"
    );
    let out = wprof_ok(&["-e", &script, "-c", &format!("{t} 4")]);
    let mut expected = entries([("@answer", 42), ("@negate[7]", 1), ("@negate[-7]", 1)]);
    expected.extend(entries((0..4).map(|i| (format!("@add[{}]", 3 * i), 1))));
    // strlen of alpha, bravo x2, charlie x3, delta x4.
    expected.extend(entries([("@len", 5 + 2 * 5 + 3 * 7 + 4 * 5)]));
    assert_eq!(map_lines(&out.stdout), expected, "{}", out.stdout);
}

/// `uprobe:libc:malloc` resolves the library by name; the count is exact for our child.
#[test]
fn uprobe_resolves_library_by_name() {
    require_bpf!();
    let t = workload("malloc_target");
    let script = "uprobe:libc:malloc /pid == cpid/ { @size[arg0] = count(); @calls = count(); }";
    let out = wprof_ok(&["-e", script, "-c", &t]);
    let mut expected = entries((0..5).map(|i| (format!("@size[{}]", 1000 + i), i + 1)));
    expected.extend(entries([("@calls", 15)]));
    assert_eq!(map_lines(&out.stdout), expected, "{}", out.stdout);
}

/// Uprobes of a `-c` command fire in its children too, as bpftrace's do
/// (they attach for every process; a script picks the command with `cpid`).
#[test]
fn uprobes_fire_in_the_commands_children() {
    require_bpf!();
    let t = workload("malloc_target");
    let script =
        "uprobe:libc:malloc /curtask->real_parent->tgid == cpid/ { @size[arg0] = count(); }";
    let command = format!("/bin/sh -c '{t}; true'");
    let out = wprof_ok(&["-e", script, "-c", &command]);
    let expected = entries((0..5).map(|i| (format!("@size[{}]", 1000 + i), i + 1)));
    let mut sizes = map_lines(&out.stdout);
    sizes.retain(|key, _| key.starts_with("@size[100"));
    assert_eq!(sizes, expected, "{}", out.stdout);
}

/// A started copy of `pid_target`, killed if the test ends early.
struct Target(Child);

impl Target {
    #[track_caller]
    fn start(binary: &str, go_file: &std::path::Path, calls: u32) -> Target {
        let child = Command::new(binary)
            .arg(go_file)
            .arg(calls.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"));
        Target(child)
    }

    #[track_caller]
    fn wait_success(&mut self) {
        let status = self.0.wait().expect("wait for pid_target");
        assert!(status.success(), "pid_target failed: {status}");
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// With `-p PID` a uprobe counts only that process, although a second copy of
/// the same binary (same inode, same probe) calls the function too; wprof stops
/// when the process exits.
#[test]
fn pid_option_scopes_uprobes_to_one_process() {
    require_bpf!();
    let t = workload("pid_target");
    let dir = scratch_dir(&format!("pid_scope_{}", std::process::id()));
    let (go_traced, go_other) = (dir.join("go_traced"), dir.join("go_other"));
    let _ = std::fs::remove_file(&go_traced);
    let _ = std::fs::remove_file(&go_other);
    let mut traced = Target::start(&t, &go_traced, 3);
    let mut other = Target::start(&t, &go_other, 7);
    let pid = traced.0.id().to_string();
    let script = format!(
        r#"BEGIN {{ printf("ready\n"); }} uprobe:{t}:tick {{ @ticks = count(); @pids[pid] = count(); }}"#
    );
    let mut tracer = Command::new(wprof_bin())
        .args(["-p", &pid, "-e", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wprof");
    let lines = read_lines(tracer.stdout.take().expect("piped"));
    let first: Vec<String> = lines.iter().take(2).collect();
    assert_eq!(
        first,
        ["Attaching 2 probes...", "ready"],
        "wprof did not start"
    );

    // The untraced copy runs to completion first, so its calls cannot be missed
    // by an early stop; then the traced copy runs and its exit ends wprof.
    std::fs::write(&go_other, "").expect("create go file");
    other.wait_success();
    std::fs::write(&go_traced, "").expect("create go file");
    traced.wait_success();
    let status = tracer.wait().expect("wait for wprof");
    let rest: Vec<String> = lines.iter().collect();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut tracer.stderr.take().expect("piped"), &mut stderr)
        .expect("stderr");
    assert!(status.success(), "wprof failed: {status}\n{stderr}");
    let expected = entries([("@ticks".to_string(), 3), (format!("@pids[{pid}]"), 3)]);
    assert_eq!(map_lines(&rest.join("\n")), expected, "{rest:?}");
}

/// Stdout lines of a child as a channel, so tests can wait for one with a timeout.
fn read_lines(stdout: std::process::ChildStdout) -> Lines {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    Lines(receive)
}

/// Lines from [`read_lines`]; iteration ends at end of output or after [`RUN_TIMEOUT`].
struct Lines(mpsc::Receiver<String>);

impl Lines {
    fn iter(&self) -> impl Iterator<Item = String> + '_ {
        std::iter::from_fn(|| self.0.recv_timeout(RUN_TIMEOUT).ok())
    }
}

/// Syscall tracepoints filtered on `cpid` count exactly the calls the workload makes.
#[test]
fn tracepoints_count_syscalls_exactly() {
    require_bpf!();
    let t = workload("syscalls");
    let script = "tracepoint:syscalls:sys_enter_getppid,
                  tracepoint:syscalls:sys_enter_getpgid,
                  tracepoint:syscalls:sys_enter_getpriority
                  /pid == cpid/ { @[probe] = count(); }";
    let out = wprof_ok(&["-e", script, "-c", &format!("{t} 7")]);
    let expected = entries([
        ("@[tracepoint:syscalls:sys_enter_getppid]", 7),
        ("@[tracepoint:syscalls:sys_enter_getpgid]", 14),
        ("@[tracepoint:syscalls:sys_enter_getpriority]", 3),
    ]);
    assert_eq!(map_lines(&out.stdout), expected, "{}", out.stdout);
}

/// `args.FIELD` reads integer fields and user strings (`str(args.filename)`).
#[test]
fn tracepoint_args_fields() {
    require_bpf!();
    let t = workload("syscalls");
    let script = "tracepoint:syscalls:sys_enter_openat /pid == cpid/ { @open[str(args.filename)] = count(); }
                  tracepoint:syscalls:sys_enter_write /pid == cpid && args.fd == 3/ { @bytes = sum(args.count); @writes = count(); }
                  tracepoint:syscalls:sys_enter_getpgid /pid == cpid/ { @pgid_arg[args.pid] = count(); }";
    let out = wprof_ok(&["-e", script, "-c", &format!("{t} 5")]);
    let maps = map_lines(&out.stdout);
    // N openat(O_RDONLY) plus one open(O_WRONLY); the dynamic loader opens other files.
    assert_eq!(
        maps.get("@open[/dev/null]").map(String::as_str),
        Some("6"),
        "{}",
        out.stdout
    );
    assert_eq!(
        maps.get("@bytes").map(String::as_str),
        Some("105"),
        "1+11+21+31+41\n{}",
        out.stdout
    );
    assert_eq!(
        maps.get("@writes").map(String::as_str),
        Some("5"),
        "{}",
        out.stdout
    );
    assert_eq!(
        maps.get("@pgid_arg[0]").map(String::as_str),
        Some("10"),
        "{}",
        out.stdout
    );
}

/// A `__data_loc` string field (`sched_process_exec`'s filename) reads the
/// exec'd path; seeing the child's exec also proves `-c` runs it after attaching.
#[test]
fn tracepoint_data_loc_string() {
    require_bpf!();
    let t = workload("syscalls");
    let script = r#"tracepoint:sched:sched_process_exec /pid == cpid/ { printf("exec %s\n", str(args.filename)); }"#;
    let out = wprof_ok(&["-e", script, "-c", &format!("{t} 1")]);
    assert_eq!(out.stdout, format!("Attaching 1 probe...\nexec {t}\n\n\n"));
}

/// A tracepoint wildcard attaches one probe per matching event in tracefs.
#[test]
fn tracepoint_wildcard_expands_to_every_match() {
    require_bpf!();
    let events = std::fs::read_to_string("/sys/kernel/tracing/available_events")
        .expect("read available_events");
    let matching = events
        .lines()
        .filter(|line| line.strip_prefix("syscalls:sys_enter_getp").is_some())
        .count();
    assert!(
        matching >= 4,
        "getpid, getppid, getpgid, getpriority ...: {matching}"
    );
    let t = workload("syscalls");
    let script = "tracepoint:syscalls:sys_enter_getp* /pid == cpid/ { @[probe] = count(); }";
    let out = wprof_ok(&["-e", script, "-c", &format!("{t} 2")]);
    assert!(
        out.stdout
            .starts_with(&format!("Attaching {matching} probes...\n")),
        "{}",
        out.stdout
    );
    let maps = map_lines(&out.stdout);
    assert_eq!(
        maps.get("@[tracepoint:syscalls:sys_enter_getppid]")
            .map(String::as_str),
        Some("2"),
        "{}",
        out.stdout
    );
    assert_eq!(
        maps.get("@[tracepoint:syscalls:sys_enter_getpgid]")
            .map(String::as_str),
        Some("4"),
        "{}",
        out.stdout
    );
}

/// String builtins and ternaries compute the right values at run time:
/// `str(p, N)` truncates, `==` and `strncmp` compare, ternaries pick keys.
#[test]
fn strings_and_ternaries_at_run_time() {
    require_bpf!();
    let t = workload("syscalls");
    let script = r#"tracepoint:syscalls:sys_enter_openat /pid == cpid/ {
          $path = str(args.filename); $short = str(args.filename, 8);
          if ($path == "/dev/null") { @null[$short] = count(); }
          @etc = sum(strncmp($path, "/etc/", 5) == 0); }
        tracepoint:syscalls:sys_enter_write /pid == cpid && args.fd == 3/ {
          @kind[args.count > 20 ? "big" : "small"] = count();
          @level[args.count > 30 ? 3 : args.count > 10 ? 2 : 1] = count(); }"#;
    let out = wprof_ok(&["-e", script, "-c", &format!("{t} 5")]);
    // str(x, 8) keeps 8 characters, as bpftrace. Writes of 1, 11, 21, 31, 41
    // bytes; ld.so opens /etc/ld.so.cache once.
    let expected = entries([
        ("@null[/dev/nul]", 6),
        ("@etc", 1),
        ("@kind[small]", 2),
        ("@kind[big]", 3),
        ("@level[1]", 1),
        ("@level[2]", 2),
        ("@level[3]", 2),
    ]);
    assert_eq!(map_lines(&out.stdout), expected, "{}", out.stdout);
}

/// `signal("SIGKILL")` (with `--unsafe`) kills the task the probe fired in:
/// the workload never reaches the calls after `answer()` (`@fib` prints 0:
/// keyless count maps always exist, as in bpftrace).
#[test]
fn signal_kills_the_probed_task() {
    require_bpf!();
    let t = workload("uprobe_target");
    let script = format!(
        "uprobe:{t}:answer /pid == cpid/ {{ @answer = count(); signal(\"SIGKILL\"); }}\n\
         uprobe:{t}:fib /pid == cpid/ {{ @fib = count(); }}"
    );
    let out = wprof_ok(&["--unsafe", "-e", &script, "-c", &format!("{t} 3")]);
    assert_eq!(
        map_lines(&out.stdout),
        entries([("@answer", 1), ("@fib", 0)]),
        "{}",
        out.stdout
    );
    assert!(
        !out.stderr.contains("uprobe_target done"),
        "the workload ran to its end:\n{}",
        out.stderr
    );
}

/// A user stack kept as a map key names its functions when printed at exit,
/// after the process is gone (bpftrace prints raw addresses then). The
/// workload lives 300 ms after the call: wprof reads its mappings when it
/// handles the thread's first report, which a loaded machine can delay.
#[test]
fn ustack_keys_resolve_after_the_process_exits() {
    require_bpf!();
    let t = workload("uprobe_target");
    let script = format!("uprobe:{t}:answer /pid == cpid/ {{ @[ustack(2)] = count(); }}");
    let out = wprof_ok(&["-e", &script, "-c", &format!("{t} 2 300")]);
    // The caller is libc's start code, whose offset depends on the libc build.
    assert!(
        out.stdout
            .contains("\n@[\n    answer+0\n    __libc_start_call_main+"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.ends_with("\n]: 1\n"), "{}", out.stdout);
}

/// With `__BPFTRACE_NOTIFY_PROBES_ATTACHED` set (bpftrace's runtime-test runner
/// sets it), wprof says on stderr, once, that the probes are attached; without
/// it, it says nothing.
#[test]
fn notifies_attachment_when_asked() {
    require_bpf!();
    let t = workload("uprobe_target");
    let script = format!("uprobe:{t}:answer {{ printf(\"answered\\n\"); }}");
    let run = |notify: bool| {
        let mut cmd = Command::new(wprof_bin());
        cmd.args(["-e", &script, "-c", &format!("{t} 1")]);
        if notify {
            cmd.env("__BPFTRACE_NOTIFY_PROBES_ATTACHED", "1");
        } else {
            cmd.env_remove("__BPFTRACE_NOTIFY_PROBES_ATTACHED");
        }
        let out = crate::common::run_with_timeout(&mut cmd, RUN_TIMEOUT).expect("wprof runs");
        assert!(out.success(), "{}", out.stderr);
        assert!(out.stdout.contains("answered\n"), "{}", out.stdout);
        out.stderr
            .matches("__BPFTRACE_NOTIFY_PROBES_ATTACHED\n")
            .count()
    };
    assert_eq!(run(true), 1);
    assert_eq!(run(false), 0);
}
