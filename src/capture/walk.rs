//! How an event's stack was walked: the unwinder that produced its user
//! frames, how that walk ended, and whether the kernel part was cut at the
//! depth limit. One byte per event in the capture's `stack walks` chunks
//! (format 2.3, `docs/data-format.md`); renderers show it per event
//! (NDJSON) and as counts (the profile report).

/// The unwinder behind a user stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unwinder {
    /// Some frame came from an `.eh_frame` table.
    Table = 1,
    /// Frame pointers only (no table covered the code).
    FramePointer = 2,
    /// The kernel's frame-pointer walk: the process had no tables yet.
    KernelWalk = 3,
    /// Reused from the task's last off-CPU walk: it blocked again from the
    /// same registers with the same stack words and mappings (the BPF walk
    /// cache, format 2.6; captures before format 2.5 wrote it from an
    /// unvalidated cache, 2.5 never).
    Cached = 4,
    /// Walked in user space from a copy of the stack taken before the
    /// process's tables were loaded (`docs/unwinding.md`, "Stack snapshots").
    Snapshot = 5,
}

/// Why a user stack's walk stopped, when it did not simply run out of
/// frames (a zero frame pointer or return address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StackEnding {
    /// At the outermost frame (`_start`, a thread's entry): complete.
    Outermost = 1,
    /// Cut at the frame limit.
    Truncated = 2,
    /// At an address it could not read.
    ReadFailed = 3,
    /// Where a frame did not move up the stack.
    NoProgress = 4,
}

/// An event's stack walk: its user part (`unwinder` absent without user
/// frames) and whether its kernel part reached the kernel's depth limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackWalk {
    pub unwinder: Option<Unwinder>,
    pub ending: Option<StackEnding>,
    pub kernel_truncated: bool,
}

/// The bit of a walk's byte that marks a truncated kernel stack.
const KERNEL_TRUNCATED: u8 = 8;

impl Unwinder {
    pub const ALL: [Unwinder; 5] = [
        Unwinder::Table,
        Unwinder::FramePointer,
        Unwinder::KernelWalk,
        Unwinder::Cached,
        Unwinder::Snapshot,
    ];

    /// Its name in NDJSON and JSON reports.
    pub fn name(self) -> &'static str {
        match self {
            Unwinder::Table => "table",
            Unwinder::FramePointer => "frame-pointer",
            Unwinder::KernelWalk => "kernel-walk",
            Unwinder::Cached => "cached",
            Unwinder::Snapshot => "snapshot",
        }
    }
}

impl StackEnding {
    pub const ALL: [StackEnding; 4] = [
        StackEnding::Outermost,
        StackEnding::Truncated,
        StackEnding::ReadFailed,
        StackEnding::NoProgress,
    ];

    /// Its name in NDJSON and JSON reports.
    pub fn name(self) -> &'static str {
        match self {
            StackEnding::Outermost => "outermost",
            StackEnding::Truncated => "truncated",
            StackEnding::ReadFailed => "unreadable",
            StackEnding::NoProgress => "no-progress",
        }
    }
}

impl StackWalk {
    /// Whether there is anything to say: user frames or a cut kernel stack.
    pub fn is_some(self) -> bool {
        self.unwinder.is_some() || self.kernel_truncated
    }

    /// The byte stored per event: the unwinder (0 for none) in the low
    /// three bits, [`KERNEL_TRUNCATED`], the ending (0 for none) in the high
    /// nibble.
    pub fn code(self) -> u8 {
        let truncated = if self.kernel_truncated {
            KERNEL_TRUNCATED
        } else {
            0
        };
        let unwinder = self.unwinder.map_or(0, |u| u as u8);
        unwinder | truncated | self.ending.map_or(0, |e| e as u8) << 4
    }

    /// The walk a stored byte describes; `None` for 0 (nothing to say) and
    /// for codes a newer writer may add.
    pub fn from_code(code: u8) -> Option<StackWalk> {
        let unwinder = match code & 7 {
            0 => None,
            u => Some(*Unwinder::ALL.iter().find(|k| **k as u8 == u)?),
        };
        let ending = match code >> 4 {
            0 => None,
            e => Some(*StackEnding::ALL.iter().find(|k| **k as u8 == e)?),
        };
        let walk = StackWalk {
            unwinder,
            ending,
            kernel_truncated: code & KERNEL_TRUNCATED != 0,
        };
        (walk.is_some() && (unwinder.is_some() || ending.is_none())).then_some(walk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every walk survives its byte, 0 means none, unknown codes and an
    /// ending without an unwinder are none.
    #[test]
    fn codes_round_trip() {
        for unwinder in Unwinder::ALL {
            let endings = StackEnding::ALL.map(Some);
            for ending in endings.into_iter().chain([None]) {
                for kernel_truncated in [false, true] {
                    let unwinder = Some(unwinder);
                    let walk = StackWalk {
                        unwinder,
                        ending,
                        kernel_truncated,
                    };
                    assert_eq!(StackWalk::from_code(walk.code()), Some(walk));
                }
            }
        }
        let kernel_only = StackWalk {
            unwinder: None,
            ending: None,
            kernel_truncated: true,
        };
        assert_eq!(StackWalk::from_code(kernel_only.code()), Some(kernel_only));
        assert_eq!(StackWalk::from_code(0), None);
        assert_eq!(StackWalk::from_code(6), None);
        assert_eq!(StackWalk::from_code(0x51), None);
        assert_eq!(StackWalk::from_code(0x18), None);
    }
}
