//! Capture reader, file side: the walk `open` makes over the chunk headers.
//! Each length is checked against its limit and the file's size before
//! anything is allocated; table chunks are loaded, events chunks located;
//! in format 2.1 every chunk after the description must follow its sequence
//! mark, so chunks removed, repeated or replaced are found and skipped. The
//! walk stops at the first chunk that cannot be trusted.

use std::fs::File;
use std::path::Path;

use super::damage::{Cut, Gap, GapKind, LastWrite};
use super::decode::{
    decode_frame, decode_info, decode_schema, decode_stack, decode_stats, decode_symbol,
    decode_thread, reserve,
};
use super::{EventsChunk, Tables, read_at};
use crate::capture::format::{
    CHUNK_HEADER_LEN, CaptureError, ChunkHeader, ChunkKind, Decoder, FILE_HEADER_LEN,
    MIN_EVENT_BYTES, Malformed, SequenceMark, Totals,
};
use crate::capture::model::{CaptureInfo, CaptureStats, RecordSchema};

/// The state of `open`'s walk over the chunks.
pub(super) struct Scan<'a> {
    len: u64,
    path: &'a Path,
    /// Whether chunks carry sequence marks (format 2.1 and later).
    sequenced: bool,
    pub info: Option<CaptureInfo>,
    pub schemas: Option<Vec<RecordSchema>>,
    pub tables: Tables,
    pub events_chunks: Vec<EventsChunk>,
    pub events: u64,
    pub stats: Option<CaptureStats>,
    pub finished: bool,
    pub readable_end: u64,
    pub cut: Option<Cut>,
    pub gaps: Vec<Gap>,
    marks: Marks,
    /// A stack walks chunk just taken (marks aside): it belongs to the
    /// events chunk that follows.
    pending_walks: Option<(u64, ChunkHeader)>,
}

/// Where the walk is in the sequence of marks.
#[derive(Default)]
struct Marks {
    /// The number the next mark should have.
    next_seq: u64,
    /// A mark read, with its offset, whose chunk has not come yet.
    announced: Option<(u64, SequenceMark)>,
    /// The chunk after a repeated mark is skipped.
    skip_next: bool,
    /// The mark of the last chunk taken in.
    last: Option<SequenceMark>,
    /// Events known lost in missing or skipped chunks.
    lost_events: u64,
}

/// What to do with a chunk, given the marks before it.
enum Verdict {
    Take(Option<SequenceMark>),
    Skip,
}

impl<'a> Scan<'a> {
    pub fn new(len: u64, path: &'a Path, sequenced: bool) -> Scan<'a> {
        Scan {
            len,
            path,
            sequenced,
            info: None,
            schemas: None,
            tables: Tables::default(),
            events_chunks: Vec::new(),
            events: 0,
            stats: None,
            finished: false,
            readable_end: FILE_HEADER_LEN as u64,
            cut: None,
            gaps: Vec::new(),
            marks: Marks::default(),
            pending_walks: None,
        }
    }

    /// Walks the chunks until the end of the file or the first damage.
    pub fn run(&mut self, file: &File) -> Result<(), CaptureError> {
        while self.readable_end < self.len && self.cut.is_none() {
            self.step(file)?;
        }
        if self.cut.is_none()
            && let Some((offset, mark)) = self.marks.announced.take()
        {
            // The file ends after a mark: its chunk was never written.
            self.cut = Some(Cut::Incomplete {
                offset,
                bytes: self.len - offset,
                events: self.unread_events(&mark),
            });
        }
        Ok(())
    }

    /// When the last chunk taken in was written, for an unfinished capture.
    pub fn last_write(&self) -> Option<LastWrite> {
        self.marks.last.map(|mark| LastWrite {
            written_ns: mark.written_ns,
            newest_ns: mark.through.newest_ns,
        })
    }

    /// Reads the chunk at `readable_end`; sets `cut` when it cannot be used.
    fn step(&mut self, file: &File) -> Result<(), CaptureError> {
        let offset = self.readable_end;
        let rest = self.len - offset;
        if self.finished {
            self.cut = Some(Cut::AfterEnd {
                offset,
                bytes: rest,
            });
            return Ok(());
        }
        if rest < CHUNK_HEADER_LEN as u64 {
            self.cut_incomplete(offset, None);
            return Ok(());
        }
        let mut raw = [0u8; CHUNK_HEADER_LEN];
        read_at(file, self.path, &mut raw, offset)?;
        let header = match ChunkHeader::decode(&raw) {
            Ok(header) => header,
            Err(what) => {
                self.cut_corrupt(offset, what.into());
                return Ok(());
            }
        };
        let kind = ChunkKind::from_u8(header.kind);
        let limit = kind.unwrap_or(ChunkKind::Info).max_payload();
        if header.payload_len > limit {
            let name = kind.map_or("unknown", ChunkKind::name);
            let what = format!(
                "the {name} chunk claims {} bytes; the limit is {limit}",
                header.payload_len
            );
            self.cut_corrupt(offset, what);
            return Ok(());
        }
        let end = offset + CHUNK_HEADER_LEN as u64 + u64::from(header.payload_len);
        if end > self.len {
            let events = (kind == Some(ChunkKind::Events)).then_some(u64::from(header.items));
            self.cut_incomplete(offset, events);
            return Ok(());
        }
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
        if let Err(m) = self.chunk(offset, header, &raw, &payload) {
            self.cut_corrupt(m.offset, m.what);
            return Ok(());
        }
        self.readable_end = end;
        Ok(())
    }

    fn cut_incomplete(&mut self, offset: u64, events: Option<u64>) {
        // The chunk's own mark, when it was written, knows its events too.
        let marked = self.marks.announced.take();
        let events = events.or(marked.and_then(|(_, m)| self.unread_events(&m)));
        self.cut = Some(Cut::Incomplete {
            offset,
            bytes: self.len - offset,
            events,
        });
    }

    fn cut_corrupt(&mut self, offset: u64, what: String) {
        let bytes = self.len - self.readable_end;
        self.cut = Some(Cut::Corrupt {
            offset,
            what,
            bytes,
        });
    }

    /// The events of the chunk `mark` announces, when its count is sane.
    fn unread_events(&self, mark: &SequenceMark) -> Option<u64> {
        mark.through.events.checked_sub(self.known_events())
    }

    /// Events read plus those known lost: what a mark's count is compared
    /// with. No overflow: `mark` refuses counts too close to `u64::MAX`.
    fn known_events(&self) -> u64 {
        self.events + self.marks.lost_events
    }

    /// Takes in one chunk whose header is good and whose payload is in the
    /// file; `payload` is read for known kinds other than events.
    fn chunk(
        &mut self,
        offset: u64,
        header: ChunkHeader,
        raw: &[u8; CHUNK_HEADER_LEN],
        payload: &[u8],
    ) -> Result<(), Malformed> {
        let kind = ChunkKind::from_u8(header.kind);
        let described = self.info.is_some() && self.schemas.is_some();
        if kind == Some(ChunkKind::Sequence) && !(self.sequenced && described) {
            return Ok(()); // marks mean nothing before the description, or in 2.0
        }
        let walks = match kind {
            Some(ChunkKind::Sequence) => None,
            _ => self.pending_walks.take(),
        };
        let mark = match self.sequenced && described {
            true => match self.verdict(offset, header, raw, payload)? {
                Verdict::Take(mark) => mark,
                Verdict::Skip => return Ok(()),
            },
            false => None,
        };
        if let Some(kind) = kind {
            self.known_chunk(offset, kind, header, payload, walks)?;
        }
        match mark {
            Some(mark) => self.check_totals(offset, mark),
            None => Ok(()),
        }
    }

    /// Reads marks, and decides whether the chunk they announce is taken.
    fn verdict(
        &mut self,
        offset: u64,
        header: ChunkHeader,
        raw: &[u8; CHUNK_HEADER_LEN],
        payload: &[u8],
    ) -> Result<Verdict, Malformed> {
        if header.kind == ChunkKind::Sequence as u8 {
            let mark = decode_mark(offset, header, payload)?;
            self.mark(offset, mark)?;
            return Ok(Verdict::Skip);
        }
        if std::mem::take(&mut self.marks.skip_next) {
            return Ok(Verdict::Skip);
        }
        let header_crc = u32::from_le_bytes([raw[16], raw[17], raw[18], raw[19]]);
        let gap = |kind| Gap {
            offset,
            kind,
            events: None,
        };
        match self.marks.announced.take() {
            Some((_, mark)) if mark.header_crc == header_crc => Ok(Verdict::Take(Some(mark))),
            Some((_, mark)) => {
                self.gaps.push(gap(GapKind::Replaced { seq: mark.seq }));
                Ok(Verdict::Skip)
            }
            None => {
                self.gaps.push(gap(GapKind::Unmarked));
                Ok(Verdict::Skip)
            }
        }
    }

    /// Notes a mark: a gap when its number is not the next one. A mark whose
    /// numbers no writer reaches is damage.
    fn mark(&mut self, offset: u64, mark: SequenceMark) -> Result<(), Malformed> {
        let Some(next_seq) = mark.seq.checked_add(1) else {
            return Err(Malformed {
                offset,
                what: format!(
                    "the sequence mark numbers its chunk {}, leaving no number for the next one",
                    mark.seq
                ),
            });
        };
        // Each event in the file takes at least MIN_EVENT_BYTES: with room
        // for all of them on top of every mark's count, the sums of events
        // read and lost cannot overflow.
        let events_in_file = self.len / u64::from(MIN_EVENT_BYTES);
        if mark.through.events > u64::MAX - events_in_file {
            return Err(Malformed {
                offset,
                what: format!(
                    "the sequence mark counts {} events, more than a capture can hold",
                    mark.through.events
                ),
            });
        }
        let gap = |kind| Gap {
            offset,
            kind,
            events: None,
        };
        if mark.seq != self.marks.next_seq || self.marks.announced.is_some() {
            // A chunk is missing or repeated: walks waiting for the next
            // events chunk may not be its own.
            self.pending_walks = None;
        }
        if let Some((_, lost)) = self.marks.announced.take() {
            // Two marks in a row: the first one's chunk is gone.
            self.gaps.push(gap(GapKind::Missing {
                first: lost.seq,
                count: 1,
            }));
        }
        let next = self.marks.next_seq;
        if mark.seq < next {
            self.gaps.push(gap(GapKind::Repeated { seq: mark.seq }));
            self.marks.skip_next = true;
            return Ok(());
        }
        if mark.seq > next {
            self.gaps.push(gap(GapKind::Missing {
                first: next,
                count: mark.seq - next,
            }));
        }
        self.marks.next_seq = next_seq;
        self.marks.announced = Some((offset, mark));
        Ok(())
    }

    /// After a chunk is taken in: the tables must be as its mark counts
    /// them (else table chunks are missing and nothing after can be trusted),
    /// and events the mark counts beyond those read were lost.
    fn check_totals(&mut self, offset: u64, mark: SequenceMark) -> Result<(), Malformed> {
        let t = &self.tables;
        let have = Totals {
            events: self.known_events(),
            strings: t.strings.len() as u64,
            threads: t.threads.len() as u64,
            frames: t.frames.len() as u64,
            stacks: t.stacks.len() as u64,
            newest_ns: mark.through.newest_ns,
        };
        let want = mark.through;
        let tables = |t: &Totals| [t.strings, t.threads, t.frames, t.stacks];
        if tables(&have) != tables(&want) || have.events > want.events {
            return Err(Malformed {
                offset,
                what: format!(
                    "the file holds {} events, {} strings, {} threads, {} frames and {} stacks \
                     where its sequence mark counts {}, {}, {}, {} and {} (chunks are missing \
                     or repeated)",
                    have.events,
                    have.strings,
                    have.threads,
                    have.frames,
                    have.stacks,
                    want.events,
                    want.strings,
                    want.threads,
                    want.frames,
                    want.stacks
                ),
            });
        }
        let lost = want.events - have.events;
        if lost > 0 {
            self.marks.lost_events += lost;
            if let Some(gap) = self.gaps.last_mut().filter(|g| g.events.is_none()) {
                gap.events = Some(lost);
            }
        }
        self.marks.last = Some(mark);
        Ok(())
    }

    /// Takes in a chunk of a kind this version knows.
    fn known_chunk(
        &mut self,
        offset: u64,
        kind: ChunkKind,
        header: ChunkHeader,
        payload: &[u8],
        walks: Option<(u64, ChunkHeader)>,
    ) -> Result<(), Malformed> {
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
            return self.events_chunk(offset, header, walks);
        }
        let start = offset + CHUNK_HEADER_LEN as u64;
        if crc32fast::hash(payload) != header.payload_crc {
            return Err(Malformed {
                offset,
                what: format!("{} chunk checksum mismatch", kind.name()),
            });
        }
        if kind == ChunkKind::StackWalks {
            return self.stack_walks(offset, header);
        }
        let mut d = Decoder::new(payload, start);
        self.decode(kind, header.items, &mut d)?;
        d.finish()
    }

    /// Locates an events chunk; it is read later, by `for_each_event`.
    fn events_chunk(
        &mut self,
        offset: u64,
        header: ChunkHeader,
        walks: Option<(u64, ChunkHeader)>,
    ) -> Result<(), Malformed> {
        if u64::from(header.items) * u64::from(MIN_EVENT_BYTES) > u64::from(header.payload_len) {
            return Err(Malformed {
                offset,
                what: format!(
                    "the events chunk claims {} events in {} bytes",
                    header.items, header.payload_len
                ),
            });
        }
        self.events_chunks.push(EventsChunk {
            offset,
            header,
            strings: self.tables.strings.len(),
            threads: self.tables.threads.len(),
            stacks: self.tables.stacks.len(),
            walks,
        });
        self.events += u64::from(header.items);
        Ok(())
    }

    /// Locates the stack walks of the events chunk that follows (one byte
    /// per event with a stack, read by `for_each_event`). Walks whose
    /// events chunk does not come next (it was skipped) are dropped: they
    /// are optional.
    fn stack_walks(&mut self, offset: u64, header: ChunkHeader) -> Result<(), Malformed> {
        if header.payload_len != header.items {
            return Err(Malformed {
                offset,
                what: format!(
                    "the stack walks chunk claims {} walks in {} bytes",
                    header.items, header.payload_len
                ),
            });
        }
        self.pending_walks = Some((offset, header));
        Ok(())
    }

    fn decode(&mut self, kind: ChunkKind, items: u32, d: &mut Decoder) -> Result<(), Malformed> {
        let t = &mut self.tables;
        match kind {
            ChunkKind::Info => self.info = Some(decode_info(d)?),
            ChunkKind::Command => {
                let pid = d.u32()?;
                if let Some(info) = self.info.as_mut() {
                    info.command_pid = Some(pid);
                }
            }
            ChunkKind::Schemas => {
                let mut schemas = Vec::new();
                reserve(&mut schemas, items as usize, d);
                for _ in 0..items {
                    schemas.push(decode_schema(d)?);
                }
                self.schemas = Some(schemas);
            }
            ChunkKind::Strings => append(&mut t.strings, items, d, |d| {
                Ok(d.string()?.into_boxed_str())
            })?,
            ChunkKind::Threads => {
                let strings = t.strings.len();
                append(&mut t.threads, items, d, |d| decode_thread(d, strings))?
            }
            ChunkKind::Frames => {
                let strings = t.strings.len();
                append(&mut t.frames, items, d, |d| decode_frame(d, strings))?
            }
            ChunkKind::Stacks => {
                let frames = t.frames.len();
                append(&mut t.stacks, items, d, |d| decode_stack(d, frames))?
            }
            ChunkKind::Symbols => {
                t.symbols.resize(t.frames.len(), None);
                for _ in 0..items {
                    let (frame, symbol) = decode_symbol(d, t.frames.len(), t.strings.len())?;
                    t.symbols[frame.0 as usize] = Some(symbol);
                }
            }
            ChunkKind::End => {
                let records = self.schemas.as_ref().map_or(0, Vec::len);
                self.stats = Some(decode_stats(d, records)?);
                self.finished = true;
            }
            // read by `for_each_event` and `verdict`, not here
            ChunkKind::Events | ChunkKind::Sequence | ChunkKind::StackWalks => {}
        }
        Ok(())
    }
}

/// Decodes `items` table entries onto `table`. The writer stores each entry
/// once, so an entry equal to the one before it is refused: this is what
/// stops a run of zeros (a sparse file) from decoding into millions of
/// empty entries, keeping memory in proportion to the bytes really stored.
fn append<T: PartialEq>(
    table: &mut Vec<T>,
    items: u32,
    d: &mut Decoder,
    mut entry: impl FnMut(&mut Decoder) -> Result<T, Malformed>,
) -> Result<(), Malformed> {
    reserve(table, items as usize, d);
    for _ in 0..items {
        let at = d.offset();
        let value = entry(d)?;
        if table.last() == Some(&value) {
            return Err(Malformed {
                offset: at,
                what: format!("table entry {} repeats the one before it", table.len()),
            });
        }
        table.push(value);
    }
    Ok(())
}

/// A sequence chunk's mark, its checksum checked.
fn decode_mark(
    offset: u64,
    header: ChunkHeader,
    payload: &[u8],
) -> Result<SequenceMark, Malformed> {
    if crc32fast::hash(payload) != header.payload_crc {
        return Err(Malformed {
            offset,
            what: "sequence chunk checksum mismatch".into(),
        });
    }
    let mut d = Decoder::new(payload, offset + CHUNK_HEADER_LEN as u64);
    let mark = SequenceMark::decode(&mut d)?;
    d.finish()?;
    Ok(mark)
}
