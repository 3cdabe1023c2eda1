//! A [`Measurement`] as named metrics (the names of `docs/analysis.md`):
//! `KIND:SUBJECT.STAT` with a dimension and a unit.

use std::collections::BTreeMap;

use super::{Measurement, RecordStats, ThreadRow};
use crate::analysis::gate::{Dimension, MetricKind, MetricName};
use crate::analysis::saturating_sum;
use crate::analysis::stats::LogHistogram;
use crate::capture::model::{FieldType, RecordKind, RecordOrigin};
use crate::render::source::CaptureSource;
use crate::tracking::records::is_internal;

/// One number of a capture.
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    pub name: MetricName,
    pub dimension: Dimension,
    /// `ns`, `bytes`, `count`, `1/s`, `ratio`.
    pub unit: &'static str,
    pub value: f64,
}

/// The dimension of a numeric record field, from its name: `size`,
/// `bytes`, `*_size`, `*_bytes` are sizes; `*_ns` durations; the rest plain
/// numbers.
pub fn field_dimension(field: &str) -> Dimension {
    let bytes = ["size", "bytes"];
    if bytes.contains(&field) || bytes.iter().any(|b| field.ends_with(&format!("_{b}"))) {
        Dimension::Bytes
    } else if field.ends_with("_ns") {
        Dimension::Time
    } else {
        Dimension::Number
    }
}

/// Percentile stats of a distribution, with their quantiles.
const PERCENTILES: [(&str, f64); 4] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)];

/// The per-event values behind a group of metrics (`span:request.p50` …
/// `.mean`, or `thread:worker.wakeup.p50` …), for testing two runs' values
/// against each other when each side has one run.
#[derive(Clone, Debug, PartialEq)]
pub struct Distribution {
    pub kind: Option<MetricKind>,
    pub subject: String,
    /// The stats' common prefix: empty, or `wakeup.`.
    pub prefix: &'static str,
    pub histogram: LogHistogram,
}

impl Distribution {
    /// Whether `name` is one of this distribution's stats.
    pub fn covers(&self, name: &MetricName) -> bool {
        let stat = name.stat.strip_prefix(self.prefix);
        name.kind == self.kind
            && name.subject == self.subject
            && stat.is_some_and(|stat| {
                PERCENTILES.iter().any(|(p, _)| *p == stat) || stat == "max" || stat == "mean"
            })
    }
}

/// A capture's metrics, and (when asked for) the distributions behind them.
#[derive(Clone, Debug, Default)]
pub struct NamedMetrics {
    /// Sorted by name.
    pub metrics: Vec<Metric>,
    pub distributions: Vec<Distribution>,
}

/// Where metrics are collected.
struct Sink {
    metrics: Vec<Metric>,
    /// `None` when distributions are not wanted.
    distributions: Option<Vec<Distribution>>,
}

/// Collects metrics under one kind and subject.
struct Named<'m> {
    out: &'m mut Sink,
    kind: Option<MetricKind>,
    subject: String,
}

impl Named<'_> {
    fn push(&mut self, stat: &str, dimension: Dimension, value: f64) {
        let unit = match dimension {
            Dimension::Time => "ns",
            Dimension::Bytes => "bytes",
            Dimension::Number if stat.ends_with("rate") => "1/s",
            Dimension::Number => "count",
            Dimension::Ratio => "ratio",
        };
        self.out.metrics.push(Metric {
            name: MetricName {
                kind: self.kind,
                subject: self.subject.clone(),
                stat: stat.to_owned(),
            },
            dimension,
            unit,
            value,
        });
    }

    fn count(&mut self, stat: &str, value: u64) {
        self.push(stat, Dimension::Number, value as f64);
    }

    fn time(&mut self, stat: &str, ns: u64) {
        self.push(stat, Dimension::Time, ns as f64);
    }

    /// `PREFIXp50` … `PREFIXmax`, `PREFIXmean` of a non-empty distribution.
    fn distribution(&mut self, prefix: &'static str, histogram: &LogHistogram) {
        if let Some(distributions) = &mut self.out.distributions
            && !histogram.is_empty()
        {
            distributions.push(Distribution {
                kind: self.kind,
                subject: self.subject.clone(),
                prefix,
                histogram: histogram.clone(),
            });
        }
        for (stat, q) in PERCENTILES {
            if let Some(value) = histogram.quantile(q) {
                self.time(&format!("{prefix}{stat}"), value);
            }
        }
        if let Some(max) = histogram.max() {
            self.time(&format!("{prefix}max"), max);
        }
        if let Some(mean) = histogram.mean() {
            self.push(&format!("{prefix}mean"), Dimension::Time, mean);
        }
    }
}

impl Measurement {
    /// Every metric of the capture, sorted by name.
    pub fn metrics(&self, source: &dyn CaptureSource) -> Vec<Metric> {
        self.named(source, false).metrics
    }

    /// Every metric of the capture, sorted by name, and with
    /// `distributions` the per-event values behind percentile stats.
    pub fn named(&self, source: &dyn CaptureSource, distributions: bool) -> NamedMetrics {
        let mut out = Sink {
            metrics: Vec::new(),
            distributions: distributions.then(Vec::new),
        };
        self.record_metrics(source, &mut out);
        self.thread_metrics(source, &mut out);
        self.function_metrics(&mut out);
        self.system_metrics(&mut out);
        out.metrics
            .sort_by_cached_key(|metric| metric.name.to_string());
        NamedMetrics {
            metrics: out.metrics,
            distributions: out.distributions.unwrap_or_default(),
        }
    }

    fn record_metrics(&self, source: &dyn CaptureSource, out: &mut Sink) {
        let schemas = source.schemas();
        let mut groups: BTreeMap<(bool, &str), Vec<usize>> = BTreeMap::new();
        let listed = schemas.iter().enumerate().filter(|(_, s)| !is_internal(s));
        for (index, schema) in listed {
            let span = schema.kind == RecordKind::Span;
            groups.entry((span, &schema.name)).or_default().push(index);
        }
        let seconds = self.window.len_ns() as f64 / 1e9;
        for ((span, name), records) in groups {
            let kind = if span {
                MetricKind::Span
            } else {
                MetricKind::Record
            };
            let mut named = Named {
                out: &mut *out,
                kind: Some(kind),
                subject: name.to_owned(),
            };
            let stats: Vec<&RecordStats> = records.iter().map(|&i| &self.records[i]).collect();
            let count: u64 = stats.iter().map(|s| s.count).sum();
            named.count("count", count);
            if seconds > 0.0 {
                named.push("rate", Dimension::Number, count as f64 / seconds);
            }
            if span {
                let mut durations = LogHistogram::new();
                stats.iter().for_each(|s| durations.merge(&s.durations));
                named.distribution("", &durations);
            }
            let first = &schemas[records[0]];
            if first.origin != RecordOrigin::Script {
                continue;
            }
            for (field_index, field) in first.fields.iter().enumerate() {
                if !matches!(field.ty, FieldType::Int | FieldType::UInt) {
                    continue;
                }
                let sums = stats.iter().filter_map(|s| s.fields.get(field_index));
                let (sum, n) = sums.fold((0i128, 0u64), |(sum, n), f| (sum + f.sum, n + f.count));
                let dimension = field_dimension(&field.name);
                named.push(&format!("{}.sum", field.name), dimension, sum as f64);
                if n > 0 {
                    let mean = sum as f64 / n as f64;
                    named.push(&format!("{}.mean", field.name), dimension, mean);
                }
            }
        }
    }

    fn thread_metrics(&self, source: &dyn CaptureSource, out: &mut Sink) {
        let mut by_thread: BTreeMap<&str, Vec<&ThreadRow>> = BTreeMap::new();
        let mut by_process: BTreeMap<&str, Vec<&ThreadRow>> = BTreeMap::new();
        for row in self.threads.values() {
            let thread = source.thread(row.thread);
            by_thread
                .entry(source.string(thread.name))
                .or_default()
                .push(row);
            by_process
                .entry(source.string(thread.process_name))
                .or_default()
                .push(row);
        }
        for (kind, groups) in [
            (MetricKind::Thread, by_thread),
            (MetricKind::Process, by_process),
        ] {
            for (name, rows) in groups {
                let mut named = Named {
                    out: &mut *out,
                    kind: Some(kind),
                    subject: name.to_owned(),
                };
                self.thread_group(&mut named, &rows);
            }
        }
    }

    fn thread_group(&self, named: &mut Named<'_>, rows: &[&ThreadRow]) {
        let sum = |f: fn(&ThreadRow) -> u64| saturating_sum(rows.iter().map(|row| f(row)));
        named.time("oncpu", sum(|r| r.times.on_cpu_ns));
        named.time("offcpu", sum(|r| r.times.off_cpu_ns()));
        named.time("sleeping", sum(|r| r.times.sleeping_ns));
        named.time("uninterruptible", sum(|r| r.times.uninterruptible_ns));
        named.time("runnable", sum(|r| r.times.runnable_ns));
        let lifetime = sum(|r| r.times.lifetime_ns);
        if lifetime > 0 {
            let known = sum(|r| r.times.known_ns());
            named.push("coverage", Dimension::Ratio, known as f64 / lifetime as f64);
        }
        let mut wakeups = LogHistogram::new();
        rows.iter()
            .for_each(|r| wakeups.merge(&r.times.wakeup_latency));
        named.distribution("wakeup.", &wakeups);
        let voluntary = sum(|r| r.times.voluntary_switches);
        let involuntary = sum(|r| r.times.involuntary_switches);
        named.count("switches", voluntary + involuntary);
        named.count("voluntary", voluntary);
        named.count("involuntary", involuntary);
        named.count("samples", sum(|r| r.times.samples));
        for (index, counter) in self.counters.iter().enumerate() {
            let total = saturating_sum(rows.iter().map(|r| r.pmu.get(index).copied().unwrap_or(0)));
            named.count(&format!("pmu.{counter}"), total);
        }
    }

    fn function_metrics(&self, out: &mut Sink) {
        for function in &self.functions {
            let mut named = Named {
                out: &mut *out,
                kind: Some(MetricKind::Func),
                subject: function.name.clone(),
            };
            if let (Some(self_ns), Some(total_ns)) = (function.self_ns, function.total_ns) {
                named.time("self", self_ns);
                named.time("total", total_ns);
            }
        }
    }

    fn system_metrics(&self, out: &mut Sink) {
        let mut named = Named {
            out,
            kind: None,
            subject: "cpu".to_owned(),
        };
        named.count("context_switches", self.system.context_switches);
        if let Some(idle) = self.system.idle_ns {
            named.time("idle", idle);
        }
        if let Some(oncpu) = self.system.oncpu_ns {
            named.time("oncpu", oncpu);
        }
    }
}
