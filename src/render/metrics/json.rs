//! `--metrics PATH`: a capture's metrics as one JSON document
//! (`docs/metrics.md` describes it), selected by name with `--metric GLOB`.

use serde_json::{Map, Value, json};

use super::{Metric, measure};
use crate::render::{Captures, Destination, Render, RenderError};

/// Which metrics to write.
#[derive(Clone, Debug, Default)]
pub struct MetricsOptions {
    /// Keep the metrics whose name one of these matches; all when empty.
    pub select: Vec<glob::Pattern>,
}

/// The `--metrics` renderer.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pub options: MetricsOptions,
}

/// The version of the document's shape.
pub const FORMAT_VERSION: u64 = 1;

impl Render for Metrics {
    fn render(&self, captures: &Captures<'_>, to: &Destination) -> Result<(), RenderError> {
        let capture = captures.single("--metrics")?;
        let (measurement, read) = measure(capture);
        read?;
        let metrics = measurement.metrics(capture.source);
        let selected: Vec<&Metric> = metrics.iter().filter(|m| self.selects(m)).collect();
        if selected.is_empty() && !self.options.select.is_empty() {
            let globs: Vec<&str> = self.options.select.iter().map(|g| g.as_str()).collect();
            return Err(RenderError::Captures {
                output: "--metrics",
                problem: format!(
                    "has no metric matching --metric {} in {}",
                    globs.join(", "),
                    capture.path.display()
                ),
            });
        }
        let window = measurement.window;
        let document = json!({
            "format": FORMAT_VERSION,
            "capture": capture.path.display().to_string(),
            "window_ns": {"start": window.start_ns, "end": window.end_ns},
            "metrics": Value::Object(selected.into_iter().map(entry).collect::<Map<_, _>>()),
        });
        let mut text = serde_json::to_string_pretty(&document).expect("JSON values serialize");
        text.push('\n');
        let mut out = to.open()?;
        out.write_all(text.as_bytes())?;
        out.flush()
    }
}

impl Metrics {
    fn selects(&self, metric: &Metric) -> bool {
        let select = &self.options.select;
        select.is_empty() || select.iter().any(|g| g.matches(&metric.name.to_string()))
    }
}

/// `"name": {kind, subject, stat, value, unit}`.
fn entry(metric: &Metric) -> (String, Value) {
    let name = &metric.name;
    let value = json!({
        "kind": name.kind.map(|k| k.name()),
        "subject": name.subject,
        "stat": name.stat,
        "value": number(metric.value),
        "unit": metric.unit,
    });
    (name.to_string(), value)
}

/// Whole numbers as integers, others as they are.
pub fn number(value: f64) -> Value {
    const EXACT: f64 = (1u64 << 53) as f64;
    if value.fract() == 0.0 && value.abs() < EXACT {
        Value::from(value as i64)
    } else {
        Value::from(value)
    }
}
