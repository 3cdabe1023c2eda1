//! One thread's state machine (the rules are in the parent module's docs).

use super::{BlockReason, OffCpuInterval, ThreadTimes, Tid, Window, add_saturating};

/// What a thread is doing since when.
#[derive(Clone, Copy, Debug)]
enum Phase<T> {
    /// Seen but not yet understood: the next event tells what it was doing.
    Unknown {
        since: u64,
    },
    Running {
        since: u64,
    },
    Off {
        since: u64,
        reason: BlockReason,
        /// When it was woken, if it was.
        woken: Option<u64>,
        /// The tag of the switch-out; `None` when it was not seen.
        tag: Option<T>,
    },
    /// Not alive: exited, or about to be created by `wakeup_new`.
    Dead,
}

#[derive(Debug)]
pub(super) struct ThreadState<T> {
    tid: Tid,
    phase: Phase<T>,
    times: ThreadTimes,
    /// Start of the current life, `None` when dead.
    alive_since: Option<u64>,
    exiting: bool,
}

impl<T: Copy> ThreadState<T> {
    /// A thread first seen in an event, alive since `since` (the window
    /// start, or the event if earlier).
    pub fn first_seen(tid: Tid, since: u64) -> Self {
        ThreadState {
            tid,
            phase: Phase::Unknown { since },
            times: ThreadTimes::default(),
            alive_since: Some(since),
            exiting: false,
        }
    }

    /// A thread about to be created.
    pub fn unborn(tid: Tid) -> Self {
        ThreadState {
            alive_since: None,
            phase: Phase::Dead,
            ..Self::first_seen(tid, 0)
        }
    }

    pub fn is_dead(&self) -> bool {
        matches!(self.phase, Phase::Dead)
    }

    /// `wakeup_new`: alive and runnable from `ts`.
    pub fn born(&mut self, ts: u64) {
        self.alive_since = Some(ts);
        self.exiting = false;
        self.phase = Phase::Off {
            since: ts,
            reason: BlockReason::Runnable,
            woken: Some(ts),
            tag: None,
        };
    }

    pub fn switch_out(&mut self, window: &Window, ts: u64, reason: BlockReason, tag: T) {
        match self.phase {
            Phase::Running { since } | Phase::Unknown { since } => {
                add_saturating(&mut self.times.on_cpu_ns, window.clip(since, ts));
            }
            Phase::Off { since, .. } => self.lost_events(window, since, ts),
            Phase::Dead => self.revive(ts),
        }
        if window.contains(ts) {
            if reason.voluntary() {
                self.times.voluntary_switches += 1;
            } else {
                self.times.involuntary_switches += 1;
            }
        }
        if reason == BlockReason::Dead || self.exiting {
            self.die(window, ts);
            return;
        }
        self.phase = Phase::Off {
            since: ts,
            reason,
            woken: None,
            tag: Some(tag),
        };
    }

    /// The thread runs from `ts`; returns the off-CPU interval this ends.
    pub fn switch_in(&mut self, window: &Window, ts: u64) -> Option<OffCpuInterval<T>> {
        let interval = match self.phase {
            Phase::Off { .. } => {
                let interval = self.account_off(window, ts, true);
                if let Phase::Off {
                    woken: Some(woken), ..
                } = self.phase
                    && window.contains(ts)
                {
                    self.times.wakeup_latency.record(ts.saturating_sub(woken));
                }
                interval
            }
            Phase::Unknown { since } => {
                add_saturating(&mut self.times.unknown_ns, window.clip(since, ts));
                None
            }
            Phase::Running { since } => {
                self.lost_events(window, since, ts);
                None
            }
            Phase::Dead => {
                self.revive(ts);
                None
            }
        };
        self.phase = Phase::Running { since: ts };
        interval
    }

    pub fn waking(&mut self, window: &Window, ts: u64) {
        match &mut self.phase {
            Phase::Off {
                reason,
                woken: woken @ None,
                ..
            } if *reason != BlockReason::Runnable => *woken = Some(ts),
            Phase::Unknown { since } => {
                add_saturating(&mut self.times.unknown_ns, window.clip(*since, ts));
                self.phase = Phase::Off {
                    since: ts,
                    reason: BlockReason::Other,
                    woken: Some(ts),
                    tag: None,
                };
            }
            _ => {}
        }
    }

    pub fn exiting(&mut self) {
        self.exiting = true;
        self.running_if_unknown();
    }

    pub fn sample(&mut self, window: &Window, ts: u64) {
        if window.contains(ts) && !self.is_dead() {
            self.times.samples += 1;
        }
        self.running_if_unknown();
    }

    /// Closes the thread at the window's end.
    pub fn close(mut self, window: &Window) -> (ThreadTimes, Option<OffCpuInterval<T>>) {
        let end = window.end_ns;
        let open = match self.phase {
            Phase::Running { since } => {
                add_saturating(&mut self.times.on_cpu_ns, window.clip(since, end));
                None
            }
            Phase::Unknown { since } => {
                add_saturating(&mut self.times.unknown_ns, window.clip(since, end));
                None
            }
            Phase::Off { .. } => self.account_off(window, end, false),
            Phase::Dead => None,
        };
        if let Some(alive_since) = self.alive_since {
            add_saturating(&mut self.times.lifetime_ns, window.clip(alive_since, end));
        }
        (self.times, open)
    }

    /// Splits the off-CPU time up to `ts` between the blocking reason and
    /// runnable; returns the interval (if any of it is in the window).
    fn account_off(
        &mut self,
        window: &Window,
        ts: u64,
        complete: bool,
    ) -> Option<OffCpuInterval<T>> {
        let Phase::Off {
            since,
            reason,
            woken,
            tag,
        } = self.phase
        else {
            return None;
        };
        let runnable_from = match reason {
            BlockReason::Runnable => since,
            _ => woken.unwrap_or(ts).clamp(since, ts.max(since)),
        };
        let blocked = window.clip(since, runnable_from);
        let runnable = window.clip(runnable_from, ts);
        let times = &mut self.times;
        match reason {
            BlockReason::Sleeping => add_saturating(&mut times.sleeping_ns, blocked),
            BlockReason::Uninterruptible => add_saturating(&mut times.uninterruptible_ns, blocked),
            BlockReason::Runnable => {}
            BlockReason::Dead | BlockReason::Other => add_saturating(&mut times.other_ns, blocked),
        }
        add_saturating(&mut times.runnable_ns, runnable);
        let (start_ns, end_ns) = (since.max(window.start_ns), ts.min(window.end_ns));
        (end_ns > start_ns).then_some(())?;
        Some(OffCpuInterval {
            tid: self.tid,
            start_ns,
            end_ns,
            reason,
            runnable_ns: runnable,
            tag,
            complete,
        })
    }

    /// Sampled or exiting: it was running all along.
    fn running_if_unknown(&mut self) {
        if let Phase::Unknown { since } = self.phase {
            self.phase = Phase::Running { since };
        }
    }

    /// An event contradicted the state: the time since `since` is unknown.
    fn lost_events(&mut self, window: &Window, since: u64, ts: u64) {
        self.times.anomalies += 1;
        add_saturating(&mut self.times.unknown_ns, window.clip(since, ts));
    }

    /// A dead thread's tid shows up again without `wakeup_new`.
    fn revive(&mut self, ts: u64) {
        self.times.anomalies += 1;
        self.alive_since = Some(ts);
        self.exiting = false;
    }

    fn die(&mut self, window: &Window, ts: u64) {
        if let Some(alive_since) = self.alive_since.take() {
            add_saturating(&mut self.times.lifetime_ns, window.clip(alive_since, ts));
        }
        self.phase = Phase::Dead;
        self.exiting = false;
    }
}
