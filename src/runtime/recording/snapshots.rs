//! Recording: user stacks copied where no table was loaded, walked once
//! their tables exist (`docs/unwinding.md`, "Stack snapshots"). A record
//! whose user walk found no table for its process (`NO_PROCESS`), a pc
//! (`UNKNOWN_MAPPING`) or a table still being built (`TABLE_PENDING`)
//! carries the user registers and the top of the stack (`SNAPSHOT`); the
//! first two also made the recorder read the process's mappings and build
//! their tables. The event waits here (holding the reorder window, as a
//! block waiting for its deferred off-CPU stack does) until the tables it
//! needs are placed, then gets the frames `unwind::snapshot` walks from the
//! copy; a wait past [`MAX_WAIT`], a process gone before it was read, or an
//! `exec` since, keep the frames the BPF walk found, counted as given up.
//! Joined here, the capture holds the walked stacks, so every renderer sees
//! them, live and in replay.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::stacks::{RawStack, StackHeader, UserFrame, raw_digest};
use super::tables::{Tables, stack_walk};
use super::{Pending, RecordError};
use crate::capture::model::StackCount;
use crate::codegen::stack_layout::snapshot as layout;
use crate::unwind::maps::flags;
use crate::unwind::proc_maps::AddressSpace;
use crate::unwind::rules::Registers;
use crate::unwind::snapshot::{Missing, StackCopy, Unwound, unwind};

/// Longest a copied stack waits for its tables (a program's table builds
/// in well under a millisecond, libc's in 55–80 ms, one of 100 MiB of code
/// in 2–3 s): past it the event keeps the BPF walk's frames.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(1);

/// The copy a message carries, and the address space it was taken in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct StackSnapshot {
    copy: StackCopy,
    identity: AddressSpace,
}

/// Reads the snapshot after the frames `desc` counts from `frames_at`.
pub(super) fn read_snapshot(
    bytes: &[u8],
    frames_at: u32,
    desc: &StackHeader,
) -> Result<StackSnapshot, RecordError> {
    let at = frames_at as usize + desc.user_bytes() + 8 * desc.kernel_frames as usize;
    let short = || {
        RecordError::Malformed(format!(
            "{} bytes, shorter than its stack snapshot at {at}",
            bytes.len()
        ))
    };
    let header = bytes
        .get(at..at + layout::HEADER as usize)
        .ok_or_else(short)?;
    let word = |offset: i16| {
        let offset = offset as usize;
        u64::from_le_bytes(header[offset..offset + 8].try_into().expect("8 bytes"))
    };
    let len = word(layout::LEN) as u32 as usize;
    let stack_at = at + layout::HEADER as usize;
    let stack = bytes.get(stack_at..stack_at + len).ok_or_else(short)?;
    Ok(StackSnapshot {
        copy: StackCopy {
            regs: Registers {
                ip: word(layout::IP),
                sp: word(layout::SP),
                bp: word(layout::BP),
            },
            bytes: stack.to_vec(),
        },
        identity: AddressSpace {
            start_stack: word(layout::START_STACK),
            end_code: word(layout::END_CODE),
        },
    })
}

/// An event waiting for the tables of its copied stack.
struct Waiting {
    pending: Pending,
    pid: u32,
    snapshot: StackSnapshot,
    arrived: Instant,
}

/// What became of a waiting copy.
enum Outcome {
    Unwound(Unwound),
    Wait,
    GiveUp,
}

/// The events waiting for the tables of their copied stacks.
#[derive(Default)]
pub(super) struct SnapshotJoin {
    waiting: Vec<Waiting>,
    unwound: u64,
    given_up: u64,
}

impl SnapshotJoin {
    /// An event of process `pid` to wait with its copy.
    pub(super) fn wait(&mut self, pid: u32, pending: Pending, snapshot: StackSnapshot) {
        self.waiting.push(Waiting {
            pending,
            pid,
            snapshot,
            arrived: Instant::now(),
        });
    }

    pub(super) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The processes waited for: their mappings must not be forgotten.
    pub(super) fn pids(&self) -> HashSet<u32> {
        self.waiting.iter().map(|w| w.pid).collect()
    }

    /// The time of the oldest waiting event: nothing after it may be written.
    pub(super) fn oldest(&self) -> Option<u64> {
        self.waiting.iter().map(|w| w.pending.event.ts_ns).min()
    }

    /// The events whose copies can be walked now (their stacks replaced)
    /// or are given up (waited past [`MAX_WAIT`], or everything with
    /// `last`: the capture ends); the rest wait on.
    pub(super) fn settle(&mut self, tables: Option<&Tables>, last: bool) -> Vec<Pending> {
        let mut settled = Vec::new();
        let mut waiting = Vec::with_capacity(self.waiting.len());
        for entry in std::mem::take(&mut self.waiting) {
            let over = last || entry.arrived.elapsed() >= MAX_WAIT;
            match tables.map_or(Outcome::GiveUp, |t| outcome(&entry, t, over)) {
                Outcome::Wait => waiting.push(entry),
                Outcome::GiveUp => settled.push(self.give_up(entry)),
                Outcome::Unwound(unwound) => {
                    self.unwound += 1;
                    settled.push(with_unwound(entry.pending, unwound));
                }
            }
        }
        self.waiting = waiting;
        settled
    }

    /// The oldest waiting event, given up: the events it held back filled
    /// the reorder window.
    pub(super) fn give_up_oldest(&mut self) -> Option<Pending> {
        let (at, _) =
            (self.waiting.iter().enumerate()).min_by_key(|(_, w)| w.pending.event.ts_ns)?;
        let entry = self.waiting.swap_remove(at);
        Some(self.give_up(entry))
    }

    fn give_up(&mut self, entry: Waiting) -> Pending {
        self.given_up += 1;
        let mut pending = entry.pending;
        if let Some((_, raw)) = &mut pending.stack {
            raw.flags &= !flags::SNAPSHOT;
            pending.event.walk = stack_walk(raw.flags, !raw.user.is_empty());
        }
        pending
    }

    /// The given-up count for the capture's stats (the walked ones are
    /// counted by their unwinder), when copies were taken.
    pub(super) fn counts(&self) -> Vec<(StackCount, u64)> {
        if self.unwound + self.given_up == 0 {
            return Vec::new();
        }
        vec![(StackCount::SnapshotGivenUp, self.given_up)]
    }
}

/// Whether the copy can be walked with what the tables hold now. A pc in
/// no mapping after the process was read again is unknown code (frame
/// pointers there); a missing process or another address space after a
/// read means the copy's code is gone.
fn outcome(entry: &Waiting, tables: &Tables, over: bool) -> Outcome {
    let read_since = tables.read_since(entry.pid, entry.arrived);
    let code = tables.code(entry.pid);
    let Some(code) = code.filter(|c| c.identity() == entry.snapshot.identity) else {
        return if read_since || over {
            Outcome::GiveUp
        } else {
            Outcome::Wait
        };
    };
    match unwind(&entry.snapshot.copy, &code, false) {
        Ok(unwound) => Outcome::Unwound(unwound),
        Err(Missing::Unmapped { .. }) if read_since => {
            let settled = unwind(&entry.snapshot.copy, &code, true);
            settled.map_or(Outcome::GiveUp, Outcome::Unwound)
        }
        Err(_) if over => Outcome::GiveUp,
        Err(_) => Outcome::Wait,
    }
}

/// `pending` with the user frames walked from its copy.
fn with_unwound(mut pending: Pending, unwound: Unwound) -> Pending {
    let Some((_, raw)) = pending.stack.take() else {
        return pending;
    };
    let kept = raw.flags & flags::KERNEL_TRUNCATED;
    let stack = RawStack {
        flags: unwound.flags | flags::SNAPSHOT | kept,
        user: unwound.frames.into_iter().map(UserFrame::Ip).collect(),
        entry_return: 0,
        ..raw
    };
    pending.event.walk = stack_walk(stack.flags, !stack.user.is_empty());
    pending.stack = Some((raw_digest(&stack), stack));
    pending
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::model::Event;
    use crate::capture::walk::{StackEnding, Unwinder};
    use crate::vocab::record_header as header;

    /// A message with one kernel frame, two user frames and a snapshot.
    fn message() -> (Vec<u8>, StackHeader) {
        let desc = StackHeader {
            kernel_frames: 1,
            user_frames: 2,
            flags: flags::NO_PROCESS | flags::SNAPSHOT,
            ..StackHeader::default()
        };
        let mut bytes = vec![0u8; header::FIELDS as usize];
        for word in [0x1111u64, 0x2222, 0xffff_ffff_8100_0000] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        for word in [0x1111u64, 0x7000, 0x7100, 0x8000, 0x400, 16] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        bytes.extend_from_slice(&[0xab; 16]);
        (bytes, desc)
    }

    /// The snapshot after the frames: registers, identity, the copied bytes.
    #[test]
    fn reads_the_snapshot_after_the_frames() {
        let (bytes, desc) = message();
        let snapshot = read_snapshot(&bytes, header::FIELDS, &desc).expect("complete");
        let regs = Registers {
            ip: 0x1111,
            sp: 0x7000,
            bp: 0x7100,
        };
        assert_eq!(snapshot.copy.regs, regs);
        assert_eq!(snapshot.copy.bytes, [0xab; 16]);
        let identity = AddressSpace {
            start_stack: 0x8000,
            end_code: 0x400,
        };
        assert_eq!(snapshot.identity, identity);
        let cut = read_snapshot(&bytes[..bytes.len() - 1], header::FIELDS, &desc);
        assert!(matches!(cut, Err(RecordError::Malformed(_))));
    }

    fn waiting_event(ts_ns: u64) -> Pending {
        let raw = RawStack {
            pid: 5,
            flags: flags::KERNEL_WALK | flags::NO_PROCESS | flags::SNAPSHOT,
            kernel: vec![0xffff_ffff_8100_0000],
            user: vec![UserFrame::Ip(0x1111)],
            entry_return: 0,
        };
        Pending {
            event: Event {
                ts_ns,
                ..Event::default()
            },
            stack: Some((1, raw)),
            join: None,
        }
    }

    /// Walked frames replace the BPF walk's, keep the kernel frames, and
    /// say they came from a snapshot; a given-up copy keeps the BPF walk
    /// and says so; both are counted.
    #[test]
    fn walked_or_given_up() {
        let unwound = Unwound {
            frames: vec![0x1111, 0x2222, 0x3333],
            flags: flags::TABLE | flags::OUTERMOST,
        };
        let walked = with_unwound(waiting_event(1), unwound);
        let (_, raw) = walked.stack.as_ref().expect("a stack");
        assert_eq!(raw.user.len(), 3);
        assert_eq!(raw.kernel, [0xffff_ffff_8100_0000]);
        let walk = walked.event.walk.expect("a walk");
        assert_eq!(walk.unwinder, Some(Unwinder::Snapshot));
        assert_eq!(walk.ending, Some(StackEnding::Outermost));

        let mut join = SnapshotJoin::default();
        let snapshot = StackSnapshot {
            copy: StackCopy {
                regs: Registers::default(),
                bytes: Vec::new(),
            },
            identity: AddressSpace::default(),
        };
        join.wait(5, waiting_event(20), snapshot.clone());
        join.wait(5, waiting_event(10), snapshot);
        assert_eq!(join.oldest(), Some(10));
        let given = join.give_up_oldest().expect("one waits");
        assert_eq!(given.event.ts_ns, 10);
        let walk = given.event.walk.expect("a walk");
        assert_eq!(walk.unwinder, Some(Unwinder::KernelWalk));
        let rest = join.settle(None, true);
        assert_eq!(rest.len(), 1);
        assert!(join.is_empty());
        assert_eq!(join.counts(), [(StackCount::SnapshotGivenUp, 2)]);
    }
}
