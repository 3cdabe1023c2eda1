//! The renderer's test capture, built on the shared [`FakeCapture`], and a
//! decoder for what the renderer writes.

use std::collections::HashMap;
use std::io::Write;

use prost::Message;

use super::proto::{self, TracePacket};
use super::{RenderStats, write_trace};
use crate::capture::model::{
    Event, FieldType, FieldValue, FrameAddr, RecordId, RecordKind, StackId, StringId, Symbol,
    ThreadId,
};
use crate::render::filter::Filter;
use crate::render::source::{CaptureSource, FakeCapture};
use crate::render::{Capture, Output, RenderError};

/// Monotonic clock at capture start: a day of uptime, so timestamps take
/// their realistic varint size.
pub const START_NS: u64 = 86_400_000_000_000;

/// Two processes, three threads (0, 1 in pid 100; 2 in pid 200), an instant
/// record `malloc` (record 0: a uint, an int, a stack), a span record `read`
/// (record 1: a string), stacks 0 (two user frames, the inner one with an
/// inlined function and a source line) and 1 (stack 0 under a kernel frame).
pub fn capture() -> FakeCapture {
    let mut c = FakeCapture::new();
    c.info.start_monotonic_ns = START_NS;
    c.info.start_realtime_ns = 1_750_000_000_000_000_000;
    c.add_thread(100, 100, "app", "app");
    c.add_thread(101, 100, "worker", "app");
    c.add_thread(200, 200, "bash", "bash");
    let fields = [("size", FieldType::UInt), ("delta", FieldType::Int)];
    c.add_schema("malloc", RecordKind::Instant, &fields, true);
    c.add_schema("read", RecordKind::Span, &[("path", FieldType::Str)], false);
    let libc = c.intern("/usr/lib/libc.so.6");
    let user = |file_offset| FrameAddr::User {
        module: libc,
        build_id: Some(vec![0xab, 0xcd]),
        file_offset,
    };
    let malloc = Symbol {
        function: Some(c.intern("malloc")),
        ..Symbol::default()
    };
    let malloc = c.add_frame(user(0x1234), Some(malloc));
    let main = Symbol {
        function: Some(c.intern("main")),
        file: Some(c.intern("app.c")),
        line: Some(42),
        inlined: vec![c.intern("inlined_helper")],
        ..Symbol::default()
    };
    let main = c.add_frame(user(0x5678), Some(main));
    let kernel = c.add_frame(
        FrameAddr::Kernel {
            addr: 0xffff_ffff_8100_0000,
        },
        None,
    );
    c.add_stack(&[malloc, main]);
    c.add_stack(&[kernel, malloc, main]);
    c.intern("/etc/passwd");
    c
}

/// An instant of record 0 (`malloc`).
pub fn malloc(ts_ns: u64, thread: u32, size: u64, stack: u32) -> Event {
    Event {
        ts_ns,
        cpu: 0,
        thread: ThreadId(thread),
        record: RecordId(0),
        duration_ns: None,
        values: vec![FieldValue::UInt(size), FieldValue::Int(3)],
        stack: Some(StackId(stack)),
        walk: None,
    }
}

/// A span of record 1 (`read`) with `path` `/etc/passwd`.
pub fn read(c: &FakeCapture, ts_ns: u64, duration_ns: u64, thread: u32) -> Event {
    let path = c.strings.iter().position(|s| s == "/etc/passwd");
    Event {
        ts_ns,
        cpu: 1,
        thread: ThreadId(thread),
        record: RecordId(1),
        duration_ns: Some(duration_ns),
        values: vec![FieldValue::Str(StringId(path.expect("interned") as u32))],
        stack: None,
        walk: None,
    }
}

/// For `FakeCapture::generated`: instants of `malloc` every 50 ns, round
/// robin over the threads and stacks, with varying sizes.
pub fn generate(i: u64, event: &mut Event) {
    if event.values.is_empty() {
        *event = malloc(0, 0, 0, 0);
    }
    event.ts_ns = i * 50;
    event.thread = ThreadId((i % 3) as u32);
    event.values[0] = FieldValue::UInt(16 + (i % 512));
    event.stack = Some(StackId((i % 2) as u32));
}

/// Renders `source` with `filter` into `out`.
pub fn render(
    source: &dyn CaptureSource,
    filter: &Filter,
    out: &mut impl Write,
) -> Result<RenderStats, RenderError> {
    let capture = Capture::test(source, filter.clone());
    write_trace(&capture, &mut Output::new("memory", out))
}

/// The packets of a trace written by the renderer, with their timestamps
/// resolved from deltas on their sequence's incremental clock to absolute
/// ones and their sequence's default track filled in, as a trace reader
/// does.
pub fn decode(bytes: &[u8]) -> Vec<TracePacket> {
    // By sequence: its incremental clock and default track.
    let mut clocks: HashMap<u32, u64> = HashMap::new();
    let mut tracks: HashMap<u32, u64> = HashMap::new();
    let mut packets = decode_raw(bytes);
    for packet in &mut packets {
        let sequence = packet.trusted_packet_sequence_id.expect("a sequence");
        let snapshot = packet.clock_snapshot.iter().flat_map(|s| &s.clocks);
        for clock in snapshot.filter(|c| c.is_incremental == Some(true)) {
            assert_eq!(clock.clock_id, Some(proto::CLOCK_INCREMENTAL));
            clocks.insert(sequence, clock.timestamp.expect("a time"));
        }
        let defaults = packet.trace_packet_defaults.as_ref();
        if let Some(track) = defaults.and_then(|d| d.track_event_defaults.as_ref()) {
            tracks.insert(sequence, track.track_uuid.expect("a track"));
        }
        if let Some(delta) = packet.timestamp {
            let clock = clocks.get_mut(&sequence);
            let clock = clock.expect("a clock snapshot before timestamps");
            *clock += delta;
            packet.timestamp = Some(*clock);
        }
        if let Some(event) = &mut packet.track_event
            && event.track_uuid.is_none()
        {
            event.track_uuid = Some(tracks[&sequence]);
        }
    }
    packets
}

/// The packets of a trace as written (timestamps are deltas).
pub fn decode_raw(mut bytes: &[u8]) -> Vec<TracePacket> {
    let mut packets = Vec::new();
    while !bytes.is_empty() {
        let key = prost::encoding::decode_varint(&mut bytes).expect("packet key");
        assert_eq!(key, (1 << 3) | 2, "every entry is Trace.packet");
        let len = prost::encoding::decode_varint(&mut bytes).expect("packet length") as usize;
        let (packet, rest) = bytes.split_at(len);
        packets.push(TracePacket::decode(packet).expect("a valid TracePacket"));
        bytes = rest;
    }
    packets
}
