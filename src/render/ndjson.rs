//! NDJSON renderer (`-J`): a [`Capture`] → one JSON object per line: a header, each stack once before its first use, then one line per
//! kept event. The line types are described by [`json_schema`].
//!
//! JSON is written by hand into one reused buffer (no value trees), per-thread
//! and per-probe fragments are escaped once, and only stacks are remembered, so
//! memory does not grow with the number of events and the same capture always
//! gives the same bytes.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use crate::capture::model::{
    DropReason, Event, FieldType, FieldValue, FrameAddr, FrameId, RecordId, RecordKind,
    RecordOrigin, StackId, ThreadId,
};
use crate::render::source::CaptureSource;
use crate::render::{Capture, Captures, Destination, Output, Render, RenderError};
use crate::tracking::records::{Trackers, is_internal};

mod json;
#[cfg(test)]
mod tests;
mod tracker_lines;

use self::json::{write_i64, write_key_str, write_seconds, write_str, write_u64};

/// Version of the line format, in the header's `version`.
pub const FORMAT_VERSION: u32 = 1;

/// The JSON Schema (draft 2020-12) of one NDJSON line, for `--json-schema`.
pub fn json_schema() -> &'static str {
    include_str!("../../docs/ndjson.schema.json")
}

/// What the NDJSON lines are made with: nothing to choose yet, every line
/// type is described by [`json_schema`].
#[derive(Clone, Debug, Default)]
pub struct Options {}

/// The NDJSON renderer.
#[derive(Clone, Debug, Default)]
pub struct Ndjson {
    pub options: Options,
}

impl Render for Ndjson {
    fn render(&self, captures: &Captures<'_>, to: &Destination) -> Result<(), RenderError> {
        let capture = captures.single("NDJSON (-J)")?;
        let mut out = to.open()?;
        write_lines(capture, &mut out)?;
        Ok(())
    }
}

/// Writes `capture` as NDJSON to `out`, keeping the events its filter keeps.
/// Returns the number of event lines written. A read failure part way
/// through is an error after the lines before it were written.
pub(crate) fn write_lines(capture: &Capture<'_>, out: &mut Output<'_>) -> Result<u64, RenderError> {
    let (source, filter) = (capture.source, &capture.filter);
    let trackers = Trackers::new(source.schemas());
    let mut writer = LineWriter::new(source, &trackers, out);
    writer.header()?;
    let mut written = 0u64;
    let mut failure = None;
    let read = source.for_each_event(&mut |event| {
        // Events come in time order: nothing after the window's end is kept.
        if filter.end_ns.is_some_and(|end| event.ts_ns >= end) {
            return ControlFlow::Break(());
        }
        if !filter.keeps(event, source) {
            return ControlFlow::Continue(());
        }
        match writer.event(event) {
            Ok(()) => {
                written += 1;
                ControlFlow::Continue(())
            }
            Err(error) => {
                failure = Some(error);
                ControlFlow::Break(())
            }
        }
    });
    if let Some(error) = failure {
        return Err(error);
    }
    writer.flush()?;
    read?;
    Ok(written)
}

/// Flush the buffer to the output past this size.
const FLUSH_AT: usize = 64 * 1024;

/// Per-probe fragments escaped once: `,"probe":"name"` and each `"field":`.
struct ProbeText {
    probe: Vec<u8>,
    field_keys: Vec<Vec<u8>>,
}

struct LineWriter<'a, 'o> {
    source: &'a dyn CaptureSource,
    out: &'a mut Output<'o>,
    buf: Vec<u8>,
    probes: Vec<ProbeText>,
    /// `{"tid":..,"pid":..,"comm":..,"pcomm":..}` by `ThreadId`, made on first use.
    tasks: Vec<Option<Box<[u8]>>>,
    /// Whether the stack line was written, by `StackId`.
    stacks_written: Vec<bool>,
    trackers: &'a Trackers,
}

impl<'a, 'o> LineWriter<'a, 'o> {
    fn new(source: &'a dyn CaptureSource, trackers: &'a Trackers, out: &'a mut Output<'o>) -> Self {
        let probes = source
            .schemas()
            .iter()
            .map(|schema| {
                let mut probe = br#","probe":"#.to_vec();
                write_str(&mut probe, schema.name.as_bytes());
                let field_keys = (schema.fields.iter())
                    .map(|field| {
                        let mut key = Vec::new();
                        write_str(&mut key, field.name.as_bytes());
                        key.push(b':');
                        key
                    })
                    .collect();
                ProbeText { probe, field_keys }
            })
            .collect();
        LineWriter {
            source,
            out,
            buf: Vec::with_capacity(FLUSH_AT + 4096),
            probes,
            tasks: vec![None; source.threads().len()],
            stacks_written: vec![false; source.stacks_len()],
            trackers,
        }
    }

    fn header(&mut self) -> Result<(), RenderError> {
        let source = self.source;
        let info = source.info();
        let buf = &mut self.buf;
        buf.extend_from_slice(br#"{"type":"header","version":"#);
        write_u64(buf, FORMAT_VERSION.into());
        write_key_str(buf, "wprof", &info.wprof_version);
        write_key_str(buf, "host", &info.hostname);
        write_key_str(buf, "kernel", &info.kernel_release);
        buf.extend_from_slice(br#","cpus":"#);
        write_u64(buf, info.cpus.into());
        buf.extend_from_slice(br#","start_realtime_ns":"#);
        write_u64(buf, info.start_realtime_ns);
        buf.extend_from_slice(br#","duration_s":"#);
        match source.stats() {
            Some(stats) => write_seconds(buf, stats.duration_ns),
            None => buf.extend_from_slice(b"null"),
        }
        buf.extend_from_slice(br#","command_line":["#);
        for (index, arg) in info.command_line.iter().enumerate() {
            if index > 0 {
                buf.push(b',');
            }
            write_str(buf, arg.as_bytes());
        }
        buf.push(b']');
        write_key_str(buf, "script", &info.script);
        write_key_str(buf, "script_name", &info.script_name);
        self.header_settings();
        self.header_probes();
        self.header_losses();
        self.buf.extend_from_slice(b"}\n");
        self.flush_if_full()
    }

    /// The system-tracking settings: `features`, `stacks`, `pmu`, `filters`
    /// (lists of strings), `prepare` and `activate` (strings or null).
    fn header_settings(&mut self) {
        let settings = &self.source.info().settings;
        let buf = &mut self.buf;
        let lists = [
            ("features", &settings.features),
            ("stacks", &settings.stacks),
            ("pmu", &settings.pmu),
            ("filters", &settings.filters),
        ];
        for (key, items) in lists {
            buf.extend_from_slice(b",\"");
            buf.extend_from_slice(key.as_bytes());
            buf.extend_from_slice(b"\":[");
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    buf.push(b',');
                }
                write_str(buf, item.as_bytes());
            }
            buf.push(b']');
        }
        for (key, spec) in [
            ("prepare", &settings.prepare),
            ("activate", &settings.activate),
        ] {
            match spec {
                Some(spec) => write_key_str(buf, key, spec),
                None => {
                    buf.extend_from_slice(b",\"");
                    buf.extend_from_slice(key.as_bytes());
                    buf.extend_from_slice(b"\":null");
                }
            }
        }
    }

    fn header_probes(&mut self) {
        let buf = &mut self.buf;
        buf.extend_from_slice(br#","probes":["#);
        let listed = (self.source.schemas().iter().enumerate()).filter(|(_, s)| !is_internal(s));
        for (index, (id, schema)) in listed.enumerate() {
            if index > 0 {
                buf.push(b',');
            }
            buf.extend_from_slice(br#"{"id":"#);
            write_u64(buf, id as u64);
            write_key_str(buf, "probe", &schema.probe);
            write_key_str(buf, "name", &schema.name);
            buf.extend_from_slice(match schema.origin {
                RecordOrigin::Script => br#","origin":"script""#,
                RecordOrigin::Tracker => br#","origin":"tracker""#,
            });
            buf.extend_from_slice(match schema.kind {
                RecordKind::Instant => br#","kind":"instant","fields":["#,
                RecordKind::Span => br#","kind":"span","fields":["#,
            });
            for (index, field) in schema.fields.iter().enumerate() {
                if index > 0 {
                    buf.push(b',');
                }
                buf.extend_from_slice(br#"{"name":"#);
                write_str(buf, field.name.as_bytes());
                buf.extend_from_slice(match field.ty {
                    FieldType::Int => br#","type":"int"}"#,
                    FieldType::UInt => br#","type":"uint"}"#,
                    FieldType::Str => br#","type":"str"}"#,
                    FieldType::Thread => br#","type":"thread"}"#,
                });
            }
            buf.extend_from_slice(br#"],"stack":"#);
            buf.extend_from_slice(if schema.has_stack { b"true" } else { b"false" });
            buf.extend_from_slice(br#","dropped":"#);
            let counted = self.source.stats().filter(|s| s.counts_per_record());
            match counted {
                Some(stats) => write_drops(buf, stats.drops_of(RecordId(id as u32))),
                None => buf.extend_from_slice(b"null"),
            }
            buf.push(b'}');
        }
        buf.push(b']');
    }

    /// `"drops"` (by reason) and `"damage"`, `null` when unknown or none.
    fn header_losses(&mut self) {
        let buf = &mut self.buf;
        buf.extend_from_slice(br#","drops":"#);
        match self.source.stats() {
            Some(stats) => write_drops(buf, stats.drops.iter().copied()),
            None => buf.extend_from_slice(b"null"),
        }
        // The internal records are not listed as probes; their losses are
        // here, so that `drops` is still the sum of what is listed.
        buf.extend_from_slice(br#","internal_dropped":"#);
        let counted = self.source.stats().filter(|s| s.counts_per_record());
        match counted {
            Some(stats) => {
                let schemas = self.source.schemas();
                let internal =
                    |record: RecordId| (schemas.get(record.0 as usize)).is_some_and(is_internal);
                let mut sums: BTreeMap<DropReason, u64> = BTreeMap::new();
                for drop in stats.record_drops.iter().filter(|d| internal(d.record)) {
                    let sum = sums.entry(drop.reason).or_default();
                    *sum = sum.saturating_add(drop.count);
                }
                write_drops(buf, sums.into_iter());
            }
            None => buf.extend_from_slice(b"null"),
        }
        buf.extend_from_slice(br#","damage":"#);
        match self.source.damage() {
            Some(damage) => write_str(buf, damage.as_bytes()),
            None => buf.extend_from_slice(b"null"),
        }
    }

    fn event(&mut self, event: &Event) -> Result<(), RenderError> {
        if let Some(tracker) = self.trackers.get(event) {
            return self.tracker_event(event, tracker);
        }
        if let Some(stack) = event.stack {
            self.stack_once(stack);
        }
        self.task(event.thread);
        let buf = &mut self.buf;
        buf.extend_from_slice(br#"{"type":"event","ts":"#);
        write_seconds(buf, event.ts_ns);
        buf.extend_from_slice(br#","cpu":"#);
        write_u64(buf, event.cpu.into());
        buf.extend_from_slice(br#","task":"#);
        self.push_task(event.thread);
        let buf = &mut self.buf;
        let probe = self.probes.get(event.record.0 as usize);
        match probe {
            Some(probe) => buf.extend_from_slice(&probe.probe),
            None => buf.extend_from_slice(br#","probe":null"#),
        }
        if let Some(duration_ns) = event.duration_ns {
            buf.extend_from_slice(br#","dur":"#);
            write_seconds(buf, duration_ns);
        }
        buf.extend_from_slice(br#","fields":{"#);
        let keys = probe.map_or(&[][..], |probe| &probe.field_keys);
        for (index, (key, value)) in keys.iter().zip(&event.values).enumerate() {
            if index > 0 {
                buf.push(b',');
            }
            buf.extend_from_slice(key);
            match *value {
                FieldValue::Int(value) => write_i64(buf, value),
                FieldValue::UInt(value) => write_u64(buf, value),
                FieldValue::Str(id) => write_str(buf, self.source.string(id).as_bytes()),
                FieldValue::Thread(id) => write_u64(buf, self.source.thread(id).tid.into()),
            }
        }
        buf.push(b'}');
        self.push_stack(event);
        self.buf.extend_from_slice(b"}\n");
        self.flush_if_full()
    }

    /// Appends `,"stack":ID` and how its user part was walked, if any.
    fn push_stack(&mut self, event: &Event) {
        let Some(stack) = event.stack else {
            return;
        };
        let buf = &mut self.buf;
        buf.extend_from_slice(br#","stack":"#);
        write_u64(buf, stack.0.into());
        let Some(walk) = event.walk else {
            return;
        };
        let mut parts = Vec::with_capacity(3);
        if let Some(unwinder) = walk.unwinder {
            parts.push(("unwinder", unwinder.name()));
        }
        if let Some(ending) = walk.ending {
            parts.push(("ending", ending.name()));
        }
        if walk.kernel_truncated {
            parts.push(("kernel", "truncated"));
        }
        buf.extend_from_slice(br#","unwind":{"#);
        for (i, (key, value)) in parts.into_iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            for part in ["\"", key, "\":\"", value, "\""] {
                buf.extend_from_slice(part.as_bytes());
            }
        }
        buf.push(b'}');
    }

    /// Appends the `task` object of `thread`, made by `task` before.
    fn push_task(&mut self, thread: ThreadId) {
        let task = self.tasks[thread.0 as usize].as_deref();
        self.buf
            .extend_from_slice(task.expect("task text made before"));
    }

    /// Makes the `task` object of `thread` if this is its first event.
    fn task(&mut self, thread: ThreadId) {
        let index = thread.0 as usize;
        if index >= self.tasks.len() {
            self.tasks.resize(index + 1, None);
        }
        if self.tasks[index].is_some() {
            return;
        }
        let thread = self.source.thread(thread);
        let mut text = br#"{"tid":"#.to_vec();
        write_u64(&mut text, thread.tid.into());
        text.extend_from_slice(br#","pid":"#);
        write_u64(&mut text, thread.pid.into());
        write_key_str(&mut text, "comm", self.source.string(thread.name));
        write_key_str(&mut text, "pcomm", self.source.string(thread.process_name));
        text.push(b'}');
        self.tasks[index] = Some(text.into_boxed_slice());
    }

    /// Writes the stack's line unless it was written already.
    fn stack_once(&mut self, id: StackId) {
        let index = id.0 as usize;
        if index >= self.stacks_written.len() {
            self.stacks_written.resize(index + 1, false);
        }
        if std::mem::replace(&mut self.stacks_written[index], true) {
            return;
        }
        let buf = &mut self.buf;
        buf.extend_from_slice(br#"{"type":"stack","id":"#);
        write_u64(buf, id.0.into());
        buf.extend_from_slice(br#","frames":["#);
        let mut lines = Vec::new();
        for &frame in &self.source.stack(id).frames {
            frame_lines(self.source, frame, &mut lines);
        }
        for (index, line) in lines.iter().enumerate() {
            if index > 0 {
                buf.push(b',');
            }
            write_str(buf, line.as_bytes());
        }
        buf.extend_from_slice(b"]}\n");
    }

    fn flush_if_full(&mut self) -> Result<(), RenderError> {
        if self.buf.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), RenderError> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.out.flush()
    }
}

/// `{"ring_buffer_full":3,...}`: counts by reason.
fn write_drops(buf: &mut Vec<u8>, drops: impl Iterator<Item = (DropReason, u64)>) {
    buf.push(b'{');
    for (index, (reason, count)) in drops.enumerate() {
        if index > 0 {
            buf.push(b',');
        }
        write_str(buf, drop_reason_key(reason).as_bytes());
        buf.push(b':');
        write_u64(buf, count);
    }
    buf.push(b'}');
}

/// The header's `drops` key for `reason`.
fn drop_reason_key(reason: DropReason) -> &'static str {
    match reason {
        DropReason::RingBufferFull => "ring_buffer_full",
        DropReason::StackLost => "stack_lost",
        DropReason::UnmatchedSpanEnd => "unmatched_span_end",
    }
}

/// Appends the text of one frame, innermost first: functions inlined at the
/// address (marked `(inlined)`), then `[U] func+0x1a (file.c:12) libfoo.so`.
/// Unresolved: `[K] 0xffff..`, `[U] libfoo.so+0x1234`, or `[U] 0x7f..`.
fn frame_lines(source: &dyn CaptureSource, frame: FrameId, lines: &mut Vec<String>) {
    let (tag, module) = match *source.frame(frame) {
        FrameAddr::Kernel { .. } => ("[K]", None),
        FrameAddr::User { module, .. } => ("[U]", Some(base_name(source.string(module)))),
        FrameAddr::UnknownUser { .. } => ("[U]", None),
    };
    let module_suffix = module
        .map(|module| format!(" {module}"))
        .unwrap_or_default();
    let symbol = source.symbol(frame);
    let Some((symbol, function)) = symbol.and_then(|s| Some((s, s.function?))) else {
        lines.push(match *source.frame(frame) {
            FrameAddr::Kernel { addr } | FrameAddr::UnknownUser { addr } => {
                format!("{tag} {addr:#x}")
            }
            FrameAddr::User { file_offset, .. } => {
                format!("{tag} {}+{file_offset:#x}", module.unwrap_or_default())
            }
        });
        return;
    };
    for &inlined in symbol.inlined.iter().rev() {
        let name = source.string(inlined);
        lines.push(format!("{tag} {name} (inlined){module_suffix}"));
    }
    let mut line = format!("{tag} {}+{:#x}", source.string(function), symbol.offset);
    if let Some(file) = symbol.file {
        let file = source.string(file);
        match symbol.line {
            Some(number) => line.push_str(&format!(" ({file}:{number})")),
            None => line.push_str(&format!(" ({file})")),
        }
    }
    line.push_str(&module_suffix);
    lines.push(line);
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}
