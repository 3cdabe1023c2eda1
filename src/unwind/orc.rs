//! The kernel's own unwind tables (ORC, `arch/x86/kernel/unwind_orc.c`) as
//! rows the BPF kernel-stack walker ([`super::orc_bpf`]) reads: the
//! `.orc_unwind_ip` and `.orc_unwind` sections copied out of the kernel
//! ([`super::orc_read`]) → decoded, the last of equal addresses kept (the
//! kernel's lookup takes the rightmost), clipped to the core text
//! `[_stext, _etext)` → neighbours with the same rule merged → an index of
//! the row in force at the start of every 256-byte block, as the kernel's
//! `orc_lookup`. Input: the raw sections. Output: an [`OrcTable`].
//!
//! A row is 8 bytes, like a user table's (`super::rules`): `pc: u32` (the
//! offset from `_stext`), `sp_offset: i16`, `bp_offset: i8` (in 8-byte
//! units), `kind: u8` ([`kind`]).

/// Bytes of one `struct orc_entry` (Linux 6.x: `sp_offset: s16`,
/// `bp_offset: s16`, then `sp_reg:4, bp_reg:4, type:3, signal:1`).
pub const ENTRY_BYTES: usize = 6;
/// Bytes of text per index block (the kernel's `LOOKUP_BLOCK_SIZE`).
pub const BLOCK_BYTES: u64 = 256;
/// Bytes of one encoded row.
pub const ROW_BYTES: usize = 8;

/// The kernel's `ORC_REG_*` and `ORC_TYPE_*` values this reader knows.
mod kernel {
    pub const REG_UNDEFINED: u8 = 0;
    pub const REG_PREV_SP: u8 = 1;
    pub const REG_BP: u8 = 4;
    pub const REG_SP: u8 = 5;
    pub const REG_BP_INDIRECT: u8 = 8;
    pub const REG_SP_INDIRECT: u8 = 9;
    pub const TYPE_END_OF_STACK: u8 = 1;
    pub const TYPE_CALL: u8 = 2;
    pub const TYPE_REGS: u8 = 3;
    pub const TYPE_REGS_PARTIAL: u8 = 4;
}

/// Encoded row fields.
pub mod layout {
    pub const PC: i16 = 0;
    pub const SP_OFFSET: i16 = 4;
    pub const BP_OFFSET: i16 = 6;
    pub const KIND: i16 = 7;
}

/// The kind byte: bits 0-1 the previous sp's base, 2-3 the previous bp's
/// rule, 4-6 the frame type (the kernel's `ORC_TYPE_*` numbers; 0, the
/// kernel's undefined, also for rules BPF cannot follow), 7 `signal`.
pub mod kind {
    pub const SP_MASK: u8 = 0x03;
    pub const SP_SP: u8 = 0;
    pub const SP_BP: u8 = 1;
    pub const SP_SP_INDIRECT: u8 = 2;
    pub const SP_BP_INDIRECT: u8 = 3;
    pub const BP_SHIFT: u8 = 2;
    pub const BP_MASK: u8 = 0x0c;
    pub const BP_UNCHANGED: u8 = 0;
    pub const BP_AT_PREV_SP: u8 = 1;
    pub const BP_AT_BP: u8 = 2;
    pub const TYPE_SHIFT: u8 = 4;
    pub const TYPE_MASK: u8 = 0x70;
    pub const TYPE_UNUSABLE: u8 = 0;
    pub const TYPE_END: u8 = 1;
    pub const TYPE_CALL: u8 = 2;
    pub const TYPE_REGS: u8 = 3;
    pub const TYPE_REGS_PARTIAL: u8 = 4;
    pub const SIGNAL: u8 = 0x80;
}

/// Where the caller's stack pointer (the CFA) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpBase {
    /// `sp + offset`
    Sp,
    /// `bp + offset`
    Bp,
    /// `*sp + offset`
    SpIndirect,
    /// `*(bp + offset)`
    BpIndirect,
}

/// Where the caller's `bp` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BpRule {
    /// Not saved: unchanged, or taken from the registers a `Regs` frame
    /// found.
    Unchanged,
    /// At `CFA + offset`.
    AtPrevSp(i16),
    /// At `bp + offset`.
    AtBp(i16),
}

/// What the frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameType {
    /// The return address is at `CFA - 8`.
    Call,
    /// A whole `struct pt_regs` at the CFA (an entry from user space or an
    /// interrupt).
    Regs,
    /// The hardware's interrupt frame (`ip, cs, flags, sp, ss`) at the CFA.
    RegsPartial,
}

/// The rule from a row's address to the next row's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OrcRule {
    Frame {
        sp: SpBase,
        sp_offset: i16,
        bp: BpRule,
        frame: FrameType,
        signal: bool,
    },
    /// The bottom of a stack (`ret_from_fork`, kernel thread entries).
    EndOfStack,
    /// The kernel's undefined type, or a rule whose registers BPF does not
    /// have (`r10`, `r13`, `di`, `dx`): the walker leaves such a stack to
    /// the kernel.
    Unusable,
}

/// A rule from `pc` (bytes from the table's base) on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrcRow {
    pub pc: u32,
    pub rule: OrcRule,
}

/// The rows of the core kernel text, and the block index over them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrcTable {
    /// `_stext`: row and block addresses are offsets from it.
    pub base: u64,
    /// `_etext`: the walker leaves pcs from here on to the kernel.
    pub end: u64,
    /// Ascending by `pc`, the first at 0, no two neighbours equal.
    pub rows: Vec<OrcRow>,
    /// For each block of `BLOCK_BYTES` from `base`, and one past the last:
    /// the index of the row in force at its start. A pc's row is among
    /// `rows[blocks[b]..=blocks[b + 1]]`.
    pub blocks: Vec<u32>,
    /// Entries read, before clipping and merging.
    pub entries: usize,
}

/// The kernel's sections as copied: the ip table (`s32` offsets from each
/// entry's own address, which is `ip_table_at + 4 * index`) and the entries.
pub struct RawOrc<'a> {
    pub ip_table_at: u64,
    pub ip_table: &'a [u8],
    pub entries: &'a [u8],
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OrcError {
    #[error("the ORC sections disagree: {ips} addresses, {entries} bytes of entries")]
    Sizes { ips: usize, entries: usize },
    #[error("the ORC addresses are not sorted at entry {0}")]
    Unsorted(usize),
    #[error("the kernel text [{base:#x}, {end:#x}) is empty or too large for 32-bit offsets")]
    Text { base: u64, end: u64 },
}

impl OrcTable {
    /// Decodes, clips to `[base, end)` and indexes the kernel's sections.
    pub fn build(raw: &RawOrc, base: u64, end: u64) -> Result<OrcTable, OrcError> {
        if end <= base || end - base > u64::from(u32::MAX) {
            return Err(OrcError::Text { base, end });
        }
        let count = raw.ip_table.len() / 4;
        if !raw.ip_table.len().is_multiple_of(4) || raw.entries.len() != count * ENTRY_BYTES {
            return Err(OrcError::Sizes {
                ips: count,
                entries: raw.entries.len(),
            });
        }
        let mut rows = vec![OrcRow {
            pc: 0,
            rule: OrcRule::Unusable,
        }];
        let mut previous = 0;
        for (index, (ip, entry)) in (raw.ip_table.chunks_exact(4))
            .zip(raw.entries.chunks_exact(ENTRY_BYTES))
            .enumerate()
        {
            let offset = i32::from_le_bytes(ip.try_into().expect("4 bytes"));
            let at = raw.ip_table_at + 4 * index as u64;
            let ip = at.wrapping_add_signed(i64::from(offset));
            if ip < previous {
                return Err(OrcError::Unsorted(index));
            }
            previous = ip;
            if ip < base || ip >= end {
                continue;
            }
            let pc = (ip - base) as u32;
            let rule = decode(entry.try_into().expect("6 bytes"));
            // Of equal addresses the kernel's search takes the last.
            if rows.last().is_some_and(|row| row.pc == pc) {
                rows.pop();
            }
            rows.push(OrcRow { pc, rule });
        }
        rows.dedup_by(|row, kept| row.rule == kept.rule);
        let blocks = block_index(&rows, end - base);
        Ok(OrcTable {
            base,
            end,
            rows,
            blocks,
            entries: count,
        })
    }

    /// The rule at `ip`, found as BPF finds it (through the block index);
    /// `None` outside `[base, end)`.
    pub fn lookup(&self, ip: u64) -> Option<OrcRule> {
        let pc = u32::try_from(ip.checked_sub(self.base)?).ok()?;
        let block = (u64::from(pc) / BLOCK_BYTES) as usize;
        let (lo, hi) = (*self.blocks.get(block)?, *self.blocks.get(block + 1)?);
        let span = &self.rows[lo as usize..=hi as usize];
        let at = span.partition_point(|row| row.pc <= pc);
        (ip < self.end).then(|| span[at.max(1) - 1].rule)
    }

    /// The most rows a lookup searches (the largest `hi - lo + 1`).
    pub fn widest_block(&self) -> u32 {
        (self.blocks.windows(2))
            .map(|pair| pair[1] - pair[0] + 1)
            .max()
            .unwrap_or(0)
    }

    /// The rows in their BPF encoding, back to back.
    pub fn encoded_rows(&self) -> Vec<u8> {
        self.rows.iter().flat_map(OrcRow::encode).collect()
    }

    /// Rules that are [`OrcRule::Unusable`].
    pub fn unusable_rows(&self) -> usize {
        (self.rows.iter())
            .filter(|row| row.rule == OrcRule::Unusable)
            .count()
    }
}

/// `blocks[b]` = the last row at or below block `b`'s start, for every
/// block of `text` bytes and the one after.
fn block_index(rows: &[OrcRow], text: u64) -> Vec<u32> {
    let blocks = text.div_ceil(BLOCK_BYTES) + 1;
    (0..blocks)
        .map(|block| {
            let start = block * BLOCK_BYTES;
            let after = rows.partition_point(|row| u64::from(row.pc) <= start);
            after.saturating_sub(1) as u32
        })
        .collect()
}

/// One `struct orc_entry`.
fn decode(entry: [u8; ENTRY_BYTES]) -> OrcRule {
    let sp_offset = i16::from_le_bytes([entry[0], entry[1]]);
    let bp_offset = i16::from_le_bytes([entry[2], entry[3]]);
    let (sp_reg, bp_reg) = (entry[4] & 0xf, entry[4] >> 4);
    let (frame_type, signal) = (entry[5] & 7, entry[5] & 8 != 0);
    let frame = match frame_type {
        kernel::TYPE_END_OF_STACK => return OrcRule::EndOfStack,
        kernel::TYPE_CALL => FrameType::Call,
        kernel::TYPE_REGS => FrameType::Regs,
        kernel::TYPE_REGS_PARTIAL => FrameType::RegsPartial,
        _ => return OrcRule::Unusable,
    };
    let sp = match sp_reg {
        kernel::REG_SP => SpBase::Sp,
        kernel::REG_BP => SpBase::Bp,
        kernel::REG_SP_INDIRECT => SpBase::SpIndirect,
        kernel::REG_BP_INDIRECT => SpBase::BpIndirect,
        _ => return OrcRule::Unusable,
    };
    let bp = match bp_reg {
        kernel::REG_UNDEFINED => BpRule::Unchanged,
        kernel::REG_PREV_SP => BpRule::AtPrevSp(bp_offset),
        kernel::REG_BP => BpRule::AtBp(bp_offset),
        _ => return OrcRule::Unusable,
    };
    OrcRule::Frame {
        sp,
        sp_offset,
        bp,
        frame,
        signal,
    }
}

impl OrcRow {
    /// The 8 bytes BPF reads. A saved-`bp` offset that is not a multiple
    /// of 8 within ±1 KiB cannot be encoded: the row becomes unusable.
    pub fn encode(&self) -> [u8; ROW_BYTES] {
        let mut out = [0u8; ROW_BYTES];
        out[..4].copy_from_slice(&self.pc.to_le_bytes());
        let OrcRule::Frame {
            sp,
            sp_offset,
            bp,
            frame,
            signal,
        } = self.rule
        else {
            let frame_type = match self.rule {
                OrcRule::EndOfStack => kind::TYPE_END,
                _ => kind::TYPE_UNUSABLE,
            };
            out[7] = frame_type << kind::TYPE_SHIFT;
            return out;
        };
        let (bp_rule, bp_offset) = match bp {
            BpRule::Unchanged => (kind::BP_UNCHANGED, 0),
            BpRule::AtPrevSp(offset) => (kind::BP_AT_PREV_SP, offset),
            BpRule::AtBp(offset) => (kind::BP_AT_BP, offset),
        };
        let Some(bp_units) = (bp_offset % 8 == 0)
            .then(|| i8::try_from(bp_offset / 8).ok())
            .flatten()
        else {
            return OrcRow {
                pc: self.pc,
                rule: OrcRule::Unusable,
            }
            .encode();
        };
        let sp_base = match sp {
            SpBase::Sp => kind::SP_SP,
            SpBase::Bp => kind::SP_BP,
            SpBase::SpIndirect => kind::SP_SP_INDIRECT,
            SpBase::BpIndirect => kind::SP_BP_INDIRECT,
        };
        let frame_type = match frame {
            FrameType::Call => kind::TYPE_CALL,
            FrameType::Regs => kind::TYPE_REGS,
            FrameType::RegsPartial => kind::TYPE_REGS_PARTIAL,
        };
        out[4..6].copy_from_slice(&sp_offset.to_le_bytes());
        out[6] = bp_units as u8;
        out[7] = sp_base
            | bp_rule << kind::BP_SHIFT
            | frame_type << kind::TYPE_SHIFT
            | if signal { kind::SIGNAL } else { 0 };
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALL: [u8; 6] = [8, 0, 0, 0, 0x05, 0x02];
    const CALL_BP_SAVED: [u8; 6] = [16, 0, 0xf0, 0xff, 0x15, 0x02];

    /// The sections of `entries` at these absolute `ips`, the ip table at
    /// `at`.
    fn sections(at: u64, ips: &[u64], entries: &[[u8; 6]]) -> (Vec<u8>, Vec<u8>) {
        let ip_table = (ips.iter().enumerate())
            .flat_map(|(i, &ip)| ((ip as i64 - (at + 4 * i as u64) as i64) as i32).to_le_bytes())
            .collect();
        (ip_table, entries.concat())
    }

    fn build(ips: &[u64], entries: &[[u8; 6]], base: u64, end: u64) -> OrcTable {
        let at = 0xffff_ffff_8300_0000;
        let (ip_table, raw_entries) = sections(at, ips, entries);
        let raw = RawOrc {
            ip_table_at: at,
            ip_table: &ip_table,
            entries: &raw_entries,
        };
        OrcTable::build(&raw, base, end).expect("builds")
    }

    /// The 6.x bit layout: sp_reg and bp_reg nibbles, type in three bits,
    /// signal above; registers BPF does not have make a rule unusable.
    #[test]
    fn decodes_entries() {
        let call = OrcRule::Frame {
            sp: SpBase::Sp,
            sp_offset: 8,
            bp: BpRule::Unchanged,
            frame: FrameType::Call,
            signal: false,
        };
        assert_eq!(decode(CALL), call);
        let saved = decode(CALL_BP_SAVED);
        assert_eq!(
            saved,
            OrcRule::Frame {
                sp: SpBase::Sp,
                sp_offset: 16,
                bp: BpRule::AtPrevSp(-16),
                frame: FrameType::Call,
                signal: false,
            }
        );
        let regs = decode([0, 0, 0, 0, 0x05, 0x0b]);
        assert!(matches!(
            regs,
            OrcRule::Frame {
                frame: FrameType::Regs,
                signal: true,
                ..
            }
        ));
        assert_eq!(decode([0, 0, 0, 0, 0x05, 0x01]), OrcRule::EndOfStack);
        assert_eq!(decode([0, 0, 0, 0, 0x05, 0x00]), OrcRule::Unusable);
        assert_eq!(decode([0, 0, 0, 0, 0x03, 0x02]), OrcRule::Unusable);
    }

    /// Equal addresses keep the last entry (the kernel's "weak"
    /// terminators come first), entries outside the text are dropped,
    /// equal neighbours merge, and a row at the base says where no entry
    /// does.
    #[test]
    fn keeps_the_last_clips_and_merges() {
        let base = 0xffff_ffff_8100_0000;
        let end = base + 0x1000;
        let ips = [
            base - 16,
            base + 0x10,
            base + 0x10,
            base + 0x20,
            base + 0x30,
            end,
        ];
        let undefined = [0, 0, 0, 0, 0, 0];
        let entries = [CALL, undefined, CALL, CALL, CALL_BP_SAVED, CALL];
        let table = build(&ips, &entries, base, end);
        let pcs: Vec<u32> = table.rows.iter().map(|r| r.pc).collect();
        assert_eq!(pcs, [0, 0x10, 0x30]);
        assert_eq!(table.rows[0].rule, OrcRule::Unusable);
        assert_eq!(table.entries, 6);
        assert_eq!(table.lookup(base + 0x2f), Some(decode(CALL)));
        assert_eq!(table.lookup(base + 0x30), Some(decode(CALL_BP_SAVED)));
        assert_eq!(table.lookup(base + 0x8), Some(OrcRule::Unusable));
        assert_eq!(table.lookup(end), None);
        assert_eq!(table.lookup(base - 1), None);
    }

    /// The block index finds, for every address, the row a search of the
    /// whole table finds.
    #[test]
    fn block_index_agrees_with_a_full_search() {
        let base = 0xffff_ffff_8100_0000;
        let end = base + 0x800;
        let ips: Vec<u64> = (0..40).map(|i| base + i * 37 + (i % 3) * 5).collect();
        let entries: Vec<[u8; 6]> = (0..40)
            .map(|i| if i % 2 == 0 { CALL } else { CALL_BP_SAVED })
            .collect();
        let table = build(&ips, &entries, base, end);
        assert_eq!(table.blocks.len(), 9);
        for ip in base..end {
            let pc = (ip - base) as u32;
            let at = table.rows.partition_point(|r| r.pc <= pc);
            assert_eq!(table.lookup(ip), Some(table.rows[at - 1].rule), "{ip:#x}");
        }
        assert!(table.widest_block() <= 9, "{}", table.widest_block());
    }

    /// Rows encode their fields where the walker reads them; a saved-bp
    /// offset that is not whole 8-byte units is unusable.
    #[test]
    fn encodes_rows() {
        let row = OrcRow {
            pc: 0x1234,
            rule: decode(CALL_BP_SAVED),
        };
        let bytes = row.encode();
        assert_eq!(&bytes[..4], &0x1234u32.to_le_bytes());
        assert_eq!(i16::from_le_bytes([bytes[4], bytes[5]]), 16);
        assert_eq!(bytes[6] as i8, -2);
        let expected = kind::SP_SP
            | kind::BP_AT_PREV_SP << kind::BP_SHIFT
            | kind::TYPE_CALL << kind::TYPE_SHIFT;
        assert_eq!(bytes[7], expected);
        let odd = OrcRow {
            pc: 1,
            rule: decode([16, 0, 0xf4, 0xff, 0x15, 0x0a]),
        };
        assert_eq!(odd.encode()[7], kind::TYPE_UNUSABLE << kind::TYPE_SHIFT);
        let end = OrcRow {
            pc: 2,
            rule: OrcRule::EndOfStack,
        };
        assert_eq!(
            end.encode()[7] & kind::TYPE_MASK,
            kind::TYPE_END << kind::TYPE_SHIFT
        );
    }

    /// Sections whose sizes disagree, unsorted addresses and an empty text
    /// are errors.
    #[test]
    fn rejects_bad_sections() {
        let raw = RawOrc {
            ip_table_at: 0,
            ip_table: &[0; 8],
            entries: &[0; 6],
        };
        assert!(matches!(
            OrcTable::build(&raw, 0, 16),
            Err(OrcError::Sizes { .. })
        ));
        let at = 0x1000;
        let (ip_table, entries) = sections(at, &[0x2000, 0x1800], &[CALL, CALL]);
        let raw = RawOrc {
            ip_table_at: at,
            ip_table: &ip_table,
            entries: &entries,
        };
        assert_eq!(OrcTable::build(&raw, 0, 0x3000), Err(OrcError::Unsorted(1)));
        assert!(matches!(
            OrcTable::build(&raw, 5, 5),
            Err(OrcError::Text { .. })
        ));
    }
}
