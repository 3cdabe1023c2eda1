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
    CaptureInfo, CaptureSettings, CaptureStats, DropReason, Event, FieldSchema, FieldType,
    FieldValue, FrameAddr, FrameId, RecordId, RecordKind, RecordOrigin, RecordSchema, Stack,
    StackId, StringId, Symbol, Thread, ThreadId,
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
        let mut event = Event::default();
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
            FieldType::Thread => FieldValue::Thread(ThreadId(d.index(limits.threads, "thread")?)),
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
        settings: decode_settings(d)?,
    })
}

fn decode_settings(d: &mut Decoder) -> Result<CaptureSettings, Malformed> {
    let mut list = || -> Result<Vec<String>, Malformed> {
        let n = d.count()?;
        (0..n).map(|_| d.string()).collect()
    };
    let (features, stacks, pmu, filters) = (list()?, list()?, list()?, list()?);
    let mut spec = || -> Result<Option<String>, Malformed> {
        let s = d.string()?;
        Ok((!s.is_empty()).then_some(s))
    };
    Ok(CaptureSettings {
        features,
        stacks,
        pmu,
        filters,
        prepare: spec()?,
        activate: spec()?,
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
            3 => FieldType::Thread,
            t => return Err(d.error(format!("unknown field type {t}"))),
        };
        fields.push(FieldSchema { name, ty });
    }
    let has_stack = match d.u8()? {
        0 => false,
        1 => true,
        b => return Err(d.error(format!("has_stack is {b}, not 0 or 1"))),
    };
    let origin = match d.u8()? {
        0 => RecordOrigin::Script,
        1 => RecordOrigin::Tracker,
        o => return Err(d.error(format!("unknown record origin {o}"))),
    };
    Ok(RecordSchema {
        probe,
        name,
        kind,
        fields,
        has_stack,
        origin,
    })
}

fn decode_thread(d: &mut Decoder, strings: usize) -> Result<Thread, Malformed> {
    Ok(Thread {
        tid: d.u32()?,
        pid: d.u32()?,
        name: StringId(d.index(strings, "string")?),
        process_name: StringId(d.index(strings, "string")?),
        ppid: d.u32()?,
        kthread: match d.u8()? {
            0 => false,
            1 => true,
            b => return Err(d.error(format!("kthread is {b}, not 0 or 1"))),
        },
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
mod tests;
