//! One side's captures, each measured once into its named metrics (and, for
//! a one-run-a-side comparison, the distributions behind its percentiles).

use std::collections::BTreeMap;

use super::CompareError;
use crate::render::metrics::{self, Distribution, Metric};
use crate::render::{Capture, RenderError};

/// One capture's metrics.
pub(super) struct Run {
    /// By canonical name.
    pub metrics: BTreeMap<String, Metric>,
    pub distributions: Vec<Distribution>,
}

impl Run {
    /// The distribution behind the metric `name`, if kept.
    pub fn distribution(&self, name: &Metric) -> Option<&Distribution> {
        self.distributions.iter().find(|d| d.covers(&name.name))
    }
}

/// Measures each capture in turn. A damaged capture is an error: its
/// metrics would be those of a shorter run.
pub(super) fn measure(
    captures: &[Capture<'_>],
    distributions: bool,
) -> Result<Vec<Run>, RenderError> {
    captures
        .iter()
        .map(|capture| {
            if let Some(damage) = capture.source.damage() {
                let path = capture.path.to_path_buf();
                return Err(CompareError::Damaged { path, damage }.into());
            }
            let (measurement, read) = metrics::measure(capture);
            read?;
            let named = measurement.named(capture.source, distributions);
            let metrics = (named.metrics.into_iter())
                .map(|metric| (metric.name.to_string(), metric))
                .collect();
            Ok(Run {
                metrics,
                distributions: named.distributions,
            })
        })
        .collect()
}
