//! The session's life against signals and the traced command: SIGTERM and
//! SIGHUP end a capture as Ctrl-C does, and the command's whole process
//! group ends with the session; without privileges, the error names them;
//! printed lines reach stdout promptly.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::capture::{Ndjson, fresh_dir, o0_workload, summary_events};
use super::{path_str, workload, wprof_ok};
use crate::common::wprof_bin;
use crate::require_bpf;

/// Captures `capture_ticker` with stacks, sends `signal` to wprof once events
/// are flowing, and checks the capture is finished: end chunk (stats),
/// symbols, no damage, and no ticker left running.
fn signal_ends_capture(test: &str, signal: libc::c_int) {
    let dir = fresh_dir(test);
    let data = dir.join("s.data");
    let program = o0_workload("capture_ticker");
    let script = format!("uprobe:{program}:tick /pid == cpid/ < i = arg0; stack >");
    // A count unique to this test names its ticker among other tests' ones.
    let command = format!("{program} {} 2", 1_000_000 + signal);
    let mut child = Command::new(wprof_bin())
        .args(["-f", "none", "-e", &script, "-D", &path_str(&data)])
        .args(["-c", &command])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wprof");
    thread::sleep(Duration::from_millis(1500));
    // SAFETY: kill only sends a signal to the child we started.
    unsafe { libc::kill(child.id() as i32, signal) };
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for wprof") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("wprof did not end within 20 s of signal {signal}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "signal {signal}: {status:?}");
    assert!(
        processes_running(&command).is_empty(),
        "the traced command survived signal {signal}"
    );
    let replay = wprof_ok(&["-R", "-D", &path_str(&data), "-J", "-"]);
    assert_eq!(replay.stderr, "", "the replay warns");
    let ndjson = Ndjson::parse(&replay.stdout);
    assert_eq!(ndjson.header["damage"], serde_json::Value::Null);
    assert!(ndjson.header["duration_s"].as_f64().unwrap_or(0.0) > 1.0);
    let ticks = ndjson.of("tick").len() as u64;
    assert!(ticks > 10, "{ticks} ticks in 1.5 s");
    assert!(!ndjson.stacks.is_empty(), "no stacks: symbols lost");
    let summary = wprof_ok(&["-R", "-I", "-D", &path_str(&data)]).stdout;
    assert_eq!(summary_events(&summary, "tick"), ticks, "{summary}");
}

/// Pids of running processes whose command line contains `needle`.
fn processes_running(needle: &str) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                text.contains(needle) && !text.contains("wprof")
            })
        })
        .collect()
}

/// SIGTERM mid-capture ends it as Ctrl-C does: stats and symbols are written.
#[test]
fn sigterm_finishes_the_capture() {
    require_bpf!();
    signal_ends_capture("sigterm", libc::SIGTERM);
}

/// SIGHUP (the terminal went away) also finishes the capture.
#[test]
fn sighup_finishes_the_capture() {
    require_bpf!();
    signal_ends_capture("sighup", libc::SIGHUP);
}

/// Whatever `-c` started ends with the session: a shell's background and
/// foreground children are gone when wprof exits after `-d`.
#[test]
fn traced_command_group_ends_with_the_session() {
    require_bpf!();
    // Durations unique to this test name its processes.
    let (first, second) = ("76.0419", "77.0419");
    let command = format!("sh -c 'sleep {first} & sleep {second}'");
    // Not through a pipe: its reader would wait for the survivors to end.
    let status = Command::new(wprof_bin())
        .args(["-e", "profile:hz:9 { }", "-d", "1s", "-c", &command])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run wprof");
    assert!(status.success(), "{status:?}");
    // Reparented orphans may take a moment to be reaped by init.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !processes_running("sleep 7").is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        processes_running(&format!("sleep {first}")),
        Vec::<u32>::new()
    );
    assert_eq!(
        processes_running(&format!("sleep {second}")),
        Vec::<u32>::new()
    );
}

/// What probes sent after `exit()` is not printed, also when the command
/// ended before wprof read any of it: wprof is stopped while the command
/// makes its calls and exits, so the session sees the command gone with the
/// `exit()` still unread in the ring. Which of wprof's threads wakes first
/// varies, so the case is run several times (before the fix, one in three
/// runs printed every call).
#[test]
fn exit_holds_when_the_command_ended_before_it_was_read() {
    require_bpf!();
    let target = workload("uprobe_target");
    let script = format!(
        "uprobe:{target}:add /pid == cpid/ {{ printf(\"add %d\\n\", arg0); if (arg0 == 3) {{ exit(); }} }} \
         END {{ printf(\"end\\n\"); }}"
    );
    let command =
        format!("sh -c 'w=$PPID; (sleep 0.3; kill -CONT $w) & kill -STOP $w; exec {target} 10'");
    for run in 0..8 {
        let out = wprof_ok(&["-e", &script, "-c", &command]);
        assert_eq!(
            out.stdout.trim_end(),
            "Attaching 2 probes...\nadd 0\nadd 1\nadd 2\nadd 3\nend",
            "run {run}"
        );
    }
}

/// Probes wake wprof at most once a millisecond (a wake-up per message made
/// `printf` in a busy probe cost several times the traced work), so a
/// message sent just after one that woke it is read by the session's
/// follow-up look, not left for the next wake-up or the 250 ms poll. Pairs
/// of `getppid` calls 0.5 ms apart, 0.4 s between pairs: each line's delay
/// from its probe to wprof's stdout (~0.2 ms and ~2 ms here; ~250 ms for
/// the second without the follow-up).
#[test]
fn printed_lines_arrive_promptly() {
    require_bpf!();
    const PAIRS: usize = 10;
    let script = format!(
        "tracepoint:syscalls:sys_enter_getppid /pid == {}/ {{ printf(\"T %lld\\n\", nsecs); }}",
        std::process::id()
    );
    let mut child = Command::new(wprof_bin())
        .args(["-e", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start wprof");
    let stdout = child.stdout.take().expect("piped stdout");
    let (lines, received) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send((line, monotonic_ns())).is_err() {
                break;
            }
        }
    });
    let wait = Duration::from_secs(30);
    let attached = received.recv_timeout(wait).map(|(line, _)| line);
    assert!(
        attached
            .as_deref()
            .is_ok_and(|l| l.starts_with("Attaching")),
        "{attached:?}"
    );
    // The probe is live once a call prints (`Attaching` comes just before).
    let live = Instant::now();
    loop {
        let _ = std::os::unix::process::parent_id();
        if received.recv_timeout(Duration::from_millis(50)).is_ok() {
            break;
        }
        assert!(live.elapsed() < wait, "no line from the probe in 30 s");
    }
    thread::sleep(Duration::from_millis(100));
    while received.try_recv().is_ok() {}
    for _ in 0..PAIRS {
        let _ = std::os::unix::process::parent_id();
        thread::sleep(Duration::from_micros(500));
        let _ = std::os::unix::process::parent_id();
        thread::sleep(Duration::from_millis(400));
    }
    let delays_ms: Vec<f64> = (0..2 * PAIRS)
        .map_while(|_| received.recv_timeout(Duration::from_secs(2)).ok())
        .map(|(line, read)| {
            let printed: u64 = line
                .strip_prefix("T ")
                .and_then(|ns| ns.parse().ok())
                .unwrap_or_else(|| panic!("unexpected line {line:?}"));
            read.saturating_sub(printed) as f64 / 1e6
        })
        .collect();
    // SAFETY: kill only sends a signal to the child we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let _ = child.wait();
    assert_eq!(delays_ms.len(), 2 * PAIRS, "lines: {delays_ms:?}");
    // One late line is the machine's (a busy CI host); a missed follow-up
    // delays every pair's second line by ~250 ms.
    let late = delays_ms.iter().filter(|&&ms| ms > 100.0).count();
    assert!(late <= 1, "delays (ms): {delays_ms:?}");
}

fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// Runs wprof through `wrapper` (which drops privileges) with `args`.
fn unprivileged(wrapper: &[&str], args: &[&str]) -> crate::common::RunOutput {
    let mut command = Command::new(wrapper[0]);
    command.args(&wrapper[1..]).arg(wprof_bin()).args(args);
    crate::common::run_with_timeout(&mut command, super::RUN_TIMEOUT).expect("run wprof")
}

/// Without root or CAP_BPF + CAP_PERFMON (as nobody, or as root with every
/// capability dropped), a capture fails at once naming the missing
/// privilege; a dump of tracepoints names tracefs access.
#[test]
fn unprivileged_capture_names_the_privilege() {
    require_bpf!();
    let nobody: &[&str] = &["runuser", "-u", "nobody", "--"];
    let no_caps: &[&str] = &["setpriv", "--bounding-set=-all", "--inh-caps=-all"];
    for (wrapper, uid) in [(nobody, "uid 65534"), (no_caps, "uid 0")] {
        for args in [
            &["-e", "BEGIN { exit(); }"][..],
            &["-d", "1s", "-D", "/dev/null"],
        ] {
            let out = unprivileged(wrapper, args);
            assert_eq!(out.status.and_then(|s| s.code()), Some(1), "{}", out.stderr);
            let expected = format!(
                "wprof: tracing needs privileges: run wprof as root, or with CAP_BPF and \
                 CAP_PERFMON (and read access to tracefs); this process ({uid}) lacks CAP_BPF \
                 and CAP_PERFMON\n"
            );
            assert_eq!(out.stderr, expected, "{wrapper:?} {args:?}");
        }
    }
    let tracefs_mode = fs::metadata("/sys/kernel/tracing").map_or(0, |m| m.permissions().mode());
    if tracefs_mode & 0o005 != 0 {
        eprintln!("tracefs is readable by every user here: its access error is not tested");
        return;
    }
    let script = "tracepoint:syscalls:sys_enter_openat { @ = count(); }";
    let out = unprivileged(nobody, &["--dump-bpf", "-e", script]);
    assert!(
        out.stderr.contains(
            "× cannot read tracefs at /sys/kernel/tracing: Permission denied (os error 13); \
             reading tracepoints needs root or read access to tracefs"
        ),
        "{}",
        out.stderr
    );
}
