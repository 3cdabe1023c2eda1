//! Profiles from a capture, shared by `--folded`, `--flamegraph` and
//! `--pprof` so that they always agree: a capture's events → weighted
//! samples keyed by thread, stack and on/off-CPU state ([`Profile`]).
//!
//! Input: a [`Capture`] (its window and task filters) and the profile asked
//! for ([`ProfileOptions`], resolved by [`ProfileSpec`]). Output: one value
//! per column per distinct [`SampleKey`], in memory bounded by the number of
//! distinct keys (threads × stacks), never by the number of events.
//!
//! Samples:
//! - `cpu`: each `timer` event of a selected thread in the window, `[1,
//!   period]`;
//! - `offcpu`: each off-CPU interval of a selected thread (switch-out to
//!   switch-in, clipped to the window, from `analysis::wallclock`),
//!   `[1, duration]`, under the stack recorded for it (`render::sched`);
//! - `wakeup`: the same intervals that waited for a CPU, `[1, runnable]`;
//! - `wall`: both, on-CPU samples `[1, period, 0, period]` tagged
//!   [`CpuState::OnCpu`], intervals `[0, 0, duration, duration]` tagged
//!   [`CpuState::OffCpu`];
//! - a record: each of its events, `[1]` or `[1, field]`.
//!
//! An interval shorter than the stack threshold (the larger of the
//! capture's `-S offcpu=DUR` and `--min-block`) keeps its exact duration
//! under the `[no stack: block < DUR]` frame ([`SampleStack::ShortBlock`]);
//! a longer one whose stack was not recorded, under `[no stack]`.

mod spec;

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use ahash::AHashMap;

pub use spec::{Column, PROFILE_KINDS, ProfileError, ProfileKind, ProfileSpec, RecordWeight};

use crate::analysis::folded::{CpuState, FoldOptions, Folded, Folder};
use crate::analysis::wallclock::{OffCpuInterval, WallClock, Window};
use crate::capture::model::{Event, FieldValue, StackId, ThreadId};
use crate::render::format::whole_duration;
use crate::render::frames::{Frames, StackParts};
use crate::render::recorded::RecordedStacks;
use crate::render::sched::{self, OffCpuTag, SchedFeed, latest_identities};
use crate::render::source::CaptureSource;
use crate::render::{Capture, Destination, RenderError};
use crate::tracking::records::Kind;

/// What the command line asks of profiles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProfileOptions {
    /// `--profile`: a profile kind or a record name; `None` for the default.
    pub profile: Option<String>,
    /// `--weight`.
    pub weight: Option<String>,
    pub parts: StackParts,
    /// Thread frame, delimiter, annotations.
    pub fold: FoldOptions,
    /// `--min-block`: off-CPU intervals shorter than this show no stack.
    pub min_block_ns: u64,
    /// `--per-thread`: one output file per thread.
    pub per_thread: bool,
    /// `--cpu`: only samples taken on these CPUs, and off-CPU intervals of
    /// threads leaving them (sorted); `None`: every CPU.
    pub cpus: Option<Vec<u32>>,
}

/// What a sample is attributed to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SampleKey {
    pub thread: ThreadId,
    pub stack: SampleStack,
    /// Wall-clock profiles only.
    pub state: Option<CpuState>,
}

/// The frames of a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SampleStack {
    Recorded(StackId),
    /// An off-CPU block shorter than the profile's stack threshold.
    ShortBlock,
    /// No stack recorded (lost, or a block still open at the window's end).
    Missing,
}

impl From<Option<StackId>> for SampleStack {
    fn from(stack: Option<StackId>) -> Self {
        stack.map_or(SampleStack::Missing, SampleStack::Recorded)
    }
}

/// The most columns a profile has (`wall`).
pub const MAX_COLUMNS: usize = 4;

/// One value per column.
pub type Values = [u64; MAX_COLUMNS];

/// A capture's samples, summed per key.
#[derive(Debug)]
pub struct Profile {
    pub spec: ProfileSpec,
    pub window: Window,
    /// Off-CPU blocks shorter than this have no stack: the larger of the
    /// capture's `-S offcpu=DUR` and `--min-block` (0: none).
    pub min_block_ns: u64,
    pub samples: AHashMap<SampleKey, Values>,
}

impl Profile {
    /// Reads `capture` once into the profile `options` ask for.
    pub fn build(capture: &Capture<'_>, options: &ProfileOptions) -> Result<Profile, RenderError> {
        let source = capture.source;
        let spec = ProfileSpec::resolve(
            source,
            options.profile.as_deref(),
            options.weight.as_deref(),
        )?;
        let window = sched::window(capture)?;
        let recorded = RecordedStacks::of(&source.info().settings);
        let captured_min = recorded.offcpu.and_then(|o| o.min_block_ns).unwrap_or(0);
        let min_block_ns = options.min_block_ns.max(captured_min);
        let thresholds = (options.min_block_ns, min_block_ns);
        let mut collector = Collector::new(capture, &spec, window, thresholds);
        collector.cpus = options.cpus.as_deref();
        // Events come in time order: nothing after the window changes it.
        source.for_each_event(&mut |event| {
            if event.ts_ns >= window.end_ns {
                return ControlFlow::Break(());
            }
            collector.event(event);
            ControlFlow::Continue(())
        })?;
        let samples = collector.finish();
        if samples.is_empty() {
            let profile = spec.name().to_owned();
            return Err(ProfileError::Empty { profile }.into());
        }
        Ok(Profile {
            spec,
            window,
            min_block_ns,
            samples,
        })
    }

    /// The frame of [`SampleStack::ShortBlock`] samples: `[no stack: block < 1ms]`.
    pub fn short_block_frame(&self) -> String {
        format!("[no stack: block < {}]", whole_duration(self.min_block_ns))
    }

    /// The sum of column `column` over all samples.
    pub fn total(&self, column: usize) -> u64 {
        (self.samples.values()).fold(0, |sum, values| sum.saturating_add(values[column]))
    }

    /// The samples in key order.
    pub fn sorted(&self) -> Vec<(&SampleKey, &Values)> {
        let mut samples: Vec<_> = self.samples.iter().collect();
        samples.sort_unstable_by_key(|(key, _)| **key);
        samples
    }

    /// The folded stacks of the samples `keep` selects, weighed by the
    /// profile's weight column.
    pub fn fold(
        &self,
        source: &dyn CaptureSource,
        options: &ProfileOptions,
        keep: impl Fn(&SampleKey) -> bool,
    ) -> Folded {
        self.fold_threads(source, options, keep, |id| thread_frame(source, id))
    }

    /// [`Profile::fold`] with the thread frame `thread` names (e.g. a name
    /// without ids, to merge the threads of several runs).
    pub fn fold_threads(
        &self,
        source: &dyn CaptureSource,
        options: &ProfileOptions,
        keep: impl Fn(&SampleKey) -> bool,
        thread: impl Fn(ThreadId) -> String,
    ) -> Folded {
        let mut folder = Folder::new();
        for (key, values) in &self.samples {
            if keep(key) && values[self.spec.weight] > 0 {
                folder.add(*key, values[self.spec.weight]);
            }
        }
        let frames = Frames::new(source, options.parts);
        let short_block = self.short_block_frame();
        folder.fold(options.fold, |key, builder| {
            if let Some(state) = key.state {
                builder.state(state);
            }
            builder.thread(&thread(key.thread));
            match key.stack {
                SampleStack::Recorded(id) => frames.describe(Some(id), builder),
                SampleStack::ShortBlock => {
                    builder.user(&short_block);
                }
                SampleStack::Missing => frames.describe(None, builder),
            }
        })
    }

    /// The threads with samples, by tid, each with its latest identity.
    pub fn threads(&self, source: &dyn CaptureSource) -> Vec<(u32, ThreadId)> {
        let mut threads: Vec<(u32, ThreadId)> = (self.samples.keys())
            .map(|key| (source.thread(key.thread).tid, key.thread))
            .collect();
        threads.sort_unstable();
        threads.dedup_by_key(|(tid, _)| *tid);
        threads
    }
}

/// What one output file shows: the whole profile, or one thread's stacks.
pub struct FoldedFile {
    /// The thread, with `--per-thread`.
    pub thread: Option<ThreadId>,
    pub folded: Folded,
    pub to: Destination,
}

impl Profile {
    /// The folded stacks of each file an output writes: all of them at `to`,
    /// or with `--per-thread` one file per thread, named `PATH`'s stem, then
    /// `-TID-NAME`, then its extension (`out.svg` → `out-42-worker.svg`).
    pub fn files(
        &self,
        source: &dyn CaptureSource,
        options: &ProfileOptions,
        to: &Destination,
        output: &'static str,
    ) -> Result<Vec<FoldedFile>, RenderError> {
        if !options.per_thread {
            let folded = self.fold(source, options, |_| true);
            let to = to.clone();
            return Ok(vec![FoldedFile {
                thread: None,
                folded,
                to,
            }]);
        }
        let Destination::File(path) = to else {
            return Err(RenderError::Captures {
                output,
                problem: "with --per-thread writes one file per thread: give a path, not -".into(),
            });
        };
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        let extension = path
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()));
        let safe = |c: char| {
            if c.is_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        };
        let files = (self.threads(source).into_iter())
            .map(|(tid, id)| {
                let name: String = source
                    .string(source.thread(id).name)
                    .chars()
                    .map(safe)
                    .collect();
                let file = format!("{stem}-{tid}-{name}{}", extension.as_deref().unwrap_or(""));
                FoldedFile {
                    thread: Some(id),
                    folded: self.fold(source, options, |key| source.thread(key.thread).tid == tid),
                    to: Destination::File(path.with_file_name(file)),
                }
            })
            .collect();
        Ok(files)
    }
}

/// The first frame of a thread's stacks: `name-pid/tid`, as
/// `stackcollapse-perf.pl --tid` writes it.
pub fn thread_frame(source: &dyn CaptureSource, id: ThreadId) -> String {
    let thread = source.thread(id);
    format!(
        "{}-{}/{}",
        source.string(thread.name),
        thread.pid,
        thread.tid
    )
}

/// Turns events into samples.
struct Collector<'c> {
    capture: &'c Capture<'c>,
    spec: &'c ProfileSpec,
    feed: SchedFeed<'c>,
    /// For the profiles made of off-CPU intervals.
    wallclock: Option<WallClock<OffCpuTag>>,
    /// `--min-block`: shorter intervals lose their stack.
    min_block_ns: u64,
    /// [`Profile::min_block_ns`]: shorter intervals without a stack are
    /// [`SampleStack::ShortBlock`].
    short_block_ns: u64,
    /// Each tid's latest identity (`sched::latest_identities`).
    latest: BTreeMap<u32, ThreadId>,
    /// [`ProfileOptions::cpus`].
    cpus: Option<&'c [u32]>,
    samples: AHashMap<SampleKey, Values>,
}

impl<'c> Collector<'c> {
    fn new(
        capture: &'c Capture<'c>,
        spec: &'c ProfileSpec,
        window: Window,
        (min_block_ns, short_block_ns): (u64, u64),
    ) -> Self {
        let off_cpu = matches!(
            spec.kind,
            ProfileKind::OffCpu | ProfileKind::Wall | ProfileKind::Wakeup
        );
        Collector {
            capture,
            spec,
            feed: SchedFeed::new(capture.source),
            wallclock: off_cpu.then(|| WallClock::new(window)),
            min_block_ns,
            short_block_ns,
            latest: latest_identities(capture.source),
            cpus: None,
            samples: AHashMap::new(),
        }
    }

    fn event(&mut self, event: &Event) {
        if let Some(wallclock) = &mut self.wallclock
            && let Some(interval) = self.feed.account(wallclock, event)
        {
            self.off_cpu(&interval);
        }
        match &self.spec.kind {
            ProfileKind::Cpu | ProfileKind::Wall => {
                if self.feed.kind(event) == Some(Kind::Timer) && self.keeps(event) {
                    self.on_cpu(event);
                }
            }
            ProfileKind::Record {
                records, weight, ..
            } => {
                if let Some(index) = records.iter().position(|&r| r == event.record)
                    && self.keeps(event)
                {
                    let value = record_value(event, weight, index);
                    self.add(event.thread, event.stack.into(), None, [1, value, 0, 0]);
                }
            }
            ProfileKind::OffCpu | ProfileKind::Wakeup => {}
        }
    }

    fn keeps(&self, event: &Event) -> bool {
        self.on_selected_cpu(Some(event.cpu))
            && self.capture.filter.keeps(event, self.capture.source)
    }

    /// Whether `--cpu` selects `cpu` (an interval no switch began left no
    /// known CPU: only without `--cpu`).
    fn on_selected_cpu(&self, cpu: Option<u32>) -> bool {
        match (self.cpus, cpu) {
            (None, _) => true,
            (Some(cpus), Some(cpu)) => cpus.binary_search(&cpu).is_ok(),
            (Some(_), None) => false,
        }
    }

    fn on_cpu(&mut self, event: &Event) {
        let period = self.spec.period_ns;
        match self.spec.kind {
            ProfileKind::Wall => {
                let values = [1, period, 0, period];
                let stack = event.stack.into();
                self.add(event.thread, stack, Some(CpuState::OnCpu), values);
            }
            _ => self.add(event.thread, event.stack.into(), None, [1, period, 0, 0]),
        }
    }

    /// Adds an off-CPU interval under the thread as it left the CPU (its
    /// latest identity when no switch began the interval).
    fn off_cpu(&mut self, interval: &OffCpuInterval<OffCpuTag>) {
        let source = self.capture.source;
        let Some(thread) = (interval.tag.map(|tag| tag.thread))
            .or_else(|| self.latest.get(&interval.tid).copied())
        else {
            return;
        };
        if !(self.capture.filter).selects_thread(source.thread(thread), source)
            || !self.on_selected_cpu(interval.tag.map(|tag| tag.cpu))
        {
            return;
        }
        let duration = interval.duration_ns();
        let stack = match interval.tag.and_then(|tag| tag.stack) {
            Some(id) if duration >= self.min_block_ns => SampleStack::Recorded(id),
            _ if duration < self.short_block_ns => SampleStack::ShortBlock,
            _ => SampleStack::Missing,
        };
        match self.spec.kind {
            ProfileKind::OffCpu => self.add(thread, stack, None, [1, duration, 0, 0]),
            ProfileKind::Wall => {
                let values = [0, 0, duration, duration];
                self.add(thread, stack, Some(CpuState::OffCpu), values);
            }
            ProfileKind::Wakeup if interval.runnable_ns > 0 => {
                self.add(thread, stack, None, [1, interval.runnable_ns, 0, 0]);
            }
            _ => {}
        }
    }

    fn add(
        &mut self,
        thread: ThreadId,
        stack: SampleStack,
        state: Option<CpuState>,
        values: Values,
    ) {
        let key = SampleKey {
            thread,
            stack,
            state,
        };
        let sums = self.samples.entry(key).or_insert([0; MAX_COLUMNS]);
        for (sum, value) in sums.iter_mut().zip(values) {
            *sum = sum.saturating_add(value);
        }
    }

    /// The samples, with the off-CPU intervals still open at the window's
    /// end, each thread under its latest identity (one root per thread in
    /// flame graphs, as in the report, even across a rename or an exec).
    fn finish(mut self) -> AHashMap<SampleKey, Values> {
        if let Some(wallclock) = self.wallclock.take() {
            for interval in wallclock.finish().open_intervals {
                self.off_cpu(&interval);
            }
        }
        let source = self.capture.source;
        let latest = &self.latest;
        let mut samples = AHashMap::with_capacity(self.samples.len());
        for (mut key, values) in self.samples {
            let tid = source.thread(key.thread).tid;
            key.thread = latest.get(&tid).copied().unwrap_or(key.thread);
            let sums: &mut Values = samples.entry(key).or_insert([0; MAX_COLUMNS]);
            for (sum, value) in sums.iter_mut().zip(values) {
                *sum = sum.saturating_add(value);
            }
        }
        samples
    }
}

/// What one event of a record profile weighs (negative fields weigh 0).
fn record_value(event: &Event, weight: &RecordWeight, record: usize) -> u64 {
    match weight {
        RecordWeight::Count => 0,
        RecordWeight::Duration => event.duration_ns.unwrap_or(0),
        RecordWeight::Field { indexes, .. } => match event.values.get(indexes[record]) {
            Some(FieldValue::UInt(v)) => *v,
            Some(FieldValue::Int(v)) => u64::try_from(*v).unwrap_or(0),
            _ => 0,
        },
    }
}

#[cfg(test)]
mod tests;
