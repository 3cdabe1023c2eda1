//! `--fail-if` and `--budget` gates evaluated against a comparison's rows: a
//! change condition sees the medians and the verdict, a budget the
//! candidate's median. A metric the comparison lacks, or cannot compare, is
//! an error pointing at it in the expression.

use std::collections::HashMap;

use super::{CompareError, OneSided, Row};
use crate::analysis::gate::{Condition, Gate, GateKind, GateOutcome, Observation, Threshold};

/// How one gate came out.
#[derive(Clone, Debug, PartialEq)]
pub struct GateResult {
    pub kind: GateKind,
    /// The expression as given.
    pub expression: String,
    pub outcome: GateOutcome,
}

impl GateResult {
    /// `FAIL`/`pass` with the option and the expression, then each
    /// condition's numbers (`span:request.p99 1.2ms → 1.4ms (+15.0%), + (p=0.008 n=5+5)`).
    pub fn summary(&self) -> (String, Vec<String>) {
        let status = if self.outcome.failed { "FAIL" } else { "pass" };
        let head = format!("{status}  {} '{}'", self.kind.option(), self.expression);
        let details = (self.outcome.conditions.iter())
            .map(|c| match self.kind {
                GateKind::Budget if !c.holds => format!("{} (does not hold)", c.explanation),
                _ => c.explanation.clone(),
            })
            .collect();
        (head, details)
    }
}

/// Evaluates every gate on `rows`; `compared` says whether there were
/// baseline captures.
pub(super) fn evaluate(
    gates: &[Gate],
    rows: &[Row],
    one_sided: &[OneSided],
    compared: bool,
) -> Result<Vec<GateResult>, CompareError> {
    let by_name: HashMap<String, &Row> = (rows.iter())
        .map(|row| (row.name.to_string(), row))
        .collect();
    gates
        .iter()
        .map(|gate| {
            for condition in gate.conditions() {
                check(gate, condition, &by_name, one_sided, compared)?;
            }
            let outcome = gate.evaluate(|name| {
                let row = by_name.get(&name.to_string())?;
                Some(Observation {
                    dimension: row.dimension,
                    baseline: row.baseline.as_ref().map(|side| side.median),
                    candidate: row.candidate.median,
                    verdict: row.verdict,
                })
            })?;
            Ok(GateResult {
                kind: gate.kind,
                expression: gate.text.clone(),
                outcome,
            })
        })
        .collect()
}

/// The errors the gate's own evaluation cannot word: a metric of one side
/// only, or a change of one the captures cannot compare.
fn check(
    gate: &Gate,
    condition: &Condition,
    rows: &HashMap<String, &Row>,
    one_sided: &[OneSided],
    compared: bool,
) -> Result<(), CompareError> {
    let name = condition.metric.to_string();
    let change = !matches!(condition.threshold, Threshold::Budget(_));
    if let Some(only) = one_sided.iter().find(|m| m.name == name) {
        let (has, lacks) = match only.baseline {
            true => ("baseline", "candidate"),
            false => ("candidate", "baseline"),
        };
        let message = format!("`{name}` is in the {has} captures but not in the {lacks}");
        let help =
            "the captures differ in what they recorded (`--metrics -` lists a capture's metrics)";
        return Err(gate.metric_error(condition, message, help).into());
    }
    match rows.get(&name).and_then(|row| row.uncompared) {
        Some(reason) if change && compared => {
            let message = format!("`{name}` is not compared: {reason}");
            let help = "record both sides with the same settings";
            Err(gate.metric_error(condition, message, help).into())
        }
        _ => Ok(()),
    }
}
