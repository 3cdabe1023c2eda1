//! Perfetto renderer: a capture (seen through [`CaptureSource`]) and the
//! replay [`Filter`] → a Perfetto protobuf trace, streamed packet by packet.
//!
//! Layout of the output, one packet sequence (`SEQUENCE_ID`):
//! - the first packet clears incremental state, declares the capture's
//!   `CLOCK_MONOTONIC` as the trace clock (with the realtime clock beside it
//!   in a `ClockSnapshot`) and makes it the sequence's default timestamp
//!   clock, so event timestamps are `start_monotonic_ns + ts_ns` as they are;
//! - tracks (see [`tracks`]): process → thread → one child track per record,
//!   each described by a `TrackDescriptor` packet just before its first event;
//! - instants are `TYPE_INSTANT`, spans a `TYPE_SLICE_BEGIN` at the start and
//!   a `TYPE_SLICE_END` at the end. ENDs wait in a queue ordered by time and
//!   are written as soon as the next event is not earlier, so the sequence's
//!   timestamps never decrease; spans that overlap without nesting go to
//!   sibling lane tracks, so each END closes the right slice;
//! - fields are debug annotations; event names, annotation names, string
//!   values and callstacks (frames, function names, mappings, source paths)
//!   are interned (see [`interning`]) in the packet that first uses them.
//!
//! Events must come in non-decreasing `ts_ns` order (the capture's order);
//! an event earlier than one already written is skipped and counted in
//! [`RenderStats::out_of_order`].

mod encode;
#[cfg(test)]
mod fake;
mod interning;
mod proto;
#[cfg(test)]
mod tests;
mod tracks;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Write};
use std::ops::ControlFlow;

use self::encode::EventPacket;
use self::interning::Interner;
use self::proto::{
    AnnotationValue, Clock, ClockSnapshot, TracePacket, TracePacketDefaults, TrackDescriptor,
};
use self::tracks::{Names, Tracks};
use crate::capture::model::{Event, FieldValue, RecordKind, RecordSchema, Thread};
use crate::render::filter::Filter;
use crate::render::source::CaptureSource;

/// The one `trusted_packet_sequence_id` of the trace.
const SEQUENCE_ID: u32 = 1;
/// Buffered output is handed to the writer in chunks of about this size.
const FLUSH_BYTES: usize = 256 * 1024;

/// Counts from one render.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RenderStats {
    /// Events read from the capture.
    pub events: u64,
    /// Events the filter dropped.
    pub filtered: u64,
    /// Events skipped because they were earlier than one already written.
    pub out_of_order: u64,
    /// Events whose values did not match their schema, or spans without a
    /// duration (rendered anyway, with what they have).
    pub malformed: u64,
    pub instants: u64,
    pub slices: u64,
    /// Process, thread and record tracks described.
    pub tracks: u64,
    pub packets: u64,
    pub bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("cannot write the Perfetto trace")]
    Write(#[source] io::Error),
    #[error("cannot read the capture's events: {0}")]
    Capture(String),
    #[error("event of record {record}, but the capture has {schemas} record schemas")]
    UnknownRecord { record: u32, schemas: usize },
}

/// Renders the events of `source` that `filter` keeps as a Perfetto trace
/// into `out` (a serialized `Trace` message, written packet by packet).
pub fn render(
    source: &dyn CaptureSource,
    filter: &Filter,
    out: &mut dyn Write,
) -> Result<RenderStats, RenderError> {
    let mut renderer = Renderer::new(source, filter, out);
    renderer.start()?;
    let mut failed = None;
    source
        .for_each_event(&mut |event| match renderer.event(event) {
            Ok(()) => ControlFlow::Continue(()),
            Err(err) => {
                failed = Some(err);
                ControlFlow::Break(())
            }
        })
        .map_err(RenderError::Capture)?;
    if let Some(err) = failed {
        return Err(err);
    }
    renderer.finish()
}

/// Writes `Trace.packet` entries one by one through a buffer.
struct PacketWriter<'w> {
    out: &'w mut dyn Write,
    buf: Vec<u8>,
    packets: u64,
    bytes: u64,
}

impl PacketWriter<'_> {
    fn write(&mut self, packet: &TracePacket) -> Result<(), RenderError> {
        let before = self.buf.len();
        prost::encoding::message::encode(proto::TRACE_PACKET_FIELD, packet, &mut self.buf);
        self.bytes += (self.buf.len() - before) as u64;
        self.packets += 1;
        self.flush_if_full()
    }

    fn write_event(&mut self, event: &EventPacket) -> Result<(), RenderError> {
        self.bytes += encode::put_event_packet(&mut self.buf, event) as u64;
        self.packets += 1;
        self.flush_if_full()
    }

    fn flush_if_full(&mut self) -> Result<(), RenderError> {
        if self.buf.len() >= FLUSH_BYTES {
            self.flush_buffer()?;
        }
        Ok(())
    }

    fn flush_buffer(&mut self) -> Result<(), RenderError> {
        self.out.write_all(&self.buf).map_err(RenderError::Write)?;
        self.buf.clear();
        Ok(())
    }
}

/// A slice END waiting for its time: (end, order of BEGIN, track).
type PendingEnd = Reverse<(u64, u64, u64)>;

struct Renderer<'a> {
    source: &'a dyn CaptureSource,
    filter: &'a Filter,
    writer: PacketWriter<'a>,
    interner: Interner,
    tracks: Tracks,
    ends: BinaryHeap<PendingEnd>,
    begins: u64,
    last_ts_ns: u64,
    /// `CaptureInfo::start_monotonic_ns`: event times are relative to it.
    start_ns: u64,
    /// Reused for every event's annotations, so the hot path does not allocate.
    annotations: Vec<(u64, AnnotationValue)>,
    stats: RenderStats,
}

impl<'a> Renderer<'a> {
    fn new(source: &'a dyn CaptureSource, filter: &'a Filter, out: &'a mut dyn Write) -> Self {
        Renderer {
            source,
            filter,
            writer: PacketWriter {
                out,
                buf: Vec::with_capacity(FLUSH_BYTES + 4096),
                packets: 0,
                bytes: 0,
            },
            interner: Interner::new(),
            tracks: Tracks::new(),
            ends: BinaryHeap::new(),
            begins: 0,
            last_ts_ns: 0,
            start_ns: source.info().start_monotonic_ns,
            annotations: Vec::new(),
            stats: RenderStats::default(),
        }
    }

    /// The first packet: clears incremental state and sets up the clock.
    fn start(&mut self) -> Result<(), RenderError> {
        let info = self.source.info();
        let mut clocks = vec![Clock {
            clock_id: Some(proto::CLOCK_MONOTONIC),
            timestamp: Some(info.start_monotonic_ns),
        }];
        if info.start_realtime_ns != 0 {
            clocks.push(Clock {
                clock_id: Some(proto::CLOCK_REALTIME),
                timestamp: Some(info.start_realtime_ns),
            });
        }
        self.writer.write(&TracePacket {
            trusted_packet_sequence_id: Some(SEQUENCE_ID),
            sequence_flags: Some(proto::SEQ_INCREMENTAL_STATE_CLEARED),
            clock_snapshot: Some(ClockSnapshot {
                clocks,
                primary_trace_clock: Some(proto::CLOCK_MONOTONIC as i32),
            }),
            trace_packet_defaults: Some(TracePacketDefaults {
                timestamp_clock_id: Some(proto::CLOCK_MONOTONIC),
            }),
            ..TracePacket::default()
        })
    }

    fn event(&mut self, event: &Event) -> Result<(), RenderError> {
        let source = self.source;
        self.stats.events += 1;
        let thread = source.thread(event.thread);
        let process_name = source.string(thread.process_name);
        if !self.filter.keeps(event, thread, process_name) {
            self.stats.filtered += 1;
            return Ok(());
        }
        if event.ts_ns < self.last_ts_ns {
            self.stats.out_of_order += 1;
            return Ok(());
        }
        let schemas = source.schemas();
        let schema = schemas
            .get(event.record.0 as usize)
            .ok_or(RenderError::UnknownRecord {
                record: event.record.0,
                schemas: schemas.len(),
            })?;
        self.last_ts_ns = event.ts_ns;
        self.end_slices_until(event.ts_ns)?;
        let (kind, track) = match schema.kind {
            RecordKind::Instant => {
                self.stats.instants += 1;
                let known = self.tracks.known_instant(event.thread, event.record);
                let track = known.unwrap_or_else(|| {
                    let names = Names {
                        thread: source.string(thread.name),
                        process: process_name,
                        record: &schema.name,
                    };
                    self.tracks
                        .instant(event.thread, thread, event.record, &names)
                });
                (proto::TYPE_INSTANT, track)
            }
            RecordKind::Span => {
                let names = Names {
                    thread: source.string(thread.name),
                    process: process_name,
                    record: &schema.name,
                };
                (
                    proto::TYPE_SLICE_BEGIN,
                    self.begin_span(event, thread, &names),
                )
            }
        };
        if self.tracks.has_new() {
            for descriptor in self.tracks.take_new() {
                self.writer.write(&descriptor_packet(descriptor))?;
            }
        }
        self.write_event(event, schema, kind, track)
    }

    /// Places a span on a lane track and queues its END.
    fn begin_span(&mut self, event: &Event, thread: &Thread, names: &Names) -> u64 {
        self.stats.slices += 1;
        let duration_ns = event.duration_ns.unwrap_or_else(|| {
            self.stats.malformed += 1;
            0
        });
        let end_ns = event.ts_ns.saturating_add(duration_ns);
        let track = self.tracks.span(
            event.thread,
            thread,
            event.record,
            (event.ts_ns, end_ns),
            names,
        );
        self.ends.push(Reverse((end_ns, self.begins, track)));
        self.begins += 1;
        track
    }

    /// Writes an instant or slice BEGIN with its annotations and stack,
    /// carrying whatever it newly interned.
    fn write_event(
        &mut self,
        event: &Event,
        schema: &RecordSchema,
        kind: i32,
        track: u64,
    ) -> Result<(), RenderError> {
        let source = self.source;
        let name_iid = self.interner.record(source, event.record).name;
        let callstack_iid = event.stack.map(|id| self.interner.callstack(source, id));
        if event.values.len() != schema.fields.len() {
            self.stats.malformed += 1;
        }
        self.annotations.clear();
        for (i, value) in event.values.iter().take(schema.fields.len()).enumerate() {
            let value = match *value {
                FieldValue::Int(v) => AnnotationValue::Int(v),
                FieldValue::UInt(v) => AnnotationValue::Uint(v),
                FieldValue::Str(id) => {
                    AnnotationValue::StringIid(self.interner.string_value(source, id))
                }
                FieldValue::Thread(id) => AnnotationValue::Uint(source.thread(id).tid.into()),
            };
            let name_iid = self.interner.record(source, event.record).fields[i];
            self.annotations.push((name_iid, value));
        }
        let interned = self.interner.take_pending();
        self.writer.write_event(&EventPacket {
            timestamp: self.start_ns.saturating_add(event.ts_ns),
            kind,
            track_uuid: track,
            name_iid: Some(name_iid),
            callstack_iid,
            annotations: &self.annotations,
            interned: interned.as_ref(),
            ..EventPacket::default()
        })
    }

    /// Writes the slice ENDs due at or before `ts_ns`.
    fn end_slices_until(&mut self, ts_ns: u64) -> Result<(), RenderError> {
        while let Some(&Reverse((end_ns, _, track))) = self.ends.peek() {
            if end_ns > ts_ns {
                break;
            }
            self.ends.pop();
            self.writer.write_event(&EventPacket {
                timestamp: self.start_ns.saturating_add(end_ns),
                kind: proto::TYPE_SLICE_END,
                track_uuid: track,
                ..EventPacket::default()
            })?;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<RenderStats, RenderError> {
        self.end_slices_until(u64::MAX)?;
        self.writer.flush_buffer()?;
        self.writer.out.flush().map_err(RenderError::Write)?;
        self.stats.tracks = self.tracks.count() as u64;
        self.stats.packets = self.writer.packets;
        self.stats.bytes = self.writer.bytes;
        Ok(self.stats)
    }
}

fn descriptor_packet(descriptor: TrackDescriptor) -> TracePacket {
    TracePacket {
        trusted_packet_sequence_id: Some(SEQUENCE_ID),
        track_descriptor: Some(descriptor),
        ..TracePacket::default()
    }
}
