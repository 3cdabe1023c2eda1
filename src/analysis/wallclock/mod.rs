//! Wall-clock accounting: where each thread's time went in a window.
//!
//! Input: scheduler events in time order ([`SchedEvent`]: context switches
//! with the reason the previous thread left, wake-ups, new tasks, exits,
//! timer samples). Output: per thread ([`ThreadTimes`]) on-CPU time, off-CPU
//! time by reason (sleeping `S`, uninterruptible `D`, runnable — preempted
//! or woken and waiting for a CPU —, other, unknown), the wake-up latency
//! distribution, voluntary and involuntary switches, samples and coverage of
//! the thread's life in the window; and each completed off-CPU interval
//! ([`OffCpuInterval`]) with the tag (e.g. the off-CPU stack) of the switch
//! that began it, for off-CPU and wake-up flame graphs: the intervals add up
//! to each thread's off-CPU time.
//!
//! Rules:
//! - Every span of time is clipped to the window; events before it only set
//!   state.
//! - A thread first seen mid-window: first switching out, or sampled, or
//!   exiting, it was running since the window start; first switching in or
//!   being woken, it was off-CPU for an unknown reason since then; created
//!   (`wakeup_new`), its life starts there. Unknown time counts against
//!   coverage: coverage = (on-CPU + off-CPU with a known reason) / life in
//!   the window.
//! - After a wake-up the thread is runnable: the time from the wake-up to its
//!   switch-in is runnable time and one wake-up latency sample; the time
//!   before is the blocking reason's. A preempted thread is runnable the
//!   whole time (no latency sample).
//! - A switch is voluntary when the thread blocked (not runnable), as the
//!   kernel counts `nvcsw`; preemptions and yields are involuntary.
//! - tid 0 (each CPU's idle task) is not accounted.
//! - Events that contradict the state (a switch-in of a running thread: an
//!   event was lost) make the time since the last known state unknown and
//!   are counted in [`ThreadTimes::anomalies`].
//! - Times saturate at u64::MAX: a damaged capture's timestamps (any value,
//!   restarting in every events chunk) can count a long span again.
//!
//! Memory is per thread, never per event.

mod thread;

use std::collections::BTreeMap;

use crate::analysis::saturating_sum;
use crate::analysis::stats::LogHistogram;

use thread::ThreadState;

/// A thread id as the kernel gives it.
pub type Tid = u32;

/// Why a thread left the CPU, from `sched_switch`'s `prev_state` and
/// `preempt` (the `ps` state letter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BlockReason {
    /// `S`: interruptible sleep (waiting for an event, a timer, I/O on a socket).
    Sleeping,
    /// `D`: uninterruptible sleep (disk I/O, some locks).
    Uninterruptible,
    /// `R`, `R+`: preempted or yielded, still runnable.
    Runnable,
    /// The thread died (`X`, `Z`): its last switch.
    Dead,
    /// Stopped, traced, parked, idle (`T`, `t`, `P`, `I`).
    Other,
}

impl BlockReason {
    /// From the state letter of a switch (`R`, `R+`, `S`, `D`, `T`, `t`,
    /// `X`, `Z`, `P`, `I`).
    pub fn from_state_letter(letter: &str) -> BlockReason {
        match letter {
            "R" | "R+" => BlockReason::Runnable,
            "S" => BlockReason::Sleeping,
            "D" => BlockReason::Uninterruptible,
            "X" | "Z" => BlockReason::Dead,
            _ => BlockReason::Other,
        }
    }

    /// Whether leaving the CPU for this reason is a voluntary switch.
    pub fn voluntary(self) -> bool {
        self != BlockReason::Runnable
    }
}

/// One scheduler event; `T` tags switches (e.g. the off-CPU stack id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedEvent<T> {
    /// `prev` leaves the CPU for `reason`, `next` runs.
    Switch {
        ts_ns: u64,
        prev: Tid,
        reason: BlockReason,
        next: Tid,
        tag: T,
    },
    /// `tid` is woken (`sched_waking`).
    Waking { ts_ns: u64, tid: Tid },
    /// `tid` is a new task, runnable from now (`sched_wakeup_new`).
    WakeupNew { ts_ns: u64, tid: Tid },
    /// `tid` exits; its next switch-out is its last.
    Exit { ts_ns: u64, tid: Tid },
    /// A timer sample of running `tid`.
    Sample { ts_ns: u64, tid: Tid },
}

/// The accounted window, `[start_ns, end_ns)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Window {
    /// The part of `[from, to)` inside the window, in ns.
    pub fn clip(&self, from: u64, to: u64) -> u64 {
        to.min(self.end_ns).saturating_sub(from.max(self.start_ns))
    }

    pub fn contains(&self, ts_ns: u64) -> bool {
        (self.start_ns..self.end_ns).contains(&ts_ns)
    }

    pub fn len_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// An off-CPU interval, clipped to the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffCpuInterval<T> {
    pub tid: Tid,
    pub start_ns: u64,
    pub end_ns: u64,
    pub reason: BlockReason,
    /// The part spent runnable, waiting for a CPU (after a wake-up, or all of
    /// it when preempted).
    pub runnable_ns: u64,
    /// The tag of the switch that began the interval; `None` when no switch
    /// began it (a thread first seen being woken, or a new task).
    pub tag: Option<T>,
    /// `false` when the window ended before the thread ran again.
    pub complete: bool,
}

impl<T> OffCpuInterval<T> {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }
}

/// Where one thread's time went in the window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThreadTimes {
    pub on_cpu_ns: u64,
    pub sleeping_ns: u64,
    pub uninterruptible_ns: u64,
    /// Preempted, or woken and waiting for a CPU.
    pub runnable_ns: u64,
    pub other_ns: u64,
    /// Off-CPU (or before the first event) for a reason not seen.
    pub unknown_ns: u64,
    /// Wake-up to running, per wake-up whose thread ran in the window.
    pub wakeup_latency: LogHistogram,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub samples: u64,
    /// Time alive in the window.
    pub lifetime_ns: u64,
    /// Events that contradicted the known state.
    pub anomalies: u64,
}

impl ThreadTimes {
    /// Off-CPU time with a known reason.
    pub fn off_cpu_ns(&self) -> u64 {
        saturating_sum([
            self.sleeping_ns,
            self.uninterruptible_ns,
            self.runnable_ns,
            self.other_ns,
        ])
    }

    /// On-CPU time and off-CPU time with a known reason.
    pub fn known_ns(&self) -> u64 {
        self.on_cpu_ns.saturating_add(self.off_cpu_ns())
    }

    /// The share of the thread's life in the window whose state is known.
    pub fn coverage(&self) -> f64 {
        if self.lifetime_ns == 0 {
            return 0.0;
        }
        self.known_ns() as f64 / self.lifetime_ns as f64
    }

    /// Adds `other`'s times, counts and wake-up latencies (the threads of a
    /// process summed).
    pub fn merge(&mut self, other: &ThreadTimes) {
        let ThreadTimes {
            on_cpu_ns,
            sleeping_ns,
            uninterruptible_ns,
            runnable_ns,
            other_ns,
            unknown_ns,
            wakeup_latency,
            voluntary_switches,
            involuntary_switches,
            samples,
            lifetime_ns,
            anomalies,
        } = other;
        for (total, value) in [
            (&mut self.on_cpu_ns, on_cpu_ns),
            (&mut self.sleeping_ns, sleeping_ns),
            (&mut self.uninterruptible_ns, uninterruptible_ns),
            (&mut self.runnable_ns, runnable_ns),
            (&mut self.other_ns, other_ns),
            (&mut self.unknown_ns, unknown_ns),
            (&mut self.voluntary_switches, voluntary_switches),
            (&mut self.involuntary_switches, involuntary_switches),
            (&mut self.samples, samples),
            (&mut self.lifetime_ns, lifetime_ns),
            (&mut self.anomalies, anomalies),
        ] {
            add_saturating(total, *value);
        }
        self.wakeup_latency.merge(wakeup_latency);
    }
}

/// `total += value`, saturating: a hostile capture's timestamps (any u64,
/// restarting in every events chunk) can count the same long span again and
/// again.
fn add_saturating(total: &mut u64, value: u64) {
    *total = total.saturating_add(value);
}

/// The accounting, fed event by event.
#[derive(Debug)]
pub struct WallClock<T> {
    window: Window,
    threads: BTreeMap<Tid, ThreadState<T>>,
}

/// What the accounting found.
#[derive(Clone, Debug, PartialEq)]
pub struct WallClockReport<T> {
    pub threads: BTreeMap<Tid, ThreadTimes>,
    /// Off-CPU intervals still open when the window ended, clipped to it.
    pub open_intervals: Vec<OffCpuInterval<T>>,
}

impl<T: Copy> WallClock<T> {
    pub fn new(window: Window) -> Self {
        WallClock {
            window,
            threads: BTreeMap::new(),
        }
    }

    /// Accounts `event`; returns the off-CPU interval it completes, if any.
    pub fn feed(&mut self, event: &SchedEvent<T>) -> Option<OffCpuInterval<T>> {
        let window = self.window;
        match *event {
            SchedEvent::Switch {
                ts_ns,
                prev,
                reason,
                next,
                tag,
            } => {
                if let Some(state) = self.thread(prev, ts_ns) {
                    state.switch_out(&window, ts_ns, reason, tag);
                }
                self.thread(next, ts_ns)?.switch_in(&window, ts_ns)
            }
            SchedEvent::Waking { ts_ns, tid } => {
                self.thread(tid, ts_ns)?.waking(&window, ts_ns);
                None
            }
            SchedEvent::WakeupNew { ts_ns, tid } => {
                if tid != 0 && self.threads.get(&tid).is_none_or(ThreadState::is_dead) {
                    let state = self
                        .threads
                        .entry(tid)
                        .or_insert_with(|| ThreadState::unborn(tid));
                    state.born(ts_ns);
                }
                None
            }
            SchedEvent::Exit { ts_ns, tid } => {
                self.thread(tid, ts_ns)?.exiting();
                None
            }
            SchedEvent::Sample { ts_ns, tid } => {
                self.thread(tid, ts_ns)?.sample(&window, ts_ns);
                None
            }
        }
    }

    /// Closes every thread at the window's end.
    pub fn finish(self) -> WallClockReport<T> {
        let window = self.window;
        let mut open_intervals = Vec::new();
        let threads = self
            .threads
            .into_iter()
            .map(|(tid, state)| {
                let (times, open) = state.close(&window);
                open_intervals.extend(open);
                (tid, times)
            })
            .collect();
        WallClockReport {
            threads,
            open_intervals,
        }
    }

    /// The state of `tid` (created as first seen at `ts_ns`); `None` for the
    /// idle task.
    fn thread(&mut self, tid: Tid, ts_ns: u64) -> Option<&mut ThreadState<T>> {
        if tid == 0 {
            return None;
        }
        let since = self.window.start_ns.min(ts_ns);
        Some(
            self.threads
                .entry(tid)
                .or_insert_with(|| ThreadState::first_seen(tid, since)),
        )
    }
}

#[cfg(test)]
mod tests;
