//! A command that runs into the C library only after its mappings were
//! read and is gone before they can be read again (`docs/unwinding.md`,
//! "Code mapped since the last read"): its stacks through libc are walked
//! with libc's table, found through the kernel's memory area of the pc,
//! and its libc frames are named, although the recorder never saw libc
//! in its mappings.
//!
//! `libc_burst` (its own `_start`, so no stack before the burst has a libc
//! frame) is held at the end of its `exec` while its mappings are read
//! (the program and the loader: libc is mapped after), prints `ready`,
//! and waits. wprof is then stopped (`SIGSTOP`: its recorder can read
//! nothing), the command sorts with `qsort` for 300 ms and exits, and
//! wprof goes on only once the command is a zombie. Before the unwinder
//! asked the kernel, every such stack ended at its first libc frame, left
//! as a bare address (what issue 12's "Limits" described for a command
//! that ends within milliseconds, 2 runs in 8 under load).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::super::capture::{Ndjson, fresh_dir};
use super::super::{machine_lock, path_str};
use super::captures::{Sample, outside_main, samples};
use super::workloads::c_libc_burst;
use crate::common::wprof_bin;
use crate::require_bpf;

/// How long the command sorts.
const BURST_MS: u32 = 300;
const WAIT: Duration = Duration::from_secs(30);

/// wprof, stopped or not: continued and killed if the test ends early.
struct Wprof(Child);

impl Wprof {
    fn signal(&self, signal: i32) {
        // SAFETY: a plain syscall on our own child's pid.
        let sent = unsafe { libc::kill(self.0.id() as i32, signal) };
        assert_eq!(
            sent,
            0,
            "kill({signal}): {}",
            std::io::Error::last_os_error()
        );
    }
}

impl Drop for Wprof {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            // SAFETY: as above.
            unsafe { libc::kill(self.0.id() as i32, libc::SIGCONT) };
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Whether process `pid` is a zombie (exited, not reaped).
fn is_zombie(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    state == Some("Z")
}

/// Captures `libc_burst` as described above; returns the NDJSON.
fn capture_gone_command(test: &str) -> Ndjson {
    let dir = fresh_dir(test);
    let (data, json) = (dir.join("c.data"), dir.join("c.json"));
    let command = format!("{} {BURST_MS}", path_str(&c_libc_burst()));
    let child = Command::new(wprof_bin())
        .args(["-S", "-S", "timer=1000hz", "-n", "libc_burst", "-D"])
        .arg(&data)
        .arg("-J")
        .arg(&json)
        .args(["-c", &command])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start wprof");
    let mut wprof = Wprof(child);
    let stdout = wprof.0.stdout.take().expect("piped");
    let (lines, ready) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let pid: u32 = loop {
        let line = ready
            .recv_timeout(WAIT)
            .expect("the command says it is ready");
        if let Some(pid) = line.strip_prefix("ready ") {
            break pid.parse().expect("a pid");
        }
    };
    wprof.signal(libc::SIGSTOP);
    let mut stdin = wprof.0.stdin.take().expect("piped");
    writeln!(stdin, "go").expect("release the command");
    let deadline = Instant::now() + WAIT;
    while !is_zombie(pid) {
        assert!(Instant::now() < deadline, "the command did not exit");
        std::thread::sleep(Duration::from_millis(5));
    }
    wprof.signal(libc::SIGCONT);
    let status = wprof.0.wait().expect("wprof ends with its command");
    assert!(status.success(), "wprof: {status}");
    Ndjson::parse(&std::fs::read_to_string(&json).expect("NDJSON written"))
}

/// Whether a user frame was left a bare address.
fn is_bare(frame: &str) -> bool {
    frame.starts_with("[U] 0x")
}

/// Every timer stack of the command's burst (all its stacks on the CPU
/// but those in its `exec`, the loader's start-up and `main` alone) reaches `main`
/// through `burst`, with no bare user frame, and a good part of them run
/// through libc's `qsort`, named from libc; over two runs.
#[test]
fn libc_frames_of_a_command_gone_before_its_mappings_are_read() {
    require_bpf!();
    let _machine = machine_lock();
    let captures: Vec<Ndjson> = (0..2)
        .map(|run| capture_gone_command(&format!("unwind-late-libc-{run}")))
        .collect();
    let all: Vec<Sample> = (captures.iter())
        .flat_map(|json| samples(json, "libc_burst"))
        .collect();
    // Outside the burst: `main` before its wait and at its exit, and its
    // own system calls (`sys3`, inlined: writing `ready`, reading `go`).
    let around = |s: &Sample| {
        let names = s.user_functions();
        (names.iter()).all(|f| ["main", "start_main", "_start", "sys3"].contains(f))
    };
    let burst: Vec<&Sample> = (all.iter())
        .filter(|s| s.kind == "timer" && !outside_main(s) && !around(s))
        .collect();
    let whole = |s: &Sample| {
        let names = s.user_functions();
        names.contains(&"burst") && names.contains(&"main") && !s.frames.iter().any(|f| is_bare(f))
    };
    let in_libc = |s: &Sample| s.frames.iter().any(|f| f.ends_with(" libc.so.6"));
    let good = burst.iter().filter(|s| whole(s)).count();
    let through_libc = (burst.iter()).filter(|s| whole(s) && in_libc(s)).count();
    let bad: Vec<&[String]> = (burst.iter().filter(|s| !whole(s)))
        .map(|s| s.frames)
        .take(2)
        .collect();
    eprintln!(
        "{good} of {} burst stacks reach main with every frame named, {through_libc} through libc",
        burst.len()
    );
    assert!(burst.len() >= 60, "only {} burst stacks", burst.len());
    assert_eq!(good, burst.len(), "e.g. {bad:#?}");
    assert!(
        through_libc * 4 >= burst.len(),
        "{through_libc} through libc"
    );
}
