//! Unwinding a copy of a user stack in user space (`docs/unwinding.md`,
//! "Stack snapshots"): when the BPF unwinder found no table for a process
//! or a pc, the record carries the user registers and the top bytes of the
//! stack, and the recorder walks them here once the tables exist, as
//! `perf --call-graph dwarf` does. Input: a [`StackCopy`] and the code of
//! the process ([`CodeMap`]: the table manager's mappings and tables).
//! Output: the frames and the same [`flags`] the BPF walk sets, or what is
//! still missing. The rules are evaluated by [`Rule::caller`], the one
//! Rust evaluation of the table format.

use super::maps::{MAX_FRAMES, flags};
use super::rules::{Registers, Rule, Step, frame_pointer_step};

/// The registers of the interrupted frame and the stack bytes from `sp` up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackCopy {
    pub regs: Registers,
    pub bytes: Vec<u8>,
}

impl StackCopy {
    /// The 8 bytes at user address `addr`, when the copy holds them.
    pub fn read(&self, addr: u64) -> Option<u64> {
        let at = usize::try_from(addr.checked_sub(self.regs.sp)?).ok()?;
        let word = self.bytes.get(at..at.checked_add(8)?)?;
        Some(u64::from_le_bytes(word.try_into().expect("8 bytes")))
    }
}

/// What the process's code says about a pc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeLookup {
    /// A mapping with a table: the rule in force there.
    Rule(Rule),
    /// A mapping without a table (anonymous code, a file without CFI):
    /// frame pointers.
    NoTable,
    /// In no known mapping.
    Unmapped,
    /// Its table is still being built.
    Building,
}

/// The code of one process: what a pc finds.
pub trait CodeMap {
    fn lookup(&self, pc: u64) -> CodeLookup;
}

/// Why a copy cannot be walked yet: a table it needs is being built, or a
/// pc is in no mapping the process had when it was last read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    Building { pc: u64 },
    Unmapped { pc: u64 },
}

/// A walked copy: the frames (the first the interrupted ip) and flags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unwound {
    pub frames: Vec<u64>,
    pub flags: u32,
}

/// Walks `copy` with `code`. With `settle`, a pc in no mapping or in code
/// whose table is not built is walked with frame pointers (the process was
/// read since, or the wait is over); without, the walk stops and says what
/// it misses.
pub fn unwind(copy: &StackCopy, code: &impl CodeMap, settle: bool) -> Result<Unwound, Missing> {
    let read = |addr| copy.read(addr);
    let mut out = Unwound::default();
    let mut regs = copy.regs;
    while regs.ip != 0 {
        if out.frames.len() >= MAX_FRAMES as usize {
            out.flags |= flags::TRUNCATED;
            break;
        }
        // Above the first frame the pc is a return address, which may be
        // the first byte of the next function.
        let pc = if out.frames.is_empty() {
            regs.ip
        } else {
            regs.ip - 1
        };
        out.frames.push(regs.ip);
        let step = match code.lookup(pc) {
            CodeLookup::Rule(rule) => rule.caller(regs, read),
            CodeLookup::NoTable => Step::NoRule,
            CodeLookup::Building if !settle => return Err(Missing::Building { pc }),
            CodeLookup::Unmapped if !settle => return Err(Missing::Unmapped { pc }),
            CodeLookup::Unmapped => {
                out.flags |= flags::UNKNOWN_MAPPING;
                Step::NoRule
            }
            CodeLookup::Building => Step::NoRule,
        };
        let step = match step {
            Step::NoRule => match frame_pointer_step(regs, read) {
                Some(step) => {
                    out.flags |= flags::FRAME_POINTER;
                    step
                }
                None => break,
            },
            Step::Caller { .. } => {
                out.flags |= flags::TABLE;
                step
            }
            other => other,
        };
        match step {
            Step::Caller { regs: caller, cfa } => {
                if cfa <= regs.sp {
                    out.flags |= flags::NO_PROGRESS;
                    break;
                }
                regs = caller;
            }
            Step::Outermost => {
                out.flags |= flags::OUTERMOST;
                break;
            }
            Step::Unreadable => {
                out.flags |= flags::READ_FAILED;
                break;
            }
            Step::NoRule => unreachable!("replaced by the frame-pointer step above"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unwind::rules::{Cfa, Rbp};

    /// Code at 0x1000.. is a leaf (CFA rsp+8), 0x2000.. a function with a
    /// 32-byte frame, 0x3000.. `_start`; 0x4000.. has no table, 0x5000..
    /// is being built; the rest is unmapped.
    struct Code;

    impl CodeMap for Code {
        fn lookup(&self, pc: u64) -> CodeLookup {
            let frame = |cfa| {
                CodeLookup::Rule(Rule::Frame {
                    cfa,
                    rbp: Rbp::Unchanged,
                })
            };
            match pc >> 12 {
                1 => frame(Cfa::Rsp(8)),
                2 => frame(Cfa::Rsp(32)),
                3 => CodeLookup::Rule(Rule::Outermost),
                4 => CodeLookup::NoTable,
                5 => CodeLookup::Building,
                _ => CodeLookup::Unmapped,
            }
        }
    }

    fn copy(ip: u64, words: &[u64]) -> StackCopy {
        StackCopy {
            regs: Registers {
                ip,
                sp: 0x7000,
                bp: 0,
            },
            bytes: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        }
    }

    /// A leaf, its caller with a frame, and `_start`: three frames, ending
    /// at the outermost row.
    #[test]
    fn walks_with_rules_to_the_outermost_frame() {
        let stack = copy(0x1010, &[0x2020, 0, 0, 0, 0x3030]);
        let unwound = unwind(&stack, &Code, false).expect("every table is there");
        assert_eq!(unwound.frames, [0x1010, 0x2020, 0x3030]);
        assert_eq!(unwound.flags, flags::TABLE | flags::OUTERMOST);
    }

    /// A table being built or an unknown pc make the walk wait; settled, it
    /// goes on with frame pointers there (here rbp is 0: it ends).
    #[test]
    fn waits_for_missing_tables_then_settles() {
        let building = copy(0x5000, &[]);
        assert_eq!(
            unwind(&building, &Code, false),
            Err(Missing::Building { pc: 0x5000 })
        );
        let unmapped = copy(0x1010, &[0x9001]);
        assert_eq!(
            unwind(&unmapped, &Code, false),
            Err(Missing::Unmapped { pc: 0x9000 })
        );
        let settled = unwind(&unmapped, &Code, true).expect("settled");
        assert_eq!(settled.frames, [0x1010, 0x9001]);
        assert_eq!(settled.flags, flags::TABLE | flags::UNKNOWN_MAPPING);
    }

    /// Code without a table follows frame pointers; a read past the copy
    /// ends the walk as unreadable.
    #[test]
    fn follows_frame_pointers_and_stops_at_the_copy_end() {
        let mut stack = copy(0x4000, &[0x7010, 0x2020, 0x7777, 0x1234]);
        stack.regs.bp = 0x7000;
        let unwound = unwind(&stack, &Code, false).expect("no table needed");
        assert_eq!(unwound.frames, [0x4000, 0x2020]);
        assert_eq!(unwound.flags, flags::FRAME_POINTER | flags::READ_FAILED);
        assert_eq!(stack.read(0x7018), Some(0x1234));
        assert_eq!(stack.read(0x7019), None);
        assert_eq!(stack.read(0x6ff8), None);
    }
}
