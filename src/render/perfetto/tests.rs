use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use prost::Message;

use super::RenderStats;
use super::fake::{START_NS, capture, decode, decode_raw, generate, malloc, read, render};
use super::proto::{self, TracePacket};
use crate::frontend::options::TaskFilter;
use crate::render::filter::{Filter, TaskSelector};
use crate::render::source::FakeCapture;

fn render_bytes(capture: &FakeCapture, filter: &Filter) -> (Vec<u8>, RenderStats) {
    let mut out = Vec::new();
    let stats = render(capture, filter, &mut out).expect("rendering to memory succeeds");
    (out, stats)
}

fn events(packets: &[TracePacket]) -> Vec<(&TracePacket, &proto::TrackEvent)> {
    packets
        .iter()
        .filter_map(|p| p.track_event.as_ref().map(|e| (p, e)))
        .collect()
}

/// Size of a packet as a `Trace.packet` entry.
fn entry_len(packet: &TracePacket) -> usize {
    let len = packet.encoded_len();
    1 + prost::encoding::encoded_len_varint(len as u64) + len
}

/// The first packet clears state and sets the clock; tracks are described
/// before use with correct pids, tids and names.
#[test]
fn tracks_are_described_before_use() {
    let mut capture = capture();
    capture.events = vec![
        malloc(10, 0, 16, 0),
        malloc(20, 1, 32, 1),
        read(&capture, 30, 5, 2),
    ];
    let (bytes, stats) = render_bytes(&capture, &Filter::default());
    let packets = decode(&bytes);
    let first = &packets[0];
    assert_eq!(
        first.sequence_flags,
        Some(proto::SEQ_INCREMENTAL_STATE_CLEARED)
    );
    let defaults = first.trace_packet_defaults.as_ref().expect("defaults");
    assert_eq!(defaults.timestamp_clock_id, Some(proto::CLOCK_INCREMENTAL));
    assert!(
        packets
            .iter()
            .all(|p| p.trusted_packet_sequence_id == Some(1))
    );
    let mut described = BTreeMap::new();
    for packet in &packets {
        if let Some(d) = &packet.track_descriptor {
            if let Some(parent) = d.parent_uuid {
                assert!(described.contains_key(&parent), "parent described first");
            }
            described.insert(d.uuid.expect("uuid"), d.clone());
        }
        if let Some(event) = &packet.track_event {
            let track = &described[&event.track_uuid.expect("track")];
            let parent = &described[&track.parent_uuid.expect("child track")];
            assert!(parent.thread.is_some());
        }
    }
    let threads: Vec<_> = described
        .values()
        .filter_map(|d| d.thread.clone())
        .collect();
    let tids: Vec<_> = threads
        .iter()
        .map(|t| (t.pid, t.tid, t.thread_name.clone()))
        .collect();
    assert_eq!(
        tids,
        [
            (Some(100), Some(100), Some("app".into())),
            (Some(100), Some(101), Some("worker".into())),
            (Some(200), Some(200), Some("bash".into())),
        ]
    );
    let processes = described.values().filter_map(|d| d.process.clone()).count();
    assert_eq!(processes, 2);
    assert_eq!((stats.instants, stats.slices, stats.tracks), (2, 1, 8));
    let (packet, event) = events(&packets)[0];
    assert_eq!(packet.timestamp, Some(START_NS + 10));
    assert_eq!(event.r#type, Some(proto::TYPE_INSTANT));
}

/// A thread that execs (a new name for the same pid and tid) keeps one
/// track, described once under its latest name, as is its process.
#[test]
fn tracks_follow_exec_and_rename() {
    let mut capture = capture();
    capture.add_thread(200, 200, "sleep", "sleep");
    capture.events = vec![
        malloc(5, 0, 16, 0),
        malloc(10, 2, 16, 0),
        malloc(20, 3, 16, 0),
    ];
    let (bytes, _) = render_bytes(&capture, &Filter::default());
    let packets = decode(&bytes);
    let descriptors: Vec<_> = packets
        .iter()
        .filter_map(|p| p.track_descriptor.as_ref())
        .collect();
    let names = |uuid: Option<u64>| -> Vec<String> {
        let described = descriptors.iter().filter(|d| d.uuid == uuid);
        (described.filter_map(|d| d.thread.as_ref()?.thread_name.clone())).collect()
    };
    let instants = events(&packets);
    let thread_track = |i: usize| {
        let track = instants[i].1.track_uuid;
        descriptors
            .iter()
            .find(|d| d.uuid == track)
            .and_then(|d| d.parent_uuid)
    };
    assert_eq!(thread_track(1), thread_track(2), "one track for the thread");
    assert_eq!(names(thread_track(1)), ["sleep"]);
    let processes: Vec<_> = (descriptors.iter())
        .filter_map(|d| d.process.as_ref()?.process_name.clone())
        .collect();
    assert_eq!(processes, ["app", "sleep"]);
}

/// Nested spans share a track; overlapping ones move to a lane; every END
/// closes the span it belongs to and timestamps never decrease.
#[test]
fn spans_nest_or_take_lanes() {
    let mut capture = capture();
    capture.events = vec![
        read(&capture, 0, 100, 0),
        read(&capture, 10, 20, 0),
        read(&capture, 50, 100, 0),
        read(&capture, 200, 1, 0),
    ];
    let (bytes, stats) = render_bytes(&capture, &Filter::default());
    let packets = decode(&bytes);
    let mut last = 0;
    let mut stacks: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut closed = Vec::new();
    for (packet, event) in events(&packets) {
        let ts = packet.timestamp.expect("timestamp") - START_NS;
        assert!(ts >= last, "timestamps never decrease");
        last = ts;
        let stack = stacks.entry(event.track_uuid.expect("track")).or_default();
        match event.r#type {
            Some(proto::TYPE_SLICE_BEGIN) => stack.push(ts),
            Some(proto::TYPE_SLICE_END) => closed.push((stack.pop().expect("open slice"), ts)),
            other => panic!("unexpected {other:?}"),
        }
    }
    closed.sort();
    assert_eq!(closed, [(0, 100), (10, 30), (50, 150), (200, 201)]);
    assert_eq!(stacks.len(), 2, "one extra lane for the overlapping span");
    let names: Vec<_> = packets
        .iter()
        .filter_map(|p| p.track_descriptor.as_ref()?.name.clone())
        .collect();
    assert_eq!(names, ["read", "read #2"]);
    assert_eq!(stats.slices, 4);
}

/// Callstacks are interned in the packet that first uses them, outermost
/// frame first, inlined functions expanded, file and line on the innermost.
#[test]
fn callstacks_interned_at_first_use() {
    let mut capture = capture();
    capture.events = vec![
        malloc(1, 0, 16, 0),
        malloc(2, 0, 16, 0),
        malloc(3, 0, 16, 1),
    ];
    let (bytes, _) = render_bytes(&capture, &Filter::default());
    let packets = decode(&bytes);
    let evs = events(&packets);
    let first = evs[0]
        .0
        .interned_data
        .as_ref()
        .expect("interned with first use");
    assert_eq!(evs[0].1.callstack_iid, Some(1));
    let frame_names: Vec<_> = first.callstacks[0]
        .frame_ids
        .iter()
        .map(|&iid| {
            let frame = first
                .frames
                .iter()
                .find(|f| f.iid == Some(iid))
                .expect("frame");
            let name = first
                .function_names
                .iter()
                .find(|n| n.iid == frame.function_name_id)
                .expect("name");
            (
                String::from_utf8(name.str.clone().unwrap()).unwrap(),
                frame.line_number,
            )
        })
        .collect();
    let expected = [
        ("main", None),
        ("inlined_helper", Some(42)),
        ("malloc", None),
    ];
    let expected: Vec<_> = expected.iter().map(|(n, l)| (n.to_string(), *l)).collect();
    assert_eq!(frame_names, expected);
    assert_eq!(first.mappings.len(), 1);
    assert!(
        evs[1].0.interned_data.is_none(),
        "nothing new the second time"
    );
    let third = evs[2].0.interned_data.as_ref().expect("the new stack");
    assert_eq!(third.callstacks[0].frame_ids.len(), 4);
    assert_eq!(third.frames.len(), 1, "only the kernel frame is new");
    assert_eq!(evs[2].1.callstack_iid, Some(2));
}

/// The replay filter applies: pids and the time window.
#[test]
fn filter_applies() {
    let mut capture = capture();
    capture.events = vec![
        malloc(10, 0, 1, 0),
        malloc(20, 2, 1, 0),
        malloc(30, 0, 1, 0),
    ];
    let filter = Filter {
        tasks: vec![
            TaskSelector::new(&TaskFilter {
                pids: vec![100],
                ..TaskFilter::default()
            })
            .unwrap(),
        ],
        end_ns: Some(30),
        ..Filter::default()
    };
    let (bytes, stats) = render_bytes(&capture, &filter);
    assert_eq!((stats.events, stats.filtered, stats.instants), (3, 2, 1));
    assert_eq!(events(&decode(&bytes)).len(), 1);
}

/// Events earlier than one already written are skipped and counted.
#[test]
fn out_of_order_is_counted() {
    let mut capture = capture();
    capture.events = vec![malloc(10, 0, 1, 0), malloc(5, 1, 1, 0)];
    let (_, stats) = render_bytes(&capture, &Filter::default());
    assert_eq!((stats.instants, stats.out_of_order), (1, 1));
}

/// Same capture, same bytes.
#[test]
fn output_is_deterministic() {
    let mut capture = capture();
    capture.events = vec![
        malloc(1, 0, 1, 0),
        read(&capture, 2, 9, 1),
        malloc(3, 2, 1, 1),
        read(&capture, 4, 1, 1),
    ];
    let (a, _) = render_bytes(&capture, &Filter::default());
    let (b, _) = render_bytes(&capture, &Filter::default());
    assert_eq!(a, b);
}

/// An instant with two int fields and a stack, once its names and stack are
/// interned, fits in 32 bytes a day into uptime: its timestamp is the 1 µs
/// since the previous packet, not the absolute time.
#[test]
fn instant_size() {
    let mut capture = capture();
    capture.events = vec![malloc(1_000, 0, 16, 0), malloc(2_000, 0, 100, 0)];
    let (bytes, _) = render_bytes(&capture, &Filter::default());
    let packets = decode_raw(&bytes);
    let (second, _) = events(&packets)[1];
    assert_eq!(second.timestamp, Some(1_000));
    let size = entry_len(second);
    println!("bytes per instant (2 int fields + stack): {size}");
    assert!(size <= 32, "{size} bytes");
}

/// Throughput on synthetic instants (2 M in release, fewer in debug builds).
#[test]
fn throughput() {
    let count = if cfg!(debug_assertions) {
        200_000
    } else {
        2_000_000
    };
    let mut capture = capture();
    capture.generated = Some((count, generate));
    let mut out = std::io::sink();
    let started = Instant::now();
    let stats = render(&capture, &Filter::default(), &mut out).expect("renders");
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(stats.instants, count);
    println!(
        "{count} events in {elapsed:.3} s: {:.1} M events/s, {:.1} bytes/event",
        count as f64 / elapsed / 1e6,
        stats.bytes as f64 / count as f64
    );
}

/// The official Perfetto schema (PyPI `perfetto`) accepts the trace and
/// `tests/perfetto_check.py` finds the sequence, tracks and interning valid.
#[test]
fn python_oracle_accepts_trace() {
    let probe = Command::new("python3")
        .args([
            "-c",
            "import perfetto.protos.perfetto.trace.perfetto_trace_pb2",
        ])
        .output();
    match probe {
        Err(err) => return println!("skipped: python3 not runnable: {err}"),
        Ok(out) if !out.status.success() => {
            return println!("skipped: python package `perfetto` missing (pip install perfetto)");
        }
        Ok(_) => {}
    }
    let mut capture = capture();
    capture.events = vec![
        malloc(10, 0, 16, 0),
        read(&capture, 15, 100, 1),
        read(&capture, 20, 10, 1),
        read(&capture, 25, 100, 1),
        malloc(30, 2, 32, 1),
        malloc(40, 1, 64, 0),
    ];
    let (bytes, _) = render_bytes(&capture, &Filter::default());
    let dir = tempfile::tempdir().expect("temp dir");
    let trace = dir.path().join("trace.pb");
    std::fs::write(&trace, bytes).expect("trace written");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/perfetto_check.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(&trace)
        .args(["--expect-instants", "3", "--expect-slices", "3"])
        .args(["--expect-name", "malloc=3", "--expect-name", "read=3"])
        .args(["--expect-tracks", "10", "--expect-callstacks", "2"])
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "perfetto_check.py failed:\n{stdout}\n{stderr}"
    );
    println!("{stdout}");
}
