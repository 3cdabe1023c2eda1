//! Metrics from a capture: the one computation behind `--metrics`,
//! `--report`/`--report-json` and the counts of `-I` (and, to come, the
//! comparison of captures), so they never disagree.
//!
//! Input: a [`Capture`] (its window and task filters). [`measure`] reads its
//! events once into a [`Measurement`]: per record, kept events, span
//! durations (percentiles in bounded memory, `stats::LogHistogram`) and sums
//! of numeric fields; per selected thread, the wall-clock accounting of
//! `analysis::wallclock` and PMU counter totals; per function, on-CPU timer
//! samples (self and total); system-wide, context switches and idle time;
//! and the capture's contents for `-I`. [`Measurement::metrics`] names them
//! as `docs/analysis.md` specifies (`span:request.p99`,
//! `thread:worker.oncpu`, `func:parse.self`, `cpu.idle`); `json` writes them.
//!
//! Rules:
//! - per-thread times are accounted from the capture's first event over the
//!   window (`render::sched`); threads are those the filters select, named
//!   by their latest identity; `thread:` and `process:` metrics sum the
//!   threads of one name;
//! - records, spans and timer samples count the events the filter keeps;
//! - PMU totals of a thread sum the counter's deltas between consecutive
//!   switches on a CPU, attributed to the thread switched out;
//! - system metrics count every switch recorded in the window; idle and
//!   busy times only exist for captures made without task filters (with
//!   them, switches between unselected tasks were not recorded).

mod json;
mod named;
mod scan;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;

pub use json::{Metrics, MetricsOptions, number};
pub use named::{Distribution, Metric, NamedMetrics, field_dimension};

use crate::analysis::stats::LogHistogram;
use crate::analysis::wallclock::{ThreadTimes, Window};
use crate::capture::format::CaptureError;
use crate::capture::model::ThreadId;
use crate::capture::walk::StackWalk;
use crate::render::Capture;
use crate::render::recorded::RecordedStacks;
use crate::render::sched::window_as_read;

/// What one pass over a capture found.
#[derive(Clone, Debug)]
pub struct Measurement {
    pub window: Window,
    pub recorded: RecordedStacks,
    /// By `RecordId`, the events the filter keeps.
    pub records: Vec<RecordStats>,
    pub contents: Contents,
    /// Selected threads (not the idle task) by tid.
    pub threads: BTreeMap<u32, ThreadRow>,
    /// PMU counter names, the order of [`ThreadRow::pmu`].
    pub counters: Vec<String>,
    /// Functions on timer stacks, by name.
    pub functions: Vec<FunctionTimes>,
    /// Timer samples of selected threads (with or without a stack).
    pub timer_samples: u64,
    pub system: System,
}

/// One record's kept events.
#[derive(Clone, Debug, Default)]
pub struct RecordStats {
    pub count: u64,
    /// Summed span durations.
    pub span_ns: u64,
    /// Span durations (empty for instants).
    pub durations: LogHistogram,
    /// By field index: the sum of a script record's numeric field.
    pub fields: Vec<FieldSum>,
}

/// The sum of one numeric field over events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FieldSum {
    pub sum: i128,
    /// Events that had a number in the field.
    pub count: u64,
}

/// What `-I` says of the kept events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contents {
    pub kept: u64,
    pub read: u64,
    /// Kept events of a record the capture has no schema for.
    pub unknown_records: u64,
    /// Distinct threads (identities) and processes of kept events.
    pub threads: usize,
    pub pids: BTreeSet<u32>,
    /// Distinct stacks of kept events.
    pub stacks_used: usize,
    /// Kept events with a user stack, by how it was walked.
    pub stack_walks: BTreeMap<StackWalk, u64>,
    pub first_ns: Option<u64>,
    pub last_ns: u64,
}

/// One thread's times.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadRow {
    /// Its latest identity.
    pub thread: ThreadId,
    pub times: ThreadTimes,
    /// Counter totals, by [`Measurement::counters`].
    pub pmu: Vec<u64>,
}

/// Timer samples in which a function was the innermost (self) or anywhere
/// on the stack (total), and the on-CPU time they stand for (each sample its
/// thread's on-CPU time over its samples; the timer period for threads
/// without scheduler accounting; `None` when neither is known).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionTimes {
    pub name: String,
    pub self_samples: u64,
    pub total_samples: u64,
    pub self_ns: Option<u64>,
    pub total_ns: Option<u64>,
}

/// System-wide numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct System {
    /// Switches recorded in the window.
    pub context_switches: u64,
    /// Summed over CPUs; `None` when the capture had task filters.
    pub idle_ns: Option<u64>,
    /// Every thread's on-CPU time; `None` when the capture had task filters.
    pub oncpu_ns: Option<u64>,
}

/// Reads `capture` once. A read failure part way through is returned
/// beside what was measured up to it.
pub fn measure(capture: &Capture<'_>) -> (Measurement, Result<(), CaptureError>) {
    let (window, read) = window_as_read(capture);
    let mut scanner = scan::Scanner::new(capture, window);
    let events = capture.source.for_each_event(&mut |event| {
        scanner.event(event);
        ControlFlow::Continue(())
    });
    (scanner.finish(), read.and(events))
}

#[cfg(test)]
mod tests;
