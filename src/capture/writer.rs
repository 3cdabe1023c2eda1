//! Capture stage, output side: interned tables and events → `wprof.data`
//! chunks (layout in `docs/data-format.md`). Table entries are encoded as they
//! are created and written before the first events chunk that can use them,
//! so every complete prefix of the file is a consistent capture.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{
    CaptureError, ChunkHeader, ChunkKind, VERSION, file_header, put_bytes, put_ivarint, put_uvarint,
};
use super::model::{
    CaptureInfo, CaptureStats, DropReason, Event, FieldType, FieldValue, FrameAddr, FrameId,
    RecordKind, RecordSchema, StackId, StringId, Symbol, Thread, ThreadId,
};

/// Events are cut into chunks of about this many payload bytes: small enough
/// that a crash loses little, large enough that chunk headers cost nothing.
pub const EVENTS_CHUNK_BYTES: usize = 64 * 1024;

/// Writes a capture. Ids handed out by `intern`, `thread`, `frame` and
/// `stack` are valid for events given to this writer only.
pub struct CaptureWriter<W: Write> {
    sink: Sink<W>,
    schemas: Vec<RecordSchema>,
    strings: Vec<Arc<str>>,
    string_ids: HashMap<Arc<str>, StringId>,
    threads: HashMap<(u32, u32, StringId, StringId), ThreadId>,
    frames: Vec<FrameAddr>,
    frame_ids: HashMap<FrameAddr, FrameId>,
    stacks: HashMap<Box<[FrameId]>, StackId>,
    /// Encoded table entries not yet written, in the order they must be written.
    pending: [Pending; 4],
    events: Pending,
    prev_ts_ns: u64,
    events_chunk_bytes: usize,
    events_written: u64,
}

/// Encoded entries of one chunk kind waiting to be written.
struct Pending {
    kind: ChunkKind,
    items: u32,
    payload: Vec<u8>,
}

impl Pending {
    fn new(kind: ChunkKind) -> Pending {
        Pending {
            kind,
            items: 0,
            payload: Vec::new(),
        }
    }
}

const STRINGS: usize = 0;
const FRAMES: usize = 1;
const STACKS: usize = 2;
const THREADS: usize = 3;

/// Where chunks go, and how many bytes went there.
struct Sink<W: Write> {
    out: W,
    path: Option<PathBuf>,
    bytes_written: u64,
}

impl<W: Write> Sink<W> {
    fn io_error(&self, source: std::io::Error) -> CaptureError {
        match &self.path {
            Some(path) => CaptureError::Io {
                op: "writing",
                path: path.clone(),
                source,
            },
            None => CaptureError::Write { source },
        }
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), CaptureError> {
        self.out.write_all(bytes).map_err(|e| self.io_error(e))?;
        self.bytes_written += bytes.len() as u64;
        Ok(())
    }

    /// Writes `pending` as one chunk (nothing when it is empty) and empties it.
    fn write_pending(&mut self, pending: &mut Pending) -> Result<(), CaptureError> {
        if pending.items == 0 {
            return Ok(());
        }
        self.write_chunk(pending.kind, pending.items, &pending.payload)?;
        pending.items = 0;
        pending.payload.clear();
        Ok(())
    }

    fn write_chunk(
        &mut self,
        kind: ChunkKind,
        items: u32,
        payload: &[u8],
    ) -> Result<(), CaptureError> {
        let header = ChunkHeader::for_payload(kind, items, payload).ok_or_else(|| {
            CaptureError::Rejected {
                what: format!(
                    "a {} chunk of {} bytes (over 4 GiB)",
                    kind.name(),
                    payload.len()
                ),
            }
        })?;
        self.write(&header.encode())?;
        self.write(payload)
    }
}

impl CaptureWriter<BufWriter<File>> {
    /// Creates (or truncates) `path` and writes the capture's description.
    pub fn create(
        path: &Path,
        info: &CaptureInfo,
        schemas: &[RecordSchema],
    ) -> Result<Self, CaptureError> {
        let file = File::create(path).map_err(|source| CaptureError::Io {
            op: "creating",
            path: path.to_path_buf(),
            source,
        })?;
        let sink = Sink {
            out: BufWriter::new(file),
            path: Some(path.to_path_buf()),
            bytes_written: 0,
        };
        Self::start(sink, info, schemas)
    }
}

impl<W: Write> CaptureWriter<W> {
    /// Writes the file header and the capture's description to `out`.
    pub fn new(out: W, info: &CaptureInfo, schemas: &[RecordSchema]) -> Result<Self, CaptureError> {
        let sink = Sink {
            out,
            path: None,
            bytes_written: 0,
        };
        Self::start(sink, info, schemas)
    }

    fn start(
        mut sink: Sink<W>,
        info: &CaptureInfo,
        schemas: &[RecordSchema],
    ) -> Result<Self, CaptureError> {
        sink.write(&file_header(VERSION))?;
        let mut payload = Vec::new();
        encode_info(&mut payload, info);
        sink.write_chunk(ChunkKind::Info, 1, &payload)?;
        payload.clear();
        for schema in schemas {
            encode_schema(&mut payload, schema);
        }
        let count = u32::try_from(schemas.len()).map_err(|_| CaptureError::Rejected {
            what: format!("{} record schemas", schemas.len()),
        })?;
        sink.write_chunk(ChunkKind::Schemas, count, &payload)?;
        Ok(CaptureWriter {
            sink,
            schemas: schemas.to_vec(),
            strings: Vec::new(),
            string_ids: HashMap::new(),
            threads: HashMap::new(),
            frames: Vec::new(),
            frame_ids: HashMap::new(),
            stacks: HashMap::new(),
            pending: [
                Pending::new(ChunkKind::Strings),
                Pending::new(ChunkKind::Frames),
                Pending::new(ChunkKind::Stacks),
                Pending::new(ChunkKind::Threads),
            ],
            events: Pending::new(ChunkKind::Events),
            prev_ts_ns: 0,
            events_chunk_bytes: EVENTS_CHUNK_BYTES,
            events_written: 0,
        })
    }

    /// Cuts events chunks at about `bytes` payload bytes instead of
    /// `EVENTS_CHUNK_BYTES` (tests use small chunks to get many of them).
    pub fn set_events_chunk_bytes(&mut self, bytes: usize) {
        self.events_chunk_bytes = bytes.max(1);
    }

    /// The id of `s`, adding it to the string table the first time.
    pub fn intern(&mut self, s: &str) -> StringId {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = StringId(next_id(self.strings.len(), "strings"));
        let s: Arc<str> = Arc::from(s);
        let pending = &mut self.pending[STRINGS];
        put_bytes(&mut pending.payload, s.as_bytes());
        pending.items += 1;
        self.strings.push(s.clone());
        self.string_ids.insert(s, id);
        id
    }

    /// The id of a thread; the same identity (including both names) gives
    /// the same id, a rename makes a new entry.
    pub fn thread(&mut self, tid: u32, pid: u32, name: &str, process_name: &str) -> ThreadId {
        let name = self.intern(name);
        let process_name = self.intern(process_name);
        let next = next_id(self.threads.len(), "threads");
        let pending = &mut self.pending[THREADS];
        *self
            .threads
            .entry((tid, pid, name, process_name))
            .or_insert_with(|| {
                encode_thread(
                    &mut pending.payload,
                    &Thread {
                        tid,
                        pid,
                        name,
                        process_name,
                    },
                );
                pending.items += 1;
                ThreadId(next)
            })
    }

    /// The id of a code address; equal addresses share one id.
    pub fn frame(&mut self, addr: FrameAddr) -> FrameId {
        if let Some(&id) = self.frame_ids.get(&addr) {
            return id;
        }
        let id = FrameId(next_id(self.frames.len(), "frames"));
        let pending = &mut self.pending[FRAMES];
        encode_frame(&mut pending.payload, &addr);
        pending.items += 1;
        self.frames.push(addr.clone());
        self.frame_ids.insert(addr, id);
        id
    }

    /// The id of a stack (innermost frame first); equal frame lists share one id.
    pub fn stack(&mut self, frames: &[FrameId]) -> StackId {
        if let Some(&id) = self.stacks.get(frames) {
            return id;
        }
        let id = StackId(next_id(self.stacks.len(), "stacks"));
        let pending = &mut self.pending[STACKS];
        encode_stack(&mut pending.payload, frames);
        pending.items += 1;
        self.stacks.insert(frames.into(), id);
        id
    }

    /// Every frame so far, indexed by `FrameId`, for symbolizing at the end.
    pub fn frames(&self) -> &[FrameAddr] {
        &self.frames
    }

    /// The text of an interned string.
    ///
    /// Panics if `id` was not handed out by this writer.
    pub fn string(&self, id: StringId) -> &str {
        &self.strings[id.0 as usize]
    }

    /// Adds an event. Events should arrive in time order (out-of-order ones
    /// are stored, but cost more bytes).
    pub fn event(&mut self, event: &Event) -> Result<(), CaptureError> {
        self.check_event(event)?;
        let out = &mut self.events.payload;
        let key = u64::from(event.record.0) << 2
            | u64::from(event.stack.is_some()) << 1
            | u64::from(event.duration_ns.is_some());
        put_uvarint(out, key);
        put_ivarint(out, event.ts_ns.wrapping_sub(self.prev_ts_ns) as i64);
        self.prev_ts_ns = event.ts_ns;
        put_uvarint(out, u64::from(event.cpu));
        put_uvarint(out, u64::from(event.thread.0));
        if let Some(d) = event.duration_ns {
            put_uvarint(out, d);
        }
        for value in &event.values {
            match *value {
                FieldValue::Int(v) => put_ivarint(out, v),
                FieldValue::UInt(v) => put_uvarint(out, v),
                FieldValue::Str(id) => put_uvarint(out, u64::from(id.0)),
            }
        }
        if let Some(stack) = event.stack {
            put_uvarint(out, u64::from(stack.0));
        }
        self.events.items += 1;
        self.events_written += 1;
        if self.events.payload.len() >= self.events_chunk_bytes {
            self.write_events()?;
        }
        Ok(())
    }

    fn check_event(&self, event: &Event) -> Result<(), CaptureError> {
        let reject = |what: String| Err(CaptureError::Rejected { what });
        let Some(schema) = self.schemas.get(event.record.0 as usize) else {
            return reject(format!("an event of unknown record {}", event.record.0));
        };
        if event.values.len() != schema.fields.len() {
            return reject(format!(
                "{} values for record `{}`, which has {} fields",
                event.values.len(),
                schema.name,
                schema.fields.len()
            ));
        }
        for (value, field) in event.values.iter().zip(&schema.fields) {
            let fits = match (value, field.ty) {
                (FieldValue::Int(_), FieldType::Int) | (FieldValue::UInt(_), FieldType::UInt) => {
                    true
                }
                (FieldValue::Str(id), FieldType::Str) => (id.0 as usize) < self.strings.len(),
                _ => false,
            };
            if !fits {
                return reject(format!(
                    "{value:?} for field `{}` ({:?}) of record `{}`",
                    field.name, field.ty, schema.name
                ));
            }
        }
        if event.thread.0 as usize >= self.threads.len() {
            return reject(format!("unknown thread id {}", event.thread.0));
        }
        if let Some(stack) = event.stack.filter(|s| s.0 as usize >= self.stacks.len()) {
            return reject(format!("unknown stack id {}", stack.0));
        }
        Ok(())
    }

    /// Writes pending table entries, then buffered events, as chunks.
    fn write_events(&mut self) -> Result<(), CaptureError> {
        for pending in &mut self.pending {
            self.sink.write_pending(pending)?;
        }
        self.sink.write_pending(&mut self.events)?;
        self.prev_ts_ns = 0;
        Ok(())
    }

    /// Bytes handed to the output so far (buffered events not included).
    pub fn bytes_written(&self) -> u64 {
        self.sink.bytes_written
    }

    /// Events accepted so far.
    pub fn events_written(&self) -> u64 {
        self.events_written
    }

    /// Writes everything accepted so far as complete chunks and flushes the
    /// output: a crash after this loses none of it.
    pub fn flush(&mut self) -> Result<(), CaptureError> {
        self.write_events()?;
        self.sink.out.flush().map_err(|e| self.sink.io_error(e))
    }

    /// Writes the remaining events, the symbols and the statistics, and
    /// returns the output. Symbol strings must come from `intern`.
    pub fn finish(
        mut self,
        symbols: &[(FrameId, Symbol)],
        stats: &CaptureStats,
    ) -> Result<W, CaptureError> {
        self.write_events()?;
        let mut payload = Vec::new();
        for (frame, symbol) in symbols {
            self.check_symbol(*frame, symbol)?;
            encode_symbol(&mut payload, *frame, symbol);
        }
        let count = u32::try_from(symbols.len()).map_err(|_| CaptureError::Rejected {
            what: format!("{} symbols", symbols.len()),
        })?;
        self.sink.write_chunk(ChunkKind::Symbols, count, &payload)?;
        payload.clear();
        encode_stats(&mut payload, stats);
        self.sink.write_chunk(ChunkKind::End, 1, &payload)?;
        self.sink.out.flush().map_err(|e| self.sink.io_error(e))?;
        Ok(self.sink.out)
    }

    fn check_symbol(&self, frame: FrameId, symbol: &Symbol) -> Result<(), CaptureError> {
        let strings = symbol
            .function
            .iter()
            .chain(&symbol.file)
            .chain(&symbol.inlined);
        if frame.0 as usize >= self.frames.len() {
            Err(CaptureError::Rejected {
                what: format!("a symbol for unknown frame id {}", frame.0),
            })
        } else if let Some(s) = strings
            .into_iter()
            .find(|s| s.0 as usize >= self.strings.len())
        {
            Err(CaptureError::Rejected {
                what: format!("a symbol naming unknown string id {}", s.0),
            })
        } else {
            Ok(())
        }
    }
}

/// The id after `len` entries of `table`.
fn next_id(len: usize, table: &str) -> u32 {
    u32::try_from(len).unwrap_or_else(|_| panic!("a capture holds fewer than 2^32 {table}"))
}

fn encode_info(out: &mut Vec<u8>, info: &CaptureInfo) {
    put_uvarint(out, info.command_line.len() as u64);
    for arg in &info.command_line {
        put_bytes(out, arg.as_bytes());
    }
    put_bytes(out, info.script.as_bytes());
    put_bytes(out, info.script_name.as_bytes());
    put_bytes(out, info.hostname.as_bytes());
    put_bytes(out, info.kernel_release.as_bytes());
    put_uvarint(out, u64::from(info.cpus));
    put_uvarint(out, info.start_monotonic_ns);
    put_uvarint(out, info.start_realtime_ns);
    put_bytes(out, info.wprof_version.as_bytes());
}

fn encode_schema(out: &mut Vec<u8>, schema: &RecordSchema) {
    put_bytes(out, schema.probe.as_bytes());
    put_bytes(out, schema.name.as_bytes());
    out.push(match schema.kind {
        RecordKind::Instant => 0,
        RecordKind::Span => 1,
    });
    put_uvarint(out, schema.fields.len() as u64);
    for field in &schema.fields {
        put_bytes(out, field.name.as_bytes());
        out.push(match field.ty {
            FieldType::Int => 0,
            FieldType::UInt => 1,
            FieldType::Str => 2,
        });
    }
    out.push(u8::from(schema.has_stack));
}

fn encode_thread(out: &mut Vec<u8>, thread: &Thread) {
    put_uvarint(out, u64::from(thread.tid));
    put_uvarint(out, u64::from(thread.pid));
    put_uvarint(out, u64::from(thread.name.0));
    put_uvarint(out, u64::from(thread.process_name.0));
}

fn encode_frame(out: &mut Vec<u8>, frame: &FrameAddr) {
    match frame {
        FrameAddr::Kernel { addr } => {
            out.push(0);
            put_uvarint(out, *addr);
        }
        FrameAddr::User {
            module,
            build_id,
            file_offset,
        } => {
            out.push(1);
            put_uvarint(out, u64::from(module.0));
            match build_id {
                Some(id) => {
                    put_uvarint(out, id.len() as u64 + 1);
                    out.extend_from_slice(id);
                }
                None => put_uvarint(out, 0),
            }
            put_uvarint(out, *file_offset);
        }
        FrameAddr::UnknownUser { addr } => {
            out.push(2);
            put_uvarint(out, *addr);
        }
    }
}

/// Frame ids as zigzag deltas: a new stack's frames are often new, consecutive ids.
fn encode_stack(out: &mut Vec<u8>, frames: &[FrameId]) {
    put_uvarint(out, frames.len() as u64);
    let mut prev = 0i64;
    for frame in frames {
        put_ivarint(out, i64::from(frame.0) - prev);
        prev = i64::from(frame.0);
    }
}

/// Optional ids and numbers are stored as value + 1, with 0 for none.
fn put_option(out: &mut Vec<u8>, v: Option<u32>) {
    put_uvarint(out, v.map_or(0, |v| u64::from(v) + 1));
}

fn encode_symbol(out: &mut Vec<u8>, frame: FrameId, symbol: &Symbol) {
    put_uvarint(out, u64::from(frame.0));
    put_option(out, symbol.function.map(|s| s.0));
    put_uvarint(out, symbol.offset);
    put_option(out, symbol.file.map(|s| s.0));
    put_option(out, symbol.line);
    put_uvarint(out, symbol.inlined.len() as u64);
    for s in &symbol.inlined {
        put_uvarint(out, u64::from(s.0));
    }
}

/// The code of a drop reason in the end chunk.
pub(super) fn drop_reason_code(reason: DropReason) -> u8 {
    match reason {
        DropReason::RingBufferFull => 0,
        DropReason::StackLost => 1,
        DropReason::UnmatchedSpanEnd => 2,
    }
}

fn encode_stats(out: &mut Vec<u8>, stats: &CaptureStats) {
    put_uvarint(out, stats.events);
    put_uvarint(out, stats.drops.len() as u64);
    for (reason, count) in &stats.drops {
        out.push(drop_reason_code(*reason));
        put_uvarint(out, *count);
    }
    put_uvarint(out, stats.duration_ns);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::capture::model::{FieldSchema, RecordId};

    /// A capture with every kind of entry, and what was put into it.
    pub(crate) struct Sample {
        pub info: CaptureInfo,
        pub schemas: Vec<RecordSchema>,
        pub strings: Vec<(StringId, String)>,
        pub threads: Vec<(ThreadId, Thread)>,
        pub frames: Vec<FrameAddr>,
        pub stacks: Vec<(StackId, Vec<FrameId>)>,
        pub events: Vec<Event>,
        pub symbols: Vec<(FrameId, Symbol)>,
        pub stats: CaptureStats,
        pub bytes: Vec<u8>,
    }

    pub(crate) fn schemas() -> Vec<RecordSchema> {
        let field = |name: &str, ty| FieldSchema {
            name: name.into(),
            ty,
        };
        vec![
            RecordSchema {
                probe: "uprobe:/usr/lib/libc.so.6:malloc".into(),
                name: "malloc".into(),
                kind: RecordKind::Instant,
                fields: vec![
                    field("size", FieldType::UInt),
                    field("delta", FieldType::Int),
                ],
                has_stack: true,
            },
            RecordSchema {
                probe: "tracepoint:syscalls:sys_enter_read".into(),
                name: "read".into(),
                kind: RecordKind::Span,
                fields: vec![field("fd", FieldType::Int), field("path", FieldType::Str)],
                has_stack: false,
            },
            RecordSchema {
                probe: "profile:hz:99".into(),
                name: "tick".into(),
                kind: RecordKind::Instant,
                fields: vec![],
                has_stack: false,
            },
        ]
    }

    pub(crate) fn info() -> CaptureInfo {
        CaptureInfo {
            command_line: vec![
                "wprof".into(),
                "record".into(),
                "-e".into(),
                "ü \0 ∞".into(),
            ],
            script: "uprobe:libc:malloc { <size = arg0> }".into(),
            script_name: "<script>".into(),
            hostname: "host".into(),
            kernel_release: "6.8.0".into(),
            cpus: 8,
            start_monotonic_ns: 123_456_789_000,
            start_realtime_ns: u64::MAX,
            wprof_version: "0.1.0".into(),
        }
    }

    /// Writes the sample through `writer`, interleaving table entries and
    /// events the way a session does.
    fn fill<W: Write>(w: &mut CaptureWriter<W>, s: &mut Sample) -> Result<(), CaptureError> {
        let libc = w.intern("/usr/lib/libc.so.6");
        let frames = [
            FrameAddr::Kernel {
                addr: 0xffff_ffff_8100_0000,
            },
            FrameAddr::User {
                module: libc,
                build_id: Some(vec![0xab; 20]),
                file_offset: 0x9a0f0,
            },
            FrameAddr::User {
                module: libc,
                build_id: None,
                file_offset: 7,
            },
            FrameAddr::User {
                module: libc,
                build_id: Some(vec![]),
                file_offset: 0,
            },
            FrameAddr::UnknownUser { addr: u64::MAX },
        ];
        for i in 0..240u64 {
            let thread = match i % 5 {
                0 => w.thread(100, 100, "main", "app"),
                1 => w.thread(101, 100, &format!("worker-{}", i % 3), "app"),
                _ => w.thread(7, 7, "", ""),
            };
            let f: Vec<FrameId> = (0..(i % 4))
                .map(|k| w.frame(frames[((i + k) % 5) as usize].clone()))
                .collect();
            let stack = w.stack(&f);
            let path = w.intern(&format!("/tmp/file{}", i % 7));
            let (record, values, duration_ns, stack) = match i % 3 {
                0 => (
                    0,
                    vec![FieldValue::UInt(i * 1000), FieldValue::Int(-(i as i64))],
                    None,
                    (i % 2 == 0).then_some(stack),
                ),
                1 => (
                    1,
                    vec![FieldValue::Int(i64::MIN + i as i64), FieldValue::Str(path)],
                    Some(i * 7),
                    None,
                ),
                _ => (2, vec![], None, None),
            };
            let event = Event {
                // mostly increasing, one step back and one huge jump
                ts_ns: if i == 200 {
                    u64::MAX - 5
                } else {
                    i * 997 + (i % 4) * 3
                },
                cpu: (i % 8) as u32,
                thread,
                record: RecordId(record),
                duration_ns,
                values,
                stack,
            };
            w.event(&event)?;
            s.events.push(event);
            if i == 100 {
                w.flush()?;
            }
        }
        Ok(())
    }

    /// The sample written to memory with events chunks of about `chunk_bytes`.
    pub(crate) fn sample(chunk_bytes: usize) -> Sample {
        let mut s = Sample {
            info: info(),
            schemas: schemas(),
            strings: vec![],
            threads: vec![],
            frames: vec![],
            stacks: vec![],
            events: vec![],
            symbols: vec![],
            stats: CaptureStats {
                events: 240,
                drops: vec![
                    (DropReason::RingBufferFull, 3),
                    (DropReason::StackLost, 0),
                    (DropReason::UnmatchedSpanEnd, u64::MAX),
                ],
                duration_ns: 1_000_000_000,
            },
            bytes: vec![],
        };
        let mut w = CaptureWriter::new(Vec::new(), &s.info, &s.schemas).expect("write to memory");
        w.set_events_chunk_bytes(chunk_bytes);
        fill(&mut w, &mut s).expect("sample events are valid");
        let malloc = w.intern("malloc");
        let file = w.intern("malloc.c");
        let inl = w.intern("inlined_helper");
        s.symbols = vec![
            (
                FrameId(1),
                Symbol {
                    function: Some(malloc),
                    offset: 16,
                    file: Some(file),
                    line: Some(3120),
                    inlined: vec![inl, malloc],
                },
            ),
            (FrameId(0), Symbol::default()),
        ];
        s.frames = w.frames().to_vec();
        s.strings = (0..w.strings.len() as u32)
            .map(|i| (StringId(i), w.string(StringId(i)).to_owned()))
            .collect();
        let mut threads: Vec<_> = w.threads.iter().map(|(k, v)| (*v, *k)).collect();
        threads.sort_by_key(|(id, _)| *id);
        s.threads = threads
            .into_iter()
            .map(|(id, (tid, pid, name, process_name))| {
                let t = Thread {
                    tid,
                    pid,
                    name,
                    process_name,
                };
                (id, t)
            })
            .collect();
        s.stacks = w.stacks.iter().map(|(k, v)| (*v, k.to_vec())).collect();
        s.stacks.sort_by_key(|(id, _)| *id);
        s.bytes = w.finish(&s.symbols, &s.stats).expect("write to memory");
        s
    }

    /// Writing the same inputs twice gives byte-identical files.
    #[test]
    fn deterministic() {
        assert_eq!(sample(200).bytes, sample(200).bytes);
        assert_eq!(
            sample(EVENTS_CHUNK_BYTES).bytes,
            sample(EVENTS_CHUNK_BYTES).bytes
        );
    }

    /// Equal strings, threads, frames and stacks get one id; a rename gets a new one.
    #[test]
    fn dedups_tables() {
        let mut w = CaptureWriter::new(Vec::new(), &info(), &schemas()).unwrap();
        assert_eq!(w.intern("a"), w.intern("a"));
        assert_ne!(w.intern("a"), w.intern("b"));
        let t = w.thread(1, 1, "x", "p");
        assert_eq!(w.thread(1, 1, "x", "p"), t);
        assert_ne!(w.thread(1, 1, "renamed", "p"), t);
        let k = FrameAddr::Kernel { addr: 1 };
        let f = w.frame(k.clone());
        assert_eq!(w.frame(k), f);
        assert_ne!(w.frame(FrameAddr::UnknownUser { addr: 1 }), f);
        assert_eq!(w.stack(&[f, f]), w.stack(&[f, f]));
        assert_ne!(w.stack(&[f]), w.stack(&[f, f]));
        assert_eq!(w.frames().len(), 2);
        assert_eq!(w.string(StringId(1)), "b");
    }

    /// Events that do not match their schema or name unknown ids are refused.
    #[test]
    fn rejects_bad_events() {
        let mut w = CaptureWriter::new(Vec::new(), &info(), &schemas()).unwrap();
        let thread = w.thread(1, 1, "t", "p");
        let good = Event {
            ts_ns: 1,
            cpu: 0,
            thread,
            record: RecordId(2),
            duration_ns: None,
            values: vec![],
            stack: None,
        };
        w.event(&good).unwrap();
        let bad = [
            Event {
                record: RecordId(3),
                ..good.clone()
            },
            Event {
                values: vec![FieldValue::Int(1)],
                ..good.clone()
            },
            Event {
                record: RecordId(0),
                values: vec![FieldValue::Int(1), FieldValue::Int(1)],
                ..good.clone()
            },
            Event {
                record: RecordId(1),
                values: vec![FieldValue::Int(1), FieldValue::Str(StringId(99))],
                ..good.clone()
            },
            Event {
                thread: ThreadId(5),
                ..good.clone()
            },
            Event {
                stack: Some(StackId(0)),
                ..good.clone()
            },
        ];
        for event in &bad {
            let err = w.event(event).unwrap_err();
            assert!(
                matches!(err, CaptureError::Rejected { .. }),
                "{event:?}: {err}"
            );
        }
        assert_eq!(w.events_written(), 1);
        let symbol = Symbol {
            function: Some(StringId(50)),
            ..Symbol::default()
        };
        let f = w.frame(FrameAddr::Kernel { addr: 1 });
        assert!(w.finish(&[(f, symbol)], &CaptureStats::default()).is_err());
    }

    /// xorshift64*: deterministic pseudo-random numbers for the size measurement.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A typical stream (one or two small ints and a stack id, a few hundred
    /// threads and stacks, ~1 µs apart on 8 CPUs) costs at most 20 bytes an event.
    #[test]
    fn bytes_per_event() {
        let mut w = CaptureWriter::new(Vec::new(), &info(), &schemas()).unwrap();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let threads: Vec<ThreadId> = (0..300)
            .map(|i| {
                w.thread(
                    1000 + i,
                    1000 + i / 10,
                    &format!("t{i}"),
                    &format!("p{}", i / 10),
                )
            })
            .collect();
        let stacks: Vec<StackId> = (0..500u64)
            .map(|i| {
                let frames: Vec<FrameId> = (0..12)
                    .map(|k| {
                        w.frame(FrameAddr::Kernel {
                            addr: 0xffff_0000 + (i * 7 + k) % 900,
                        })
                    })
                    .collect();
                w.stack(&frames)
            })
            .collect();
        let n = 1_000_000u64;
        let mut ts_ns = 0;
        for _ in 0..n {
            let r = next(&mut rng);
            ts_ns += 200 + r % 1600;
            let (record, values) = if r >> 40 & 1 == 0 {
                (
                    0,
                    vec![
                        FieldValue::UInt(16 << (r >> 20 & 7)),
                        FieldValue::Int(-3 + (r >> 24 & 7) as i64),
                    ],
                )
            } else {
                (
                    0,
                    vec![FieldValue::UInt(r >> 28 & 0xfff), FieldValue::Int(0)],
                )
            };
            let event = Event {
                ts_ns,
                cpu: (r >> 8 & 7) as u32,
                thread: threads[(r >> 32) as usize % threads.len()],
                record: RecordId(record),
                duration_ns: None,
                values,
                stack: Some(stacks[(r >> 48) as usize % stacks.len()]),
            };
            w.event(&event).unwrap();
        }
        let bytes = w.finish(&[], &CaptureStats::default()).unwrap();
        let per_event = bytes.len() as f64 / n as f64;
        println!(
            "{n} events, {} bytes: {per_event:.2} bytes/event (tables included)",
            bytes.len()
        );
        assert!(per_event <= 20.0, "{per_event} bytes per event");
    }
}
