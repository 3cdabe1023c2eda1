//! Capture stage, input side: `wprof.data` → tables in memory and a stream of
//! events (layout in `docs/data-format.md`). `open` reads every chunk header
//! once, loading and checking table chunks and remembering where events
//! chunks are; `for_each_event` then reads events chunks one at a time, so
//! memory does not grow with the number of events. A file cut short or
//! damaged is read up to its last good chunk, and `damage` says what was lost.

mod damage;
mod decode;
mod scan;

use std::fs::File;
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub use self::damage::{Cut, Damage, Gap, GapKind, LastWrite};
use self::decode::{Limits, decode_event};
use self::scan::Scan;
use super::files::open_capture;
use super::format::{
    CHUNK_HEADER_LEN, CaptureError, ChunkHeader, Decoder, FILE_HEADER_LEN, HeaderProblem, MAGIC,
    Malformed, SEQUENCED, VERSION, Version, parse_file_header,
};
use super::model::{
    CaptureInfo, CaptureStats, Event, FrameAddr, FrameId, RecordSchema, Stack, StackId, StringId,
    Symbol, Thread, ThreadId,
};
use super::walk::StackWalk;

/// A capture opened for replay.
pub struct CaptureReader {
    path: PathBuf,
    file: File,
    /// The format version (tests check what was read).
    #[cfg(test)]
    version: Version,
    info: CaptureInfo,
    schemas: Vec<RecordSchema>,
    tables: Tables,
    events_chunks: Vec<EventsChunk>,
    /// Events in the readable part of the file (tests check the count).
    #[cfg(test)]
    events: u64,
    stats: Option<CaptureStats>,
    damage: Option<Damage>,
}

/// The interned tables, grown chunk by chunk.
#[derive(Default)]
pub(super) struct Tables {
    strings: Vec<Box<str>>,
    threads: Vec<Thread>,
    frames: Vec<FrameAddr>,
    stacks: Vec<Stack>,
    /// Indexed by `FrameId`; empty until a symbols chunk is read.
    symbols: Vec<Option<Symbol>>,
}

/// Where an events chunk is, and the table sizes when it was written: its
/// events may only refer to entries written before it.
pub(super) struct EventsChunk {
    offset: u64,
    header: ChunkHeader,
    strings: usize,
    threads: usize,
    stacks: usize,
    /// Where its stack walks chunk is (format 2.3), if it has one.
    walks: Option<(u64, ChunkHeader)>,
}

impl CaptureReader {
    /// Opens a capture, reading its description and tables. The file must
    /// be a regular file (a FIFO or a device is refused before any read).
    pub fn open(path: &Path) -> Result<CaptureReader, CaptureError> {
        let (file, len) = open_capture(path)?;
        let version = read_file_header(&file, len, path)?;
        let mut scan = Scan::new(len, path, version >= SEQUENCED);
        scan.run(&file)?;
        let (Some(info), Some(schemas)) = (scan.info.take(), scan.schemas.take()) else {
            return Err(missing_description(path, scan.readable_end, scan.cut));
        };
        let recorded = scan
            .stats
            .as_ref()
            .map(|stats| stats.events)
            .filter(|&n| n != scan.events);
        let damaged = !scan.finished || scan.cut.is_some() || !scan.gaps.is_empty();
        let damage = (damaged || recorded.is_some()).then(|| Damage {
            events: scan.events,
            readable_end: scan.readable_end,
            finished: scan.finished,
            stopped: (!scan.finished).then(|| scan.last_write()).flatten(),
            cut: scan.cut.take(),
            gaps: std::mem::take(&mut scan.gaps),
            recorded,
        });
        Ok(CaptureReader {
            path: path.to_path_buf(),
            file,
            #[cfg(test)]
            version,
            info,
            schemas,
            tables: scan.tables,
            events_chunks: scan.events_chunks,
            #[cfg(test)]
            events: scan.events,
            stats: scan.stats,
            damage,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The format version the file was written in.
    #[cfg(test)]
    pub(crate) fn version(&self) -> Version {
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

    #[cfg(test)]
    pub(crate) fn strings_len(&self) -> usize {
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

    #[cfg(test)]
    pub(crate) fn frames_len(&self) -> usize {
        self.tables.frames.len()
    }

    /// Events in the readable part of the file.
    #[cfg(test)]
    pub(crate) fn events_len(&self) -> u64 {
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
            let walks = self.read_walks(chunk)?;
            let mut walks = walks.iter();
            let mut d = Decoder::new(&payload, start);
            let mut ts_ns = 0;
            for _ in 0..chunk.header.items {
                decode_event(&mut d, &limits, &mut ts_ns, &mut event)
                    .map_err(|m| self.malformed(m))?;
                event.walk = match event.stack {
                    Some(_) => walks.next().and_then(|&code| StackWalk::from_code(code)),
                    None => None,
                };
                if f(&event).is_break() {
                    return Ok(());
                }
            }
            d.finish().map_err(|m| self.malformed(m))?;
        }
        Ok(())
    }

    /// The walk codes of an events chunk's stacks, empty when it has none.
    fn read_walks(&self, chunk: &EventsChunk) -> Result<Vec<u8>, CaptureError> {
        let Some((offset, header)) = chunk.walks else {
            return Ok(Vec::new());
        };
        let mut walks = vec![0; header.payload_len as usize];
        read_at(
            &self.file,
            &self.path,
            &mut walks,
            offset + CHUNK_HEADER_LEN as u64,
        )?;
        if crc32fast::hash(&walks) != header.payload_crc {
            return Err(self.corrupt(offset, "stack walks chunk checksum mismatch"));
        }
        Ok(walks)
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
        .map_err(|cause| CaptureError::Io {
            op: "read",
            path: path.to_path_buf(),
            cause,
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

#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod tests;
