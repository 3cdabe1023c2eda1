//! Recording: the deferred user stacks of `-S offcpu=DUR` joined to their
//! blocks (`docs/unwinding.md`, "Off-CPU stacks"). A long block that began
//! in a system call ends with a `switch` record flagged `USER_PENDING`,
//! holding its kernel stack only; it waits here until its task returns from
//! the call and the `offcpu_pending` record brings the user stack, stamped
//! with the switch-in time of the first block it answers. Every waiting
//! block of that task from that time on takes the user stack (one stack:
//! the task ran no user code in between); earlier ones, whose own answer was
//! lost, and blocks whose task never returns, keep their kernel stack and
//! are counted lost. A return whose stack waits for its tables (a copy,
//! `super::snapshots`) answers only the blocks of its own system call: each
//! block and return carries its thread's count of returns decoded before
//! it (its epoch), so a later call's blocks wait for their own return.
//! Joined here, the capture holds whole stacks, so every renderer sees
//! them, live and in replay.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::Pending;
use super::decode::FieldDecoder;
use super::stacks::{RawStack, raw_digest};
use super::window::ReorderWindow;
use crate::capture::model::{Event, RecordSchema, StackCount};
use crate::capture::walk::StackWalk;
use crate::tracking::records::{Field, Kind, Trackers};
use crate::unwind::maps::flags;

/// The tracker record that brings deferred user stacks.
pub const PENDING_RECORD: &str = "offcpu_pending";

/// How long a block waits for its task's return: past this (behind the
/// newest event) it is written without its user stack. Events after a
/// waiting block stay in the reorder window until it goes out
/// ([`PendingJoin::oldest`]), but no longer than the window's event cap
/// allows ([`PendingJoin::evict_oldest`]), so that the recorder's memory
/// does not follow the event rate; a task that blocks again in the same
/// call waits long for its return.
pub(super) const MAX_WAIT_NS: u64 = 500_000_000;

/// How long a thread's epoch is kept after its last return while none of
/// its blocks waits: longer than a return waits for its tables
/// (`super::snapshots::MAX_WAIT`), so no return of an older epoch is left.
const EPOCH_KEPT: Duration = Duration::from_secs(2);

/// What a message means to the join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Join {
    /// A long block of thread `tid` waiting for its user stack, after
    /// `epoch` returns of the thread.
    Awaits { tid: u32, epoch: u32 },
    /// The user stack of thread `tid`'s waiting blocks of `epoch`; none
    /// when an `execve` replaced the program during their system call
    /// (`image_changed`: the stack at its return is the new program's).
    Brings {
        tid: u32,
        image_changed: bool,
        epoch: u32,
    },
}

/// What leaves the reorder window ([`PendingJoin::next_due`]).
pub(super) enum Due {
    /// An event to write.
    Event(Event),
    /// A waiting block given up: the events it held back filled the
    /// window, whose memory must not follow the event rate.
    GivenUp(Pending),
}

/// The blocks waiting for their user stacks, by thread.
#[derive(Default)]
pub(super) struct PendingJoin {
    /// The `switch` record and the position of its `next` field.
    switch: Option<(u32, usize)>,
    pending_record: Option<u32>,
    waiting: HashMap<u32, Vec<Pending>>,
    /// Per thread: the returns decoded, and when the last was.
    epochs: HashMap<u32, (u32, Instant)>,
    joined: u64,
    lost: u64,
    /// Blocks left without a user stack because of an `execve`.
    exec: u64,
    /// Blocks given up to keep the reorder window within its cap.
    evicted: u64,
}

impl PendingJoin {
    pub(super) fn new(records: &[RecordSchema]) -> PendingJoin {
        let trackers = Trackers::new(records);
        let pending_record = records.iter().position(|r| {
            r.name == PENDING_RECORD && r.origin == crate::capture::model::RecordOrigin::Tracker
        });
        let switch = trackers
            .find(Kind::Switch)
            .and_then(|(record, layout)| Some((record as u32, layout.position(Field::Next)?)));
        PendingJoin {
            switch: switch.filter(|_| pending_record.is_some()),
            pending_record: pending_record.map(|r| r as u32),
            ..PendingJoin::default()
        }
    }

    /// Whether the capture defers user stacks at all.
    pub(super) fn active(&self) -> bool {
        self.pending_record.is_some()
    }

    /// What the message of `record` (stack `flags`, sent by `tid`) means to
    /// the join; `fields` decode it, `bytes` hold it.
    pub(super) fn classify(
        &mut self,
        record: u32,
        stack_flags: u32,
        tid: u32,
        fields: &[FieldDecoder],
        bytes: &[u8],
    ) -> Option<Join> {
        if self.pending_record == Some(record) {
            let image_changed = stack_flags & flags::USER_EXEC != 0;
            let epoch = self.epochs.entry(tid).or_insert((0, Instant::now()));
            let brings = Join::Brings {
                tid,
                image_changed,
                epoch: epoch.0,
            };
            *epoch = (epoch.0.wrapping_add(1), Instant::now());
            return Some(brings);
        }
        let (switch, next) = self.switch?;
        if record != switch || stack_flags & flags::USER_PENDING == 0 {
            return None;
        }
        let FieldDecoder::Thread { at } = fields.get(next)? else {
            return None;
        };
        let next_tid = super::decode::u64_at(bytes, *at).ok()? as u32;
        let epoch = self.epochs.get(&next_tid).map_or(0, |&(epoch, _)| epoch);
        Some(Join::Awaits {
            tid: next_tid,
            epoch,
        })
    }

    /// A block to wait.
    pub(super) fn wait(&mut self, tid: u32, block: Pending) {
        self.waiting.entry(tid).or_default().push(block);
    }

    /// The waiting blocks of its epoch `brings` answers, each with its
    /// user stack joined (or, after an `execve`, its kernel stack alone);
    /// and those it cannot answer (earlier than its time), as they are.
    pub(super) fn answer(&mut self, tid: u32, brings: &Pending) -> Vec<Pending> {
        let Some(Join::Brings {
            image_changed,
            epoch,
            ..
        }) = brings.join
        else {
            return Vec::new();
        };
        let Some(blocks) = self.waiting.remove(&tid) else {
            return Vec::new();
        };
        let (blocks, later): (Vec<Pending>, Vec<Pending>) = (blocks.into_iter())
            .partition(|b| matches!(b.join, Some(Join::Awaits { epoch: e, .. }) if e == epoch));
        if !later.is_empty() {
            self.waiting.insert(tid, later);
        }
        let from = brings.event.ts_ns;
        let user = brings.stack.as_ref().map(|(_, raw)| raw);
        blocks
            .into_iter()
            .map(|mut block| {
                if block.event.ts_ns < from {
                    self.lost += 1;
                    return block;
                }
                if image_changed {
                    self.exec += 1;
                    block.stack = joined(block.stack.take().map(|(_, raw)| raw), None);
                    return block;
                }
                self.joined += 1;
                // The user walk comes with the return; the kernel stack's cut
                // is the block's own.
                let kernel_truncated = block.event.walk.is_some_and(|w| w.kernel_truncated);
                block.event.walk = (brings.event.walk).map(|w| StackWalk {
                    kernel_truncated,
                    ..w
                });
                block.stack = joined(block.stack.take().map(|(_, raw)| raw), user);
                block
            })
            .collect()
    }

    /// The time of the oldest waiting block: nothing after it may be written.
    pub(super) fn oldest(&self) -> Option<u64> {
        let blocks = self.waiting.values().flatten();
        blocks.map(|b| b.event.ts_ns).min()
    }

    /// What leaves `window` next, with `hold_ns` the time of the oldest
    /// waiting block ([`Self::oldest`], again after a block is given up):
    /// an event that is due and older than the hold; else, when the window
    /// is over its cap behind the hold, the oldest waiting block, given up
    /// (it goes into the window without its user stack); else nothing.
    pub(super) fn next_due(
        &mut self,
        window: &mut ReorderWindow,
        hold_ns: Option<u64>,
    ) -> Option<Due> {
        if let Some(event) = window.pop_due_before(hold_ns.unwrap_or(u64::MAX)) {
            return Some(Due::Event(event));
        }
        if !window.over_cap() {
            return None;
        }
        self.evict_oldest().map(Due::GivenUp)
    }

    /// The oldest waiting block, given up, counted.
    fn evict_oldest(&mut self) -> Option<Pending> {
        let (&tid, at) = (self.waiting.iter())
            .filter_map(|(tid, blocks)| {
                let oldest = (blocks.iter().enumerate()).min_by_key(|(_, b)| b.event.ts_ns)?;
                Some((tid, oldest))
            })
            .min_by_key(|(_, (_, block))| block.event.ts_ns)
            .map(|(tid, (at, _))| (tid, at))?;
        let blocks = self.waiting.get_mut(&tid)?;
        let block = blocks.remove(at);
        if blocks.is_empty() {
            self.waiting.remove(&tid);
        }
        self.evicted += 1;
        Some(block)
    }

    /// Blocks that waited too long before `newest_ns` (all with
    /// `u64::MAX`), written without their user stack.
    pub(super) fn expire(&mut self, newest_ns: u64) -> Vec<Pending> {
        let limit = newest_ns.saturating_sub(MAX_WAIT_NS);
        let mut expired = Vec::new();
        self.waiting.retain(|_, blocks| {
            let (old, young): (Vec<Pending>, Vec<Pending>) = std::mem::take(blocks)
                .into_iter()
                .partition(|b| b.event.ts_ns < limit || newest_ns == u64::MAX);
            expired.extend(old);
            *blocks = young;
            !blocks.is_empty()
        });
        self.lost += expired.len() as u64;
        let waiting = &self.waiting;
        (self.epochs).retain(|tid, (_, at)| waiting.contains_key(tid) || at.elapsed() < EPOCH_KEPT);
        expired
    }

    /// The joined and lost counts for the capture's stats.
    pub(super) fn counts(&self) -> Vec<(StackCount, u64)> {
        if !self.active() {
            return Vec::new();
        }
        vec![
            (StackCount::PendingJoined, self.joined),
            (StackCount::PendingLost, self.lost),
            (StackCount::PendingExec, self.exec),
            (StackCount::PendingEvicted, self.evicted),
        ]
    }
}

/// A block's kernel stack with the user stack its return brought.
fn joined(kernel: Option<RawStack>, user: Option<&RawStack>) -> Option<(u128, RawStack)> {
    let kernel = kernel.map(|k| k.kernel).unwrap_or_default();
    let stack = match user {
        Some(user) => RawStack {
            kernel,
            ..user.clone()
        },
        None => RawStack {
            pid: 0,
            flags: 0,
            kernel,
            user: Vec::new(),
            entry_return: 0,
        },
    };
    Some((raw_digest(&stack), stack))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::model::{FieldSchema, RecordKind, RecordOrigin};
    use crate::capture::walk::Unwinder;
    use crate::runtime::recording::stacks::UserFrame;
    use crate::unwind::maps::flags;

    const TID: u32 = 7;

    fn schema(name: &str, fields: Vec<FieldSchema>) -> RecordSchema {
        RecordSchema {
            probe: String::new(),
            name: name.into(),
            kind: RecordKind::Instant,
            fields,
            has_stack: true,
            origin: RecordOrigin::Tracker,
        }
    }

    /// The tracker `switch` record (record 0) and `offcpu_pending` (1).
    fn records() -> Vec<RecordSchema> {
        let fields = (Kind::Switch.fields().iter())
            .map(|f| FieldSchema {
                name: f.name().into(),
                ty: f.ty(),
            })
            .collect();
        vec![schema("switch", fields), schema(PENDING_RECORD, Vec::new())]
    }

    fn raw(kernel: &[u64], user: &[u64]) -> RawStack {
        RawStack {
            pid: 1,
            flags: flags::FRAME_POINTER,
            kernel: kernel.to_vec(),
            user: user.iter().map(|&ip| UserFrame::Ip(ip)).collect(),
            entry_return: 0,
        }
    }

    fn block(ts_ns: u64, kernel: &[u64]) -> Pending {
        Pending {
            event: Event {
                ts_ns,
                ..Event::default()
            },
            stack: Some((u128::from(ts_ns), raw(kernel, &[]))),
            join: Some(Join::Awaits { tid: TID, epoch: 0 }),
        }
    }

    /// The joined, lost, exec and evicted counts, as `counts` gives them.
    fn counts([joined, lost, exec, evicted]: [u64; 4]) -> Vec<(StackCount, u64)> {
        vec![
            (StackCount::PendingJoined, joined),
            (StackCount::PendingLost, lost),
            (StackCount::PendingExec, exec),
            (StackCount::PendingEvicted, evicted),
        ]
    }

    /// Each answered block's kernel frames and number of user frames.
    fn frames_of(answered: &[Pending]) -> Vec<(Vec<u64>, usize)> {
        (answered.iter())
            .map(|b| b.stack.as_ref().expect("a stack"))
            .map(|(_, raw)| (raw.kernel.clone(), raw.user.len()))
            .collect()
    }

    fn brings(ts_ns: u64, user: &[u64]) -> Pending {
        let walk = StackWalk {
            unwinder: Some(Unwinder::FramePointer),
            ending: None,
            kernel_truncated: false,
        };
        Pending {
            event: Event {
                ts_ns,
                walk: Some(walk),
                ..Event::default()
            },
            stack: Some((0, raw(&[], user))),
            join: Some(Join::Brings {
                tid: TID,
                image_changed: false,
                epoch: 0,
            }),
        }
    }

    /// The pending record brings; a `switch` flagged `USER_PENDING` awaits
    /// for its `next` thread; other switches and captures without the
    /// pending record take no part.
    #[test]
    fn classifies_by_record_and_flag() {
        let mut join = PendingJoin::new(&records());
        let next = Kind::Switch.fields().iter().position(|f| *f == Field::Next);
        let ty = crate::vocab::ValueType::Int {
            size: 8,
            signed: false,
        };
        let mut fields = vec![FieldDecoder::Value { at: 0, ty }; 8];
        fields[next.expect("switch has next")] = FieldDecoder::Thread { at: 8 };
        let bytes = [[0u8; 8], 42u64.to_le_bytes()].concat();
        let mut classify = |record, bits, tid| join.classify(record, bits, tid, &fields, &bytes);
        let brings = |image_changed, epoch| {
            Some(Join::Brings {
                tid: TID,
                image_changed,
                epoch,
            })
        };
        let awaits = |epoch| Some(Join::Awaits { tid: 42, epoch });
        assert_eq!(classify(1, 0, TID), brings(false, 0));
        assert_eq!(classify(1, flags::USER_EXEC, TID), brings(true, 1));
        assert_eq!(classify(0, flags::USER_PENDING, TID), awaits(0));
        assert_eq!(classify(0, flags::TABLE, TID), None);
        // Thread 42's first return: its later blocks are of the next epoch.
        assert!(classify(1, 0, 42).is_some());
        assert_eq!(classify(0, flags::USER_PENDING, TID), awaits(1));
        let mut without = PendingJoin::new(&records()[..1]);
        assert!(!without.active() && without.counts().is_empty());
        let classify = without.classify(0, flags::USER_PENDING, TID, &fields, &bytes);
        assert_eq!(classify, None);
    }

    /// A return's user stack joins every block waiting from its time on,
    /// with the walk of its user part; an older block (its own answer was
    /// lost) keeps its kernel stack and counts lost.
    #[test]
    fn answers_blocks_from_its_time_on() {
        let mut join = PendingJoin::new(&records());
        join.wait(TID, block(10, &[1]));
        join.wait(TID, block(20, &[2]));
        join.wait(TID, block(30, &[3]));
        let answered = join.answer(TID, &brings(20, &[100, 200]));
        assert_eq!(
            frames_of(&answered),
            [(vec![1], 0), (vec![2], 2), (vec![3], 2)]
        );
        assert_eq!(answered[0].event.walk, None);
        assert_eq!(answered[1].event.walk, brings(0, &[]).event.walk);
        assert!(join.answer(TID, &brings(40, &[1])).is_empty());
        assert_eq!(join.counts(), counts([2, 1, 0, 0]));
    }

    /// A return that waited for its tables (routed after the next call's
    /// return) answers only its own call's blocks; the next return answers
    /// the next call's, not the earlier ones (which are not lost).
    #[test]
    fn a_late_return_answers_its_own_epoch() {
        let mut join = PendingJoin::new(&records());
        join.wait(TID, block(10, &[1]));
        let mut next_call = block(30, &[3]);
        next_call.join = Some(Join::Awaits { tid: TID, epoch: 1 });
        join.wait(TID, next_call);
        let mut second = brings(30, &[300]);
        second.join = Some(Join::Brings {
            tid: TID,
            image_changed: false,
            epoch: 1,
        });
        assert_eq!(frames_of(&join.answer(TID, &second)), [(vec![3], 1)]);
        let first = join.answer(TID, &brings(10, &[100, 200]));
        assert_eq!(frames_of(&first), [(vec![1], 2)]);
        assert_eq!(join.counts(), counts([2, 0, 0, 0]));
    }

    /// After an `execve` the return's user stack is the new program's:
    /// the blocks it answers keep their kernel stack alone, never its
    /// frames, and count as dropped by exec.
    #[test]
    fn an_exec_leaves_blocks_their_kernel_stack() {
        let mut join = PendingJoin::new(&records());
        join.wait(TID, block(10, &[1]));
        join.wait(TID, block(20, &[2]));
        let mut after_exec = brings(10, &[100, 200]);
        after_exec.join = Some(Join::Brings {
            tid: TID,
            image_changed: true,
            epoch: 0,
        });
        let answered = join.answer(TID, &after_exec);
        assert_eq!(frames_of(&answered), [(vec![1], 0), (vec![2], 0)]);
        assert!(answered.iter().all(|b| b.event.walk.is_none()));
        assert_eq!(join.counts(), counts([0, 0, 2, 0]));
    }

    /// Evicting gives up the oldest waiting block of any thread, counted;
    /// a later block of its thread still takes its return's stack.
    #[test]
    fn evicts_the_oldest_block_first() {
        let mut join = PendingJoin::new(&records());
        join.wait(TID, block(30, &[3]));
        join.wait(TID, block(10, &[1]));
        let mut other = block(20, &[2]);
        other.join = Some(Join::Awaits {
            tid: TID + 1,
            epoch: 0,
        });
        join.wait(TID + 1, other);
        let times: Vec<u64> = std::iter::from_fn(|| join.evict_oldest())
            .take(2)
            .map(|b| b.event.ts_ns)
            .collect();
        assert_eq!(times, [10, 20]);
        assert_eq!(join.oldest(), Some(30));
        assert_eq!(join.answer(TID, &brings(30, &[100])).len(), 1);
        assert_eq!(join.evict_oldest().map(|b| b.event.ts_ns), None);
        let counts = join.counts();
        assert!(
            counts.contains(&(StackCount::PendingEvicted, 2)),
            "{counts:?}"
        );
        assert!(
            counts.contains(&(StackCount::PendingJoined, 1)),
            "{counts:?}"
        );
    }

    /// Behind a waiting block the window keeps its events past its cap
    /// only until the block is given up: then the block and the oldest
    /// events go out, in time order, until the window is within its cap.
    #[test]
    fn a_full_window_gives_up_the_oldest_block() {
        let mut join = PendingJoin::new(&records());
        join.wait(TID, block(5, &[1]));
        let mut window = ReorderWindow::new(u64::MAX, 2);
        let at = |ts_ns| Event {
            ts_ns,
            ..Event::default()
        };
        window.insert((6..10).map(at).collect());
        let mut out = Vec::new();
        let mut hold_ns = join.oldest();
        while let Some(due) = join.next_due(&mut window, hold_ns) {
            match due {
                Due::Event(event) => out.push(event.ts_ns),
                Due::GivenUp(block) => {
                    out.push(0);
                    window.insert(vec![block.event]);
                    hold_ns = join.oldest();
                }
            }
        }
        assert_eq!(out, [0, 5, 6, 7]);
        assert_eq!(window.len(), 2);
        assert!(join.counts().contains(&(StackCount::PendingEvicted, 1)));
    }

    /// Blocks left waiting past the wait limit, and all at the end, go out
    /// as they are and count lost; the oldest waiting one holds writes back.
    #[test]
    fn expires_blocks_that_wait_too_long() {
        let mut join = PendingJoin::new(&records());
        join.wait(TID, block(5, &[1]));
        join.wait(TID + 1, block(MAX_WAIT_NS, &[2]));
        assert_eq!(join.oldest(), Some(5));
        assert!(join.expire(MAX_WAIT_NS + 5).is_empty());
        let expired = join.expire(MAX_WAIT_NS + 6);
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].event.ts_ns, 5);
        assert_eq!(join.expire(u64::MAX).len(), 1);
        assert_eq!(join.counts(), counts([0, 2, 0, 0]));
    }
}
