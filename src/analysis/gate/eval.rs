//! Evaluating a parsed gate against the metrics of a comparison (or of one
//! capture, for budgets).

use super::{
    Condition, Dimension, Gate, GateError, GateKind, MetricName, Node, Quantity, Threshold,
};
use crate::analysis::stats::{Change, Verdict};

/// One metric as the comparison computed it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Observation {
    pub dimension: Dimension,
    /// The baseline's value; `None` without `--baseline`.
    pub baseline: Option<f64>,
    pub candidate: f64,
    /// Whether the change is significant; `None` when it could not be tested
    /// (one run per side).
    pub verdict: Option<Verdict>,
}

/// How one condition of a gate came out.
#[derive(Clone, Debug, PartialEq)]
pub struct ConditionOutcome {
    /// The condition, canonically spelled.
    pub condition: String,
    /// Whether the condition (a failure) is true.
    pub holds: bool,
    /// The numbers behind it, for the CI log.
    pub explanation: String,
}

/// How a whole gate came out.
#[derive(Clone, Debug, PartialEq)]
pub struct GateOutcome {
    /// The build fails: a `--fail-if` expression is true, or a `--budget`
    /// expression false.
    pub failed: bool,
    /// Every condition, in the order written.
    pub conditions: Vec<ConditionOutcome>,
}

impl Gate {
    /// The conditions in the order written, e.g. to know which metrics to
    /// compute.
    pub fn conditions(&self) -> Vec<&Condition> {
        fn walk<'a>(node: &'a Node, out: &mut Vec<&'a Condition>) {
            match node {
                Node::Condition(c) => out.push(c),
                Node::And(a, b) | Node::Or(a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.root, &mut out);
        out
    }

    /// Evaluates every condition with the observations `lookup` gives; an
    /// unknown metric, a unit that does not fit, or a change without a
    /// baseline is an error naming its column.
    pub fn evaluate(
        &self,
        lookup: impl Fn(&MetricName) -> Option<Observation>,
    ) -> Result<GateOutcome, GateError> {
        let conditions = self
            .conditions()
            .into_iter()
            .map(|condition| self.evaluate_condition(condition, &lookup))
            .collect::<Result<Vec<_>, _>>()?;
        let mut next = conditions.iter().map(|c| c.holds);
        let holds = combine(&self.root, &mut next);
        let failed = match self.kind {
            GateKind::FailIf => holds,
            GateKind::Budget => !holds,
        };
        Ok(GateOutcome { failed, conditions })
    }

    fn evaluate_condition(
        &self,
        condition: &Condition,
        lookup: &impl Fn(&MetricName) -> Option<Observation>,
    ) -> Result<ConditionOutcome, GateError> {
        let metric = &condition.metric;
        let Some(observation) = lookup(metric) else {
            return Err(self.metric_error(
                condition,
                format!("no metric `{metric}` in the captures"),
                "`--metrics -` lists the metrics a capture has",
            ));
        };
        self.check_dimension(condition, observation.dimension)
            .map_err(|e| e.in_gate(self.kind))?;
        let spelled = format!(
            "{metric} {} {}",
            condition.op.symbol(),
            &self.text[condition.threshold_span.0..condition.threshold_span.1]
        );
        let (holds, explanation) = match condition.threshold {
            Threshold::Budget(budget) => {
                let holds = condition.op.holds(observation.candidate, budget.value);
                let value = format_value(observation.candidate, observation.dimension);
                (holds, format!("{metric} is {value}"))
            }
            Threshold::Relative(_) | Threshold::Delta(_) => {
                let baseline = observation.baseline.ok_or_else(|| {
                    GateError::new(
                        &self.text,
                        condition.threshold_span,
                        "a change needs a baseline",
                    )
                    .with_help("give --baseline captures, or write a budget without a sign (5ms)")
                })?;
                change_outcome(condition, metric, baseline, &observation)
            }
        };
        Ok(ConditionOutcome {
            condition: spelled,
            holds,
            explanation,
        })
    }

    fn check_dimension(&self, condition: &Condition, metric: Dimension) -> Result<(), GateError> {
        let threshold = match condition.threshold {
            Threshold::Relative(_) => return Ok(()),
            Threshold::Delta(q) | Threshold::Budget(q) => q.dimension,
        };
        let fits = threshold == metric
            || (threshold == Dimension::Number && matches!(metric, Dimension::Ratio));
        if fits {
            return Ok(());
        }
        let help = match metric {
            Dimension::Time => "give a duration: ns, us, ms or s",
            Dimension::Bytes => "give a size: B, KB, MB, GB, KiB, MiB or GiB",
            Dimension::Number => "give a plain number (k, M, G allowed)",
            Dimension::Ratio => "give a percentage or a fraction",
        };
        Err(GateError::new(
            &self.text,
            condition.threshold_span,
            format!(
                "the threshold is {} but {} is {}",
                threshold.describe(),
                condition.metric,
                metric.describe()
            ),
        )
        .with_help(help))
    }
}

/// A change condition: the change must pass the threshold and be significant
/// in its direction.
fn change_outcome(
    condition: &Condition,
    metric: &MetricName,
    baseline: f64,
    observation: &Observation,
) -> (bool, String) {
    let candidate = observation.candidate;
    let (change, threshold, shown) = match condition.threshold {
        Threshold::Relative(fraction) => {
            let relative = relative_change(baseline, candidate);
            (relative, fraction, format!("{:+.1}%", relative * 100.0))
        }
        Threshold::Delta(Quantity { value, dimension }) => {
            let delta = candidate - baseline;
            let sign = if delta < 0.0 { "-" } else { "+" };
            (
                delta,
                value,
                format!("{sign}{}", format_value(delta.abs(), dimension)),
            )
        }
        Threshold::Budget(_) => unreachable!("budgets are not changes"),
    };
    let passes = condition.op.holds(change, threshold);
    let (significant, evidence) = match &observation.verdict {
        Some(verdict) => (
            matches!(
                (verdict.change, change > 0.0, change < 0.0),
                (Change::Increase, true, _) | (Change::Decrease, _, true)
            ),
            verdict.to_string(),
        ),
        None => (true, "not tested: one run per side".to_owned()),
    };
    let dimension = observation.dimension;
    let explanation = format!(
        "{metric} {} → {} ({shown}), {evidence}",
        format_value(baseline, dimension),
        format_value(candidate, dimension),
    );
    (passes && significant, explanation)
}

/// `(candidate − baseline) / |baseline|`; ±∞ from a zero baseline.
pub fn relative_change(baseline: f64, candidate: f64) -> f64 {
    if baseline == 0.0 {
        match candidate.partial_cmp(&0.0) {
            Some(std::cmp::Ordering::Greater) => f64::INFINITY,
            Some(std::cmp::Ordering::Less) => f64::NEG_INFINITY,
            _ => 0.0,
        }
    } else {
        (candidate - baseline) / baseline.abs()
    }
}

/// The gate's truth from its conditions' truths, in order.
fn combine(node: &Node, holds: &mut impl Iterator<Item = bool>) -> bool {
    match node {
        Node::Condition(_) => holds.next().expect("one outcome per condition"),
        Node::And(a, b) => {
            let (a, b) = (combine(a, holds), combine(b, holds));
            a && b
        }
        Node::Or(a, b) => {
            let (a, b) = (combine(a, holds), combine(b, holds));
            a || b
        }
    }
}

/// A value in a readable unit, to four significant digits: `1.5ms`,
/// `377.9us`, `12KiB`, `0.250`, `95.0%`.
pub fn format_value(value: f64, dimension: Dimension) -> String {
    let scaled = |units: &[(f64, &str)]| {
        let (scale, unit) = units
            .iter()
            .rev()
            .find(|(scale, _)| value.abs() >= *scale)
            .unwrap_or(&units[0]);
        let scaled = value / scale;
        let decimals = match scaled.abs() {
            v if v >= 100.0 => 1,
            v if v >= 10.0 => 2,
            _ => 3,
        };
        let number = format!("{scaled:.decimals$}");
        let number = number.trim_end_matches('0').trim_end_matches('.');
        format!("{number}{unit}")
    };
    match dimension {
        Dimension::Time => scaled(&[(1.0, "ns"), (1e3, "us"), (1e6, "ms"), (1e9, "s")]),
        Dimension::Bytes => scaled(&[
            (1.0, "B"),
            (1024.0, "KiB"),
            (1024.0 * 1024.0, "MiB"),
            (1024.0 * 1024.0 * 1024.0, "GiB"),
        ]),
        Dimension::Ratio => format!("{:.1}%", value * 100.0),
        Dimension::Number => {
            if value == value.trunc() && value.abs() < 1e15 {
                format!("{value:.0}")
            } else {
                format!("{value:.3}")
            }
        }
    }
}

#[cfg(test)]
mod tests;
