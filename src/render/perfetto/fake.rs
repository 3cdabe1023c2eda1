//! An in-memory capture for the renderer's tests, and a decoder for what the
//! renderer writes.

use std::convert::Infallible;
use std::ops::ControlFlow;

use prost::Message;

use super::CaptureSource;
use super::proto::TracePacket;
use crate::capture::model::{
    CaptureInfo, Event, FieldSchema, FieldType, FieldValue, FrameAddr, FrameId, RecordId,
    RecordKind, RecordSchema, Stack, StackId, StringId, Symbol, Thread, ThreadId,
};

/// Monotonic clock at capture start: a day of uptime, so timestamps take
/// their realistic varint size.
pub const START_NS: u64 = 86_400_000_000_000;

#[derive(Debug, Default)]
pub struct FakeCapture {
    pub info: CaptureInfo,
    pub schemas: Vec<RecordSchema>,
    pub strings: Vec<String>,
    pub threads: Vec<Thread>,
    pub stacks: Vec<Stack>,
    pub frames: Vec<FrameAddr>,
    pub symbols: Vec<Option<Symbol>>,
    pub events: Vec<Event>,
    /// When non-zero, `for_each_event` generates this many instants of
    /// record 0 (two int fields, a stack) instead of replaying `events`.
    pub synthetic: u64,
}

impl FakeCapture {
    /// Two processes, three threads, an instant record `malloc` (two ints, a
    /// stack), a span record `read` (a string field), two stacks.
    pub fn new() -> Self {
        let mut capture = FakeCapture {
            info: CaptureInfo {
                start_monotonic_ns: START_NS,
                start_realtime_ns: 1_750_000_000_000_000_000,
                ..CaptureInfo::default()
            },
            ..FakeCapture::default()
        };
        let field = |name: &str, ty| FieldSchema {
            name: name.to_owned(),
            ty,
        };
        capture.schemas = vec![
            RecordSchema {
                probe: "uprobe:/usr/lib/libc.so.6:malloc".to_owned(),
                name: "malloc".to_owned(),
                kind: RecordKind::Instant,
                fields: vec![field("size", FieldType::UInt), field("delta", FieldType::Int)],
                has_stack: true,
            },
            RecordSchema {
                probe: "span:read".to_owned(),
                name: "read".to_owned(),
                kind: RecordKind::Span,
                fields: vec![field("path", FieldType::Str)],
                has_stack: false,
            },
        ];
        let names = ["app", "worker", "bash", "/usr/lib/libc.so.6", "malloc", "main"];
        let names = names.into_iter().chain(["app.c", "inlined_helper", "/etc/passwd"]);
        capture.strings = names.map(str::to_owned).collect();
        let thread = |tid, pid, name, process_name| Thread {
            tid,
            pid,
            name: StringId(name),
            process_name: StringId(process_name),
        };
        capture.threads = vec![thread(100, 100, 0, 0), thread(101, 100, 1, 0), thread(200, 200, 2, 2)];
        capture.frames = vec![
            FrameAddr::User {
                module: StringId(3),
                build_id: Some(vec![0xab, 0xcd]),
                file_offset: 0x1234,
            },
            FrameAddr::User {
                module: StringId(3),
                build_id: Some(vec![0xab, 0xcd]),
                file_offset: 0x5678,
            },
            FrameAddr::Kernel { addr: 0xffff_ffff_8100_0000 },
        ];
        capture.symbols = vec![
            Some(Symbol {
                function: Some(StringId(4)),
                ..Symbol::default()
            }),
            Some(Symbol {
                function: Some(StringId(5)),
                file: Some(StringId(6)),
                line: Some(42),
                inlined: vec![StringId(7)],
                ..Symbol::default()
            }),
            None,
        ];
        capture.stacks = vec![
            Stack {
                frames: vec![FrameId(0), FrameId(1)],
            },
            Stack {
                frames: vec![FrameId(2), FrameId(0), FrameId(1)],
            },
        ];
        capture
    }
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
    }
}

/// A span of record 1 (`read`).
pub fn read(ts_ns: u64, duration_ns: u64, thread: u32) -> Event {
    Event {
        ts_ns,
        cpu: 1,
        thread: ThreadId(thread),
        record: RecordId(1),
        duration_ns: Some(duration_ns),
        values: vec![FieldValue::Str(StringId(8))],
        stack: None,
    }
}

impl CaptureSource for FakeCapture {
    type Error = Infallible;

    fn info(&self) -> &CaptureInfo {
        &self.info
    }
    fn schemas(&self) -> &[RecordSchema] {
        &self.schemas
    }
    fn string(&self, id: StringId) -> &str {
        &self.strings[id.0 as usize]
    }
    fn threads(&self) -> &[Thread] {
        &self.threads
    }
    fn thread(&self, id: ThreadId) -> &Thread {
        &self.threads[id.0 as usize]
    }
    fn stack(&self, id: StackId) -> &Stack {
        &self.stacks[id.0 as usize]
    }
    fn frame(&self, id: FrameId) -> &FrameAddr {
        &self.frames[id.0 as usize]
    }
    fn symbol(&self, id: FrameId) -> Option<&Symbol> {
        self.symbols[id.0 as usize].as_ref()
    }

    fn for_each_event(
        &self,
        mut f: impl FnMut(&Event) -> ControlFlow<()>,
    ) -> Result<(), Infallible> {
        if self.synthetic == 0 {
            for event in &self.events {
                if f(event).is_break() {
                    break;
                }
            }
            return Ok(());
        }
        // One event reused, as a reader decoding into a buffer would.
        let mut event = malloc(0, 0, 0, 0);
        for i in 0..self.synthetic {
            event.ts_ns = i * 50;
            event.thread = ThreadId((i % 3) as u32);
            event.values[0] = FieldValue::UInt(16 + (i % 512));
            event.stack = Some(StackId((i % 2) as u32));
            if f(&event).is_break() {
                break;
            }
        }
        Ok(())
    }
}

/// The packets of a trace written by the renderer.
pub fn decode(mut bytes: &[u8]) -> Vec<TracePacket> {
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
