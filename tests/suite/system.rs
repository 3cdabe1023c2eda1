//! System tracking against the real kernel: `--prepare` / `--activate`
//! timing and the kernel gate, spec errors before any setup, Ctrl-C while
//! waiting, and the built-in trackers' default capture.

use std::ops::ControlFlow;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use wprof::capture::reader::CaptureReader;

use super::capture::fresh_dir;
use super::{path_str, wprof, wprof_fails, wprof_ok};
use crate::common::wprof_bin;
use crate::require_bpf;

/// Every event's timestamp in the capture at `path`, and the capture.
fn timestamps(path: &Path) -> (CaptureReader, Vec<u64>) {
    let reader = CaptureReader::open(path).expect("open the capture");
    let mut ts = Vec::new();
    reader
        .for_each_event(|event| {
            ts.push(event.ts_ns);
            ControlFlow::Continue(())
        })
        .expect("read events");
    (reader, ts)
}

fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as u64
}

/// `--activate +1s`: time 0 is a second after launch, no event comes from
/// before it, -d counts from it, and the capture keeps the spec.
#[test]
fn activation_starts_the_capture_later() {
    require_bpf!();
    let dir = fresh_dir("activate-later");
    let data = path_str(&dir.join("a.data"));
    let launched_ns = realtime_ns();
    let started = Instant::now();
    wprof_ok(&[
        "--prepare",
        "@now",
        "--activate",
        "+1s",
        "-d",
        "300ms",
        "-D",
        &data,
        "-e",
        "profile:hz:199 < >",
    ]);
    assert!(started.elapsed() >= Duration::from_millis(1300));
    let (reader, ts) = timestamps(Path::new(&data));
    let info = reader.info();
    assert_eq!(info.settings.prepare.as_deref(), Some("@now"));
    assert_eq!(info.settings.activate.as_deref(), Some("+1000ms"));
    assert!(info.start_realtime_ns >= launched_ns + 1_000_000_000);
    assert!(ts.len() > 10, "{} events", ts.len());
    // Timestamps are unsigned offsets from time 0: an event from before it
    // would show as 0.
    assert!(ts.iter().all(|&t| t > 0 && t < 400_000_000), "{ts:?}");
}

/// Inverted and past specs fail at once, before anything is loaded or written.
#[test]
fn bad_specs_fail_before_setup() {
    let dir = fresh_dir("bad-specs");
    let data = path_str(&dir.join("never.data"));
    let started = Instant::now();
    let out = wprof_fails(&[
        "--prepare",
        "+2s",
        "--activate",
        "+1s",
        "-D",
        &data,
        "-e",
        "profile:hz:99 < >",
    ]);
    assert!(out.stderr.contains("inverted"), "{}", out.stderr);
    let out = wprof_fails(&["--activate", "@2000-01-01T00:00", "-e", "profile:hz:99 < >"]);
    assert!(out.stderr.contains("in the past"), "{}", out.stderr);
    // A malformed value is a usage error (clap's exit code 2).
    let out = wprof(&["--activate", "soon", "-e", "profile:hz:99 < >"]);
    assert_eq!(out.status.and_then(|s| s.code()), Some(2));
    assert!(out.stderr.contains("`soon`"), "{}", out.stderr);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(!Path::new(&data).exists());
}

/// Ctrl-C while waiting to activate ends cleanly with a valid, empty capture.
#[test]
fn interrupt_while_waiting_leaves_an_empty_capture() {
    require_bpf!();
    let dir = fresh_dir("interrupt-waiting");
    let data = path_str(&dir.join("w.data"));
    let child = Command::new(wprof_bin())
        .args(["--activate", "+30s", "-D", &data, "-e", "profile:hz:99 < >"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wprof");
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: kill only sends a signal to the child we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let started = Instant::now();
    let out = child.wait_with_output().expect("wait for wprof");
    assert!(started.elapsed() < Duration::from_secs(5));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("nothing was captured"), "{stderr}");
    let (reader, ts) = timestamps(Path::new(&data));
    assert!(ts.is_empty());
    assert_eq!(reader.stats().map(|s| s.events), Some(0));
}

/// With no script, wprof captures the system for -d with the built-in trackers.
#[test]
fn default_capture_without_script() {
    require_bpf!();
    let dir = fresh_dir("default-capture");
    let (data, trace) = (dir.join("s.data"), dir.join("s.pb"));
    wprof_ok(&["-d1000", "-D", &path_str(&data), "-T", &path_str(&trace)]);
    let (reader, ts) = timestamps(&data);
    assert!(!ts.is_empty());
    let names: Vec<&str> = reader.schemas().iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"switch"), "{names:?}");
    assert!(std::fs::metadata(&trace).expect("trace written").len() > 0);
}
