//! Capture stage, input side: `wprof.data` → tables in memory and a stream of
//! events (layout in `docs/data-format.md`). `open` reads every chunk header
//! once, loading and checking table chunks and remembering where events
//! chunks are; `for_each_event` then reads events chunks one at a time, so
//! memory does not grow with the number of events. A file cut short or
//! damaged is read up to its last good chunk, and `damage` says what was lost.

use std::fmt;
use std::fs::File;
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::format::{
    CHUNK_HEADER_LEN, CaptureError, ChunkHeader, ChunkKind, Decoder, FILE_HEADER_LEN,
    HeaderProblem, MAGIC, Malformed, VERSION, Version, parse_file_header,
};
use super::model::{
    CaptureInfo, CaptureStats, DropReason, Event, FieldSchema, FieldType, FieldValue, FrameAddr,
    FrameId, RecordId, RecordKind, RecordSchema, Stack, StackId, StringId, Symbol, Thread,
    ThreadId,
};
use super::writer::drop_reason_code;

/// A capture opened for replay.
pub struct CaptureReader {
    path: PathBuf,
    file: File,
    version: Version,
    info: CaptureInfo,
    schemas: Vec<RecordSchema>,
    tables: Tables,
    events_chunks: Vec<EventsChunk>,
    events: u64,
    stats: Option<CaptureStats>,
    damage: Option<Damage>,
}

/// The interned tables, grown chunk by chunk.
#[derive(Default)]
struct Tables {
    strings: Vec<Box<str>>,
    threads: Vec<Thread>,
    frames: Vec<FrameAddr>,
    stacks: Vec<Stack>,
    /// Indexed by `FrameId`; empty until a symbols chunk is read.
    symbols: Vec<Option<Symbol>>,
}

/// Where an events chunk is, and the table sizes when it was written: its
/// events may only refer to entries written before it.
struct EventsChunk {
    offset: u64,
    header: ChunkHeader,
    strings: usize,
    threads: usize,
    stacks: usize,
}

/// What part of a capture could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Events in the readable part.
    pub events: u64,
    /// The byte offset where the readable part ends.
    pub readable_end: u64,
    /// Whether the end chunk (with the statistics) was read.
    pub finished: bool,
    /// What stopped reading before the end of the file, if anything did.
    pub cut: Option<Cut>,
}

/// Why reading stopped before the end of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cut {
    /// The last chunk is incomplete (the writer was killed, or the disk filled).
    Incomplete { offset: u64, bytes: u64 },
    /// A chunk failed its checks; nothing from `offset` on is trusted.
    Corrupt {
        offset: u64,
        what: String,
        bytes: u64,
    },
    /// Bytes follow the end chunk.
    AfterEnd { offset: u64, bytes: u64 },
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the capture ends after {} events at byte {}:",
            self.events, self.readable_end
        )?;
        let mut sep = " ";
        if !self.finished {
            write!(f, "{sep}the writer did not finish (no end chunk)")?;
            sep = "; ";
        }
        match &self.cut {
            None => Ok(()),
            Some(Cut::Incomplete { bytes, .. }) => {
                write!(f, "{sep}{bytes} bytes of an incomplete chunk ignored")
            }
            Some(Cut::Corrupt {
                offset,
                what,
                bytes,
            }) => write!(
                f,
                "{sep}corrupt data at byte {offset} ({what}); the {bytes} bytes from there on are ignored"
            ),
            Some(Cut::AfterEnd { bytes, .. }) => {
                write!(f, "{sep}{bytes} bytes after the end chunk ignored")
            }
        }
    }
}

impl CaptureReader {
    /// Opens a capture, reading its description and tables.
    pub fn open(path: &Path) -> Result<CaptureReader, CaptureError> {
        let io = |op| {
            move |source| CaptureError::Io {
                op,
                path: path.to_path_buf(),
                source,
            }
        };
        let file = File::open(path).map_err(io("opening"))?;
        let len = file.metadata().map_err(io("reading"))?.len();
        let version = read_file_header(&file, len, path)?;
        let mut scan = Scan::new(len, path);
        scan.run(&file)?;
        let (Some(info), Some(schemas)) = (scan.info, scan.schemas) else {
            return Err(missing_description(path, scan.readable_end, scan.cut));
        };
        let damage = (!scan.finished || scan.cut.is_some()).then_some(Damage {
            events: scan.events,
            readable_end: scan.readable_end,
            finished: scan.finished,
            cut: scan.cut,
        });
        Ok(CaptureReader {
            path: path.to_path_buf(),
            file,
            version,
            info,
            schemas,
            tables: scan.tables,
            events_chunks: scan.events_chunks,
            events: scan.events,
            stats: scan.stats,
            damage,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The format version the file was written in.
    pub fn version(&self) -> Version {
        self.version
    }

    pub fn info(&self) -> &CaptureInfo {
        &self.info
    }

    pub fn schemas(&self) -> &[RecordSchema] {
        &self.schemas
    }

    /// Panics if `id` does not come from this capture (ids in events do).
    pub fn string(&self, id: StringId) -> &str {
        &self.tables.strings[id.0 as usize]
    }

    pub fn strings_len(&self) -> usize {
        self.tables.strings.len()
    }

    pub fn threads(&self) -> &[Thread] {
        &self.tables.threads
    }

    /// Panics if `id` does not come from this capture (ids in events do).
    pub fn thread(&self, id: ThreadId) -> &Thread {
        &self.tables.threads[id.0 as usize]
    }

    /// Panics if `id` does not come from this capture (ids in events do).
    pub fn stack(&self, id: StackId) -> &Stack {
        &self.tables.stacks[id.0 as usize]
    }

    /// Panics if `id` does not come from this capture (ids in stacks do).
    pub fn frame(&self, id: FrameId) -> &FrameAddr {
        &self.tables.frames[id.0 as usize]
    }

    /// The symbol of a frame; `None` when it did not resolve or the capture
    /// has no symbols (it was cut short).
    pub fn symbol(&self, id: FrameId) -> Option<&Symbol> {
        self.tables.symbols.get(id.0 as usize)?.as_ref()
    }

    pub fn stacks_len(&self) -> usize {
        self.tables.stacks.len()
    }

    pub fn frames_len(&self) -> usize {
        self.tables.frames.len()
    }

    /// Events in the readable part of the file.
    pub fn events_len(&self) -> u64 {
        self.events
    }

    /// The writer's statistics; `None` when it did not finish.
    pub fn stats(&self) -> Option<&CaptureStats> {
        self.stats.as_ref()
    }

    /// What was lost and where; `None` for a complete, intact file.
    pub fn damage(&self) -> Option<&Damage> {
        self.damage.as_ref()
    }

    /// Calls `f` with every event in file order until it breaks. Events
    /// chunks are read and checked one at a time; a damaged one ends the
    /// iteration with `CaptureError::Corrupt` (events before it were delivered).
    pub fn for_each_event(
        &self,
        mut f: impl FnMut(&Event) -> ControlFlow<()>,
    ) -> Result<(), CaptureError> {
        let mut payload = Vec::new();
        let mut event = Event {
            ts_ns: 0,
            cpu: 0,
            thread: ThreadId(0),
            record: RecordId(0),
            duration_ns: None,
            values: Vec::new(),
            stack: None,
        };
        for chunk in &self.events_chunks {
            let start = chunk.offset + CHUNK_HEADER_LEN as u64;
            payload.resize(chunk.header.payload_len as usize, 0);
            read_at(&self.file, &self.path, &mut payload, start)?;
            if crc32fast::hash(&payload) != chunk.header.payload_crc {
                return Err(self.corrupt(chunk.offset, "events chunk checksum mismatch"));
            }
            let limits = Limits {
                schemas: &self.schemas,
                strings: chunk.strings,
                threads: chunk.threads,
                stacks: chunk.stacks,
            };
            let mut d = Decoder::new(&payload, start);
            let mut ts_ns = 0;
            for _ in 0..chunk.header.items {
                decode_event(&mut d, &limits, &mut ts_ns, &mut event)
                    .map_err(|m| self.malformed(m))?;
                if f(&event).is_break() {
                    return Ok(());
                }
            }
            d.finish().map_err(|m| self.malformed(m))?;
        }
        Ok(())
    }

    fn corrupt(&self, offset: u64, what: &str) -> CaptureError {
        CaptureError::Corrupt {
            path: self.path.clone(),
            offset,
            what: what.into(),
        }
    }

    fn malformed(&self, m: Malformed) -> CaptureError {
        self.corrupt(m.offset, &m.what)
    }
}

/// Reads and checks the file header, returning the file's version.
fn read_file_header(file: &File, len: u64, path: &Path) -> Result<Version, CaptureError> {
    let mut header = [0u8; FILE_HEADER_LEN];
    let have = len.min(FILE_HEADER_LEN as u64) as usize;
    read_at(file, path, &mut header[..have], 0)?;
    if have < FILE_HEADER_LEN {
        let n = have.min(MAGIC.len());
        return Err(if header[..n] == MAGIC[..n] {
            CaptureError::Truncated {
                path: path.to_path_buf(),
                offset: len,
                what: "file header",
            }
        } else {
            CaptureError::NotACapture {
                path: path.to_path_buf(),
            }
        });
    }
    let version = parse_file_header(&header).map_err(|problem| match problem {
        HeaderProblem::NotACapture => CaptureError::NotACapture {
            path: path.to_path_buf(),
        },
        HeaderProblem::Checksum => CaptureError::Corrupt {
            path: path.to_path_buf(),
            offset: 0,
            what: "file header checksum mismatch".into(),
        },
    })?;
    if version.major > VERSION.major {
        return Err(CaptureError::NewerVersion {
            path: path.to_path_buf(),
            found: version,
            supported: VERSION,
        });
    }
    if version.major == 0 {
        return Err(CaptureError::Corrupt {
            path: path.to_path_buf(),
            offset: 8,
            what: format!("format version {version} does not exist"),
        });
    }
    Ok(version)
}

fn read_at(file: &File, path: &Path, buf: &mut [u8], offset: u64) -> Result<(), CaptureError> {
    file.read_exact_at(buf, offset)
        .map_err(|source| CaptureError::Io {
            op: "reading",
            path: path.to_path_buf(),
            source,
        })
}

/// The error for a file whose info or schemas chunk could not be read.
fn missing_description(path: &Path, end: u64, cut: Option<Cut>) -> CaptureError {
    match cut {
        Some(Cut::Corrupt { offset, what, .. }) => CaptureError::Corrupt {
            path: path.to_path_buf(),
            offset,
            what,
        },
        _ => CaptureError::Truncated {
            path: path.to_path_buf(),
            offset: end,
            what: "description (info and schemas chunks)",
        },
    }
}

/// The state of `open`'s walk over the chunk headers.
struct Scan<'a> {
    len: u64,
    path: &'a Path,
    info: Option<CaptureInfo>,
    schemas: Option<Vec<RecordSchema>>,
    tables: Tables,
    events_chunks: Vec<EventsChunk>,
    events: u64,
    stats: Option<CaptureStats>,
    finished: bool,
    readable_end: u64,
    cut: Option<Cut>,
}

impl<'a> Scan<'a> {
    fn new(len: u64, path: &'a Path) -> Scan<'a> {
        Scan {
            len,
            path,
            info: None,
            schemas: None,
            tables: Tables::default(),
            events_chunks: Vec::new(),
            events: 0,
            stats: None,
            finished: false,
            readable_end: FILE_HEADER_LEN as u64,
            cut: None,
        }
    }

    /// Walks the chunks until the end of the file or the first damage.
    fn run(&mut self, file: &File) -> Result<(), CaptureError> {
        while self.readable_end < self.len {
            let offset = self.readable_end;
            let rest = self.len - offset;
            if self.finished {
                self.cut = Some(Cut::AfterEnd {
                    offset,
                    bytes: rest,
                });
                break;
            }
            if rest < CHUNK_HEADER_LEN as u64 {
                self.cut = Some(Cut::Incomplete {
                    offset,
                    bytes: rest,
                });
                break;
            }
            let mut raw = [0u8; CHUNK_HEADER_LEN];
            read_at(file, self.path, &mut raw, offset)?;
            let header = match ChunkHeader::decode(&raw) {
                Ok(header) => header,
                Err(what) => {
                    self.cut_corrupt(offset, what.into());
                    break;
                }
            };
            let end = offset + CHUNK_HEADER_LEN as u64 + u64::from(header.payload_len);
            if end > self.len {
                self.cut = Some(Cut::Incomplete {
                    offset,
                    bytes: rest,
                });
                break;
            }
            let kind = ChunkKind::from_u8(header.kind);
            let mut payload = Vec::new();
            if kind.is_some_and(|k| k != ChunkKind::Events) {
                payload.resize(header.payload_len as usize, 0);
                read_at(
                    file,
                    self.path,
                    &mut payload,
                    offset + CHUNK_HEADER_LEN as u64,
                )?;
            }
            if let Err(m) = self.chunk(offset, header, &payload) {
                self.cut_corrupt(m.offset, m.what);
                break;
            }
            self.readable_end = end;
        }
        Ok(())
    }

    fn cut_corrupt(&mut self, offset: u64, what: String) {
        let bytes = self.len - self.readable_end;
        self.cut = Some(Cut::Corrupt {
            offset,
            what,
            bytes,
        });
    }

    /// Takes in one chunk whose header is good and whose payload is in the
    /// file; `payload` is read for known kinds other than events.
    fn chunk(&mut self, offset: u64, header: ChunkHeader, payload: &[u8]) -> Result<(), Malformed> {
        let Some(kind) = ChunkKind::from_u8(header.kind) else {
            return Ok(()); // a newer minor version's chunk: skipped by design
        };
        let expected = match (&self.info, &self.schemas) {
            (None, _) => Some(ChunkKind::Info),
            (Some(_), None) => Some(ChunkKind::Schemas),
            _ => None,
        };
        let misplaced = match expected {
            Some(expected) => kind != expected,
            None => matches!(kind, ChunkKind::Info | ChunkKind::Schemas),
        };
        if misplaced {
            return Err(Malformed {
                offset,
                what: format!("unexpected {} chunk", kind.name()),
            });
        }
        if kind == ChunkKind::Events {
            self.events_chunks.push(EventsChunk {
                offset,
                header,
                strings: self.tables.strings.len(),
                threads: self.tables.threads.len(),
                stacks: self.tables.stacks.len(),
            });
            self.events += u64::from(header.items);
            return Ok(());
        }
        let start = offset + CHUNK_HEADER_LEN as u64;
        if crc32fast::hash(payload) != header.payload_crc {
            return Err(Malformed {
                offset,
                what: format!("{} chunk checksum mismatch", kind.name()),
            });
        }
        let mut d = Decoder::new(payload, start);
        self.decode(kind, header.items, &mut d)?;
        d.finish()
    }

    fn decode(&mut self, kind: ChunkKind, items: u32, d: &mut Decoder) -> Result<(), Malformed> {
        let t = &mut self.tables;
        let n = (items as usize).min(d.remaining());
        match kind {
            ChunkKind::Info => self.info = Some(decode_info(d)?),
            ChunkKind::Schemas => {
                let mut schemas = Vec::with_capacity(n);
                for _ in 0..items {
                    schemas.push(decode_schema(d)?);
                }
                self.schemas = Some(schemas);
            }
            ChunkKind::Strings => {
                t.strings.reserve(n);
                for _ in 0..items {
                    t.strings.push(d.string()?.into_boxed_str());
                }
            }
            ChunkKind::Threads => {
                t.threads.reserve(n);
                for _ in 0..items {
                    let thread = decode_thread(d, t.strings.len())?;
                    t.threads.push(thread);
                }
            }
            ChunkKind::Frames => {
                t.frames.reserve(n);
                for _ in 0..items {
                    let frame = decode_frame(d, t.strings.len())?;
                    t.frames.push(frame);
                }
            }
            ChunkKind::Stacks => {
                t.stacks.reserve(n);
                for _ in 0..items {
                    let stack = decode_stack(d, t.frames.len())?;
                    t.stacks.push(stack);
                }
            }
            ChunkKind::Symbols => {
                t.symbols.resize(t.frames.len(), None);
                for _ in 0..items {
                    let (frame, symbol) = decode_symbol(d, t.frames.len(), t.strings.len())?;
                    t.symbols[frame.0 as usize] = Some(symbol);
                }
            }
            ChunkKind::End => {
                self.stats = Some(decode_stats(d)?);
                self.finished = true;
            }
            // read by `for_each_event`, not by the scan
            ChunkKind::Events => {}
        }
        Ok(())
    }
}

/// The table sizes an events chunk may refer to.
struct Limits<'a> {
    schemas: &'a [RecordSchema],
    strings: usize,
    threads: usize,
    stacks: usize,
}

/// Decodes the next event into `event`, reusing its `values`.
#[inline]
fn decode_event(
    d: &mut Decoder,
    limits: &Limits,
    ts_ns: &mut u64,
    event: &mut Event,
) -> Result<(), Malformed> {
    let at = d.offset();
    let key = d.uvarint()?;
    let Some(schema) = limits.schemas.get((key >> 2) as usize) else {
        return Err(Malformed {
            offset: at,
            what: format!("record id {} out of range", key >> 2),
        });
    };
    *ts_ns = ts_ns.wrapping_add(d.ivarint()? as u64);
    event.ts_ns = *ts_ns;
    event.record = RecordId((key >> 2) as u32);
    event.cpu = d.u32()?;
    event.thread = ThreadId(d.index(limits.threads, "thread")?);
    event.duration_ns = if key & 1 != 0 {
        Some(d.uvarint()?)
    } else {
        None
    };
    event.values.clear();
    for field in &schema.fields {
        event.values.push(match field.ty {
            FieldType::Int => FieldValue::Int(d.ivarint()?),
            FieldType::UInt => FieldValue::UInt(d.uvarint()?),
            FieldType::Str => FieldValue::Str(StringId(d.index(limits.strings, "string")?)),
        });
    }
    event.stack = if key & 2 != 0 {
        Some(StackId(d.index(limits.stacks, "stack")?))
    } else {
        None
    };
    Ok(())
}

fn decode_info(d: &mut Decoder) -> Result<CaptureInfo, Malformed> {
    let args = d.count()?;
    let mut command_line = Vec::with_capacity(args);
    for _ in 0..args {
        command_line.push(d.string()?);
    }
    Ok(CaptureInfo {
        command_line,
        script: d.string()?,
        script_name: d.string()?,
        hostname: d.string()?,
        kernel_release: d.string()?,
        cpus: d.u32()?,
        start_monotonic_ns: d.uvarint()?,
        start_realtime_ns: d.uvarint()?,
        wprof_version: d.string()?,
    })
}

fn decode_schema(d: &mut Decoder) -> Result<RecordSchema, Malformed> {
    let probe = d.string()?;
    let name = d.string()?;
    let kind = match d.u8()? {
        0 => RecordKind::Instant,
        1 => RecordKind::Span,
        k => return Err(d.error(format!("unknown record kind {k}"))),
    };
    let n = d.count()?;
    let mut fields = Vec::with_capacity(n);
    for _ in 0..n {
        let name = d.string()?;
        let ty = match d.u8()? {
            0 => FieldType::Int,
            1 => FieldType::UInt,
            2 => FieldType::Str,
            t => return Err(d.error(format!("unknown field type {t}"))),
        };
        fields.push(FieldSchema { name, ty });
    }
    let has_stack = match d.u8()? {
        0 => false,
        1 => true,
        b => return Err(d.error(format!("has_stack is {b}, not 0 or 1"))),
    };
    Ok(RecordSchema {
        probe,
        name,
        kind,
        fields,
        has_stack,
    })
}

fn decode_thread(d: &mut Decoder, strings: usize) -> Result<Thread, Malformed> {
    Ok(Thread {
        tid: d.u32()?,
        pid: d.u32()?,
        name: StringId(d.index(strings, "string")?),
        process_name: StringId(d.index(strings, "string")?),
    })
}

fn decode_frame(d: &mut Decoder, strings: usize) -> Result<FrameAddr, Malformed> {
    Ok(match d.u8()? {
        0 => FrameAddr::Kernel { addr: d.uvarint()? },
        1 => {
            let module = StringId(d.index(strings, "string")?);
            let build_id = match d.option()? {
                None => None,
                Some(len) => Some(d.take(len as usize)?.to_vec()),
            };
            FrameAddr::User {
                module,
                build_id,
                file_offset: d.uvarint()?,
            }
        }
        2 => FrameAddr::UnknownUser { addr: d.uvarint()? },
        t => return Err(d.error(format!("unknown frame kind {t}"))),
    })
}

fn decode_stack(d: &mut Decoder, frames: usize) -> Result<Stack, Malformed> {
    let n = d.count()?;
    let mut ids = Vec::with_capacity(n);
    let mut prev = 0i64;
    for _ in 0..n {
        let at = d.offset();
        let id = prev.wrapping_add(d.ivarint()?);
        if id < 0 || id as u64 >= frames as u64 {
            return Err(Malformed {
                offset: at,
                what: format!("frame id {id} out of range ({frames} known)"),
            });
        }
        ids.push(FrameId(id as u32));
        prev = id;
    }
    Ok(Stack { frames: ids })
}

fn decode_symbol(
    d: &mut Decoder,
    frames: usize,
    strings: usize,
) -> Result<(FrameId, Symbol), Malformed> {
    let frame = FrameId(d.index(frames, "frame")?);
    let string = |d: &mut Decoder| -> Result<Option<StringId>, Malformed> {
        let at = d.offset();
        match d.option()? {
            Some(id) if (id as usize) < strings => Ok(Some(StringId(id))),
            Some(id) => Err(Malformed {
                offset: at,
                what: format!("string id {id} out of range ({strings} known)"),
            }),
            None => Ok(None),
        }
    };
    let function = string(d)?;
    let offset = d.uvarint()?;
    let file = string(d)?;
    let line = d.option()?;
    let n = d.count()?;
    let mut inlined = Vec::with_capacity(n);
    for _ in 0..n {
        inlined.push(StringId(d.index(strings, "string")?));
    }
    let symbol = Symbol {
        function,
        offset,
        file,
        line,
        inlined,
    };
    Ok((frame, symbol))
}

fn decode_stats(d: &mut Decoder) -> Result<CaptureStats, Malformed> {
    let events = d.uvarint()?;
    let n = d.count()?;
    let mut drops = Vec::with_capacity(n);
    for _ in 0..n {
        let code = d.u8()?;
        let reason = [
            DropReason::RingBufferFull,
            DropReason::StackLost,
            DropReason::UnmatchedSpanEnd,
        ]
        .into_iter()
        .find(|r| drop_reason_code(*r) == code)
        .ok_or_else(|| d.error(format!("unknown drop reason {code}")))?;
        drops.push((reason, d.uvarint()?));
    }
    Ok(CaptureStats {
        events,
        drops,
        duration_ns: d.uvarint()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::format::{VERSION, file_header};
    use crate::capture::writer::CaptureWriter;
    use crate::capture::writer::tests::{Sample, info, sample, schemas};
    use std::time::Instant;

    /// Writes `bytes` to a fresh file and opens it.
    fn open_bytes(dir: &tempfile::TempDir, bytes: &[u8]) -> Result<CaptureReader, CaptureError> {
        let path = dir.path().join("wprof.data");
        std::fs::write(&path, bytes).expect("write test file");
        CaptureReader::open(&path)
    }

    fn collect(reader: &CaptureReader) -> Result<Vec<Event>, CaptureError> {
        let mut events = vec![];
        reader.for_each_event(|e| {
            events.push(e.clone());
            ControlFlow::Continue(())
        })?;
        Ok(events)
    }

    /// (start, end) of every chunk in an intact file.
    fn chunks(bytes: &[u8]) -> Vec<(usize, usize)> {
        let mut out = vec![];
        let mut at = FILE_HEADER_LEN;
        while at < bytes.len() {
            let raw: [u8; CHUNK_HEADER_LEN] = bytes[at..at + CHUNK_HEADER_LEN].try_into().unwrap();
            let header = ChunkHeader::decode(&raw).unwrap();
            let end = at + CHUNK_HEADER_LEN + header.payload_len as usize;
            out.push((at, end));
            at = end;
        }
        out
    }

    fn check_round_trip(s: &Sample, r: &CaptureReader) {
        assert_eq!(r.info(), &s.info);
        assert_eq!(r.schemas(), &s.schemas[..]);
        assert_eq!(r.version(), VERSION);
        assert_eq!(r.strings_len(), s.strings.len());
        for (id, text) in &s.strings {
            assert_eq!(r.string(*id), text);
        }
        let threads: Vec<Thread> = s.threads.iter().map(|(_, t)| t.clone()).collect();
        assert_eq!(r.threads(), &threads[..]);
        for (id, t) in &s.threads {
            assert_eq!(r.thread(*id), t);
        }
        assert_eq!(r.frames_len(), s.frames.len());
        for (i, f) in s.frames.iter().enumerate() {
            assert_eq!(r.frame(FrameId(i as u32)), f);
        }
        assert_eq!(r.stacks_len(), s.stacks.len());
        for (id, frames) in &s.stacks {
            assert_eq!(&r.stack(*id).frames, frames);
        }
        for (id, symbol) in &s.symbols {
            assert_eq!(r.symbol(*id), Some(symbol));
        }
        assert_eq!(r.symbol(FrameId(2)), None);
        assert_eq!(r.symbol(FrameId(9999)), None);
        assert_eq!(r.stats(), Some(&s.stats));
        assert_eq!(r.events_len(), s.events.len() as u64);
        assert_eq!(collect(r).unwrap(), s.events);
    }

    /// Every model type comes back as written, with one or many events chunks.
    #[test]
    fn round_trips_every_type() {
        let dir = tempfile::tempdir().unwrap();
        for chunk_bytes in [1, 100, 1 << 20] {
            let s = sample(chunk_bytes);
            let r = open_bytes(&dir, &s.bytes).unwrap();
            assert_eq!(r.damage(), None);
            check_round_trip(&s, &r);
        }
    }

    /// `create` writes a file that opens, even with no events or symbols.
    #[test]
    fn empty_capture_through_create() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wprof.data");
        let w = CaptureWriter::create(&path, &info(), &[]).unwrap();
        w.finish(&[], &CaptureStats::default()).unwrap();
        let r = CaptureReader::open(&path).unwrap();
        assert_eq!(r.damage(), None);
        assert!(r.schemas().is_empty());
        assert_eq!(r.stats(), Some(&CaptureStats::default()));
        assert_eq!(collect(&r).unwrap(), vec![]);
    }

    /// Iteration stops when the callback breaks.
    #[test]
    fn for_each_event_stops_on_break() {
        let dir = tempfile::tempdir().unwrap();
        let s = sample(64);
        let r = open_bytes(&dir, &s.bytes).unwrap();
        let mut seen = 0;
        r.for_each_event(|_| {
            seen += 1;
            if seen == 10 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
        assert_eq!(seen, 10);
    }

    /// A file cut at any byte opens with its damage described (or fails
    /// cleanly before its description) and yields a prefix of the events.
    #[test]
    fn truncated_at_every_offset() {
        let dir = tempfile::tempdir().unwrap();
        let s = sample(64);
        let layout = chunks(&s.bytes);
        let description_end = layout[1].1;
        for len in 0..s.bytes.len() {
            let result = open_bytes(&dir, &s.bytes[..len]);
            let r = match result {
                Err(CaptureError::Truncated { offset, .. }) if len < description_end => {
                    assert!(offset <= len as u64);
                    continue;
                }
                Err(e) => panic!("cut at {len}: {e}"),
                Ok(r) => r,
            };
            assert!(len >= description_end, "cut at {len} opened");
            let damage = r.damage().expect("a cut file is damaged");
            let events = collect(&r).unwrap_or_else(|e| panic!("cut at {len}: {e}"));
            assert_eq!(damage.events, events.len() as u64);
            assert_eq!(events[..], s.events[..events.len()]);
            assert!(damage.readable_end <= len as u64);
            let partial = len as u64 - damage.readable_end;
            if partial > 0 {
                assert!(
                    matches!(damage.cut, Some(Cut::Incomplete { bytes, .. }) if bytes == partial)
                );
            }
            assert_eq!(damage.finished, r.stats().is_some());
        }
    }

    /// Any flipped byte is detected and reported with an offset inside the
    /// damaged chunk (or the file header), never a panic or wrong events.
    #[test]
    fn flipped_bytes_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let s = sample(64);
        let layout = chunks(&s.bytes);
        for i in 0..s.bytes.len() {
            let mut bytes = s.bytes.clone();
            bytes[i] ^= 0x5a;
            let Some(&(start, end)) = layout.iter().find(|(a, b)| (*a..*b).contains(&i)) else {
                let err = open_bytes(&dir, &bytes)
                    .err()
                    .expect("bad file header opened");
                assert!(
                    matches!(
                        err,
                        CaptureError::NotACapture { .. } | CaptureError::Corrupt { offset: 0, .. }
                    ),
                    "byte {i}: {err}"
                );
                continue;
            };
            let in_chunk = |offset: u64| (start as u64..end as u64).contains(&offset);
            let r = match open_bytes(&dir, &bytes) {
                Err(CaptureError::Corrupt { offset, .. }) if in_chunk(offset) => continue,
                Err(e) => panic!("byte {i}: {e}"),
                Ok(r) => r,
            };
            if let Some(Cut::Corrupt { offset, .. }) = r.damage().and_then(|d| d.cut.as_ref()) {
                assert!(in_chunk(*offset), "byte {i} reported at {offset}");
                let events = collect(&r).unwrap();
                assert_eq!(events[..], s.events[..events.len()]);
                continue;
            }
            // an events chunk's payload: found when that chunk is read
            match collect(&r) {
                Err(CaptureError::Corrupt { offset, .. }) => {
                    assert!(in_chunk(offset), "byte {i} reported at {offset}")
                }
                other => panic!("byte {i} not detected: {:?}", other.map(|e| e.len())),
            }
        }
    }

    /// Ids that point past their table are reported with the offset of the
    /// id, even in chunks whose checksums are right.
    #[test]
    fn rejects_ids_out_of_range() {
        let dir = tempfile::tempdir().unwrap();
        let s = sample(64);
        let description = &s.bytes[..chunks(&s.bytes)[1].1];
        let chunk = |kind, items, payload: &[u8]| -> Vec<u8> {
            let header = ChunkHeader::for_payload(kind, items, payload).unwrap();
            header.encode().iter().chain(payload).copied().collect()
        };
        let mut bytes = description.to_vec();
        let threads_at = bytes.len() as u64;
        bytes.extend(chunk(ChunkKind::Threads, 1, &[1, 1, 5, 5]));
        let r = open_bytes(&dir, &bytes).unwrap();
        let cut = r.damage().unwrap().cut.clone();
        assert!(matches!(cut, Some(Cut::Corrupt { offset, .. }) if offset == threads_at + 22));

        let mut bytes = description.to_vec();
        let events_at = bytes.len() as u64;
        // record 2 (no fields), ts 0, cpu 0, thread 3 of none
        bytes.extend(chunk(ChunkKind::Events, 1, &[2 << 2, 0, 0, 3]));
        let r = open_bytes(&dir, &bytes).unwrap();
        assert_eq!(r.events_len(), 1);
        let err = collect(&r).unwrap_err();
        assert!(
            matches!(err, CaptureError::Corrupt { offset, .. } if offset == events_at + 23),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("thread id 3 out of range (0 known)"),
            "{err}"
        );
    }

    /// A file that is not a capture says so.
    #[test]
    fn rejects_wrong_magic() {
        let dir = tempfile::tempdir().unwrap();
        for bytes in [&b"PK\x03\x04 not a capture at all"[..], b"x", &[0u8; 64]] {
            let err = open_bytes(&dir, bytes).err().unwrap();
            assert!(matches!(err, CaptureError::NotACapture { .. }), "{err}");
            assert!(err.to_string().ends_with("is not a wprof capture"), "{err}");
        }
        let err = open_bytes(&dir, b"").err().unwrap();
        assert!(
            matches!(err, CaptureError::Truncated { offset: 0, .. }),
            "{err}"
        );
    }

    /// A file from a newer major version names both versions; a newer minor
    /// version is read, skipping the chunk kinds it added.
    #[test]
    fn newer_versions() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = sample(64).bytes;
        let newer = Version {
            major: VERSION.major + 1,
            minor: 0,
        };
        bytes[..FILE_HEADER_LEN].copy_from_slice(&file_header(newer));
        let err = open_bytes(&dir, &bytes).err().unwrap();
        assert!(
            matches!(err, CaptureError::NewerVersion { found, supported, .. }
            if found == newer && supported == VERSION)
        );
        let text = err.to_string();
        assert!(
            text.contains("format 2.0") && text.contains("format 1.0"),
            "{text}"
        );

        let s = sample(64);
        let mut bytes = s.bytes.clone();
        let minor = Version {
            major: VERSION.major,
            minor: VERSION.minor + 1,
        };
        bytes[..FILE_HEADER_LEN].copy_from_slice(&file_header(minor));
        let unknown = ChunkHeader {
            kind: 200,
            payload_len: 3,
            items: 1,
            payload_crc: crc32fast::hash(b"new"),
        };
        let at = chunks(&bytes)[2].0;
        let extra: Vec<u8> = unknown.encode().iter().chain(b"new").copied().collect();
        bytes.splice(at..at, extra);
        let r = open_bytes(&dir, &bytes).unwrap();
        assert_eq!(r.version(), minor);
        assert_eq!(r.damage(), None);
        assert_eq!(collect(&r).unwrap(), s.events);
    }

    /// A writer killed after `flush` (dropped without `finish`) leaves a file
    /// that replays the flushed events and says the writer did not finish.
    #[test]
    fn killed_writer_replays_flushed_events() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wprof.data");
        let s = sample(1 << 20);
        let mut w = CaptureWriter::create(&path, &s.info, &s.schemas).unwrap();
        let thread = w.thread(1, 1, "t", "p");
        let event = |ts_ns| Event {
            ts_ns,
            cpu: 1,
            thread,
            record: RecordId(2),
            duration_ns: None,
            values: vec![],
            stack: None,
        };
        for ts in 0..1234 {
            w.event(&event(ts)).unwrap();
        }
        w.flush().unwrap();
        let complete = std::fs::metadata(&path).unwrap().len();
        for ts in 2000..2100 {
            w.event(&event(ts)).unwrap();
        }
        w.flush().unwrap();
        w.event(&event(5000)).unwrap();
        std::mem::forget(w); // SIGKILL: no destructor runs, the unflushed event is lost
        // the second flush's write was cut short after 30 bytes
        let bytes = &std::fs::read(&path).unwrap()[..complete as usize + 30];
        let r = open_bytes(&dir, bytes).unwrap();
        assert_eq!(r.stats(), None);
        let damage = r.damage().unwrap();
        assert_eq!(
            damage.to_string(),
            format!(
                "the capture ends after 1234 events at byte {complete}: the writer did not \
                 finish (no end chunk); 30 bytes of an incomplete chunk ignored"
            )
        );
        assert_eq!(collect(&r).unwrap().len(), 1234);
    }

    /// Bytes after the end chunk are reported, the capture is still read.
    #[test]
    fn reports_bytes_after_end() {
        let dir = tempfile::tempdir().unwrap();
        let s = sample(64);
        let mut bytes = s.bytes.clone();
        bytes.extend_from_slice(&[0; 100]);
        let r = open_bytes(&dir, &bytes).unwrap();
        let damage = r.damage().unwrap();
        assert!(damage.finished);
        assert_eq!(
            damage.cut,
            Some(Cut::AfterEnd {
                offset: s.bytes.len() as u64,
                bytes: 100
            })
        );
        assert!(
            damage
                .to_string()
                .ends_with("100 bytes after the end chunk ignored")
        );
        check_round_trip(&s, &r);
    }

    /// Decoding is far faster than the 10 M events/s replay target.
    #[test]
    fn decode_throughput() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wprof.data");
        let mut w = CaptureWriter::create(&path, &info(), &schemas()).unwrap();
        let threads: Vec<ThreadId> = (0..64).map(|i| w.thread(i, i, "t", "p")).collect();
        let stack = w.stack(&[]);
        let n = 2_000_000u64;
        for i in 0..n {
            let event = Event {
                ts_ns: i * 1000,
                cpu: (i % 8) as u32,
                thread: threads[(i % 64) as usize],
                record: RecordId(0),
                duration_ns: None,
                values: vec![FieldValue::UInt(i % 4096), FieldValue::Int(-1)],
                stack: Some(stack),
            };
            w.event(&event).unwrap();
        }
        w.finish(&[], &CaptureStats::default()).unwrap();
        let r = CaptureReader::open(&path).unwrap();
        let started = Instant::now();
        let mut sum = 0u64;
        r.for_each_event(|e| {
            sum = sum.wrapping_add(e.ts_ns);
            ControlFlow::Continue(())
        })
        .unwrap();
        let rate = n as f64 / started.elapsed().as_secs_f64();
        println!("decoded {n} events at {:.1} M events/s", rate / 1e6);
        assert_eq!(sum, (0..n).map(|i| i * 1000).sum::<u64>());
    }
}
