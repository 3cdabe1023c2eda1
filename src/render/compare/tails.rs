//! Whether a gated percentile stands on enough events in every run. A run's
//! value of `span:request.p99` is its 1%-longest request: over 300 requests
//! that is the 3rd longest, which a couple of preempted requests move, and
//! the runs' values then spread too widely for a test to see a real change.
//!
//! Input: the gates and both sides' runs. Output: one warning per gated
//! percentile of a span or record some run computed from fewer than
//! [`MIN_BEYOND`] events beyond it, naming the events per run it needs.

use super::runs::Run;
use crate::analysis::gate::{Gate, MetricKind, MetricName};

/// Events beyond a percentile that make a run's value of it stable enough.
pub(super) const MIN_BEYOND: f64 = 10.0;

/// A warning for each gated percentile (`pNN`) of a span or record that a
/// run of `runs` computed from too few events (its `.count`).
pub(super) fn thin_tails<'r>(
    gates: &[Gate],
    runs: impl Iterator<Item = &'r Run> + Clone,
) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut seen: Vec<&MetricName> = Vec::new();
    for condition in gates.iter().flat_map(Gate::conditions) {
        let metric = &condition.metric;
        let Some(tail) = tail_fraction(metric) else {
            continue;
        };
        if seen.contains(&metric) {
            continue;
        }
        seen.push(metric);
        let count = MetricName {
            stat: "count".to_owned(),
            ..metric.clone()
        }
        .to_string();
        let fewest = (runs.clone())
            .filter_map(|run| run.metrics.get(&count))
            .map(|m| m.value)
            .min_by(f64::total_cmp);
        if let Some(fewest) = fewest.filter(|n| n * tail < MIN_BEYOND) {
            let needed = (MIN_BEYOND / tail).ceil();
            warnings.push(format!(
                "{metric}: a run has only {fewest} events, {:.0} of them beyond the \
                 percentile, so its value is a few outliers'; the gate needs runs of at \
                 least {needed} events",
                (fewest * tail).floor(),
            ));
        }
    }
    warnings
}

/// The fraction of events beyond the percentile `metric` names (0.01 for
/// `p99`), for spans and records, whose `.count` is their number of events.
fn tail_fraction(metric: &MetricName) -> Option<f64> {
    if !matches!(metric.kind, Some(MetricKind::Span | MetricKind::Record)) {
        return None;
    }
    let percent: f64 = metric.stat.strip_prefix('p')?.parse().ok()?;
    (0.0..100.0)
        .contains(&percent)
        .then_some(1.0 - percent / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::gate::{Dimension, parse};
    use crate::render::metrics::Metric;

    /// A run with `count` requests.
    fn run(count: f64) -> Run {
        let name = MetricName {
            kind: Some(MetricKind::Span),
            subject: "request".to_owned(),
            stat: "count".to_owned(),
        };
        let metric = Metric {
            name: name.clone(),
            dimension: Dimension::Number,
            unit: "count",
            value: count,
        };
        Run {
            metrics: [(name.to_string(), metric)].into(),
            distributions: Vec::new(),
        }
    }

    fn gates(expressions: &[&str]) -> Vec<Gate> {
        (expressions.iter())
            .map(|e| parse(e).expect("a gate"))
            .collect()
    }

    /// A p99 over 300 events (3 beyond it) is flagged once with the 1000
    /// events it needs; over 1000 events it is not.
    #[test]
    fn flags_a_p99_of_few_events() {
        let gates = gates(&["span:request.p99 > +5%", "span:request.p99 > +9%"]);
        let runs = [run(5000.0), run(300.0)];
        let warnings = thin_tails(&gates, runs.iter());
        assert_eq!(
            warnings,
            [
                "span:request.p99: a run has only 300 events, 3 of them beyond the percentile, \
              so its value is a few outliers'; the gate needs runs of at least 1000 events"
            ]
        );
        let runs = [run(1000.0)];
        assert!(thin_tails(&gates, runs.iter()).is_empty());
    }

    /// The median, means, other kinds and metrics without a count are never flagged.
    #[test]
    fn ignores_what_is_not_a_tail() {
        let gates = gates(&[
            "span:request.p50 > +5%",
            "span:request.mean > +5%",
            "thread:worker.wakeup.p99 > +5%",
            "record:malloc.p99 > +5%",
        ]);
        assert!(thin_tails(&gates, [run(40.0)].iter()).is_empty());
    }
}
