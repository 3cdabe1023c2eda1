//! Perfetto renderer (`-T`): a [`Capture`] → a Perfetto protobuf trace,
//! streamed packet by packet.
//!
//! Layout of the output, on the main packet sequence (`SEQUENCE_ID`) but for
//! on-CPU slices, which go on their track's own sequence ([`sequences`]):
//! - the first packet clears incremental state, declares the capture's
//!   `CLOCK_MONOTONIC` as the trace clock (with the realtime clock beside it
//!   in a `ClockSnapshot`) and, equal to it at the start, an incremental
//!   sequence clock (`CLOCK_INCREMENTAL`) that is the sequence's default
//!   timestamp clock: every packet's `timestamp` is the time since the
//!   previous timestamped packet (see [`PacketWriter`]);
//! - tracks (see [`tracks`]): process → thread → one child track per record,
//!   each described by a `TrackDescriptor` packet just before its first event;
//! - instants are `TYPE_INSTANT`, spans a `TYPE_SLICE_BEGIN` at the start and
//!   a `TYPE_SLICE_END` at the end. ENDs wait in a queue ordered by time and
//!   are written as soon as the next event is not earlier, so the sequence's
//!   timestamps never decrease; spans that overlap without nesting go to
//!   sibling lane tracks, so each END closes the right slice;
//! - fields are debug annotations; event names, annotation names, string
//!   values and callstacks (frames, function names, mappings, source paths)
//!   are interned (see [`interning`]) in the packet that first uses them;
//! - the built-in trackers' records are rendered natively (see [`system`]):
//!   on-CPU slices on thread tracks with IRQs nested in them, wake, fork and
//!   preemption flows, PMU counter tracks ([`counters`]), and the kernel's own
//!   scheduling view as `compact_sched` bundles ([`ftrace`]) with a process
//!   tree ([`process_tree`]) written first.
//!
//! Events must come in non-decreasing `ts_ns` order (the capture's order);
//! an event earlier than one already written is skipped and counted in
//! `RenderStats::out_of_order`.

mod counters;
mod encode;
#[cfg(test)]
mod fake;
mod ftrace;
mod interning;
mod process_tree;
mod proto;
mod sched;
mod sequences;
mod system;
#[cfg(test)]
mod system_tests;
#[cfg(test)]
mod tests;
mod tracks;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::ControlFlow;
use std::path::Path;

use self::encode::EventPacket;
use self::ftrace::CompactSchedWriter;
use self::interning::Interner;
use self::proto::{
    AnnotationValue, Clock, ClockSnapshot, TracePacket, TracePacketDefaults, TrackDescriptor,
};
use self::sched::Sched;
use self::sequences::Sequences;
use self::tracks::{Names, Tracks};
use crate::capture::model::{Event, FieldValue, RecordKind, RecordSchema, Thread, ThreadId};
use crate::render::filter::Filter;
use crate::render::source::CaptureSource;
use crate::render::{Capture, Captures, Destination, Output, Render, RenderError};
use crate::tracking::records::{Delta, SwitchReadings};
use crate::tracking::records::{TrackerSchema, Trackers};

/// The `trusted_packet_sequence_id` of the main sequence.
const SEQUENCE_ID: u32 = 1;
/// Buffered output is handed to the writer in chunks of about this size.
const FLUSH_BYTES: usize = 256 * 1024;

/// Counts from one render.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RenderStats {
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

/// What the Perfetto trace is made with: nothing to choose yet, every
/// trace has the layout described above.
#[derive(Clone, Debug, Default)]
pub struct Options {}

/// The Perfetto renderer.
#[derive(Clone, Debug, Default)]
pub struct Perfetto {
    pub options: Options,
}

impl Render for Perfetto {
    fn render(&self, captures: &Captures<'_>, to: &Destination) -> Result<(), RenderError> {
        let capture = captures.single("the Perfetto trace (-T)")?;
        let mut out = to.open()?;
        write_trace(capture, &mut out)?;
        Ok(())
    }
}

/// Writes the events of `capture` that its filter keeps as a Perfetto trace
/// into `out` (a serialized `Trace` message, written packet by packet).
pub(crate) fn write_trace(
    capture: &Capture<'_>,
    out: &mut Output<'_>,
) -> Result<RenderStats, RenderError> {
    let source = capture.source;
    let trackers = Trackers::new(source.schemas());
    let mut renderer = Renderer::new(capture, &trackers, out);
    renderer.start()?;
    let mut failed = None;
    source.for_each_event(&mut |event| match renderer.event(event) {
        Ok(()) => ControlFlow::Continue(()),
        Err(err) => {
            failed = Some(err);
            ControlFlow::Break(())
        }
    })?;
    if let Some(err) = failed {
        return Err(err);
    }
    renderer.finish()
}

/// Writes `Trace.packet` entries one by one through a buffer, turning their
/// absolute timestamps into deltas on the incremental clock.
struct PacketWriter<'w, 'o> {
    out: &'w mut Output<'o>,
    buf: Vec<u8>,
    packets: u64,
    bytes: u64,
    /// By sequence id: its incremental clock, the last timestamp written
    /// (absolute, ns).
    clocks: Vec<u64>,
}

impl PacketWriter<'_, '_> {
    fn write(&mut self, packet: &TracePacket) -> Result<(), RenderError> {
        let before = self.buf.len();
        let sequence = packet.trusted_packet_sequence_id.unwrap_or(SEQUENCE_ID);
        match packet.timestamp {
            Some(ts) => {
                let delta = TracePacket {
                    timestamp: Some(self.advance(sequence, ts)),
                    ..packet.clone()
                };
                prost::encoding::message::encode(proto::TRACE_PACKET_FIELD, &delta, &mut self.buf);
            }
            None => {
                prost::encoding::message::encode(proto::TRACE_PACKET_FIELD, packet, &mut self.buf)
            }
        }
        self.bytes += (self.buf.len() - before) as u64;
        self.packets += 1;
        self.flush_if_full()
    }

    fn write_event(&mut self, event: &EventPacket) -> Result<(), RenderError> {
        let delta = EventPacket {
            timestamp: self.advance(event.sequence_id, event.timestamp),
            ..*event
        };
        self.bytes += encode::put_event_packet(&mut self.buf, &delta) as u64;
        self.packets += 1;
        self.flush_if_full()
    }

    /// Sets the incremental clock of `sequence` to `ts_ns`.
    fn set_clock(&mut self, sequence: u32, ts_ns: u64) {
        let index = sequence as usize;
        if self.clocks.len() <= index {
            self.clocks.resize(index + 1, 0);
        }
        self.clocks[index] = ts_ns;
    }

    /// Moves the incremental clock of `sequence` to `ts_ns`, returning the
    /// delta. The renderer writes in time order (it skips events that would
    /// go back).
    fn advance(&mut self, sequence: u32, ts_ns: u64) -> u64 {
        let clock = &mut self.clocks[sequence as usize];
        debug_assert!(ts_ns >= *clock, "timestamps never decrease");
        let delta = ts_ns.saturating_sub(*clock);
        *clock = (*clock).max(ts_ns);
        delta
    }

    fn flush_if_full(&mut self) -> Result<(), RenderError> {
        if self.buf.len() >= FLUSH_BYTES {
            self.flush_buffer()?;
        }
        Ok(())
    }

    fn flush_buffer(&mut self) -> Result<(), RenderError> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
}

/// A slice END, or a counter value, waiting for its time: (time, order of
/// queueing, track, counter value).
type PendingEnd = Reverse<(u64, u64, u64, Option<i64>)>;

struct Renderer<'a, 'o> {
    source: &'a dyn CaptureSource,
    /// The capture's path, for messages.
    path: &'a Path,
    filter: &'a Filter,
    trackers: &'a Trackers,
    writer: PacketWriter<'a, 'o>,
    interner: Interner,
    tracks: Tracks,
    ends: BinaryHeap<PendingEnd>,
    begins: u64,
    last_ts_ns: u64,
    /// `CaptureInfo::start_monotonic_ns`: event times are relative to it.
    start_ns: u64,
    /// Reused for every event's annotations, so the hot path does not allocate.
    annotations: Vec<(u64, AnnotationValue)>,
    /// Reused for the flows leaving and ending at the next packet.
    flows_out: Vec<u64>,
    flows_in: Vec<u64>,
    sched: Sched,
    sequences: Sequences,
    switch_readings: SwitchReadings,
    /// Reused for the PMU deltas of one slice: (counter, delta).
    deltas: Vec<(usize, Delta)>,
    compact_sched: CompactSchedWriter,
    /// `pmu:C` by counter: the names of the delta annotations, and their
    /// iids once interned (0 before).
    pmu_names: Vec<String>,
    pmu_iids: Vec<u64>,
    /// By `ThreadId`: 0 not decided yet, 1 selected, 2 not.
    selected: Vec<u8>,
    stats: RenderStats,
}

/// What [`Renderer::emit`] writes besides the annotations and flows.
struct Emit {
    ts_ns: u64,
    kind: i32,
    track: u64,
    name_iid: Option<u64>,
    callstack_iid: Option<u64>,
}

/// The sequence a packet goes on: the main one, or its track's own (see
/// [`sequences`]), where the name and annotation names it uses are defined.
#[derive(Clone, Copy)]
enum On {
    Main,
    Track(u32),
}

impl<'a, 'o> Renderer<'a, 'o> {
    fn new(capture: &'a Capture<'a>, trackers: &'a Trackers, out: &'a mut Output<'o>) -> Self {
        let source = capture.source;
        Renderer {
            source,
            path: capture.path,
            filter: &capture.filter,
            trackers,
            writer: PacketWriter {
                out,
                buf: Vec::with_capacity(FLUSH_BYTES + 4096),
                packets: 0,
                bytes: 0,
                clocks: Vec::new(),
            },
            interner: Interner::new(),
            tracks: Tracks::new(source),
            ends: BinaryHeap::new(),
            begins: 0,
            last_ts_ns: 0,
            start_ns: source.info().start_monotonic_ns,
            annotations: Vec::new(),
            flows_out: Vec::new(),
            flows_in: Vec::new(),
            sched: Sched::default(),
            sequences: Sequences::default(),
            switch_readings: SwitchReadings::default(),
            deltas: Vec::new(),
            compact_sched: CompactSchedWriter::default(),
            pmu_names: trackers
                .counters
                .iter()
                .map(|c| format!("pmu:{c}"))
                .collect(),
            pmu_iids: vec![0; trackers.counters.len()],
            selected: Vec::new(),
            stats: RenderStats::default(),
        }
    }

    /// The first packet: clears incremental state and sets up the clock.
    fn start(&mut self) -> Result<(), RenderError> {
        let info = self.source.info();
        let clock = |id, timestamp| Clock {
            clock_id: Some(id),
            timestamp: Some(timestamp),
            is_incremental: None,
        };
        let mut clocks = vec![
            clock(proto::CLOCK_MONOTONIC, info.start_monotonic_ns),
            Clock {
                is_incremental: Some(true),
                ..clock(proto::CLOCK_INCREMENTAL, info.start_monotonic_ns)
            },
        ];
        self.writer.set_clock(SEQUENCE_ID, info.start_monotonic_ns);
        if info.start_realtime_ns != 0 {
            clocks.push(clock(proto::CLOCK_REALTIME, info.start_realtime_ns));
        }
        if self.trackers.any() {
            // compact_sched timestamps are in ftrace's clock, BOOTTIME by
            // default; ours are MONOTONIC, so the two are declared equal.
            clocks.push(clock(proto::CLOCK_BOOTTIME, info.start_monotonic_ns));
        }
        self.writer.write(&TracePacket {
            trusted_packet_sequence_id: Some(SEQUENCE_ID),
            sequence_flags: Some(proto::SEQ_INCREMENTAL_STATE_CLEARED),
            clock_snapshot: Some(ClockSnapshot {
                clocks,
                primary_trace_clock: Some(proto::CLOCK_MONOTONIC as i32),
            }),
            trace_packet_defaults: Some(TracePacketDefaults {
                timestamp_clock_id: Some(proto::CLOCK_INCREMENTAL),
                track_event_defaults: None,
            }),
            ..TracePacket::default()
        })?;
        if self.trackers.any() {
            let (source, filter) = (self.source, self.filter);
            let selected = |thread: &Thread| filter.selects_thread(thread, source);
            let tree = process_tree::process_tree(source, &selected, info.start_monotonic_ns);
            self.writer.write(&process_tree::system_info(source))?;
            self.writer.write(&tree)?;
        }
        Ok(())
    }

    fn event(&mut self, event: &Event) -> Result<(), RenderError> {
        let source = self.source;
        self.stats.events += 1;
        let trackers = self.trackers;
        let tracker = trackers.get(event);
        if !self.filter.keeps(event, source) {
            self.stats.filtered += 1;
            return Ok(());
        }
        if event.ts_ns < self.last_ts_ns {
            self.stats.out_of_order += 1;
            return Ok(());
        }
        let schemas = source.schemas();
        let schema =
            schemas
                .get(event.record.0 as usize)
                .ok_or_else(|| RenderError::UnknownRecord {
                    path: self.path.to_path_buf(),
                    record: event.record.0,
                    schemas: schemas.len(),
                })?;
        self.last_ts_ns = event.ts_ns;
        self.end_slices_until(event.ts_ns)?;
        match tracker {
            Some(tracker) => self.tracker_event(event, schema, tracker),
            None => self.user_event(event, schema),
        }
    }

    /// An event of a user record: on its record's child track of the thread.
    fn user_event(&mut self, event: &Event, schema: &RecordSchema) -> Result<(), RenderError> {
        let source = self.source;
        let thread = source.thread(event.thread);
        let process_name = source.string(thread.process_name);
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
        self.write_new_tracks()?;
        let name_iid = self.interner.record(source, event.record).name;
        self.write_event(event, schema, (kind, track), name_iid)
    }

    /// Writes the descriptors of tracks created since the last call.
    fn write_new_tracks(&mut self) -> Result<(), RenderError> {
        if self.tracks.has_new() {
            for descriptor in self.tracks.take_new() {
                self.writer.write(&descriptor_packet(descriptor))?;
            }
        }
        Ok(())
    }

    /// Whether thread `id` gets tracks.
    fn selected(&mut self, id: ThreadId) -> bool {
        let index = id.0 as usize;
        if self.selected.len() <= index {
            self.selected.resize(index + 1, 0);
        }
        if self.selected[index] == 0 {
            let thread = self.source.thread(id);
            self.selected[index] = if self.filter.selects_thread(thread, self.source) {
                1
            } else {
                2
            };
        }
        self.selected[index] == 1
    }

    /// A span's duration; 0, counted as malformed, when it has none.
    fn span_duration(&mut self, event: &Event) -> u64 {
        event.duration_ns.unwrap_or_else(|| {
            self.stats.malformed += 1;
            0
        })
    }

    /// Places a span on a lane track and queues its END.
    fn begin_span(&mut self, event: &Event, thread: &Thread, names: &Names) -> u64 {
        self.stats.slices += 1;
        let end_ns = event.ts_ns.saturating_add(self.span_duration(event));
        let track = self.tracks.span(
            event.thread,
            thread,
            event.record,
            (event.ts_ns, end_ns),
            names,
        );
        self.ends.push(Reverse((end_ns, self.begins, track, None)));
        self.begins += 1;
        track
    }

    /// Writes an instant or slice BEGIN named `name_iid` with the event's
    /// fields (but PMU readings) as annotations, and its stack.
    fn write_event(
        &mut self,
        event: &Event,
        schema: &RecordSchema,
        (kind, track): (i32, u64),
        name_iid: u64,
    ) -> Result<(), RenderError> {
        self.field_annotations(event, schema, self.trackers.get(event));
        self.emit_event(event, (kind, track), name_iid)
    }

    /// Writes `event` with the annotations gathered so far and its stack.
    fn emit_event(
        &mut self,
        event: &Event,
        (kind, track): (i32, u64),
        name_iid: u64,
    ) -> Result<(), RenderError> {
        let callstack_iid = event
            .stack
            .map(|id| self.interner.callstack(self.source, id));
        self.emit(Emit {
            ts_ns: event.ts_ns,
            kind,
            track,
            name_iid: Some(name_iid),
            callstack_iid,
        })
    }

    /// Adds the event's fields to the annotations, but for PMU readings.
    fn field_annotations(
        &mut self,
        event: &Event,
        schema: &RecordSchema,
        tracker: Option<&TrackerSchema>,
    ) {
        let source = self.source;
        if event.values.len() != schema.fields.len() {
            self.stats.malformed += 1;
        }
        for (i, value) in event.values.iter().take(schema.fields.len()).enumerate() {
            if tracker.is_some_and(|t| t.is_pmu_field(i)) {
                continue;
            }
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
    }

    /// Writes one event packet on the main sequence (see [`Self::emit_on`]).
    fn emit(&mut self, e: Emit) -> Result<(), RenderError> {
        self.emit_on(On::Main, e)
    }

    /// Writes one event packet with the annotations and flows gathered for
    /// it and whatever was newly interned, then clears them.
    fn emit_on(&mut self, on: On, e: Emit) -> Result<(), RenderError> {
        let (sequence_id, track_uuid, interned) = match on {
            On::Main => (SEQUENCE_ID, Some(e.track), self.interner.take_pending()),
            On::Track(id) => (id, None, self.sequences.take_pending()),
        };
        let result = self.writer.write_event(&EventPacket {
            sequence_id,
            timestamp: self.start_ns.saturating_add(e.ts_ns),
            kind: e.kind,
            track_uuid,
            name_iid: e.name_iid,
            callstack_iid: e.callstack_iid,
            annotations: &self.annotations,
            interned: interned.as_ref(),
            flow_ids: &self.flows_out,
            terminating_flow_ids: &self.flows_in,
            ..EventPacket::default()
        });
        self.annotations.clear();
        self.flows_out.clear();
        self.sched.ended(&self.flows_in);
        self.flows_in.clear();
        result
    }

    /// Writes the slice ENDs due at or before `ts_ns`.
    fn end_slices_until(&mut self, ts_ns: u64) -> Result<(), RenderError> {
        while let Some(&Reverse((end_ns, _, track, value))) = self.ends.peek() {
            if end_ns > ts_ns {
                break;
            }
            self.ends.pop();
            self.writer.write_event(&EventPacket {
                sequence_id: SEQUENCE_ID,
                timestamp: self.start_ns.saturating_add(end_ns),
                kind: match value {
                    Some(_) => proto::TYPE_COUNTER,
                    None => proto::TYPE_SLICE_END,
                },
                track_uuid: Some(track),
                counter_value: value,
                ..EventPacket::default()
            })?;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<RenderStats, RenderError> {
        self.finish_sched()?;
        self.writer.flush_buffer()?;
        self.writer.out.flush()?;
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
