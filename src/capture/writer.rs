//! Capture stage, output side: interned tables and events → `wprof.data`
//! chunks (layout in `docs/data-format.md`). Table entries are encoded as they
//! are created and written before the first events chunk that can use them,
//! so every complete prefix of the file is a consistent capture. Every chunk
//! after the description follows a sequence mark that numbers it.

mod sink;

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;

use self::sink::{Pending, Sink};
use super::files::create_output;
use super::format::{
    CaptureError, ChunkKind, MAX_CPUS, MAX_EVENTS_PAYLOAD, VERSION, file_header, put_bytes,
    put_ivarint, put_uvarint,
};
use super::model::{
    CaptureInfo, CaptureStats, Event, FieldType, FieldValue, FrameAddr, FrameId, RecordKind,
    RecordOrigin, RecordSchema, StackId, StringId, Symbol, Thread, ThreadId, ThreadInfo,
};
use super::walk::StackWalk;

/// Events are cut into chunks of about this many payload bytes: small enough
/// that a crash loses little, large enough that chunk headers cost nothing.
pub const EVENTS_CHUNK_BYTES: usize = 64 * 1024;

/// Table entries (strings, frames, stacks, threads, symbols) are cut into
/// chunks of about this many payload bytes, far below the readers' limit.
pub const TABLE_CHUNK_BYTES: usize = 1 << 20;

/// Writes a capture. Ids handed out by `intern`, `thread`, `frame` and
/// `stack` are valid for events given to this writer only.
pub struct CaptureWriter<W: Write> {
    sink: Sink<W>,
    schemas: Vec<RecordSchema>,
    strings: Vec<Arc<str>>,
    string_ids: HashMap<Arc<str>, StringId>,
    threads: HashMap<Thread, ThreadId>,
    frames: Vec<FrameAddr>,
    frame_ids: HashMap<FrameAddr, FrameId>,
    stacks: HashMap<Box<[FrameId]>, StackId>,
    /// Encoded table entries not yet written, in the order they must be written.
    pending: [Pending; 4],
    events: Pending,
    /// One walk code per event of `events` with a stack, written after it.
    walks: Pending,
    prev_ts_ns: u64,
    /// The newest time of the events in `events`.
    newest_ns: u64,
    events_chunk_bytes: usize,
    events_written: u64,
}

const STRINGS: usize = 0;
const FRAMES: usize = 1;
const STACKS: usize = 2;
const THREADS: usize = 3;

impl CaptureWriter<BufWriter<File>> {
    /// Creates (or truncates) `path` as a private file (`files::create_output`:
    /// no symbolic link followed, mode 0600) and writes the capture's description.
    pub fn create(
        path: &Path,
        info: &CaptureInfo,
        schemas: &[RecordSchema],
    ) -> Result<Self, CaptureError> {
        let file = create_output(path)?;
        let sink = Sink::new(
            BufWriter::new(file),
            Some(path.to_path_buf()),
            Some(info.start_monotonic_ns),
        );
        Self::start(sink, info, schemas)
    }
}

impl<W: Write> CaptureWriter<W> {
    /// Writes the file header and the capture's description to `out`.
    #[cfg(test)]
    pub(crate) fn new(
        out: W,
        info: &CaptureInfo,
        schemas: &[RecordSchema],
    ) -> Result<Self, CaptureError> {
        Self::start(Sink::new(out, None, None), info, schemas)
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
        sink.marking = true;
        if let Some(pid) = info.command_pid {
            payload.clear();
            put_uvarint(&mut payload, u64::from(pid));
            sink.write_chunk(ChunkKind::Command, 1, &payload)?;
        }
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
            walks: Pending::new(ChunkKind::StackWalks),
            prev_ts_ns: 0,
            newest_ns: 0,
            events_chunk_bytes: EVENTS_CHUNK_BYTES,
            events_written: 0,
        })
    }

    /// Cuts events chunks at about `bytes` payload bytes instead of
    /// `EVENTS_CHUNK_BYTES` (tests use small chunks to get many of them).
    pub fn set_events_chunk_bytes(&mut self, bytes: usize) {
        self.events_chunk_bytes = bytes.clamp(1, MAX_EVENTS_PAYLOAD as usize / 2);
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
        pending.added();
        self.strings.push(s.clone());
        self.string_ids.insert(s, id);
        id
    }

    /// The id of a thread; the same identity (including both names) gives
    /// the same id, a rename makes a new entry.
    pub fn thread(&mut self, info: &ThreadInfo) -> ThreadId {
        let thread = Thread {
            tid: info.tid,
            pid: info.pid,
            name: self.intern(info.name),
            process_name: self.intern(info.process_name),
            ppid: info.ppid,
            kthread: info.kthread,
        };
        let next = next_id(self.threads.len(), "threads");
        let pending = &mut self.pending[THREADS];
        *self.threads.entry(thread).or_insert_with_key(|thread| {
            encode_thread(&mut pending.payload, thread);
            pending.added();
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
        pending.added();
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
        pending.added();
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
        self.newest_ns = self.newest_ns.max(event.ts_ns);
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
                FieldValue::Thread(id) => put_uvarint(out, u64::from(id.0)),
            }
        }
        if let Some(stack) = event.stack {
            put_uvarint(out, u64::from(stack.0));
            self.walks
                .payload
                .push(event.walk.map_or(0, StackWalk::code));
            self.walks.items += 1;
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
                (FieldValue::Thread(id), FieldType::Thread) => (id.0 as usize) < self.threads.len(),
                _ => false,
            };
            if !fits {
                return reject(format!(
                    "{value:?} for field `{}` ({:?}) of record `{}`",
                    field.name, field.ty, schema.name
                ));
            }
        }
        if event.cpu >= MAX_CPUS {
            return reject(format!("CPU {} (the limit is {MAX_CPUS})", event.cpu));
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
        let through = &mut self.sink.through;
        through.newest_ns = through.newest_ns.max(self.newest_ns);
        // Before its events: a file cut between them loses both.
        if self.walks.payload.iter().any(|&code| code != 0) {
            self.sink.write_pending(&mut self.walks)?;
        }
        self.walks.payload.clear();
        self.walks.items = 0;
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
        let mut pending = Pending::new(ChunkKind::Symbols);
        for (frame, symbol) in symbols {
            self.check_symbol(*frame, symbol)?;
            encode_symbol(&mut pending.payload, *frame, symbol);
            pending.added();
        }
        self.sink.write_pending(&mut pending)?;
        let mut payload = Vec::new();
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
    let settings = &info.settings;
    for list in [
        &settings.features,
        &settings.stacks,
        &settings.pmu,
        &settings.filters,
    ] {
        put_uvarint(out, list.len() as u64);
        for item in list {
            put_bytes(out, item.as_bytes());
        }
    }
    for spec in [&settings.prepare, &settings.activate] {
        put_bytes(out, spec.as_deref().unwrap_or("").as_bytes());
    }
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
            FieldType::Thread => 3,
        });
    }
    out.push(u8::from(schema.has_stack));
    out.push(match schema.origin {
        RecordOrigin::Script => 0,
        RecordOrigin::Tracker => 1,
    });
}

fn encode_thread(out: &mut Vec<u8>, thread: &Thread) {
    put_uvarint(out, u64::from(thread.tid));
    put_uvarint(out, u64::from(thread.pid));
    put_uvarint(out, u64::from(thread.name.0));
    put_uvarint(out, u64::from(thread.process_name.0));
    put_uvarint(out, u64::from(thread.ppid));
    out.push(u8::from(thread.kthread));
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

pub(super) fn encode_stats(out: &mut Vec<u8>, stats: &CaptureStats) {
    put_uvarint(out, stats.events);
    put_uvarint(out, stats.drops.len() as u64);
    for (reason, count) in &stats.drops {
        out.push(reason.code());
        put_uvarint(out, *count);
    }
    put_uvarint(out, stats.duration_ns);
    put_uvarint(out, stats.stacks.len() as u64);
    for (count, n) in &stats.stacks {
        out.push(count.code());
        put_uvarint(out, *n);
    }
    put_uvarint(out, stats.record_drops.len() as u64);
    for drop in &stats.record_drops {
        put_uvarint(out, u64::from(drop.record.0));
        out.push(drop.reason.code());
        put_uvarint(out, drop.count);
    }
}

#[cfg(test)]
pub(crate) mod tests;
