//! Replaying captures (`-R`): files cut short by SIGKILL or truncation,
//! damaged bytes, foreign files and newer versions give clear messages and
//! never a panic; outputs are deterministic; `-p`, `-n`, time windows and
//! `-d` select exactly the events they describe.

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use wprof::capture::format::VERSION;

use super::capture::{Ndjson, fresh_dir, o0_workload, summary_events};
use super::{path_str, wprof, wprof_fails, wprof_ok};
use crate::common::{RunOutput, wprof_bin};
use crate::require_bpf;

/// Mallocs in a finished `capture_malloc` capture.
const MALLOCS: usize = 7;

/// A finished capture of `capture_malloc` (all table kinds, 7 events) in a
/// fresh directory: its path and bytes.
fn finished_capture(test: &str) -> (PathBuf, Vec<u8>) {
    let dir = fresh_dir(test);
    let data = dir.join("f.data");
    let program = o0_workload("capture_malloc");
    let script = "uprobe:libc:malloc /pid == cpid/ < size = arg0; stack >";
    wprof_ok(&[
        "-f",
        "none",
        "-e",
        script,
        "-D",
        &path_str(&data),
        "-c",
        &program,
    ]);
    let bytes = fs::read(&data).expect("capture written");
    (dir, bytes)
}

/// `(offset, kind)` of every chunk, walking the headers (docs/data-format.md).
fn chunks(bytes: &[u8]) -> Vec<(usize, u8)> {
    let mut found = Vec::new();
    let mut offset = 16;
    while offset + 20 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[offset + 4..offset + 8].try_into().unwrap());
        found.push((offset, bytes[offset]));
        offset += 20 + len as usize;
    }
    assert_eq!(offset, bytes.len(), "chunks end with the file");
    found
}

/// The offset of the first chunk of `kind`.
#[track_caller]
fn chunk(bytes: &[u8], kind: u8) -> usize {
    let found = chunks(bytes);
    found
        .iter()
        .find(|(_, k)| *k == kind)
        .unwrap_or_else(|| panic!("no chunk of kind {kind}: {found:?}"))
        .0
}

/// Writes `bytes` to `dir/name` and replays it as NDJSON.
fn replay_bytes(dir: &Path, name: &str, bytes: &[u8]) -> RunOutput {
    let path = dir.join(name);
    fs::write(&path, bytes).expect("write damaged capture");
    wprof(&["-R", "-D", &path_str(&path), "-J", "-"])
}

/// Number of event lines in NDJSON text.
fn event_lines(stdout: &str) -> usize {
    stdout
        .lines()
        .filter(|l| l.starts_with(r#"{"type":"event""#))
        .count()
}

/// Kills wprof (SIGKILL, by pid) and then the rest of its process group.
fn kill_capture(mut child: Child) {
    let pid = child.id() as libc::pid_t;
    child.kill().expect("SIGKILL wprof");
    child.wait().expect("reap wprof");
    // SAFETY: kill has no memory-safety preconditions; the group is the one we spawned.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
}

/// Records `capture_ticker N MS` into `data`, SIGKILLs wprof once the file
/// is larger than `min_bytes` (plus `extra` time), and checks the replay.
fn kill_during_capture(test: &str, ticker_args: &str, min_bytes: u64, extra: Duration) {
    let dir = fresh_dir(test);
    let data = dir.join("k.data");
    let program = o0_workload("capture_ticker");
    let script = format!("uprobe:{program}:tick /pid == cpid/ < i = arg0 >");
    let command = format!("{program} {ticker_args}");
    let child = Command::new(wprof_bin())
        .args([
            "-f",
            "none",
            "-e",
            &script,
            "-D",
            &path_str(&data),
            "-c",
            &command,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start wprof");
    let start = Instant::now();
    let size = || fs::metadata(&data).map_or(0, |m| m.len());
    while size() <= min_bytes && start.elapsed() < Duration::from_secs(8) {
        thread::sleep(Duration::from_millis(20));
    }
    let grown = size();
    if grown > min_bytes {
        thread::sleep(extra);
    }
    kill_capture(child);
    assert!(
        grown > min_bytes,
        "the capture stayed at {grown} bytes for 8 s: nothing was flushed while recording"
    );

    let out = wprof_ok(&["-R", "-D", &path_str(&data), "-J", "-"]);
    assert!(
        out.stderr
            .contains("the writer did not finish (no end chunk: wprof was killed"),
        "{}",
        out.stderr
    );
    // How much may be lost: the events after the newest one on file, and
    // when the last write happened.
    let lost_after = between(
        &out.stderr,
        "events after ",
        " s are lost (its last write was at ",
    )
    .and_then(|s| s.parse::<f64>().ok())
    .unwrap_or_else(|| panic!("no lost window in: {}", out.stderr));
    let ndjson = Ndjson::parse(&out.stdout);
    assert!(ndjson.header["damage"].is_string(), "{}", ndjson.header);
    assert_eq!(ndjson.header["duration_s"], Value::Null);
    let ticks: Vec<u64> = ndjson
        .of("tick")
        .iter()
        .map(|e| e["fields"]["i"].as_u64().unwrap())
        .collect();
    assert!(!ticks.is_empty(), "no flushed events replayed");
    assert!(ticks.windows(2).all(|w| w[0] < w[1]), "{ticks:?}");
    let newest = ndjson
        .of("tick")
        .iter()
        .map(|e| e["ts"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(
        (newest - lost_after).abs() < 2e-6,
        "newest {newest}, lost after {lost_after}"
    );
    let summary = wprof_ok(&["-R", "-I", "-D", &path_str(&data)]).stdout;
    assert_eq!(summary_events(&summary, "tick"), ticks.len() as u64);
    assert!(summary.contains("DAMAGED"), "{summary}");
}

/// The text between `before` and `after` in `text`, when both are there.
fn between<'t>(text: &'t str, before: &str, after: &str) -> Option<&'t str> {
    let start = text.find(before)? + before.len();
    let len = text[start..].find(after)?;
    Some(&text[start..start + len])
}

/// SIGKILL during a slow capture: the events flushed so far (about every
/// 250 ms) replay, and stderr says the writer did not finish and from
/// which time on events are lost.
#[test]
fn killed_capture_replays_flushed_events() {
    require_bpf!();
    kill_during_capture("killed_slow", "4000 5", 0, Duration::from_millis(600));
}

/// SIGKILL during a busy capture: every complete events chunk replays.
#[test]
fn killed_busy_capture_replays_complete_chunks() {
    require_bpf!();
    kill_during_capture("killed_busy", "2000000 0", 70_000, Duration::ZERO);
}

/// Flipped bytes in the header, a table chunk, an events chunk and the
/// symbols chunk are reported with the damaged chunk's offset: an error, or
/// the events before the damage with a warning.
#[test]
fn flipped_bytes_name_their_offset() {
    require_bpf!();
    let (dir, good) = finished_capture("flipped");
    let (info, strings, events, symbols) = (
        chunk(&good, 1),
        chunk(&good, 3),
        chunk(&good, 7),
        chunk(&good, 8),
    );
    let flip = |at: usize| {
        let mut bytes = good.clone();
        bytes[at] ^= 0xff;
        replay_bytes(&dir, &format!("flip{at}.data"), &bytes)
    };
    // (byte to flip, exit code, events kept, message)
    let cases = [
        (
            9,
            1,
            0,
            "is corrupt at byte 0: file header checksum mismatch".to_string(),
        ),
        (
            info + 25,
            1,
            0,
            "is corrupt at byte 16: info chunk checksum mismatch".into(),
        ),
        (
            strings + 6,
            0,
            0,
            format!("corrupt data at byte {strings} (chunk header checksum"),
        ),
        (
            strings + 22,
            0,
            0,
            format!("corrupt data at byte {strings} (strings chunk checksum"),
        ),
        (
            events + 22,
            1,
            0,
            format!("corrupt at byte {events}: events chunk checksum mismatch"),
        ),
        (
            symbols + 21,
            0,
            MALLOCS,
            format!("corrupt data at byte {symbols} (symbols chunk"),
        ),
    ];
    for (at, code, kept, message) in cases {
        let out = flip(at);
        assert_eq!(
            out.status.and_then(|s| s.code()),
            Some(code),
            "flip {at}: {}",
            out.stderr
        );
        assert!(out.stderr.contains(&message), "flip {at}: {}", out.stderr);
        assert_eq!(event_lines(&out.stdout), kept, "flip {at}");
    }
}

/// A damaged events chunk is a read error, not a failure to write the output.
#[test]
fn damaged_events_are_not_a_write_error() {
    require_bpf!();
    let (dir, mut bytes) = finished_capture("flipped_events");
    let events = chunk(&bytes, 7);
    bytes[events + 22] ^= 0xff;
    let out = replay_bytes(&dir, "flip.data", &bytes);
    assert!(!out.stderr.contains("cannot write"), "{}", out.stderr);
}

/// A capture cut at any length replays the complete chunks before the cut,
/// with a warning, or fails naming where the file ends.
#[test]
fn truncated_captures_replay_their_complete_prefix() {
    require_bpf!();
    let (dir, good) = finished_capture("truncated");
    let (schemas, events, symbols) = (chunk(&good, 2), chunk(&good, 7), chunk(&good, 8));
    let cut = |len: usize| replay_bytes(&dir, &format!("cut{len}.data"), &good[..len]);
    for len in [0, 5, 15] {
        let out = cut(len);
        assert_eq!(out.status.and_then(|s| s.code()), Some(1), "cut {len}");
        let message = format!("ends at byte {len}, before its file header");
        assert!(out.stderr.contains(&message), "cut {len}: {}", out.stderr);
    }
    for len in [16, 40, schemas + 10] {
        let out = cut(len);
        assert_eq!(out.status.and_then(|s| s.code()), Some(1), "cut {len}");
        let message = "before its description (info and schemas chunks)";
        assert!(out.stderr.contains(message), "cut {len}: {}", out.stderr);
    }
    // (cut length, events kept, byte where the readable capture ends)
    for (len, kept, ends) in [
        (events, 0, events),
        (events + 30, 0, events),
        (symbols, MALLOCS, symbols),
        (good.len() - 1, MALLOCS, chunk(&good, 9)),
    ] {
        let out = cut(len);
        assert!(out.success(), "cut {len}: {}", out.stderr);
        assert_eq!(event_lines(&out.stdout), kept, "cut {len}");
        let message = format!(
            "the capture ends after {kept} events at byte {ends}: the writer did not finish"
        );
        assert!(out.stderr.contains(&message), "cut {len}: {}", out.stderr);
    }
}

/// Files that are not captures (text, an empty file's garbage, a bad magic) are refused.
#[test]
fn refuses_files_that_are_not_captures() {
    let dir = fresh_dir("not_captures");
    let mut magic = b"\x89WPROF\r\n\x01\x00\x00\x00\x00\x00\x00\x00".to_vec();
    magic[1] = b'X';
    for (name, bytes) in [
        ("text.data", b"hello, this is not a capture at all".to_vec()),
        ("magic.data", magic),
    ] {
        let path = dir.join(name);
        fs::write(&path, bytes).expect("write");
        let out = wprof_fails(&["-R", "-D", &path_str(&path), "-I"]);
        assert!(
            out.stderr.contains("is not a wprof capture"),
            "{}",
            out.stderr
        );
        assert_eq!(out.stdout, "");
    }
}

/// The header with `major.minor` and its CRC recomputed.
fn with_version(bytes: &[u8], major: u16, minor: u16) -> Vec<u8> {
    let mut bytes = bytes.to_vec();
    bytes[8..10].copy_from_slice(&major.to_le_bytes());
    bytes[10..12].copy_from_slice(&minor.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..12]);
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// A newer major version is refused naming both versions; a newer minor version replays.
#[test]
fn refuses_a_newer_major_version() {
    require_bpf!();
    let (dir, good) = finished_capture("versions");
    let out = replay_bytes(&dir, "v3.data", &with_version(&good, 3, 0));
    assert_eq!(out.status.and_then(|s| s.code()), Some(1), "{}", out.stderr);
    let refusal = format!("written in capture format 3.0; this wprof reads format {VERSION}");
    assert!(out.stderr.contains(&refusal), "{}", out.stderr);
    let out = replay_bytes(&dir, "v2_9.data", &with_version(&good, 2, 9));
    assert!(out.success(), "{}", out.stderr);
    assert_eq!(event_lines(&out.stdout), MALLOCS);
}

/// Replaying one file twice writes byte-identical Perfetto and NDJSON.
#[test]
fn replay_is_deterministic() {
    require_bpf!();
    let (dir, _) = finished_capture("deterministic");
    let data = path_str(&dir.join("f.data"));
    let render = |run: u32| {
        let (pb, json) = (
            dir.join(format!("r{run}.pb")),
            dir.join(format!("r{run}.json")),
        );
        wprof_ok(&[
            "-R",
            "-D",
            &data,
            "-T",
            &path_str(&pb),
            "-J",
            &path_str(&json),
        ]);
        (fs::read(pb).expect("-T"), fs::read(json).expect("-J"))
    };
    let (first, second) = (render(1), render(2));
    assert!(!first.0.is_empty() && event_lines(&String::from_utf8_lossy(&first.1)) == MALLOCS);
    assert!(
        first.0 == second.0,
        "Perfetto output differs between replays"
    );
    assert!(first.1 == second.1, "NDJSON output differs between replays");
}

/// Records two processes running `tick` (40 calls as `tk`, 60 as `ticker_two`,
/// a hard link: same inode, so one uprobe) into `dir/r.data`.
fn two_process_capture(dir: &Path) -> String {
    let tk = dir.join("tk");
    let two = dir.join("ticker_two");
    fs::copy(o0_workload("capture_ticker"), &tk).expect("private copy");
    fs::hard_link(&tk, &two).expect("hard link");
    let data = path_str(&dir.join("r.data"));
    // BEGIN runs once every probe is attached (as in attach.rs).
    let script = format!(
        r#"BEGIN {{ printf("ready\n"); }} uprobe:{}:tick < i = arg0 >"#,
        path_str(&tk)
    );
    let mut wprof = Command::new(wprof_bin())
        .args(["-f", "none", "-e", &script, "-D", &data, "-d", "2s"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start wprof");
    let mut stdout = BufReader::new(wprof.stdout.take().expect("piped"));
    let mut seen = String::new();
    while !seen.ends_with("ready\n") {
        let read = stdout.read_line(&mut seen).expect("read wprof stdout");
        assert!(read > 0, "wprof ended before BEGIN ran: {seen:?}");
    }
    assert_eq!(seen, "Attaching 2 probes...\nready\n");
    let mut a = Command::new(&tk).args(["40", "5"]).spawn().expect("run tk");
    let mut b = Command::new(&two)
        .args(["60", "5"])
        .spawn()
        .expect("run ticker_two");
    assert!(a.wait().expect("tk").success() && b.wait().expect("ticker_two").success());
    // Keep reading: wprof prints at exit, and a closed pipe would fail it.
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("read wprof stdout");
    assert!(wprof.wait().expect("wprof").success());
    data
}

/// `-p` keeps exactly one process and `-n` matches process names by glob;
/// `-I` counts the same events.
#[test]
fn replay_filters_by_process() {
    require_bpf!();
    let dir = fresh_dir("filters");
    let data = two_process_capture(&dir);
    let all = Ndjson::parse(&wprof_ok(&["-R", "-D", &data, "-J", "-"]).stdout);
    assert_eq!(all.of("tick").len(), 100);
    let pid_of = |name: &str| {
        let event = all.events.iter().find(|e| e["task"]["comm"] == name);
        event.expect("events of both processes")["task"]["pid"].to_string()
    };
    for (args, comm, count) in [
        (vec!["-p", &pid_of("tk")], "tk", 40),
        (vec!["-p", &pid_of("ticker_two")], "ticker_two", 60),
        (vec!["-n", "ticker_t*"], "ticker_two", 60),
        (vec!["-n", "t?"], "tk", 40),
    ] {
        let json = wprof_ok(&[&["-R", "-D", &data, "-J", "-"], &args[..]].concat()).stdout;
        let kept = Ndjson::parse(&json);
        assert_eq!(kept.events.len(), count, "{args:?}");
        assert!(
            kept.events.iter().all(|e| e["task"]["pcomm"] == comm),
            "{args:?}"
        );
        let summary = wprof_ok(&[&["-R", "-D", &data, "-I"], &args[..]].concat()).stdout;
        assert_eq!(summary_events(&summary, "tick"), count as u64, "{args:?}");
    }
    let none = wprof_ok(&["-R", "-D", &data, "-J", "-", "-n", "nomatch*"]).stdout;
    assert_eq!(event_lines(&none), 0);
}

/// `--replay-start/--replay-end` and `-d` keep exactly the events whose
/// time from the capture start falls in the window; `-I` agrees.
#[test]
fn replay_windows_select_by_time() {
    require_bpf!();
    let dir = fresh_dir("windows");
    let data = two_process_capture(&dir);
    let all = Ndjson::parse(&wprof_ok(&["-R", "-D", &data, "-J", "-"]).stdout);
    let times: Vec<f64> = all
        .events
        .iter()
        .map(|e| e["ts"].as_f64().unwrap())
        .collect();
    // Windows relative to the first event, so they cut through the workload.
    let first_ms = (times[0] * 1000.0).floor() as u64;
    let (from, to) = (first_ms + 60, first_ms + 160);
    let in_window = |lo: f64, hi: f64| times.iter().filter(|&&t| t >= lo && t < hi).count();
    let start = format!("{from}ms");
    let end = format!("{to}ms");
    let cases: [(Vec<&str>, usize); 3] = [
        (
            vec!["--replay-start", &start, "--replay-end", &end],
            in_window(from as f64 / 1e3, to as f64 / 1e3),
        ),
        (vec!["-d", &end], in_window(0.0, to as f64 / 1e3)),
        (
            vec!["--replay-start", &start],
            in_window(from as f64 / 1e3, f64::MAX),
        ),
    ];
    for (args, expected) in cases {
        assert!(
            expected > 0 && expected < times.len(),
            "{args:?} must cut the capture"
        );
        let json = wprof_ok(&[&["-R", "-D", &data, "-J", "-"], &args[..]].concat()).stdout;
        assert_eq!(event_lines(&json), expected, "{args:?}");
        let summary = wprof_ok(&[&["-R", "-D", &data, "-I"], &args[..]].concat()).stdout;
        assert_eq!(
            summary_events(&summary, "tick"),
            expected as u64,
            "{args:?}"
        );
    }
}

/// `wprof -R … -J - | head`: when standard output's reader has gone, that
/// output ends quietly (status 0, nothing on stderr) and the file outputs
/// are still written.
#[test]
fn closed_standard_output_ends_quietly() {
    require_bpf!();
    let (dir, _) = finished_capture("replay-closed-stdout");
    let folded = dir.join("f.folded");
    let mut child = Command::new(wprof_bin())
        .args(["-R", "-D", &path_str(&dir.join("f.data")), "-J", "-"])
        .args(["--profile", "malloc", "--folded", &path_str(&folded)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run wprof");
    // No reader from the start: the first write fails with EPIPE.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wprof finishes");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(stderr.is_empty(), "{stderr}");
    let lines = fs::read_to_string(&folded).expect("the folded file is written");
    assert!(lines.contains("malloc"), "{lines}");
}
