//! The one pass over a capture's events that every metric comes from (the
//! rules are in the parent module's docs).

use std::collections::BTreeMap;

use ahash::{AHashMap, AHashSet};

use super::{Contents, FieldSum, FunctionTimes, Measurement, RecordStats, System, ThreadRow};
use crate::analysis::saturating_sum;
use crate::analysis::wallclock::{SchedEvent, ThreadTimes, WallClock, Window};
use crate::capture::model::{Event, FieldValue, RecordOrigin, StackId};
use crate::render::Capture;
use crate::render::frames::{Frames, StackParts};
use crate::render::recorded::RecordedStacks;
use crate::render::sched::{OffCpuTag, SchedFeed, latest_identities};
use crate::tracking::records::{Kind, SwitchReadings, reading};

/// What the pass accumulates; its size depends on the capture's records,
/// threads, CPUs and distinct stacks, not on its number of events.
pub(super) struct Scanner<'c> {
    capture: &'c Capture<'c>,
    feed: SchedFeed<'c>,
    window: Window,
    wallclock: WallClock<OffCpuTag>,
    records: Vec<RecordStats>,
    contents: Contents,
    threads_seen: Vec<bool>,
    stacks_seen: Vec<bool>,
    /// Timer samples of selected threads, by tid and stack.
    timer_stacks: AHashMap<(u32, StackId), u64>,
    timer_samples: u64,
    switch_readings: SwitchReadings,
    /// Counter totals by tid.
    pmu: AHashMap<u32, Vec<u64>>,
    context_switches: u64,
    idle: IdleCpus,
}

impl<'c> Scanner<'c> {
    pub fn new(capture: &'c Capture<'c>, window: Window) -> Self {
        let source = capture.source;
        let records = (source.schemas().iter())
            .map(|schema| RecordStats {
                fields: vec![FieldSum::default(); schema.fields.len()],
                ..RecordStats::default()
            })
            .collect();
        Scanner {
            capture,
            feed: SchedFeed::new(source),
            window,
            wallclock: WallClock::new(window),
            records,
            contents: Contents::default(),
            threads_seen: vec![false; source.threads().len()],
            stacks_seen: vec![false; source.stacks_len()],
            timer_stacks: AHashMap::new(),
            timer_samples: 0,
            switch_readings: SwitchReadings::default(),
            pmu: AHashMap::new(),
            context_switches: 0,
            idle: IdleCpus::default(),
        }
    }

    pub fn event(&mut self, event: &Event) {
        self.contents.read += 1;
        let sched = self.feed.translate(event);
        if let Some(sched) = &sched {
            self.wallclock.feed(sched);
        }
        if let Some(SchedEvent::Switch { prev, next, .. }) = sched {
            self.switch(event, prev, next);
        }
        if self.capture.filter.keeps(event, self.capture.source) {
            self.kept(event);
        }
    }

    fn switch(&mut self, event: &Event, prev: u32, next: u32) {
        let in_window = self.window.contains(event.ts_ns);
        self.context_switches += u64::from(in_window);
        self.idle.switch(&self.window, event, prev, next);
        let Some(layout) = self.feed.trackers().get(event) else {
            return;
        };
        let counters = self.feed.trackers().counters.len();
        for field in &layout.pmu {
            let Some(now) = reading(event, field) else {
                continue;
            };
            let delta = self.switch_readings.exchange(event.cpu, field.counter, now);
            if let Some(delta) = delta.filter(|_| in_window && prev != 0) {
                let totals = self.pmu.entry(prev).or_insert_with(|| vec![0; counters]);
                let total = &mut totals[field.counter];
                *total = total.saturating_add(delta.count);
            }
        }
    }

    fn kept(&mut self, event: &Event) {
        let source = self.capture.source;
        let contents = &mut self.contents;
        contents.kept += 1;
        contents.first_ns.get_or_insert(event.ts_ns);
        contents.last_ns = event.ts_ns;
        mark(&mut self.threads_seen, event.thread.0);
        if let Some(stack) = event.stack {
            mark(&mut self.stacks_seen, stack.0);
            if let Some(walk) = event.walk {
                *contents.stack_walks.entry(walk).or_insert(0) += 1;
            }
        }
        contents.pids.insert(source.thread(event.thread).pid);
        let Some(stats) = self.records.get_mut(event.record.0 as usize) else {
            contents.unknown_records += 1;
            return;
        };
        stats.count += 1;
        if let Some(duration) = event.duration_ns {
            stats.span_ns = stats.span_ns.saturating_add(duration);
            stats.durations.record(duration);
        }
        let schema = &source.schemas()[event.record.0 as usize];
        if schema.origin == RecordOrigin::Script {
            for (sum, value) in stats.fields.iter_mut().zip(&event.values) {
                sum.add(value);
            }
        }
        if self.feed.kind(event) == Some(Kind::Timer) {
            self.timer_samples += 1;
            if let Some(stack) = event.stack {
                let tid = source.thread(event.thread).tid;
                *self.timer_stacks.entry((tid, stack)).or_insert(0) += 1;
            }
        }
    }

    pub fn finish(self) -> Measurement {
        let source = self.capture.source;
        let recorded = RecordedStacks::of(&source.info().settings);
        let report = self.wallclock.finish();
        // Without the capture's own filters every switch was recorded, so
        // the CPUs' idle and busy times are known.
        let complete = source.info().settings.filters.is_empty();
        let system = System {
            context_switches: self.context_switches,
            idle_ns: complete.then(|| self.idle.finish(&self.window)),
            oncpu_ns: complete
                .then(|| saturating_sum(report.threads.values().map(|t| t.on_cpu_ns))),
        };
        let period_ns = recorded.timer_period_ns();
        let sample_ns = SampleTime::new(&report.threads, period_ns);
        let functions = functions(self.capture, &self.timer_stacks, &sample_ns);
        let latest = latest_identities(source);
        let counters = self.feed.trackers().counters.clone();
        let mut pmu = self.pmu;
        let threads = (report.threads.into_iter())
            .filter_map(|(tid, times)| {
                let thread = *latest.get(&tid)?;
                let selected = self
                    .capture
                    .filter
                    .selects_thread(source.thread(thread), source);
                let pmu = pmu.remove(&tid).unwrap_or_else(|| vec![0; counters.len()]);
                selected.then_some((tid, ThreadRow { thread, times, pmu }))
            })
            .collect();
        let mut contents = self.contents;
        contents.threads = self.threads_seen.iter().filter(|&&seen| seen).count();
        contents.stacks_used = self.stacks_seen.iter().filter(|&&seen| seen).count();
        Measurement {
            window: self.window,
            recorded,
            records: self.records,
            contents,
            threads,
            counters,
            functions,
            timer_samples: self.timer_samples,
            system,
        }
    }
}

fn mark(seen: &mut Vec<bool>, index: u32) {
    let index = index as usize;
    if index >= seen.len() {
        seen.resize(index + 1, false);
    }
    seen[index] = true;
}

/// What one timer sample of a thread stands for: its share of the thread's
/// on-CPU time (the scheduler's exact accounting divided by the thread's
/// samples), or the timer period for a thread without that accounting.
/// Timers lose samples on busy virtual machines (20-40% measured on the
/// shared 2-vCPU VM, bpftrace's alike), so samples × period would
/// under-count, by a different amount in every run.
struct SampleTime {
    /// By tid: (on-CPU ns, samples) of threads with both.
    threads: AHashMap<u32, (u64, u64)>,
    period_ns: Option<u64>,
}

impl SampleTime {
    fn new(threads: &BTreeMap<u32, ThreadTimes>, period_ns: Option<u64>) -> Self {
        let threads = (threads.iter())
            .filter(|(_, t)| t.samples > 0 && t.on_cpu_ns > 0)
            .map(|(&tid, t)| (tid, (t.on_cpu_ns, t.samples)))
            .collect();
        SampleTime { threads, period_ns }
    }

    /// The time `samples` samples of thread `tid` stand for.
    fn of(&self, tid: u32, samples: u64) -> Option<u64> {
        match self.threads.get(&tid) {
            Some(&(on_cpu_ns, all)) => {
                let share = u128::from(samples) * u128::from(on_cpu_ns) / u128::from(all);
                Some(u64::try_from(share).unwrap_or(u64::MAX))
            }
            None => Some(samples.saturating_mul(self.period_ns?)),
        }
    }
}

/// On-CPU samples and time per function: self (the innermost function of
/// the leaf frame) and total (every function on the stack, once per sample).
fn functions(
    capture: &Capture<'_>,
    stacks: &AHashMap<(u32, StackId), u64>,
    sample_ns: &SampleTime,
) -> Vec<FunctionTimes> {
    let frames = Frames::new(capture.source, StackParts::Both);
    let mut by_name: BTreeMap<String, FunctionTimes> = BTreeMap::new();
    let mut names = Vec::new();
    let mut on_stack: AHashSet<String> = AHashSet::new();
    fn entry(by_name: &mut BTreeMap<String, FunctionTimes>, name: String) -> &mut FunctionTimes {
        by_name
            .entry(name.clone())
            .or_insert_with(|| FunctionTimes::named(name))
    }
    for (&(tid, stack), &samples) in stacks {
        let ns = sample_ns.of(tid, samples);
        if let Some(leaf) = frames.leaf_first(stack).next() {
            entry(&mut by_name, frames.innermost_function(leaf)).add_self(samples, ns);
        }
        on_stack.clear();
        for frame in frames.leaf_first(stack) {
            names.clear();
            frames.functions(frame, &mut names);
            on_stack.extend(names.drain(..));
        }
        for name in on_stack.drain() {
            entry(&mut by_name, name).add_total(samples, ns);
        }
    }
    by_name.into_values().collect()
}

/// Each CPU's idle time, from switches to and from its idle task (tid 0).
#[derive(Debug, Default)]
struct IdleCpus {
    /// By CPU: `None` before its first switch; then since when it is idle, if it is.
    cpus: Vec<Option<Option<u64>>>,
    idle_ns: u64,
}

impl IdleCpus {
    fn switch(&mut self, window: &Window, event: &Event, prev: u32, next: u32) {
        let cpu = event.cpu as usize;
        if self.cpus.len() <= cpu {
            self.cpus.resize(cpu + 1, None);
        }
        let state = &mut self.cpus[cpu];
        // A CPU first seen leaving its idle task was idle since the start.
        let since = match *state {
            None if prev == 0 => Some(window.start_ns.min(event.ts_ns)),
            None => None,
            Some(since) => since,
        };
        if prev == 0
            && let Some(since) = since
        {
            self.idle_ns = self.idle_ns.saturating_add(window.clip(since, event.ts_ns));
        }
        *state = Some((next == 0).then_some(event.ts_ns));
    }

    fn finish(self, window: &Window) -> u64 {
        let open = self.cpus.iter().filter_map(|state| (*state)?);
        let open = open.map(|since| window.clip(since, window.end_ns));
        self.idle_ns.saturating_add(saturating_sum(open))
    }
}

impl FieldSum {
    fn add(&mut self, value: &FieldValue) {
        match *value {
            FieldValue::Int(v) => self.sum += i128::from(v),
            FieldValue::UInt(v) => self.sum += i128::from(v),
            FieldValue::Str(_) | FieldValue::Thread(_) => return,
        }
        self.count += 1;
    }
}

impl FunctionTimes {
    fn named(name: String) -> Self {
        FunctionTimes {
            name,
            self_ns: Some(0),
            total_ns: Some(0),
            ..FunctionTimes::default()
        }
    }

    fn add_self(&mut self, samples: u64, ns: Option<u64>) {
        self.self_samples += samples;
        self.self_ns = self.self_ns.zip(ns).map(|(sum, ns)| sum.saturating_add(ns));
    }

    fn add_total(&mut self, samples: u64, ns: Option<u64>) {
        self.total_samples += samples;
        self.total_ns = self
            .total_ns
            .zip(ns)
            .map(|(sum, ns)| sum.saturating_add(ns));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample is its thread's on-CPU time over its samples; a thread
    /// without scheduler accounting falls back to the timer period.
    #[test]
    fn sample_time_follows_the_thread() {
        let times = |on_cpu_ns, samples| ThreadTimes {
            on_cpu_ns,
            samples,
            ..ThreadTimes::default()
        };
        let threads = BTreeMap::from([(7, times(300, 4)), (8, times(0, 5))]);
        let with_timer = SampleTime::new(&threads, Some(10));
        assert_eq!(with_timer.of(7, 2), Some(150));
        assert_eq!(with_timer.of(8, 2), Some(20));
        assert_eq!(with_timer.of(9, 3), Some(30));
        assert_eq!(SampleTime::new(&threads, None).of(9, 3), None);
    }

    /// A sample stands for at most u64::MAX ns, whatever its thread's
    /// share or the timer's period (both from the capture).
    #[test]
    fn sample_time_saturates() {
        let busy = ThreadTimes {
            on_cpu_ns: u64::MAX,
            samples: 1,
            ..ThreadTimes::default()
        };
        let time = SampleTime::new(&BTreeMap::from([(7, busy)]), Some(u64::MAX));
        assert_eq!(time.of(7, 2), Some(u64::MAX), "more samples than accounted");
        assert_eq!(time.of(9, 2), Some(u64::MAX), "at the timer's period");
    }

    /// Idle time runs from a switch to the idle task to the next switch
    /// away from it, per CPU; a CPU first seen leaving idle was idle since
    /// the window's start, one still idle stays so to its end.
    #[test]
    fn idle_time_per_cpu() {
        let window = Window {
            start_ns: 0,
            end_ns: 100,
        };
        let mut idle = IdleCpus::default();
        let on = |cpu, ts_ns| Event {
            cpu,
            ts_ns,
            ..Event::default()
        };
        idle.switch(&window, &on(0, 10), 0, 5);
        idle.switch(&window, &on(0, 30), 5, 0);
        idle.switch(&window, &on(0, 40), 0, 6);
        idle.switch(&window, &on(1, 20), 7, 8);
        idle.switch(&window, &on(1, 90), 8, 0);
        assert_eq!(idle.finish(&window), 10 + 10 + 10);
    }
}
