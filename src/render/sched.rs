//! The built-in trackers' scheduler records as wall-clock accounting input:
//! a capture's `switch`, `waking`, `wakeup_new`, `exit` and `timer` events
//! → [`SchedEvent`]s for `analysis::wallclock`, each switch tagged with the
//! thread identity and the off-CPU stack it recorded ([`OffCpuTag`]); and
//! the accounted [`Window`] of a capture (its replay window, clipped to what
//! was captured).
//!
//! Whose stack a switch carries depends on how it was recorded: with
//! `-S offcpu` the stack of the task switched out, for the block it begins;
//! with `-S offcpu=DUR` the stack of the task switched in, for the block it
//! ends, and only when that block lasted at least DUR (the kernel decides
//! at the switch-in, so short blocks cost no stack walk).
//!
//! Every consumer of per-thread times (metrics, the wall-clock report, the
//! off-CPU, wake-up and wall-clock profiles) feeds the accounting through
//! here, from the capture's first event (earlier events set state without
//! being counted), so they all agree.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use crate::analysis::wallclock::{BlockReason, OffCpuInterval, SchedEvent, WallClock, Window};
use crate::capture::format::CaptureError;
use crate::capture::model::{Event, StackId, ThreadId};
use crate::render::recorded::RecordedStacks;
use crate::render::source::CaptureSource;
use crate::render::tracker::state_letter;
use crate::render::{Capture, RenderError};
use crate::tracking::records::{Field, Kind, Trackers};

/// What a switch-out leaves on the off-CPU interval it begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffCpuTag {
    /// The thread as it was when it left the CPU.
    pub thread: ThreadId,
    /// Its stack then, if the capture recorded one for this switch.
    pub stack: Option<StackId>,
    /// The CPU it left.
    pub cpu: u32,
}

/// Translates a capture's tracker events.
pub struct SchedFeed<'s> {
    source: &'s dyn CaptureSource,
    trackers: Trackers,
    /// `-S offcpu=DUR`: a switch's stack is that of the block it ends.
    stack_at_switch_in: bool,
}

impl<'s> SchedFeed<'s> {
    pub fn new(source: &'s dyn CaptureSource) -> Self {
        let recorded = RecordedStacks::of(&source.info().settings);
        SchedFeed {
            source,
            trackers: Trackers::new(source.schemas()),
            stack_at_switch_in: recorded.offcpu.is_some_and(|o| o.min_block_ns.is_some()),
        }
    }

    pub fn trackers(&self) -> &Trackers {
        &self.trackers
    }

    /// Whether the capture has context switches to account.
    pub fn has_switches(&self) -> bool {
        self.trackers.find(Kind::Switch).is_some()
    }

    /// The tracker kind of `event`, `None` for the script's records.
    pub fn kind(&self, event: &Event) -> Option<Kind> {
        self.trackers.get(event).map(|t| t.kind)
    }

    /// Accounts `event` in `wallclock`; returns the off-CPU interval it
    /// completes, if any, under the stack recorded for that interval.
    pub fn account(
        &self,
        wallclock: &mut WallClock<OffCpuTag>,
        event: &Event,
    ) -> Option<OffCpuInterval<OffCpuTag>> {
        let mut interval = wallclock.feed(&self.translate(event)?)?;
        if self.stack_at_switch_in
            && let Some(tag) = &mut interval.tag
        {
            tag.stack = event.stack;
        }
        Some(interval)
    }

    /// `event` as accounting input, if it is a scheduler event; a switch's
    /// tag has the stack of the block it begins, if the capture has one.
    pub fn translate(&self, event: &Event) -> Option<SchedEvent<OffCpuTag>> {
        let layout = self.trackers.get(event)?;
        let ts_ns = event.ts_ns;
        let current = self.tid(event.thread);
        let other = || layout.other_task(event).map(|id| self.tid(id));
        Some(match layout.kind {
            Kind::Switch => {
                let prev_state = layout.uint(event, Field::PrevState)?;
                let preempt = layout.uint(event, Field::Preempt)? != 0;
                SchedEvent::Switch {
                    ts_ns,
                    prev: current,
                    reason: BlockReason::from_state_letter(state_letter(prev_state, preempt)),
                    next: other()?,
                    tag: OffCpuTag {
                        thread: event.thread,
                        stack: event.stack.filter(|_| !self.stack_at_switch_in),
                        cpu: event.cpu,
                    },
                }
            }
            Kind::Waking => SchedEvent::Waking {
                ts_ns,
                tid: other()?,
            },
            Kind::WakeupNew => SchedEvent::WakeupNew {
                ts_ns,
                tid: other()?,
            },
            Kind::Exit => SchedEvent::Exit {
                ts_ns,
                tid: current,
            },
            Kind::Timer => SchedEvent::Sample {
                ts_ns,
                tid: current,
            },
            _ => return None,
        })
    }

    fn tid(&self, id: ThreadId) -> u32 {
        self.source.thread(id).tid
    }
}

/// Each tid's latest identity in the thread table (a thread renamed, or a
/// process that exec'd, has several entries; the last is the newest). The
/// idle task (tid 0, one identity per CPU) is left out.
pub fn latest_identities(source: &dyn CaptureSource) -> BTreeMap<u32, ThreadId> {
    (source.threads().iter().enumerate())
        .filter(|(_, thread)| thread.tid != 0)
        .map(|(index, thread)| (thread.tid, ThreadId(index as u32)))
        .collect()
}

/// The window a capture's per-thread times are accounted over: its replay
/// window, ending no later than the capture did (the last event, for a
/// capture that was not finished).
pub fn window(capture: &Capture<'_>) -> Result<Window, RenderError> {
    let (window, read) = window_as_read(capture);
    read?;
    Ok(window)
}

/// [`window`], and whether the events could be read to the end when the
/// capture was not finished (the window then ends at the last event read).
pub fn window_as_read(capture: &Capture<'_>) -> (Window, Result<(), CaptureError>) {
    let (captured_ns, read) = match capture.source.stats() {
        Some(stats) => (stats.duration_ns, Ok(())),
        None => {
            let mut last = None;
            let read = capture.source.for_each_event(&mut |event| {
                last = Some(event.ts_ns);
                ControlFlow::Continue(())
            });
            (last.map_or(0, |ts| ts.saturating_add(1)), read)
        }
    };
    let start_ns = capture.filter.start_ns.unwrap_or(0).min(captured_ns);
    let end_ns = (capture.filter.end_ns)
        .unwrap_or(captured_ns)
        .clamp(start_ns, captured_ns);
    (Window { start_ns, end_ns }, read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::model::StackId;
    use crate::render::filter::Filter;
    use crate::render::source::FakeCapture;
    use crate::render::system_fixture::{MS, US, system};

    /// An unfinished capture's window ends after its last event, even one
    /// stamped at the end of time (a damaged file the fuzzer made).
    #[test]
    fn unfinished_window_ends_after_the_last_event() {
        let (mut c, t) = system();
        c.stats = None;
        let record = c.events[0].record;
        c.add_event(u64::MAX, t.sleeper, record, vec![]);
        let (window, read) = window_as_read(&Capture::test(&c, Filter::default()));
        assert!(read.is_ok());
        assert_eq!((window.start_ns, window.end_ns), (0, u64::MAX));
    }

    /// Switches, wake-ups, exits and samples translate with their tasks,
    /// reasons and off-CPU stacks; other records do not.
    #[test]
    fn translates_scheduler_events() {
        let (c, t) = system();
        let feed = SchedFeed::new(&c);
        assert!(feed.has_switches());
        let first = |kind: Kind, thread: ThreadId| {
            let event = c
                .events
                .iter()
                .find(|e| feed.kind(e) == Some(kind) && e.thread == thread);
            feed.translate(event.expect("in the fixture"))
        };
        let tag = OffCpuTag {
            thread: t.sleeper,
            stack: c.events.iter().find_map(|e| e.stack),
            cpu: 0,
        };
        let switch = SchedEvent::Switch {
            ts_ns: MS,
            prev: 300,
            reason: BlockReason::Sleeping,
            next: 400,
            tag,
        };
        assert_eq!(first(Kind::Switch, t.sleeper), Some(switch));
        let waking = SchedEvent::Waking {
            ts_ns: 51 * MS - 10 * US,
            tid: 300,
        };
        assert_eq!(first(Kind::Waking, t.spinner), Some(waking));
        let sample = SchedEvent::Sample {
            ts_ns: MS / 2,
            tid: 300,
        };
        assert_eq!(first(Kind::Timer, t.sleeper), Some(sample));
        let exit = SchedEvent::Exit {
            ts_ns: 2 * MS + 200 * US,
            tid: 301,
        };
        assert_eq!(first(Kind::Exit, t.child), Some(exit));
        assert_eq!(first(Kind::Exec, t.child), None);
    }

    /// Under `-S offcpu=DUR` a switch's stack is that of the block it ends:
    /// it goes to the interval of the thread switched in, never to the one
    /// the switched-out thread begins.
    #[test]
    fn threshold_stacks_go_to_the_block_they_end() {
        let (mut c, _) = system();
        c.info.settings.stacks = vec!["offcpu=1ms".into()];
        let stack = c.events.iter().find_map(|e| e.stack).expect("a stack");
        let into_sleeper: Vec<bool> = {
            let feed = SchedFeed::new(&c);
            let ends_sleep = |e: &Event| {
                matches!(
                    feed.translate(e),
                    Some(SchedEvent::Switch { next: 300, .. })
                )
            };
            c.events.iter().map(ends_sleep).collect()
        };
        for (event, into) in c.events.iter_mut().zip(into_sleeper) {
            event.stack = into.then_some(stack);
        }
        let feed = SchedFeed::new(&c);
        let window = Window {
            start_ns: 0,
            end_ns: u64::MAX,
        };
        let mut wallclock = WallClock::new(window);
        let mut stacks: BTreeMap<u32, Vec<Option<StackId>>> = BTreeMap::new();
        for event in &c.events {
            if let Some(interval) = feed.account(&mut wallclock, event) {
                let stack = interval.tag.and_then(|tag| tag.stack);
                stacks.entry(interval.tid).or_default().push(stack);
            }
        }
        let sleeper = stacks.remove(&300).expect("the sleeper's blocks");
        assert_eq!(sleeper, vec![Some(stack); sleeper.len()]);
        assert!(sleeper.len() >= 9, "{sleeper:?}");
        assert!(stacks.values().flatten().all(Option::is_none), "{stacks:?}");
    }

    /// The window is the replay window within what was captured.
    #[test]
    fn window_stays_within_the_capture() {
        let mut c = FakeCapture::new();
        let app = c.add_thread(10, 10, "app", "app");
        let timer = c.add_tracker_schema("timer");
        c.add_event(2_000, app, timer, vec![]);
        let at = |filter: Filter, c: &FakeCapture| window(&Capture::test(c, filter)).unwrap();
        let whole = at(Filter::default(), &c);
        assert_eq!((whole.start_ns, whole.end_ns), (0, 1_000_000_000));
        let part = Filter {
            start_ns: Some(100),
            end_ns: Some(5_000_000_000),
            ..Filter::default()
        };
        let part = at(part, &c);
        assert_eq!((part.start_ns, part.end_ns), (100, 1_000_000_000));
        c.stats = None;
        let unfinished = at(Filter::default(), &c);
        assert_eq!((unfinished.start_ns, unfinished.end_ns), (0, 2_001));
    }
}
