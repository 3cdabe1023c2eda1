//! What part of a capture could not be read, as found by the reader's walk
//! over the chunks, and the sentence replay prints about it.

use std::fmt;

/// What part of a capture could not be read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Damage {
    /// Events in the readable part.
    pub events: u64,
    /// The byte offset where the readable part ends.
    pub readable_end: u64,
    /// Whether the end chunk (with the statistics) was read.
    pub finished: bool,
    /// What stopped reading before the end of the file, if anything did.
    pub cut: Option<Cut>,
    /// Chunks missing, repeated, replaced or out of sequence before the
    /// cut (format 2.1 numbers its chunks), in file order; reading went on
    /// past them.
    pub gaps: Vec<Gap>,
    /// For an unfinished capture (format 2.1): when its last chunk was written.
    pub stopped: Option<LastWrite>,
    /// For a finished capture: events the end chunk counts, when the file
    /// holds another number.
    pub recorded: Option<u64>,
}

/// Why reading stopped before the end of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cut {
    /// The last chunk is incomplete (the writer was killed, or the disk
    /// filled); `events` it held, when its header or sequence mark says.
    Incomplete {
        offset: u64,
        bytes: u64,
        events: Option<u64>,
    },
    /// A chunk failed its checks; nothing from `offset` on is trusted.
    Corrupt {
        offset: u64,
        what: String,
        bytes: u64,
    },
    /// Bytes follow the end chunk.
    AfterEnd { offset: u64, bytes: u64 },
}

/// A chunk out of sequence: found by the sequence marks of format 2.1, even
/// when every checksum is right.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gap {
    /// Where it was found: the chunk or mark out of place, or the mark that
    /// follows the missing chunks.
    pub offset: u64,
    pub kind: GapKind,
    /// Events lost with it, once a later mark tells.
    pub events: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GapKind {
    /// `count` chunks, numbered from `first`, are not in the file.
    Missing { first: u64, count: u64 },
    /// Chunk `seq` appears again; the copy was skipped.
    Repeated { seq: u64 },
    /// The chunk after mark `seq` is not the one the mark announced (it was
    /// replaced, or its kind changed); it was skipped.
    Replaced { seq: u64 },
    /// A chunk without a sequence mark; it was skipped.
    Unmarked,
}

/// When an unfinished capture was last written, in capture time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LastWrite {
    /// When the last complete chunk was written (0: not recorded).
    pub written_ns: u64,
    /// The newest event in the file (0: none).
    pub newest_ns: u64,
}

/// Gaps listed in the sentence; the others are counted.
const GAPS_SHOWN: usize = 5;

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the capture ends after {} events at byte {}:",
            self.events, self.readable_end
        )?;
        let mut parts = Vec::new();
        if !self.finished {
            parts.push(unfinished(self.stopped));
        }
        if let Some(recorded) = self.recorded {
            parts.push(format!(
                "the end chunk counts {recorded} events, the file holds {}",
                self.events
            ));
        }
        parts.extend(self.gaps.iter().take(GAPS_SHOWN).map(Gap::to_string));
        if self.gaps.len() > GAPS_SHOWN {
            parts.push(format!("{} more such chunks", self.gaps.len() - GAPS_SHOWN));
        }
        parts.extend(self.cut.as_ref().map(Cut::to_string));
        write!(f, " {}", parts.join("; "))
    }
}

/// What an unfinished capture lost, as far as the file tells: the events
/// after the newest one in it, recorded while wprof ran on after its last
/// write (up to its flush interval) and those it still held for ordering.
fn unfinished(stopped: Option<LastWrite>) -> String {
    let mut text = "the writer did not finish (no end chunk: wprof was killed, or the disk \
                    filled)"
        .to_owned();
    let Some(last) = stopped else {
        return text;
    };
    if last.newest_ns > 0 {
        text += &format!(": events after {} are lost", seconds(last.newest_ns));
    }
    if last.written_ns > 0 {
        text += &format!(" (its last write was at {})", seconds(last.written_ns));
    }
    text
}

/// Capture time as seconds with microseconds: `12.345678 s`.
fn seconds(ns: u64) -> String {
    format!("{}.{:06} s", ns / 1_000_000_000, ns / 1_000 % 1_000_000)
}

impl fmt::Display for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cut::Incomplete { bytes, events, .. } => {
                write!(f, "{bytes} bytes of an incomplete chunk ignored")?;
                match events {
                    Some(n) => write!(f, " ({n} events)"),
                    None => Ok(()),
                }
            }
            Cut::Corrupt {
                offset,
                what,
                bytes,
            } => write!(
                f,
                "corrupt data at byte {offset} ({what}); the {bytes} bytes from there on are ignored"
            ),
            Cut::AfterEnd { bytes, .. } => write!(f, "{bytes} bytes after the end chunk ignored"),
        }
    }
}

impl fmt::Display for Gap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.offset;
        match self.kind {
            GapKind::Missing { first, count: 1 } => {
                write!(f, "chunk {first} is missing before byte {at}")?
            }
            GapKind::Missing { first, count } => write!(
                f,
                "chunks {first} to {} are missing before byte {at}",
                first + count - 1
            )?,
            GapKind::Repeated { seq } => {
                write!(f, "chunk {seq} is repeated at byte {at} (skipped)")?
            }
            GapKind::Replaced { seq } => write!(
                f,
                "the chunk at byte {at} is not chunk {seq} that its sequence mark announced \
                 (replaced or changed kind; skipped)"
            )?,
            GapKind::Unmarked => {
                write!(f, "the chunk at byte {at} has no sequence mark (skipped)")?
            }
        }
        match self.events {
            Some(n) => write!(f, ", {n} events lost"),
            None => Ok(()),
        }
    }
}
