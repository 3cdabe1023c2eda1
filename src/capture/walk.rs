//! How an event's user stack was walked: the unwinder that produced its
//! frames and how the walk ended. One byte per event in the capture's
//! `stack walks` chunks (format 2.3, `docs/data-format.md`); renderers show
//! it per event (NDJSON) and as counts (the profile report).

/// The unwinder behind a user stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unwinder {
    /// Some frame came from an `.eh_frame` table.
    Table = 1,
    /// Frame pointers only (no table covered the code).
    FramePointer = 2,
    /// The kernel's frame-pointer walk: the process had no tables yet.
    KernelWalk = 3,
    /// Reused from the task's last off-CPU walk (legacy: written by wprof's
    /// removed per-task cache; still decoded in older captures).
    Cached = 4,
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

/// An event's user stack walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackWalk {
    pub unwinder: Unwinder,
    pub ending: Option<StackEnding>,
}

impl Unwinder {
    pub const ALL: [Unwinder; 4] = [
        Unwinder::Table,
        Unwinder::FramePointer,
        Unwinder::KernelWalk,
        Unwinder::Cached,
    ];

    /// Its name in NDJSON and JSON reports.
    pub fn name(self) -> &'static str {
        match self {
            Unwinder::Table => "table",
            Unwinder::FramePointer => "frame-pointer",
            Unwinder::KernelWalk => "kernel-walk",
            Unwinder::Cached => "cached",
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
    /// The byte stored per event: the unwinder in the low nibble, the
    /// ending (0 for none) in the high one.
    pub fn code(self) -> u8 {
        self.unwinder as u8 | self.ending.map_or(0, |e| e as u8) << 4
    }

    /// The walk a stored byte describes; `None` for 0 (no user stack) and
    /// for codes a newer writer may add.
    pub fn from_code(code: u8) -> Option<StackWalk> {
        let unwinder = *Unwinder::ALL.iter().find(|u| **u as u8 == code & 15)?;
        let ending = match code >> 4 {
            0 => None,
            e => Some(*StackEnding::ALL.iter().find(|k| **k as u8 == e)?),
        };
        Some(StackWalk { unwinder, ending })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every walk survives its byte, 0 means none, unknown codes are none.
    #[test]
    fn codes_round_trip() {
        for unwinder in Unwinder::ALL {
            let endings = StackEnding::ALL.map(Some);
            for ending in endings.into_iter().chain([None]) {
                let walk = StackWalk { unwinder, ending };
                assert_eq!(StackWalk::from_code(walk.code()), Some(walk));
            }
        }
        assert_eq!(StackWalk::from_code(0), None);
        assert_eq!(StackWalk::from_code(5), None);
        assert_eq!(StackWalk::from_code(0x51), None);
    }
}
