//! Capture writer, file side: encoded chunks → the output, each chunk after
//! the description preceded by its sequence mark (`docs/data-format.md`),
//! table payloads cut into chunks of about [`TABLE_CHUNK_BYTES`].

use std::io::Write;
use std::path::PathBuf;

use super::TABLE_CHUNK_BYTES;
use crate::capture::format::{CaptureError, ChunkHeader, ChunkKind, SequenceMark, Totals};

/// Encoded entries of one chunk kind waiting to be written.
pub(super) struct Pending {
    pub kind: ChunkKind,
    pub items: u32,
    pub payload: Vec<u8>,
    /// Where the payload is cut into chunks of about [`TABLE_CHUNK_BYTES`]:
    /// payload length and item count at each cut.
    cuts: Vec<(usize, u32)>,
}

impl Pending {
    pub fn new(kind: ChunkKind) -> Pending {
        Pending {
            kind,
            items: 0,
            payload: Vec::new(),
            cuts: Vec::new(),
        }
    }

    /// Counts an entry just encoded into `payload`, cutting after it when
    /// the current chunk is full.
    pub fn added(&mut self) {
        self.items += 1;
        let start = self.cuts.last().map_or(0, |&(end, _)| end);
        if self.payload.len() - start >= TABLE_CHUNK_BYTES {
            self.cuts.push((self.payload.len(), self.items));
        }
    }
}

/// Where chunks go, how many bytes went there, and the sequence marks.
pub(super) struct Sink<W: Write> {
    pub out: W,
    path: Option<PathBuf>,
    pub bytes_written: u64,
    /// Whether chunks get sequence marks (all after the description).
    pub marking: bool,
    /// The next mark's number.
    seq: u64,
    /// What the chunks written so far hold.
    pub through: Totals,
    /// `CLOCK_MONOTONIC` at capture start, to stamp marks with the time of
    /// the write; `None` (in-memory captures) stamps 0, keeping them
    /// deterministic.
    start_ns: Option<u64>,
}

impl<W: Write> Sink<W> {
    pub fn new(out: W, path: Option<PathBuf>, start_ns: Option<u64>) -> Sink<W> {
        Sink {
            out,
            path,
            bytes_written: 0,
            marking: false,
            seq: 0,
            through: Totals::default(),
            start_ns,
        }
    }

    pub fn io_error(&self, cause: std::io::Error) -> CaptureError {
        match &self.path {
            Some(path) => CaptureError::Io {
                op: "write",
                path: path.clone(),
                cause,
            },
            None => CaptureError::Write { cause },
        }
    }

    pub fn write(&mut self, bytes: &[u8]) -> Result<(), CaptureError> {
        self.out.write_all(bytes).map_err(|e| self.io_error(e))?;
        self.bytes_written += bytes.len() as u64;
        Ok(())
    }

    /// Writes `pending` as chunks at its cuts (nothing when it is empty)
    /// and empties it.
    pub fn write_pending(&mut self, pending: &mut Pending) -> Result<(), CaptureError> {
        let (mut start, mut written) = (0, 0);
        let ends = pending.cuts.iter().copied();
        for (end, items) in ends.chain([(pending.payload.len(), pending.items)]) {
            if items > written {
                self.write_chunk(pending.kind, items - written, &pending.payload[start..end])?;
            }
            (start, written) = (end, items);
        }
        pending.items = 0;
        pending.payload.clear();
        pending.cuts.clear();
        Ok(())
    }

    /// Writes one chunk, after its sequence mark once marking has started.
    pub fn write_chunk(
        &mut self,
        kind: ChunkKind,
        items: u32,
        payload: &[u8],
    ) -> Result<(), CaptureError> {
        let header = ChunkHeader::for_payload(kind, items, payload)
            .filter(|h| h.payload_len <= kind.max_payload())
            .ok_or_else(|| CaptureError::Rejected {
                what: format!(
                    "a {} chunk of {} bytes, over the format's limit of {} bytes",
                    kind.name(),
                    payload.len(),
                    kind.max_payload()
                ),
            })?;
        let header = header.encode();
        if self.marking {
            self.write_mark(kind, items, &header)?;
        }
        self.write(&header)?;
        self.write(payload)
    }

    /// Writes the sequence mark for the chunk of `kind` with `header`.
    fn write_mark(
        &mut self,
        kind: ChunkKind,
        items: u32,
        header: &[u8],
    ) -> Result<(), CaptureError> {
        let t = &mut self.through;
        let count = u64::from(items);
        match kind {
            ChunkKind::Strings => t.strings += count,
            ChunkKind::Threads => t.threads += count,
            ChunkKind::Frames => t.frames += count,
            ChunkKind::Stacks => t.stacks += count,
            ChunkKind::Events => t.events += count,
            _ => {}
        }
        let mark = SequenceMark {
            seq: self.seq,
            header_crc: u32::from_le_bytes(header[16..20].try_into().expect("4 bytes")),
            through: *t,
            written_ns: self
                .start_ns
                .map_or(0, |start| monotonic_ns().saturating_sub(start)),
        };
        self.seq += 1;
        let mut payload = Vec::with_capacity(32);
        mark.encode(&mut payload);
        let mark_header = ChunkHeader::for_payload(ChunkKind::Sequence, 1, &payload)
            .expect("a sequence mark is a few bytes");
        self.write(&mark_header.encode())?;
        self.write(&payload)
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds, the clock of event times.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to fill; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}
