//! The metrics of two sides' runs, row by row: each side's run values and
//! median, the relative change of the medians, and the verdict.

use std::collections::BTreeSet;

use super::runs::Run;
use super::{CompareOptions, OneSided};
use crate::analysis::gate::{Dimension, MetricKind, MetricName, relative_change};
use crate::analysis::stats::{Statistic, Verdict};
use crate::render::metrics::Metric;

/// One side's values of a metric.
#[derive(Clone, Debug, PartialEq)]
pub struct Side {
    /// One value per run that has the metric (absent counts are 0).
    pub runs: Vec<f64>,
    pub median: f64,
}

impl Side {
    fn of(runs: Vec<f64>) -> Side {
        let median = Statistic::Median.of(&mut runs.clone());
        Side { runs, median }
    }

    /// The largest deviation of a run from the median, relative to it
    /// (`None` with one run or a zero median).
    pub fn spread(&self) -> Option<f64> {
        if self.runs.len() < 2 || self.median == 0.0 {
            return None;
        }
        let furthest = (self.runs.iter())
            .map(|value| (value - self.median).abs())
            .fold(0.0, f64::max);
        Some(furthest / self.median.abs())
    }
}

/// One metric of the comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub name: MetricName,
    pub dimension: Dimension,
    /// `ns`, `bytes`, `count`, `1/s`, `ratio`.
    pub unit: &'static str,
    /// `None` without baseline captures.
    pub baseline: Option<Side>,
    pub candidate: Side,
    /// `(candidate − baseline) / |baseline|` of the medians; ±∞ from a zero
    /// baseline.
    pub change: Option<f64>,
    /// `None` with one run a side and no per-event values to test.
    pub verdict: Option<Verdict>,
    /// Why the captures cannot compare this metric, if they cannot.
    pub uncompared: Option<&'static str>,
}

/// `KIND:SUBJECT.*`: every stat of the metric's subject.
pub(super) fn stats_of(name: &MetricName) -> String {
    let all = MetricName {
        stat: "*".to_owned(),
        ..name.clone()
    };
    all.to_string()
}

/// Whether a run without the metric had a value of 0 (a count, a sum, a
/// time) rather than no value (a percentile of nothing).
pub(super) fn absent_is_zero(name: &MetricName) -> bool {
    let stat = name.stat.as_str();
    match name.kind {
        Some(MetricKind::Func) => true,
        Some(MetricKind::Span | MetricKind::Record) => {
            matches!(stat, "count" | "rate") || stat.ends_with(".sum")
        }
        Some(MetricKind::Thread | MetricKind::Process) => {
            let times = ["oncpu", "offcpu", "sleeping", "uninterruptible", "runnable"];
            let counts = ["switches", "voluntary", "involuntary", "samples"];
            times.contains(&stat) || counts.contains(&stat) || stat.starts_with("pmu.")
        }
        None => stat == "context_switches",
    }
}

/// The rows of every metric of `candidate` (and of `baseline`, when given),
/// and the metrics only one side has.
pub(super) fn compare(
    baseline: &[Run],
    candidate: &[Run],
    exclusions: &[(glob::Pattern, &'static str)],
    options: &CompareOptions,
) -> (Vec<Row>, Vec<OneSided>) {
    let names: BTreeSet<&String> = (baseline.iter().chain(candidate))
        .flat_map(|run| run.metrics.keys())
        .collect();
    let mut rows = Vec::new();
    let mut one_sided = Vec::new();
    for name in names {
        let in_base = baseline.iter().any(|run| run.metrics.contains_key(name));
        let in_new = candidate.iter().any(|run| run.metrics.contains_key(name));
        if !in_new || (!baseline.is_empty() && !in_base) {
            let metric = (baseline.iter().chain(candidate))
                .find_map(|run| run.metrics.get(name))
                .expect("a run has the metric");
            one_sided.push(OneSided {
                name: name.clone(),
                group: stats_of(&metric.name),
                baseline: in_base,
            });
            continue;
        }
        let uncompared = (exclusions.iter())
            .find(|(glob, _)| glob.matches(name))
            .map(|(_, reason)| *reason);
        rows.push(row(name, baseline, candidate, uncompared, options));
    }
    (rows, one_sided)
}

fn row(
    name: &str,
    baseline: &[Run],
    candidate: &[Run],
    uncompared: Option<&'static str>,
    options: &CompareOptions,
) -> Row {
    let metric = (candidate.iter())
        .find_map(|run| run.metrics.get(name))
        .expect("the candidate has the metric");
    let zero = absent_is_zero(&metric.name).then_some(0.0);
    let value = |run: &Run| run.metrics.get(name).map(|m| m.value).or(zero);
    let values = |runs: &[Run]| -> Vec<f64> { runs.iter().filter_map(value).collect() };
    let new = values(candidate);
    let base = (!baseline.is_empty()).then(|| values(baseline));
    let compared = uncompared.is_none();
    let verdict = (base.as_ref())
        .filter(|_| compared)
        .and_then(|base| match options.paired {
            true => {
                let pairs = baseline.iter().zip(candidate);
                let pairs: Vec<(f64, f64)> = pairs
                    .filter_map(|(base, new)| Some((value(base)?, value(new)?)))
                    .collect();
                Verdict::paired_signed_rank(&pairs, options.alpha)
            }
            false => verdict(metric, base, &new, baseline, candidate, options.alpha),
        });
    let candidate_side = Side::of(new);
    let baseline_side = base.map(Side::of);
    let change = (baseline_side.as_ref())
        .filter(|_| compared)
        .map(|base| relative_change(base.median, candidate_side.median));
    Row {
        name: metric.name.clone(),
        dimension: metric.dimension,
        unit: metric.unit,
        baseline: baseline_side,
        candidate: candidate_side,
        change,
        verdict,
        uncompared,
    }
}

/// The permutation test of the runs' values; with one run a side, the
/// Mann-Whitney test of the per-event values behind a percentile (span
/// durations, wake-up latencies).
fn verdict(
    metric: &Metric,
    base: &[f64],
    new: &[f64],
    baseline: &[Run],
    candidate: &[Run],
    alpha: f64,
) -> Option<Verdict> {
    match (baseline, candidate) {
        ([base_run], [new_run]) => {
            let (before, after) = (
                base_run.distribution(metric)?,
                new_run.distribution(metric)?,
            );
            Verdict::mann_whitney_binned(&before.histogram, &after.histogram, alpha)
        }
        _ => Verdict::permutation(base, new, alpha),
    }
}
