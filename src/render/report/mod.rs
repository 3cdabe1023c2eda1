//! The wall-clock report (`--report PATH`, `--report-json PATH`; `-` for
//! standard output): where each process's and thread's time went in the
//! window — on-CPU, off-CPU by state (sleeping `S`, uninterruptible `D`,
//! runnable: preempted or woken and waiting for a CPU), wake-up latency
//! percentiles, voluntary and involuntary switches, timer samples, PMU
//! counter totals (with `--pmu`), coverage of the thread's life in the
//! window — and the top functions by on-CPU time (self and total).
//!
//! Input: a [`Capture`], measured by `render::metrics` (the numbers are the
//! metrics'); [`ReportOptions`] sort and cut the rows. Output: [`ReportData`]
//! as aligned text (`text`) or JSON (its serde form, `docs/metrics.md`).

mod text;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::analysis::saturating_sum;
use crate::analysis::wallclock::ThreadTimes;
use crate::capture::walk::{StackEnding, StackWalk, Unwinder};
use crate::render::format::describe_tasks;
use crate::render::metrics::{Measurement, ThreadRow, measure};
use crate::render::source::CaptureSource;
use crate::render::{Capture, Captures, Destination, Render, RenderError};

/// What rows come first (`--sort`): the largest first, but `name`, `id`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortKey {
    #[default]
    OnCpu,
    OffCpu,
    /// On- and off-CPU.
    Total,
    Sleeping,
    Uninterruptible,
    Runnable,
    /// The wake-up latency's p99.
    Wakeup,
    Switches,
    Samples,
    Coverage,
    Name,
    /// Tid (threads) or pid (processes), ascending.
    Id,
}

impl SortKey {
    pub const ALL: [SortKey; 12] = [
        SortKey::OnCpu,
        SortKey::OffCpu,
        SortKey::Total,
        SortKey::Sleeping,
        SortKey::Uninterruptible,
        SortKey::Runnable,
        SortKey::Wakeup,
        SortKey::Switches,
        SortKey::Samples,
        SortKey::Coverage,
        SortKey::Name,
        SortKey::Id,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SortKey::OnCpu => "oncpu",
            SortKey::OffCpu => "offcpu",
            SortKey::Total => "total",
            SortKey::Sleeping => "sleeping",
            SortKey::Uninterruptible => "uninterruptible",
            SortKey::Runnable => "runnable",
            SortKey::Wakeup => "wakeup",
            SortKey::Switches => "switches",
            SortKey::Samples => "samples",
            SortKey::Coverage => "coverage",
            SortKey::Name => "name",
            SortKey::Id => "id",
        }
    }

    /// `--sort` values.
    pub fn parse(text: &str) -> Result<SortKey, String> {
        SortKey::ALL
            .into_iter()
            .find(|k| k.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = SortKey::ALL.iter().map(|k| k.name()).collect();
                format!("unknown sort key `{text}` (keys: {})", names.join(", "))
            })
    }
}

/// How the report is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportOptions {
    pub sort: SortKey,
    /// Rows per table; 0 for all.
    pub top: usize,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            sort: SortKey::default(),
            top: 20,
        }
    }
}

/// The text report renderer.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub options: ReportOptions,
}

/// The JSON report renderer.
#[derive(Clone, Debug, Default)]
pub struct ReportJson {
    pub options: ReportOptions,
}

impl Render for Report {
    fn render(&self, captures: &Captures<'_>, to: &Destination) -> Result<(), RenderError> {
        let capture = captures.single("--report")?;
        let data = ReportData::of(capture, &self.options)?;
        write(to, &text::render(&data))
    }
}

impl Render for ReportJson {
    fn render(&self, captures: &Captures<'_>, to: &Destination) -> Result<(), RenderError> {
        let capture = captures.single("--report-json")?;
        let data = ReportData::of(capture, &self.options)?;
        let mut json = serde_json::to_string_pretty(&data).expect("the report serializes");
        json.push('\n');
        write(to, &json)
    }
}

fn write(to: &Destination, text: &str) -> Result<(), RenderError> {
    let mut out = to.open()?;
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct ReportData {
    pub format: u32,
    pub capture: String,
    pub window_ns: WindowNs,
    /// The replay's task filters, if any.
    pub filters: Option<String>,
    /// The timer's rate (`-S timer=Nhz`, or its period's rounded).
    pub timer_hz: Option<u64>,
    /// The CPU time one timer sample stands for.
    pub timer_period_ns: Option<u64>,
    /// Which off-CPU blocks have stacks.
    pub offcpu_stacks: String,
    pub counters: Vec<String>,
    pub sort: &'static str,
    pub top: usize,
    /// Before cutting to `top`.
    pub process_count: usize,
    pub thread_count: usize,
    pub processes: Vec<Row>,
    pub threads: Vec<Row>,
    /// Timer samples of the selected threads, the base of the functions' shares.
    pub timer_samples: u64,
    pub functions: Vec<FunctionRow>,
    /// Events of the selected threads with a user stack, by how it was
    /// walked (unwinder, then ending).
    pub user_stacks: Vec<WalkRow>,
    /// Events of the selected threads whose kernel stack was cut at the
    /// kernel's depth limit.
    pub kernel_stacks_truncated: u64,
    /// Switch and wake-up events of the selected threads that contradicted
    /// their known state (the kernel never delivered an event in between),
    /// and the time they left unknown, over every selected thread.
    pub missing_events: MissingEvents,
}

/// Events found missing and the time they made unknown.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct MissingEvents {
    pub anomalies: u64,
    /// The threads that missed events.
    pub threads: usize,
    /// Their unknown time (also before their first event).
    pub unknown_ns: u64,
}

/// The events whose user stack one unwinder walked, ending one way
/// (`ending` absent: the walk ran out of frames).
#[derive(Clone, Debug, Serialize)]
pub struct WalkRow {
    pub unwinder: &'static str,
    pub ending: Option<&'static str>,
    pub events: u64,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct WindowNs {
    pub start: u64,
    pub end: u64,
}

/// One process or thread.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Row {
    /// `None` for a process.
    pub tid: Option<u32>,
    pub pid: u32,
    pub thread: Option<String>,
    pub process: String,
    pub threads: usize,
    pub oncpu_ns: u64,
    pub offcpu_ns: u64,
    pub sleeping_ns: u64,
    pub uninterruptible_ns: u64,
    pub runnable_ns: u64,
    /// Stopped, parked, idle-waiting (`T`, `t`, `P`, `I`) or dying.
    pub other_ns: u64,
    /// Off-CPU for a reason not seen (before its first event, or where
    /// events contradicted each other).
    pub unknown_ns: u64,
    /// Events that contradicted the thread's known state (an event lost).
    pub anomalies: u64,
    pub lifetime_ns: u64,
    /// Known time over life in the window.
    pub coverage: f64,
    pub wakeups: u64,
    pub wakeup_p50_ns: Option<u64>,
    pub wakeup_p90_ns: Option<u64>,
    pub wakeup_p99_ns: Option<u64>,
    pub wakeup_max_ns: Option<u64>,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub samples: u64,
    /// Counter totals by name.
    pub pmu: BTreeMap<String, u64>,
}

/// One function's on-CPU time from timer stacks.
#[derive(Clone, Debug, Serialize)]
pub struct FunctionRow {
    pub function: String,
    pub self_samples: u64,
    pub total_samples: u64,
    pub self_ns: Option<u64>,
    pub total_ns: Option<u64>,
}

impl ReportData {
    pub fn of(capture: &Capture<'_>, options: &ReportOptions) -> Result<ReportData, RenderError> {
        let (m, read) = measure(capture);
        read?;
        let source = capture.source;
        let mut threads: Vec<Row> = (m.threads.iter())
            .map(|(&tid, row)| thread_row(source, &m, tid, row))
            .collect();
        let mut processes = processes(source, &m);
        let (process_count, thread_count) = (processes.len(), threads.len());
        let missed = || threads.iter().filter(|t| t.anomalies > 0);
        let missing_events = MissingEvents {
            anomalies: missed().map(|t| t.anomalies).sum(),
            threads: missed().count(),
            unknown_ns: saturating_sum(missed().map(|t| t.unknown_ns)),
        };
        cut(&mut processes, options);
        cut(&mut threads, options);
        Ok(ReportData {
            format: 1,
            capture: capture.path.display().to_string(),
            window_ns: WindowNs {
                start: m.window.start_ns,
                end: m.window.end_ns,
            },
            filters: describe_tasks(&capture.filter),
            timer_hz: m.recorded.timer_hz(),
            timer_period_ns: m.recorded.timer_period_ns(),
            offcpu_stacks: m.recorded.describe_offcpu(),
            counters: m.counters.clone(),
            sort: options.sort.name(),
            top: options.top,
            process_count,
            thread_count,
            processes,
            threads,
            timer_samples: m.timer_samples,
            functions: functions(&m, options.top),
            user_stacks: user_stacks(&m.contents.stack_walks),
            kernel_stacks_truncated: (m.contents.stack_walks.iter())
                .filter(|(walk, _)| walk.kernel_truncated)
                .map(|(_, events)| events)
                .sum(),
            missing_events,
        })
    }
}

/// The user stacks' rows by unwinder, then ending (whatever their kernel part).
fn user_stacks(walks: &BTreeMap<StackWalk, u64>) -> Vec<WalkRow> {
    let mut rows: BTreeMap<(Unwinder, Option<StackEnding>), u64> = BTreeMap::new();
    for (walk, &events) in walks {
        if let Some(unwinder) = walk.unwinder {
            *rows.entry((unwinder, walk.ending)).or_default() += events;
        }
    }
    (rows.into_iter())
        .map(|((unwinder, ending), events)| WalkRow {
            unwinder: unwinder.name(),
            ending: ending.map(StackEnding::name),
            events,
        })
        .collect()
}

fn thread_row(source: &dyn CaptureSource, m: &Measurement, tid: u32, row: &ThreadRow) -> Row {
    let thread = source.thread(row.thread);
    let mut out = Row {
        tid: Some(tid),
        pid: thread.pid,
        thread: Some(source.string(thread.name).to_owned()),
        process: source.string(thread.process_name).to_owned(),
        threads: 1,
        pmu: (m.counters.iter().cloned())
            .zip(row.pmu.iter().copied())
            .collect(),
        ..Row::default()
    };
    out.set_times(&row.times);
    out
}

impl Row {
    fn set_times(&mut self, t: &ThreadTimes) {
        self.oncpu_ns = t.on_cpu_ns;
        self.offcpu_ns = t.off_cpu_ns();
        self.sleeping_ns = t.sleeping_ns;
        self.uninterruptible_ns = t.uninterruptible_ns;
        self.runnable_ns = t.runnable_ns;
        self.other_ns = t.other_ns;
        self.unknown_ns = t.unknown_ns;
        self.anomalies = t.anomalies;
        self.lifetime_ns = t.lifetime_ns;
        self.coverage = t.coverage();
        self.voluntary_switches = t.voluntary_switches;
        self.involuntary_switches = t.involuntary_switches;
        self.samples = t.samples;
        let wakeups = &t.wakeup_latency;
        self.wakeups = wakeups.count();
        self.wakeup_p50_ns = wakeups.quantile(0.5);
        self.wakeup_p90_ns = wakeups.quantile(0.9);
        self.wakeup_p99_ns = wakeups.quantile(0.99);
        self.wakeup_max_ns = wakeups.max();
    }
}

/// Per-process rows: their threads' times summed, wake-up latencies merged.
fn processes(source: &dyn CaptureSource, m: &Measurement) -> Vec<Row> {
    let mut by_pid: BTreeMap<u32, (Row, ThreadTimes)> = BTreeMap::new();
    for row in m.threads.values() {
        let thread = source.thread(row.thread);
        let (process, times) = by_pid.entry(thread.pid).or_insert_with(|| {
            let row = Row {
                pid: thread.pid,
                process: source.string(thread.process_name).to_owned(),
                ..Row::default()
            };
            (row, ThreadTimes::default())
        });
        process.threads += 1;
        for (counter, &value) in m.counters.iter().zip(&row.pmu) {
            let total = process.pmu.entry(counter.clone()).or_insert(0);
            *total = total.saturating_add(value);
        }
        times.merge(&row.times);
    }
    (by_pid.into_values())
        .map(|(mut row, times)| {
            row.set_times(&times);
            row
        })
        .collect()
}

/// Sorts by the key (ties by id) and keeps the top rows.
fn cut(rows: &mut Vec<Row>, options: &ReportOptions) {
    let id = |r: &Row| (r.tid.unwrap_or(r.pid), r.pid);
    let key = |r: &Row| -> u64 {
        match options.sort {
            SortKey::OnCpu => r.oncpu_ns,
            SortKey::OffCpu => r.offcpu_ns,
            SortKey::Total => r.oncpu_ns.saturating_add(r.offcpu_ns),
            SortKey::Sleeping => r.sleeping_ns,
            SortKey::Uninterruptible => r.uninterruptible_ns,
            SortKey::Runnable => r.runnable_ns,
            SortKey::Wakeup => r.wakeup_p99_ns.unwrap_or(0),
            SortKey::Switches => r.voluntary_switches + r.involuntary_switches,
            SortKey::Samples => r.samples,
            SortKey::Coverage => (r.coverage * 1e9) as u64,
            SortKey::Name | SortKey::Id => 0,
        }
    };
    match options.sort {
        SortKey::Name => rows.sort_by(|a, b| {
            let name = |r: &Row| (r.thread.clone().unwrap_or_default(), r.process.clone());
            name(a).cmp(&name(b)).then(id(a).cmp(&id(b)))
        }),
        SortKey::Id => rows.sort_by_key(id),
        _ => rows.sort_by(|a, b| key(b).cmp(&key(a)).then(id(a).cmp(&id(b)))),
    }
    if options.top > 0 {
        rows.truncate(options.top);
    }
}

/// The top functions by self samples (then total, then name).
fn functions(m: &Measurement, top: usize) -> Vec<FunctionRow> {
    let mut rows: Vec<FunctionRow> = (m.functions.iter())
        .map(|f| FunctionRow {
            function: f.name.clone(),
            self_samples: f.self_samples,
            total_samples: f.total_samples,
            self_ns: f.self_ns,
            total_ns: f.total_ns,
        })
        .collect();
    rows.sort_by(|a, b| {
        (b.self_samples, b.total_samples)
            .cmp(&(a.self_samples, a.total_samples))
            .then_with(|| a.function.cmp(&b.function))
    });
    if top > 0 {
        rows.truncate(top);
    }
    rows
}

#[cfg(test)]
mod tests;
