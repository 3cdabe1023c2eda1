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

/// The registers of one frame as an unwinder walks up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Registers {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// What a rule says about the caller of a frame ([`Rule::caller`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The caller's registers; `cfa` is where the frame's return address
    /// sits above (`cfa - 8`).
    Caller { regs: Registers, cfa: u64 },
    /// This frame is the outermost.
    Outermost,
    /// The rule cannot be evaluated: use frame pointers.
    NoRule,
    /// A read the rule needs failed.
    Unreadable,
}

impl Rule {
    /// The caller of the frame `regs` describes, by this rule, reading user
    /// memory with `read` (8 bytes at an address). The same evaluation as
    /// the BPF unwinder's (`unwind::bpf`): CFA from `rsp` or `rbp` (the PLT
    /// expression from the frame's own `ip`), return address at `CFA-8`,
    /// `rbp` kept, read at `CFA+N`, or lost (0).
    pub fn caller(&self, regs: Registers, read: impl Fn(u64) -> Option<u64>) -> Step {
        let (cfa, rbp) = match *self {
            Rule::Frame { cfa, rbp } => (cfa, rbp),
            Rule::Outermost => return Step::Outermost,
            Rule::NoInfo | Rule::Unsupported(_) => return Step::NoRule,
        };
        let cfa = match cfa {
            Cfa::Rsp(n) => regs.sp.wrapping_add(u64::from(n)),
            Cfa::Rbp(n) => regs.bp.wrapping_add(u64::from(n)),
            Cfa::Plt { threshold } => {
                let pushed = if regs.ip & 15 >= u64::from(threshold) {
                    8
                } else {
                    0
                };
                regs.sp.wrapping_add(8 + pushed)
            }
        };
        let Some(ip) = read(cfa.wrapping_sub(8)) else {
            return Step::Unreadable;
        };
        let bp = match rbp {
            Rbp::Unchanged => regs.bp,
            // As encoded: offsets beyond an i8 of 8-byte units are lost.
            Rbp::AtCfa(n) => match rbp_units(n) {
                Some(units) => match read(cfa.wrapping_add_signed(i64::from(units) * 8)) {
                    Some(bp) => bp,
                    None => return Step::Unreadable,
                },
                None => 0,
            },
            Rbp::Lost => 0,
        };
        let regs = Registers { ip, sp: cfa, bp };
        Step::Caller { regs, cfa }
    }
}

/// The classic frame-pointer step: saved `rbp` at `[rbp]`, return address
/// at `[rbp+8]`, CFA `rbp+16`; `None` at `rbp` 0 (the end) or when a read
/// fails (`Some(Step::Unreadable)`).
pub fn frame_pointer_step(regs: Registers, read: impl Fn(u64) -> Option<u64>) -> Option<Step> {
    if regs.bp == 0 {
        return None;
    }
    let (Some(bp), Some(ip)) = (read(regs.bp), read(regs.bp.wrapping_add(8))) else {
        return Some(Step::Unreadable);
    };
    let cfa = regs.bp.wrapping_add(16);
    Some(Step::Caller {
        regs: Registers { ip, sp: cfa, bp },
        cfa,
    })
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

    /// A rule gives the caller as BPF computes it: CFA from rsp, rbp or the
    /// PLT expression, return address at CFA-8, rbp read at CFA+N.
    #[test]
    fn evaluates_rules() {
        let memory = |addr: u64| match addr {
            0x1008 => Some(0x4000),
            0x1010 => Some(0x5000),
            0x1000 => Some(0x7777),
            _ => None,
        };
        let regs = Registers {
            ip: 0x400,
            sp: 0xff0,
            bp: 0xf90,
        };
        let frame = |cfa, rbp| Rule::Frame { cfa, rbp };
        let step = frame(Cfa::Rsp(0x20), Rbp::AtCfa(-16)).caller(regs, memory);
        let caller = Registers {
            ip: 0x4000,
            sp: 0x1010,
            bp: 0x7777,
        };
        assert_eq!(
            step,
            Step::Caller {
                regs: caller,
                cfa: 0x1010
            }
        );
        let step = frame(Cfa::Rbp(0x80), Rbp::Lost).caller(regs, memory);
        assert!(matches!(step, Step::Caller { regs, .. } if regs.bp == 0 && regs.sp == 0x1010));
        // ip & 15 = 0 < 11: the entry has pushed nothing yet: CFA rsp+8.
        let plt = frame(Cfa::Plt { threshold: 11 }, Rbp::Unchanged).caller(regs, memory);
        assert!(matches!(plt, Step::Unreadable));
        let at_push = Registers {
            ip: 0x40b,
            sp: 0x1000,
            ..regs
        };
        let plt = frame(Cfa::Plt { threshold: 11 }, Rbp::Unchanged).caller(at_push, memory);
        assert!(matches!(plt, Step::Caller { regs, .. } if regs.ip == 0x4000 && regs.bp == 0xf90));
        assert_eq!(Rule::Outermost.caller(regs, memory), Step::Outermost);
        assert_eq!(Rule::NoInfo.caller(regs, memory), Step::NoRule);
        let fp = frame_pointer_step(Registers { bp: 0x1000, ..regs }, memory);
        assert!(matches!(fp, Some(Step::Caller { regs, cfa: 0x1010 }) if regs.ip == 0x4000));
        assert_eq!(
            frame_pointer_step(Registers { bp: 0, ..regs }, memory),
            None
        );
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
