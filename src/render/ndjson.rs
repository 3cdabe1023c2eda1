//! NDJSON renderer: a [`CaptureSource`] and a [`Filter`] → one JSON object per
//! line: a header, each stack once before its first use, then one line per
//! kept event. The line types are described by [`json_schema`].
//!
//! JSON is written by hand into one reused buffer (no value trees), per-thread
//! and per-probe fragments are escaped once, and only stacks are remembered, so
//! memory does not grow with the number of events and the same capture always
//! gives the same bytes.

use std::io::{self, Write};
use std::ops::ControlFlow;

use crate::capture::model::{
    DropReason, Event, FieldType, FieldValue, FrameAddr, FrameId, RecordKind, RecordOrigin,
    StackId, ThreadId,
};
use crate::render::filter::Filter;
use crate::render::source::CaptureSource;
use crate::tracking::records::Trackers;

mod tracker_lines;

/// Version of the line format, in the header's `version`.
pub const FORMAT_VERSION: u32 = 1;

/// The JSON Schema (draft 2020-12) of one NDJSON line, for `--json-schema`.
pub fn json_schema() -> &'static str {
    include_str!("../../docs/ndjson.schema.json")
}

/// Writes `source` as NDJSON to `out`, keeping the events `filter` keeps.
/// Returns the number of event lines written. A read failure part way
/// through is `InvalidData`, after the lines before it were written.
pub fn render(source: &dyn CaptureSource, filter: &Filter, out: &mut dyn Write) -> io::Result<u64> {
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
    read.map_err(|message| io::Error::new(io::ErrorKind::InvalidData, message))?;
    Ok(written)
}

/// Flush the buffer to the output past this size.
const FLUSH_AT: usize = 64 * 1024;

/// Per-probe fragments escaped once: `,"probe":"name"` and each `"field":`.
struct ProbeText {
    probe: Vec<u8>,
    field_keys: Vec<Vec<u8>>,
}

struct LineWriter<'a> {
    source: &'a dyn CaptureSource,
    out: &'a mut dyn Write,
    buf: Vec<u8>,
    probes: Vec<ProbeText>,
    /// `{"tid":..,"pid":..,"comm":..,"pcomm":..}` by `ThreadId`, made on first use.
    tasks: Vec<Option<Box<[u8]>>>,
    /// Whether the stack line was written, by `StackId`.
    stacks_written: Vec<bool>,
    trackers: &'a Trackers,
}

impl<'a> LineWriter<'a> {
    fn new(source: &'a dyn CaptureSource, trackers: &'a Trackers, out: &'a mut dyn Write) -> Self {
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

    fn header(&mut self) -> io::Result<()> {
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
        for (id, schema) in self.source.schemas().iter().enumerate() {
            if id > 0 {
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
            buf.extend_from_slice(if schema.has_stack {
                b"true}"
            } else {
                b"false}"
            });
        }
        buf.push(b']');
    }

    /// `"drops"` (by reason) and `"damage"`, `null` when unknown or none.
    fn header_losses(&mut self) {
        let buf = &mut self.buf;
        buf.extend_from_slice(br#","drops":"#);
        match self.source.stats() {
            Some(stats) => {
                buf.push(b'{');
                for (index, &(reason, count)) in stats.drops.iter().enumerate() {
                    if index > 0 {
                        buf.push(b',');
                    }
                    write_str(buf, drop_reason_key(reason).as_bytes());
                    buf.push(b':');
                    write_u64(buf, count);
                }
                buf.push(b'}');
            }
            None => buf.extend_from_slice(b"null"),
        }
        buf.extend_from_slice(br#","damage":"#);
        match self.source.damage() {
            Some(damage) => write_str(buf, damage.as_bytes()),
            None => buf.extend_from_slice(b"null"),
        }
    }

    fn event(&mut self, event: &Event) -> io::Result<()> {
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
        if let Some(stack) = event.stack {
            buf.extend_from_slice(br#","stack":"#);
            write_u64(buf, stack.0.into());
        }
        buf.extend_from_slice(b"}\n");
        self.flush_if_full()
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

    fn flush_if_full(&mut self) -> io::Result<()> {
        if self.buf.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.out.flush()
    }
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

fn write_u64(buf: &mut Vec<u8>, value: u64) {
    buf.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

fn write_i64(buf: &mut Vec<u8>, value: i64) {
    buf.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// Nanoseconds as exact seconds with nine decimals (`1.234567890`): no
/// floating point, so every nanosecond survives and output is stable.
fn write_seconds(buf: &mut Vec<u8>, ns: u64) {
    write_u64(buf, ns / 1_000_000_000);
    let mut fraction = ns % 1_000_000_000;
    let mut digits = *b".000000000";
    for digit in digits[1..].iter_mut().rev() {
        *digit = b'0' + (fraction % 10) as u8;
        fraction /= 10;
    }
    buf.extend_from_slice(&digits);
}

/// `,"key":"value"` (the key needs no escaping).
fn write_key_str(buf: &mut Vec<u8>, key: &str, value: &str) {
    buf.extend_from_slice(b",\"");
    buf.extend_from_slice(key.as_bytes());
    buf.extend_from_slice(b"\":");
    write_str(buf, value.as_bytes());
}

/// Whether a byte must be escaped inside a JSON string (RFC 8259 §7).
const NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Writes `text` as a JSON string: quotes, backslashes and control characters
/// escaped, valid UTF-8 as is, each invalid sequence as `\ufffd`.
pub(crate) fn write_str(buf: &mut Vec<u8>, text: &[u8]) {
    buf.push(b'"');
    for chunk in text.utf8_chunks() {
        let valid = chunk.valid().as_bytes();
        let mut start = 0;
        for (index, &byte) in valid.iter().enumerate() {
            if NEEDS_ESCAPE[byte as usize] {
                buf.extend_from_slice(&valid[start..index]);
                write_escape(buf, byte);
                start = index + 1;
            }
        }
        buf.extend_from_slice(&valid[start..]);
        if !chunk.invalid().is_empty() {
            buf.extend_from_slice(br"\ufffd");
        }
    }
    buf.push(b'"');
}

fn write_escape(buf: &mut Vec<u8>, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match byte {
        b'"' => buf.extend_from_slice(br#"\""#),
        b'\\' => buf.extend_from_slice(br"\\"),
        b'\n' => buf.extend_from_slice(br"\n"),
        b'\r' => buf.extend_from_slice(br"\r"),
        b'\t' => buf.extend_from_slice(br"\t"),
        0x08 => buf.extend_from_slice(br"\b"),
        0x0c => buf.extend_from_slice(br"\f"),
        _ => buf.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(byte >> 4)],
            HEX[usize::from(byte & 0xf)],
        ]),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::Instant;

    use crate::frontend::options::TaskFilter;
    use crate::render::filter::TaskSelector;

    use serde_json::Value;

    use super::*;
    use crate::capture::model::{CaptureStats, FieldValue as V, StringId};
    use crate::render::source::FakeCapture;

    fn run(source: &dyn CaptureSource, filter: &Filter) -> (String, u64) {
        let mut out = Vec::new();
        let written = render(source, filter, &mut out).expect("render to memory");
        (String::from_utf8(out).expect("output is UTF-8"), written)
    }

    /// Lines after the header.
    fn body(source: &dyn CaptureSource, filter: &Filter) -> Vec<String> {
        let (text, _) = run(source, filter);
        text.lines().skip(1).map(str::to_owned).collect()
    }

    const S0: &str = r#"{"type":"stack","id":0,"frames":["[U] inner (inlined) libfoo.so","[U] outer (inlined) libfoo.so","[U] func+0x1a (file.c:12) libfoo.so","[K] do_sys_open+0x10"]}"#;
    const S1: &str = r#"{"type":"stack","id":1,"frames":["[U] 0x7f00deadbeef","[U] libbar.so+0x1234","[K] 0xffffffff81000020"]}"#;
    const E0: &str = r#"{"type":"event","ts":1.234567890,"cpu":1,"task":{"tid":100,"pid":100,"comm":"app","pcomm":"app"},"probe":"malloc","fields":{"size":64},"stack":0}"#;
    const E1: &str = r#"{"type":"event","ts":1.500000000,"cpu":0,"task":{"tid":101,"pid":100,"comm":"work\"er\u0001","pcomm":"app"},"probe":"lock","dur":0.000123000,"fields":{"what":"a\"b\\c\nd\te","ret":-5}}"#;
    const E2: &str = r#"{"type":"event","ts":2.000000000,"cpu":0,"task":{"tid":100,"pid":100,"comm":"app","pcomm":"app"},"probe":"malloc","fields":{"size":128},"stack":0}"#;
    const E3: &str = "{\"type\":\"event\",\"ts\":2.500000000,\"cpu\":0,\"task\":{\"tid\":200,\"pid\":200,\"comm\":\"ba\u{fffd}sh\",\"pcomm\":\"bash\"},\"probe\":\"malloc\",\"fields\":{\"size\":1},\"stack\":1}";

    /// The whole output of a small capture: header, stacks once before first use, events.
    #[test]
    fn renders_exact_lines() {
        let (text, written) = run(&FakeCapture::sample(), &Filter::default());
        let header = concat!(
            r#"{"type":"header","version":1,"wprof":"0.1.0","host":"testhost","kernel":"6.18.0-test","#,
            r#""cpus":2,"start_realtime_ns":1781094600123456789,"duration_s":3.000000000,"#,
            r#""command_line":["wprof","-e","uprobe:libc:malloc < >"],"script":"uprobe:libc:malloc < >","#,
            r#""script_name":"<script>","features":[],"stacks":[],"pmu":[],"filters":[],"#,
            r#""prepare":null,"activate":null,"#,
            r#""probes":[{"id":0,"probe":"uprobe:/usr/lib/libc.so.6:malloc","#,
            r#""name":"malloc","origin":"script","kind":"instant","fields":[{"name":"size","type":"uint"}],"stack":true},"#,
            r#"{"id":1,"probe":"uprobe:/usr/lib/libc.so.6:lock","name":"lock","origin":"script","kind":"span","#,
            r#""fields":[{"name":"what","type":"str"},{"name":"ret","type":"int"}],"stack":false}],"#,
            r#""drops":{"stack_lost":3},"damage":null}"#
        );
        let expected = [header, S0, E0, E1, E2, S1, E3]
            .map(|line| format!("{line}\n"))
            .concat();
        assert_eq!(text, expected);
        assert_eq!(written, 4);
    }

    /// The window is half-open; a stack first used after the window start is written then.
    #[test]
    fn filters_by_window() {
        let filter = Filter {
            start_ns: Some(1_300_000_000),
            end_ns: Some(2_500_000_000),
            ..Filter::default()
        };
        assert_eq!(body(&FakeCapture::sample(), &filter), [E1, S0, E2]);
    }

    /// Process id and process name filters keep only that process's events and stacks.
    #[test]
    fn filters_by_pid_and_name() {
        let only = |filter: TaskFilter| Filter {
            tasks: vec![TaskSelector::new(&filter).unwrap()],
            ..Filter::default()
        };
        let by_pid = only(TaskFilter {
            pids: vec![200],
            ..TaskFilter::default()
        });
        assert_eq!(body(&FakeCapture::sample(), &by_pid), [S1, E3]);
        let by_name = only(TaskFilter {
            names: vec!["ap*".into()],
            ..TaskFilter::default()
        });
        assert_eq!(body(&FakeCapture::sample(), &by_name), [S0, E0, E1, E2]);
    }

    /// An unfinished, damaged capture says so in the header.
    #[test]
    fn header_of_unfinished_capture() {
        let mut capture = FakeCapture::sample();
        capture.stats = None;
        capture.damage = Some("truncated after 4 events".into());
        let (text, _) = run(&capture, &Filter::default());
        let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(header["duration_s"], Value::Null);
        assert_eq!(header["drops"], Value::Null);
        assert_eq!(header["damage"], "truncated after 4 events");
    }

    /// A read failure is an error, after the lines read before it were written.
    #[test]
    fn read_failure_after_partial_output() {
        let mut capture = FakeCapture::sample();
        capture.read_error = Some("bad block at 4096".into());
        let mut out = Vec::new();
        let error = render(&capture, &Filter::default(), &mut out).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert_eq!(error.to_string(), "bad block at 4096");
        assert_eq!(String::from_utf8(out).unwrap().lines().count(), 7);
    }

    /// Escaping follows RFC 8259; invalid UTF-8 becomes U+FFFD.
    #[test]
    fn escapes_strings() {
        let mut buf = Vec::new();
        write_str(
            &mut buf,
            b"q\" b\\ \x08\x0c\n\r\t \x00\x1f\x7f \xc3\xa9 \xff\xfe x\xe2\x82",
        );
        let expected =
            "\"q\\\" b\\\\ \\b\\f\\n\\r\\t \\u0000\\u001f\x7f é \\ufffd\\ufffd x\\ufffd\"";
        assert_eq!(String::from_utf8(buf.clone()).unwrap(), expected);
        let parsed: String = serde_json::from_slice(&buf).unwrap();
        assert_eq!(
            parsed,
            String::from_utf8_lossy(
                b"q\" b\\ \x08\x0c\n\r\t \x00\x1f\x7f \xc3\xa9 \xff\xfe x\xe2\x82"
            )
        );
    }

    /// Seconds keep every nanosecond.
    #[test]
    fn writes_exact_seconds() {
        let mut buf = Vec::new();
        for ns in [0, 1, 999_999_999, 1_000_000_000, u64::MAX] {
            write_seconds(&mut buf, ns);
            buf.push(b' ');
        }
        let text = String::from_utf8(buf).unwrap();
        assert_eq!(
            text,
            "0.000000000 0.000000001 0.999999999 1.000000000 18446744073.709551615 "
        );
    }

    /// The same capture gives the same bytes.
    #[test]
    fn output_is_deterministic() {
        let capture = FakeCapture::sample();
        assert_eq!(
            run(&capture, &Filter::default()),
            run(&capture, &Filter::default())
        );
        assert_eq!(
            run(&capture, &Filter::default()),
            run(&FakeCapture::sample(), &Filter::default())
        );
    }

    /// Every line is JSON and conforms to the published schema.
    #[test]
    fn lines_conform_to_schema() {
        let schema: Value = serde_json::from_str(json_schema()).expect("schema is JSON");
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        let mut unfinished = FakeCapture::sample();
        (unfinished.stats, unfinished.damage) = (None, Some("truncated".into()));
        for capture in [FakeCapture::sample(), unfinished] {
            let (text, _) = run(&capture, &Filter::default());
            for line in text.lines() {
                let value: Value = serde_json::from_str(line).expect("line is JSON");
                if let Err(error) = conforms(&schema, &schema, &value) {
                    panic!("{line}\ndoes not conform: {error}");
                }
            }
        }
        let wrong: Value = serde_json::from_str(r#"{"type":"stack","id":-1,"frames":[]}"#).unwrap();
        assert!(conforms(&schema, &schema, &wrong).is_err());
    }

    /// A validator for the keywords the schema uses: `$ref` to `$defs`,
    /// `oneOf`, `type`, `const`, `enum`, `minimum`, `properties`, `required`,
    /// `additionalProperties`, `items`.
    pub(super) fn conforms(root: &Value, schema: &Value, value: &Value) -> Result<(), String> {
        if let Some(reference) = schema["$ref"].as_str() {
            let name = reference.strip_prefix("#/$defs/").expect("local reference");
            conforms(root, &root["$defs"][name], value)?;
        }
        if let Some(options) = schema["oneOf"].as_array() {
            let matching = options
                .iter()
                .filter(|o| conforms(root, o, value).is_ok())
                .count();
            if matching != 1 {
                return Err(format!("{matching} oneOf options match {value}"));
            }
        }
        let types = match &schema["type"] {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        if !types.is_empty() && !types.iter().any(|ty| has_type(value, ty)) {
            return Err(format!("{value} is not {types:?}"));
        }
        if schema.get("const").is_some_and(|c| c != value) {
            return Err(format!("{value} is not {}", schema["const"]));
        }
        if let Some(options) = schema["enum"].as_array()
            && !options.contains(value)
        {
            return Err(format!("{value} is not one of {options:?}"));
        }
        if let (Some(min), Some(number)) = (schema["minimum"].as_f64(), value.as_f64())
            && number < min
        {
            return Err(format!("{value} is below {min}"));
        }
        if let Some(items) = schema.get("items") {
            for item in value.as_array().into_iter().flatten() {
                conforms(root, items, item)?;
            }
        }
        let Some(object) = value.as_object() else {
            return Ok(());
        };
        for key in schema["required"].as_array().into_iter().flatten() {
            if !object.contains_key(key.as_str().unwrap()) {
                return Err(format!("{key} missing"));
            }
        }
        for (key, field) in object {
            match (
                schema["properties"].get(key),
                &schema["additionalProperties"],
            ) {
                (Some(property), _) => conforms(root, property, field),
                (None, Value::Bool(false)) => Err(format!("unexpected {key}")),
                (None, Value::Object(_)) => conforms(root, &schema["additionalProperties"], field),
                (None, _) => Ok(()),
            }
            .map_err(|error| format!("{key}: {error}"))?;
        }
        Ok(())
    }

    fn has_type(value: &Value, ty: &str) -> bool {
        match ty {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "boolean" => value.is_boolean(),
            "null" => value.is_null(),
            "number" => value.is_number(),
            "integer" => value.is_i64() || value.is_u64(),
            other => panic!("type {other} not handled"),
        }
    }

    /// Synthetic events for the speed test: four threads, eight stacks, a
    /// number and a string (string 0 is `"worker-0"`).
    fn generate(index: u64, event: &mut Event) {
        event.ts_ns = index * 500;
        event.cpu = (index % 2) as u32;
        event.thread = ThreadId((index % 4) as u32);
        event.stack = Some(StackId((index % 8) as u32));
        if event.values.is_empty() {
            event.values = vec![V::UInt(0), V::Str(StringId(0))];
        }
        event.values[0] = V::UInt(index * 16);
    }

    /// Prints events/s: 2 M events in release builds (fewer in debug).
    #[test]
    fn speed() {
        let count = if cfg!(debug_assertions) {
            200_000
        } else {
            2_000_000
        };
        let mut capture = FakeCapture::new();
        for tid in 0..4 {
            capture.add_thread(1000 + tid, 1000, &format!("worker-{tid}"), "server");
        }
        capture.add_schema(
            "malloc",
            RecordKind::Instant,
            &[("size", FieldType::UInt), ("who", FieldType::Str)],
            true,
        );
        let frame = capture.add_user_frame("/usr/lib/libc.so.6", 0x9a0d0, "malloc", 0x20, None);
        for _ in 0..8 {
            capture.add_stack(&[frame, frame, frame]);
        }
        capture.generated = Some((count, generate));
        capture.stats = Some(CaptureStats::default());
        let mut out = CountingSink(0);
        let started = Instant::now();
        let written = render(&capture, &Filter::default(), &mut out).unwrap();
        let seconds = started.elapsed().as_secs_f64();
        assert_eq!(written, count);
        println!(
            "ndjson: {count} events in {seconds:.3} s = {:.2} M events/s, {:.0} MB/s, {} bytes/event",
            count as f64 / seconds / 1e6,
            out.0 as f64 / seconds / 1e6,
            out.0 / count
        );
    }

    struct CountingSink(u64);

    impl Write for CountingSink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
}
