//! Builds the compact unwind table of one ELF file: the FDE rows of
//! [`super::cfi`] sorted by address, a `NoInfo` row where an FDE ends and no
//! other begins, and adjacent rows with the same rule merged. Output: an
//! [`UnwindTable`], the rows the BPF unwinder binary-searches.

use std::time::{Duration, Instant};

use object::{Object, ObjectSection, SectionKind};

use super::cfi::{CfiError, CfiRead, FdeRows, read_cfi};
use super::rules::{ROW_BYTES, Row, Rule};

/// The rows of one file, ascending by `pc`, no two neighbours equal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnwindTable {
    pub rows: Vec<Row>,
    pub stats: TableStats,
}

/// How the table was built and what it costs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    /// FDEs read (`.eh_frame` and `.debug_frame`).
    pub fdes: usize,
    /// Rows before merging, `NoInfo` rows at FDE ends included.
    pub raw_rows: usize,
    /// FDEs skipped: unparseable, beyond 4 GiB, or overlapping an earlier one.
    pub dropped_fdes: usize,
    /// Rows BPF cannot evaluate ([`Rule::Unsupported`]).
    pub unsupported_rows: usize,
    /// Bytes of executable sections in the file.
    pub text_bytes: u64,
    /// Time to read the CFI and build the table.
    pub build_time: Duration,
}

impl UnwindTable {
    /// Reads `elf`'s CFI and builds its table.
    pub fn build(elf: &[u8]) -> Result<UnwindTable, CfiError> {
        let started = Instant::now();
        let cfi = read_cfi(elf)?;
        let mut table = from_cfi(cfi);
        table.stats.text_bytes = text_bytes(elf);
        table.stats.build_time = started.elapsed();
        Ok(table)
    }

    /// Bytes the rows take in the BPF map.
    pub fn bytes(&self) -> usize {
        self.rows.len() * ROW_BYTES
    }

    /// Map bytes per MiB of executable code.
    pub fn bytes_per_text_mib(&self) -> f64 {
        self.bytes() as f64 * (1 << 20) as f64 / self.stats.text_bytes.max(1) as f64
    }

    /// The rule in force at ELF address `pc`, found as BPF finds it: the
    /// last row at or below `pc`.
    pub fn lookup(&self, pc: u64) -> Rule {
        let Ok(pc) = u32::try_from(pc) else {
            return Rule::NoInfo;
        };
        match self.rows.partition_point(|row| row.pc <= pc) {
            0 => Rule::NoInfo,
            n => self.rows[n - 1].rule,
        }
    }

    /// The rows in their BPF encoding, back to back.
    pub fn encoded(&self) -> Vec<u8> {
        self.rows.iter().flat_map(Row::encode).collect()
    }
}

/// Sorts, clips and merges the FDEs' rows.
fn from_cfi(cfi: CfiRead) -> UnwindTable {
    let mut stats = TableStats {
        fdes: cfi.fdes.len(),
        dropped_fdes: cfi.bad_fdes + cfi.shadowed_fdes,
        ..TableStats::default()
    };
    let mut fdes: Vec<FdeRows> = cfi.fdes;
    fdes.sort_by_key(|f| (f.start, f.end));
    let mut rows: Vec<Row> = Vec::new();
    let mut previous_end = 0;
    for fde in fdes {
        let Ok(end) = u32::try_from(fde.end) else {
            stats.dropped_fdes += 1;
            continue;
        };
        if fde.start < previous_end {
            // Overlapping FDEs (seen in hand-written assembly): the later
            // start wins from there on.
            stats.dropped_fdes += 1;
            let keep = rows.partition_point(|r| u64::from(r.pc) < fde.start);
            rows.truncate(keep);
        }
        for &(pc, rule) in fde.rows.iter().filter(|(pc, _)| *pc < fde.end) {
            // Below `end`, which fits 32 bits.
            let pc = pc as u32;
            if rows.last().is_some_and(|r| r.pc == pc) {
                rows.pop();
            }
            rows.push(Row { pc, rule });
        }
        rows.push(Row {
            pc: end,
            rule: Rule::NoInfo,
        });
        previous_end = fde.end;
    }
    stats.raw_rows = rows.len();
    let rows = merge_equal_neighbours(rows);
    stats.unsupported_rows = rows
        .iter()
        .filter(|r| matches!(r.rule, Rule::Unsupported(_)))
        .count();
    UnwindTable { rows, stats }
}

/// Drops rows whose rule equals the previous row's, and a `NoInfo` row at
/// the same address as the next FDE's first row.
fn merge_equal_neighbours(rows: Vec<Row>) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::with_capacity(rows.len());
    for row in rows {
        match out.last_mut() {
            Some(last) if last.pc == row.pc => *last = row,
            Some(last) if last.rule == row.rule => {}
            _ => out.push(row),
        }
        // Replacing the last row can make it equal its own predecessor.
        if out.len() >= 2 && out[out.len() - 1].rule == out[out.len() - 2].rule {
            out.pop();
        }
    }
    out
}

/// Bytes of the file's executable sections.
fn text_bytes(elf: &[u8]) -> u64 {
    object::File::parse(elf).map_or(0, |file| {
        file.sections()
            .filter(|s| s.kind() == SectionKind::Text)
            .map(|s| s.size())
            .sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unwind::rules::{Cfa, Rbp};

    fn frame(cfa: u16) -> Rule {
        Rule::Frame {
            cfa: Cfa::Rsp(cfa),
            rbp: Rbp::Unchanged,
        }
    }

    fn fde(start: u64, end: u64, rows: &[(u64, Rule)]) -> FdeRows {
        FdeRows {
            start,
            end,
            rows: rows.to_vec(),
        }
    }

    fn table(fdes: Vec<FdeRows>) -> Vec<(u32, Rule)> {
        let cfi = CfiRead {
            fdes,
            ..CfiRead::default()
        };
        from_cfi(cfi).rows.iter().map(|r| (r.pc, r.rule)).collect()
    }

    /// Neighbouring functions with the same entry rule merge; a gap between
    /// FDEs gets a NoInfo row; an FDE starting where another ends needs none.
    #[test]
    fn merges_and_marks_gaps() {
        let rows = table(vec![
            fde(0x30, 0x40, &[(0x30, frame(8)), (0x31, frame(16))]),
            fde(0x10, 0x20, &[(0x10, frame(8)), (0x18, frame(16))]),
            fde(0x20, 0x30, &[(0x20, frame(8))]),
        ]);
        let expected = [
            (0x10, frame(8)),
            (0x18, frame(16)),
            (0x20, frame(8)),
            (0x31, frame(16)),
            (0x40, Rule::NoInfo),
        ];
        assert_eq!(rows, expected);
    }

    /// A later FDE overlapping an earlier one replaces it from its start.
    #[test]
    fn overlap_later_start_wins() {
        let cfi = CfiRead {
            fdes: vec![
                fde(0x10, 0x40, &[(0x10, frame(8)), (0x30, frame(24))]),
                fde(0x20, 0x28, &[(0x20, frame(16))]),
            ],
            ..CfiRead::default()
        };
        let t = from_cfi(cfi);
        assert_eq!(t.stats.dropped_fdes, 1);
        assert_eq!(t.lookup(0x1f), frame(8));
        assert_eq!(t.lookup(0x24), frame(16));
        assert_eq!(t.lookup(0x30), Rule::NoInfo);
    }

    /// Lookups below the first row, in gaps and past 4 GiB find no rule.
    #[test]
    fn lookup_edges() {
        let cfi = CfiRead {
            fdes: vec![fde(0x10, 0x20, &[(0x10, frame(8))])],
            ..CfiRead::default()
        };
        let t = from_cfi(cfi);
        assert_eq!(t.lookup(0xf), Rule::NoInfo);
        assert_eq!(t.lookup(0x10), frame(8));
        assert_eq!(t.lookup(0x1f), frame(8));
        assert_eq!(t.lookup(0x20), Rule::NoInfo);
        assert_eq!(t.lookup(1 << 32), Rule::NoInfo);
        assert_eq!(t.encoded().len(), 2 * ROW_BYTES);
    }

    /// The test binary itself (a Rust program with .eh_frame) gives a table.
    #[test]
    fn builds_table_of_this_binary() {
        let exe = std::fs::read("/proc/self/exe").expect("read own executable");
        let t = UnwindTable::build(&exe).expect("table");
        assert!(t.stats.fdes > 1000, "{:?}", t.stats);
        assert!(
            t.rows.len() < t.stats.raw_rows,
            "merging removed nothing: {:?}",
            t.stats
        );
        assert!(t.rows.windows(2).all(|w| w[0].pc < w[1].pc));
        assert!(t.stats.text_bytes > 0);
    }
}
