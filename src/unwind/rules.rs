//! The unwind rule of one address range and its 8-byte encoding, the row
//! format the BPF unwinder reads (`docs/unwinding.md`, "Table format").
//!
//! x86-64 only: the canonical frame address (CFA) is `rsp+N` or `rbp+N`, the
//! return address is at `CFA-8`, and the only callee-saved register the
//! unwinder restores is `rbp` (the one later CFA rules may need).

/// How to find the canonical frame address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cfa {
    /// `rsp + N`
    Rsp(u16),
    /// `rbp + N`
    Rbp(u16),
    /// The `.plt` expression `rsp + 8 + ((rip & 15) >= T ? 8 : 0)`: inside
    /// a 16-byte PLT entry, the instructions at offset `T` and on run after
    /// the entry pushed the relocation index.
    Plt { threshold: u8 },
}

/// Where the caller's `rbp` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rbp {
    /// Not changed by this function (yet).
    Unchanged,
    /// Saved at `CFA + N`, `N` a multiple of 8.
    AtCfa(i16),
    /// In a place BPF cannot read (another register, an expression): the
    /// unwinder continues with `rbp` unknown (0).
    Lost,
}

/// Why a row cannot be evaluated in BPF.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unsupported {
    /// The CFA is based on a register other than rsp and rbp.
    CfaRegister,
    /// The CFA is a DWARF expression other than the PLT pattern.
    CfaExpression,
    /// The CFA offset is negative or does not fit 16 bits.
    CfaOffset,
    /// The return address is not at `CFA-8`.
    ReturnAddress,
}

/// The rule in force from a row's address up to the next row's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// A normal frame: the CFA, `rbp`, and the return address at `CFA-8`.
    Frame { cfa: Cfa, rbp: Rbp },
    /// The return address is undefined: the outermost frame (`_start`,
    /// a thread's start routine). The unwinder stops here cleanly.
    Outermost,
    /// No FDE covers these addresses.
    NoInfo,
    /// A rule BPF cannot evaluate; the unwinder falls back to frame pointers.
    Unsupported(Unsupported),
}

/// A rule starting at a virtual address of the ELF file (not the process).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Row {
    pub pc: u32,
    pub rule: Rule,
}

/// Bytes of one encoded row.
pub const ROW_BYTES: usize = 8;

/// Encoded row fields: `pc: u32` at 0, `cfa_offset: u16` at 4, `rbp_offset`
/// (i8, in 8-byte units) at 6, `kind: u8` at 7.
pub mod layout {
    pub const PC: i16 = 0;
    pub const CFA_OFFSET: i16 = 4;
    pub const RBP_OFFSET: i16 = 6;
    pub const KIND: i16 = 7;
}

/// The low four bits of the kind byte: which CFA computation.
pub mod kind {
    pub const NO_INFO: u8 = 0;
    pub const CFA_RSP: u8 = 1;
    pub const CFA_RBP: u8 = 2;
    /// `cfa_offset` holds the PLT threshold.
    pub const CFA_PLT: u8 = 3;
    pub const OUTERMOST: u8 = 4;
    pub const UNSUPPORTED: u8 = 5;
    /// Mask of the CFA kind.
    pub const CFA_MASK: u8 = 0x0f;
    /// Bit set when `rbp` is saved at `CFA + 8 * rbp_offset`.
    pub const RBP_SAVED: u8 = 0x10;
    /// Bit set when `rbp` cannot be recovered.
    pub const RBP_LOST: u8 = 0x20;
}

impl Row {
    /// The 8 bytes BPF reads. A saved-`rbp` offset that is not a multiple
    /// of 8 or beyond ±1 KiB is encoded as lost (`Rule::Frame` rows come
    /// from [`crate::unwind::cfi`], which never produces one).
    pub fn encode(&self) -> [u8; ROW_BYTES] {
        let (cfa_kind, cfa_offset, rbp) = match self.rule {
            Rule::Frame { cfa, rbp } => match cfa {
                Cfa::Rsp(n) => (kind::CFA_RSP, n, rbp),
                Cfa::Rbp(n) => (kind::CFA_RBP, n, rbp),
                Cfa::Plt { threshold } => (kind::CFA_PLT, u16::from(threshold), rbp),
            },
            Rule::Outermost => (kind::OUTERMOST, 0, Rbp::Unchanged),
            Rule::NoInfo => (kind::NO_INFO, 0, Rbp::Unchanged),
            Rule::Unsupported(_) => (kind::UNSUPPORTED, 0, Rbp::Unchanged),
        };
        let (rbp_bits, rbp_units) = match rbp {
            Rbp::Unchanged => (0, 0),
            Rbp::AtCfa(n) => match rbp_units(n) {
                Some(units) => (kind::RBP_SAVED, units),
                None => (kind::RBP_LOST, 0),
            },
            Rbp::Lost => (kind::RBP_LOST, 0),
        };
        let mut out = [0u8; ROW_BYTES];
        out[..4].copy_from_slice(&self.pc.to_le_bytes());
        out[4..6].copy_from_slice(&cfa_offset.to_le_bytes());
        out[6] = rbp_units as u8;
        out[7] = cfa_kind | rbp_bits;
        out
    }
}

/// A saved-`rbp` offset in 8-byte units, when it fits an `i8`.
pub fn rbp_units(offset: i16) -> Option<i8> {
    (offset % 8 == 0).then(|| i8::try_from(offset / 8).ok())?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A typical body row: CFA rsp+16, rbp saved at CFA-16.
    #[test]
    fn encodes_frame_row() {
        let row = Row {
            pc: 0x1234,
            rule: Rule::Frame {
                cfa: Cfa::Rsp(16),
                rbp: Rbp::AtCfa(-16),
            },
        };
        assert_eq!(row.encode(), [0x34, 0x12, 0, 0, 16, 0, 0xfe, 0x11]);
    }

    /// PLT rows carry the threshold; special rows carry only their kind.
    #[test]
    fn encodes_special_rows() {
        let plt = Row {
            pc: 8,
            rule: Rule::Frame {
                cfa: Cfa::Plt { threshold: 11 },
                rbp: Rbp::Unchanged,
            },
        };
        assert_eq!(plt.encode(), [8, 0, 0, 0, 11, 0, 0, kind::CFA_PLT]);
        let end = Row {
            pc: 1,
            rule: Rule::Outermost,
        };
        assert_eq!(end.encode()[7], kind::OUTERMOST);
        let bad = Row {
            pc: 1,
            rule: Rule::Unsupported(Unsupported::CfaExpression),
        };
        assert_eq!(bad.encode()[7], kind::UNSUPPORTED);
    }

    /// Offsets that are not multiples of 8 or too far from the CFA are lost.
    #[test]
    fn rbp_offset_limits() {
        assert_eq!(rbp_units(-1024), Some(-128));
        assert_eq!(rbp_units(-1032), None);
        assert_eq!(rbp_units(-12), None);
        let row = Row {
            pc: 0,
            rule: Rule::Frame {
                cfa: Cfa::Rbp(16),
                rbp: Rbp::AtCfa(-12),
            },
        };
        assert_eq!(row.encode()[7], kind::CFA_RBP | kind::RBP_LOST);
    }
}
