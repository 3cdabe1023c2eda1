//! `--metrics PATH` of a comparison: every row with both sides' run values
//! and medians, the change and the verdict's evidence, what differs between
//! the captures, and the gates (`docs/metrics.md`, "Comparison JSON").

use serde_json::{Map, Value, json};

use super::{CompareOptions, Comparison, Row, Side};
use crate::analysis::stats::{Evidence, Method, Verdict};
use crate::render::metrics::number;
use crate::render::{Captures, Destination, Render, RenderError};

/// The version of the document's shape.
pub const FORMAT_VERSION: u64 = 1;

/// The `--metrics` renderer of a comparison.
#[derive(Clone, Debug)]
pub struct CompareJson {
    pub options: CompareOptions,
}

impl Render for CompareJson {
    fn render(&self, captures: &Captures<'_>, to: &Destination) -> Result<(), RenderError> {
        let comparison = captures.comparison(&self.options)?;
        let mut text = serde_json::to_string_pretty(&document(comparison, &self.options.select))
            .expect("JSON values serialize");
        text.push('\n');
        let mut out = to.open()?;
        out.write_all(text.as_bytes())?;
        out.flush()
    }
}

/// The whole document.
pub fn document(comparison: &Comparison, select: &[glob::Pattern]) -> Value {
    let paths = |paths: &[std::path::PathBuf]| -> Vec<String> {
        paths.iter().map(|p| p.display().to_string()).collect()
    };
    let metrics: Map<String, Value> = (comparison.selected(select))
        .map(|row| (row.name.to_string(), metric(row)))
        .collect();
    let one_sided = |baseline: bool| -> Vec<&str> {
        (comparison.one_sided.iter())
            .filter(|m| m.baseline == baseline)
            .map(|m| m.name.as_str())
            .collect()
    };
    let differences: Vec<Value> = (comparison.differences.iter())
        .map(|d| {
            json!({
                "what": d.what,
                "baseline": d.baseline,
                "candidate": d.candidate,
                "not_compared": d.uncompared.map(|(globs, reason)| json!({"metrics": globs, "reason": reason})),
            })
        })
        .collect();
    let gates: Vec<Value> = (comparison.gates.iter())
        .map(|gate| {
            let conditions: Vec<Value> = (gate.outcome.conditions.iter())
                .map(|c| json!({"condition": c.condition, "holds": c.holds, "explanation": c.explanation}))
                .collect();
            json!({
                "option": gate.kind.option(),
                "expression": gate.expression,
                "failed": gate.outcome.failed,
                "conditions": conditions,
            })
        })
        .collect();
    json!({
        "format": FORMAT_VERSION,
        "alpha": comparison.alpha,
        "baseline": paths(&comparison.baseline),
        "candidate": paths(&comparison.candidate),
        "differences": differences,
        "metrics": Value::Object(metrics),
        "only_baseline": one_sided(true),
        "only_candidate": one_sided(false),
        "gates": gates,
    })
}

fn side(side: &Side) -> Value {
    let runs: Vec<Value> = side.runs.iter().map(|&v| number(v)).collect();
    json!({"median": number(side.median), "runs": runs})
}

/// One row: `{kind, subject, stat, unit, baseline, candidate, change, verdict, not_compared}`.
fn metric(row: &Row) -> Value {
    let change = row.change.map(|c| match c.is_finite() {
        true => json!(c),
        false => json!(if c > 0.0 { "+inf" } else { "-inf" }),
    });
    json!({
        "kind": row.name.kind.map(|k| k.name()),
        "subject": row.name.subject,
        "stat": row.name.stat,
        "unit": row.unit,
        "baseline": row.baseline.as_ref().map(side),
        "candidate": side(&row.candidate),
        "change": change,
        "verdict": row.verdict.as_ref().map(verdict),
        "not_compared": row.uncompared,
    })
}

fn verdict(verdict: &Verdict) -> Value {
    let (test, method, p, n) = match verdict.evidence {
        Evidence::Permutation(test) => (
            if test.paired {
                "paired-signed-rank"
            } else {
                "permutation"
            },
            if test.exact { "exact" } else { "sampled" },
            test.p_value,
            [test.n_baseline, test.n_candidate],
        ),
        Evidence::MannWhitney(test) => (
            "mann-whitney",
            match test.method {
                Method::Exact => "exact",
                Method::Normal => "normal approximation",
            },
            test.p_value,
            [test.n_baseline, test.n_candidate],
        ),
        Evidence::Bootstrap(_) => {
            return json!({"symbol": verdict.symbol(), "text": verdict.to_string()});
        }
    };
    json!({
        "symbol": verdict.symbol(),
        "test": test,
        "method": method,
        "p": p,
        "n": n,
        "could_detect": verdict.could_detect(),
        "text": verdict.to_string(),
    })
}
