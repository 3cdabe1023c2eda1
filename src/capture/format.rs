//! The framing of `wprof.data` (see `docs/data-format.md`): the file header,
//! chunk headers with their checksums and size limits, the sequence marks
//! that number the chunks, the varint primitives every payload is made of,
//! and `CaptureError`. The writer encodes payloads, the reader decodes them.

use std::fmt;
use std::io;
use std::path::PathBuf;

use super::files::{FileError, IoCause};

/// Why a capture could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("cannot {op} {}: {}", path.display(), IoCause(cause))]
    Io {
        op: &'static str,
        path: PathBuf,
        cause: io::Error,
    },
    #[error("cannot write the capture: {}", IoCause(cause))]
    Write { cause: io::Error },
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{} is not a wprof capture", path.display())]
    NotACapture { path: PathBuf },
    #[error(
        "{} was written in capture format {found}; this wprof reads format {supported} and older",
        path.display()
    )]
    NewerVersion {
        path: PathBuf,
        found: Version,
        supported: Version,
    },
    #[error("{} is corrupt at byte {offset}: {what}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    #[error("{} ends at byte {offset}, before its {what}", path.display())]
    Truncated {
        path: PathBuf,
        offset: u64,
        what: &'static str,
    },
    /// The writer was given something the capture cannot hold (an id it did
    /// not hand out, values that do not match the schema): a caller bug.
    #[error("the capture writer was given {what}")]
    Rejected { what: String },
}

/// The first 8 bytes of every capture. The high first byte catches 7-bit
/// transfers, `\r\n` catches line-ending conversion (as PNG does).
pub const MAGIC: [u8; 8] = *b"\x89WPROF\r\n";

/// The format version this build writes and the newest it reads.
pub const VERSION: Version = Version { major: 2, minor: 7 };

/// The first version whose chunks are numbered by sequence marks.
pub const SEQUENCED: Version = Version { major: 2, minor: 1 };

/// The largest payload of an events chunk (the writer cuts them at 64 KiB).
pub const MAX_EVENTS_PAYLOAD: u32 = 1 << 20;

/// The largest payload of any other chunk (the writer cuts tables at 1 MiB).
pub const MAX_PAYLOAD: u32 = 64 << 20;

/// CPU numbers are below this (Linux allows at most 8192 CPUs): renderers
/// keep per-CPU state in vectors indexed by CPU.
pub const MAX_CPUS: u32 = 1 << 16;

/// The fewest bytes an event takes: key, time, CPU and thread.
pub const MIN_EVENT_BYTES: u32 = 4;

/// Length of the file header: magic, major, minor, CRC32 of the first 12 bytes.
pub const FILE_HEADER_LEN: usize = 16;

/// Length of a chunk header: kind, 3 reserved bytes, payload length, item
/// count, payload CRC32, CRC32 of the first 16 header bytes.
pub const CHUNK_HEADER_LEN: usize = 20;

/// A format version: readers accept their major version (any minor, skipping
/// chunk kinds they do not know) and older majors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u16,
    pub minor: u16,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The file header for `version`.
pub fn file_header(version: Version) -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..10].copy_from_slice(&version.major.to_le_bytes());
    h[10..12].copy_from_slice(&version.minor.to_le_bytes());
    let crc = crc32fast::hash(&h[..12]);
    h[12..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Why a file header was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderProblem {
    /// The magic does not match.
    NotACapture,
    /// The header's own checksum does not match.
    Checksum,
}

/// The version in a file header (magic and checksum verified).
pub fn parse_file_header(h: &[u8; FILE_HEADER_LEN]) -> Result<Version, HeaderProblem> {
    if h[..8] != MAGIC {
        return Err(HeaderProblem::NotACapture);
    }
    if crc32fast::hash(&h[..12]) != le32(&h[12..16]) {
        return Err(HeaderProblem::Checksum);
    }
    Ok(Version {
        major: u16::from_le_bytes([h[8], h[9]]),
        minor: u16::from_le_bytes([h[10], h[11]]),
    })
}

/// Chunk kinds. Values are part of the format and never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ChunkKind {
    /// `CaptureInfo`; always the first chunk.
    Info = 1,
    /// Every `RecordSchema`; always the second chunk.
    Schemas = 2,
    /// Appends to the string table.
    Strings = 3,
    /// Appends to the thread table.
    Threads = 4,
    /// Appends to the frame table.
    Frames = 5,
    /// Appends to the stack table.
    Stacks = 6,
    /// A run of events, decodable on its own.
    Events = 7,
    /// Symbols for frames, written at the end.
    Symbols = 8,
    /// `CaptureStats`; the last chunk of a finished capture.
    End = 9,
    /// A `SequenceMark` for the chunk that follows it (format 2.1).
    Sequence = 10,
    /// `CaptureInfo::command_pid`, right after the schemas (format 2.3).
    Command = 11,
    /// How the user stacks of the events chunk that follows were walked
    /// (format 2.3).
    StackWalks = 12,
}

impl ChunkKind {
    /// The kind for a header byte, `None` for kinds this version does not know.
    pub fn from_u8(b: u8) -> Option<ChunkKind> {
        use ChunkKind::*;
        [
            Info, Schemas, Strings, Threads, Frames, Stacks, Events, Symbols, End, Sequence,
            Command, StackWalks,
        ]
        .into_iter()
        .find(|k| *k as u8 == b)
    }

    pub fn name(self) -> &'static str {
        match self {
            ChunkKind::Info => "info",
            ChunkKind::Schemas => "schemas",
            ChunkKind::Strings => "strings",
            ChunkKind::Threads => "threads",
            ChunkKind::Frames => "frames",
            ChunkKind::Stacks => "stacks",
            ChunkKind::Events => "events",
            ChunkKind::Symbols => "symbols",
            ChunkKind::End => "end",
            ChunkKind::Sequence => "sequence",
            ChunkKind::Command => "command",
            ChunkKind::StackWalks => "stack walks",
        }
    }

    /// The largest payload a chunk of this kind may have.
    pub fn max_payload(self) -> u32 {
        match self {
            ChunkKind::Events => MAX_EVENTS_PAYLOAD,
            _ => MAX_PAYLOAD,
        }
    }
}

/// A decoded chunk header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// The raw kind byte (see `ChunkKind::from_u8`).
    pub kind: u8,
    pub payload_len: u32,
    /// Entries in the payload: events, strings, threads, ...
    pub items: u32,
    pub payload_crc: u32,
}

impl ChunkHeader {
    /// The header for `payload` of `kind`.
    pub fn for_payload(kind: ChunkKind, items: u32, payload: &[u8]) -> Option<ChunkHeader> {
        Some(ChunkHeader {
            kind: kind as u8,
            payload_len: u32::try_from(payload.len()).ok()?,
            items,
            payload_crc: crc32fast::hash(payload),
        })
    }

    pub fn encode(&self) -> [u8; CHUNK_HEADER_LEN] {
        let mut h = [0u8; CHUNK_HEADER_LEN];
        h[0] = self.kind;
        h[4..8].copy_from_slice(&self.payload_len.to_le_bytes());
        h[8..12].copy_from_slice(&self.items.to_le_bytes());
        h[12..16].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = crc32fast::hash(&h[..16]);
        h[16..].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Decodes a header, `Err` with the reason when its checksum or reserved
    /// bytes are wrong.
    pub fn decode(h: &[u8; CHUNK_HEADER_LEN]) -> Result<ChunkHeader, &'static str> {
        if crc32fast::hash(&h[..16]) != le32(&h[16..20]) {
            return Err("chunk header checksum mismatch");
        }
        if h[1..4] != [0, 0, 0] {
            return Err("chunk header reserved bytes are not zero");
        }
        Ok(ChunkHeader {
            kind: h[0],
            payload_len: le32(&h[4..8]),
            items: le32(&h[8..12]),
            payload_crc: le32(&h[12..16]),
        })
    }
}

/// The payload of a `sequence` chunk: the number of the chunk after it and
/// what the file holds through that chunk. With these a reader finds chunks
/// removed, repeated, replaced or re-kinded even when every checksum is
/// right, and after a crash tells when the last write happened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SequenceMark {
    /// 0 for the first mark (after `schemas`), one more for each next one.
    pub seq: u64,
    /// The announced chunk's header checksum (its bytes 16..20).
    pub header_crc: u32,
    /// What the file holds through the end of the announced chunk.
    pub through: Totals,
    /// Capture time (ns after the start) when the chunk was written.
    pub written_ns: u64,
}

/// Counts of what a capture holds up to some chunk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub events: u64,
    pub strings: u64,
    pub threads: u64,
    pub frames: u64,
    pub stacks: u64,
    /// The newest event time, 0 before the first event.
    pub newest_ns: u64,
}

impl SequenceMark {
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_uvarint(out, self.seq);
        out.extend_from_slice(&self.header_crc.to_le_bytes());
        let t = &self.through;
        for n in [
            t.events,
            t.strings,
            t.threads,
            t.frames,
            t.stacks,
            t.newest_ns,
        ] {
            put_uvarint(out, n);
        }
        put_uvarint(out, self.written_ns);
    }

    pub fn decode(d: &mut Decoder) -> Result<SequenceMark, Malformed> {
        Ok(SequenceMark {
            seq: d.uvarint()?,
            header_crc: le32(d.take(4)?),
            through: Totals {
                events: d.uvarint()?,
                strings: d.uvarint()?,
                threads: d.uvarint()?,
                frames: d.uvarint()?,
                stacks: d.uvarint()?,
                newest_ns: d.uvarint()?,
            },
            written_ns: d.uvarint()?,
        })
    }
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Appends `v` as an unsigned LEB128 varint (7 bits a byte, low first).
#[inline]
pub fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends `v` zigzag-encoded (0, -1, 1, -2, ... → 0, 1, 2, 3, ...) as a varint.
#[inline]
pub fn put_ivarint(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// Appends a length-prefixed byte string.
pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_uvarint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A payload that failed to decode: file offset of the bad byte and what was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed {
    pub offset: u64,
    pub what: String,
}

/// Reads a payload, keeping the file offset of its first byte for errors.
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
}

impl<'a> Decoder<'a> {
    /// A decoder over `buf`, which starts at file offset `base`.
    pub fn new(buf: &'a [u8], base: u64) -> Decoder<'a> {
        Decoder { buf, pos: 0, base }
    }

    /// The file offset of the next byte.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// An error at the next byte.
    #[cold]
    pub fn error(&self, what: impl Into<String>) -> Malformed {
        Malformed {
            offset: self.offset(),
            what: what.into(),
        }
    }

    /// Fails unless every byte was consumed.
    pub fn finish(&self) -> Result<(), Malformed> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(self.error(format!("{n} unexpected bytes at the end of the chunk"))),
        }
    }

    pub fn u8(&mut self) -> Result<u8, Malformed> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| self.error("the chunk ends early"))?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    pub fn uvarint(&mut self) -> Result<u64, Malformed> {
        match self.buf.get(self.pos) {
            Some(&b) if b < 0x80 => {
                self.pos += 1;
                Ok(u64::from(b))
            }
            _ => self.uvarint_slow(),
        }
    }

    #[inline(never)]
    fn uvarint_slow(&mut self) -> Result<u64, Malformed> {
        let mut v = 0u64;
        let mut shift = 0;
        let mut pos = self.pos;
        while let Some(&b) = self.buf.get(pos) {
            if shift == 63 && b > 1 {
                return Err(self.error("number too large"));
            }
            pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                self.pos = pos;
                return Ok(v);
            }
            shift += 7;
            if shift > 63 {
                return Err(self.error("number too large"));
            }
        }
        Err(self.error("the chunk ends inside a number"))
    }

    #[inline]
    pub fn ivarint(&mut self) -> Result<i64, Malformed> {
        let u = self.uvarint()?;
        Ok((u >> 1) as i64 ^ -((u & 1) as i64))
    }

    /// A varint that must fit in a `u32`.
    #[inline]
    pub fn u32(&mut self) -> Result<u32, Malformed> {
        let at = self.offset();
        let v = self.uvarint()?;
        u32::try_from(v).map_err(|_| Malformed {
            offset: at,
            what: format!("{v} does not fit in 32 bits"),
        })
    }

    /// A varint index that must be below `len`, the size of table `table`.
    #[inline]
    pub fn index(&mut self, len: usize, table: &str) -> Result<u32, Malformed> {
        let at = self.offset();
        let v = self.uvarint()?;
        if v < len as u64 {
            Ok(v as u32)
        } else {
            Err(Malformed {
                offset: at,
                what: format!("{table} id {v} out of range ({len} known)"),
            })
        }
    }

    /// A varint count of entries that each take at least one byte.
    pub fn count(&mut self) -> Result<usize, Malformed> {
        let at = self.offset();
        let n = self.uvarint()?;
        if n > self.remaining() as u64 {
            return Err(Malformed {
                offset: at,
                what: format!("count {n} exceeds the chunk"),
            });
        }
        Ok(n as usize)
    }

    /// An optional `u32` stored as value + 1, with 0 for none.
    pub fn option(&mut self) -> Result<Option<u32>, Malformed> {
        let at = self.offset();
        match self.uvarint()? {
            0 => Ok(None),
            v => u32::try_from(v - 1).map(Some).map_err(|_| Malformed {
                offset: at,
                what: format!("{} does not fit in 32 bits", v - 1),
            }),
        }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if n > self.remaining() {
            return Err(self.error("the chunk ends early"));
        }
        let b = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    /// A length-prefixed byte string.
    pub fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let n = self.count()?;
        self.take(n)
    }

    pub fn string(&mut self) -> Result<String, Malformed> {
        let at = self.offset();
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| Malformed {
            offset: at,
            what: "string is not UTF-8".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Varints and zigzag varints round-trip at their edges, with the expected lengths.
    #[test]
    fn varints_round_trip() {
        let unsigned = [0, 1, 127, 128, 300, 16383, 16384, u32::MAX as u64, u64::MAX];
        for v in unsigned {
            let mut b = vec![];
            put_uvarint(&mut b, v);
            let mut d = Decoder::new(&b, 0);
            assert_eq!(d.uvarint(), Ok(v));
            d.finish().unwrap();
        }
        let signed = [0, -1, 1, -64, 63, 64, i64::MIN, i64::MAX];
        for v in signed {
            let mut b = vec![];
            put_ivarint(&mut b, v);
            assert_eq!(Decoder::new(&b, 0).ivarint(), Ok(v));
        }
        let mut b = vec![];
        put_ivarint(&mut b, -64);
        assert_eq!(b.len(), 1);
        put_uvarint(&mut b, u64::MAX);
        assert_eq!(b.len(), 11);
    }

    /// Overlong or truncated varints are errors with the offset of the number.
    #[test]
    fn rejects_bad_varints() {
        let too_long = [0xff; 11];
        let e = Decoder::new(&too_long, 100).uvarint().unwrap_err();
        assert_eq!(e.offset, 100);
        let overflow = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert!(Decoder::new(&overflow, 0).uvarint().is_err());
        let cut = [0x80];
        assert_eq!(Decoder::new(&cut, 7).uvarint().unwrap_err().offset, 7);
        let big = [0x80, 0x80, 0x80, 0x80, 0x10];
        assert!(Decoder::new(&big, 0).u32().is_err());
    }

    /// Counts larger than what is left in the chunk are refused before allocating.
    #[test]
    fn rejects_oversized_counts() {
        let b = [0x05, b'a', b'b'];
        assert!(Decoder::new(&b, 0).bytes().is_err());
        assert!(Decoder::new(&[0x02, 0xff, 0xfe], 0).string().is_err());
    }

    /// Chunk headers round-trip and any flipped bit is caught.
    #[test]
    fn chunk_header_checksum() {
        let h = ChunkHeader::for_payload(ChunkKind::Events, 3, b"abc").unwrap();
        let bytes = h.encode();
        assert_eq!(ChunkHeader::decode(&bytes), Ok(h));
        for i in 0..CHUNK_HEADER_LEN * 8 {
            let mut b = bytes;
            b[i / 8] ^= 1 << (i % 8);
            assert!(ChunkHeader::decode(&b).is_err(), "bit {i}");
        }
    }

    /// The file header carries the version and refuses foreign files.
    #[test]
    fn file_header_round_trip() {
        let v = Version { major: 3, minor: 9 };
        assert_eq!(parse_file_header(&file_header(v)), Ok(v));
        let mut h = file_header(VERSION);
        h[10] ^= 1;
        assert_eq!(parse_file_header(&h), Err(HeaderProblem::Checksum));
        h[0] = b'P';
        assert_eq!(parse_file_header(&h), Err(HeaderProblem::NotACapture));
        for b in 1..=12 {
            assert_eq!(ChunkKind::from_u8(b).map(|k| k as u8), Some(b));
        }
        assert_eq!(ChunkKind::from_u8(0), None);
        assert_eq!(ChunkKind::from_u8(13), None);
    }

    /// Sequence marks round-trip, and a cut one is an error.
    #[test]
    fn sequence_mark_round_trip() {
        let mark = SequenceMark {
            seq: 7,
            header_crc: 0xdead_beef,
            through: Totals {
                events: 1 << 40,
                strings: 3,
                threads: 2,
                frames: 1,
                stacks: 0,
                newest_ns: u64::MAX,
            },
            written_ns: 12_345,
        };
        let mut b = vec![];
        mark.encode(&mut b);
        let mut d = Decoder::new(&b, 0);
        assert_eq!(SequenceMark::decode(&mut d), Ok(mark));
        d.finish().unwrap();
        assert!(SequenceMark::decode(&mut Decoder::new(&b[..b.len() - 1], 0)).is_err());
    }
}
