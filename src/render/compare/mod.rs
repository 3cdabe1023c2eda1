//! Comparing captures: a candidate's captures (`-D`, one or more runs of a
//! benchmark) against a baseline's (`--baseline`), metric by metric, with a
//! significance verdict, and the `--fail-if` and `--budget` gates of a CI job.
//!
//! Input: [`Captures`](crate::render::Captures) (`main` holds the candidate's
//! runs) and [`CompareOptions`]. Output: a [`Comparison`], computed once per
//! command line ([`Captures::comparison`](crate::render::Captures::comparison))
//! and written by this module's outputs: text and Markdown tables (`table`),
//! JSON (`json`), and a differential flame graph or folded stacks of on-CPU
//! time (`flamegraph`). `docs/analysis.md` ("Comparison") states the rules:
//!
//! - every capture is measured by `render::metrics` (one pass each, in turn:
//!   memory holds one capture's metrics at a time, never its events);
//! - a side's value is the median of its runs' values; a count, sum or time
//!   (`absent_is_zero`) missing from a run is 0 in it, another stat (a
//!   percentile) leaves that run out;
//! - the verdict is the two-sided permutation test of the runs' mean values
//!   at `alpha` (with `paired`, the signed-rank test of the differences of the
//!   i-th candidate and i-th baseline runs); with one run a side, the Mann-Whitney U test of the
//!   per-event values of span durations and wake-up latencies; none for
//!   other metrics then;
//! - captures are compared only where their metrics mean the same: different
//!   scripts are an error unless allowed, and other differences (kernel,
//!   machine, CPU count, settings) are reported, with the metrics they make
//!   incomparable left uncompared (`settings`).

mod error;
mod flamegraph;
mod gates;
mod json;
mod rows;
mod runs;
mod settings;
mod table;
mod tails;

use std::path::PathBuf;

pub use error::CompareError;
pub use flamegraph::{DifferentialProfile, ProfileShape};
pub use gates::GateResult;
pub use json::CompareJson;
pub use rows::{Row, Side};
pub use settings::Difference;
pub use table::{CompareTable, TableFormat};

use crate::analysis::gate::Gate;
use crate::analysis::stats::{can_reach, can_reach_paired};
use crate::render::{Capture, RenderError};

/// What the command line asks of a comparison.
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// The significance level of the tests.
    pub alpha: f64,
    /// The i-th candidate run was recorded next to the i-th baseline run:
    /// test the pairs' differences.
    pub paired: bool,
    /// Compare captures of different scripts on the metrics they share.
    pub allow_different_scripts: bool,
    /// `--fail-if` and `--budget` expressions, in the order given.
    pub gates: Vec<Gate>,
    /// `--metric`: the metrics the outputs show (all when empty); gates see
    /// every metric.
    pub select: Vec<glob::Pattern>,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            alpha: 0.05,
            paired: false,
            allow_different_scripts: false,
            gates: Vec::new(),
            select: Vec::new(),
        }
    }
}

/// A metric present on one side only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OneSided {
    /// The canonical name.
    pub name: String,
    /// Its subject's stats: `KIND:SUBJECT.*`.
    pub group: String,
    /// Whether it is the baseline's (else the candidate's).
    pub baseline: bool,
}

/// The candidate's captures measured against the baseline's.
#[derive(Debug)]
pub struct Comparison {
    pub baseline: Vec<PathBuf>,
    pub candidate: Vec<PathBuf>,
    pub alpha: f64,
    /// Whether runs were tested in pairs (`CompareOptions::paired`).
    pub paired: bool,
    /// Every metric both sides have (or the candidate's, without a
    /// baseline), sorted by name.
    pub rows: Vec<Row>,
    /// Metrics of one side only, sorted by name.
    pub one_sided: Vec<OneSided>,
    /// What differs between the captures.
    pub differences: Vec<Difference>,
    /// The gates, in the order given.
    pub gates: Vec<GateResult>,
    /// Gated percentiles some run computed from too few events (`tails`).
    pub thin_tails: Vec<String>,
}

impl Comparison {
    /// Measures `candidate` against `baseline` (which may be empty: the
    /// candidate's metrics and the budgets alone).
    pub fn of(
        baseline: &[Capture<'_>],
        candidate: &[Capture<'_>],
        options: &CompareOptions,
    ) -> Result<Comparison, RenderError> {
        let infos = |captures: &[Capture<'_>]| -> Vec<_> {
            captures
                .iter()
                .map(|c| (c.path.to_path_buf(), c.source.info().clone()))
                .collect()
        };
        let (base_infos, new_infos) = (infos(baseline), infos(candidate));
        settings::check_scripts(&base_infos, &new_infos, options.allow_different_scripts)?;
        if options.paired && baseline.len() != candidate.len() {
            let (baseline, candidate) = (baseline.len(), candidate.len());
            Err(CompareError::Unpaired {
                baseline,
                candidate,
            })?;
        }
        let differences = settings::differences(&base_infos, &new_infos);
        // The per-event test needs each run's distributions: only then are they kept.
        let single = baseline.len() == 1 && candidate.len() == 1;
        let base_runs = runs::measure(baseline, single)?;
        let new_runs = runs::measure(candidate, single)?;
        let exclusions = settings::exclusions(&differences);
        let (rows, one_sided) = rows::compare(&base_runs, &new_runs, &exclusions, options);
        let gates = gates::evaluate(&options.gates, &rows, &one_sided, !baseline.is_empty())?;
        let thin_tails = tails::thin_tails(&options.gates, base_runs.iter().chain(&new_runs));
        let paths = |infos: Vec<(PathBuf, _)>| infos.into_iter().map(|(path, _)| path).collect();
        Ok(Comparison {
            baseline: paths(base_infos),
            candidate: paths(new_infos),
            alpha: options.alpha,
            paired: options.paired,
            rows,
            one_sided,
            differences,
            gates,
            thin_tails,
        })
    }

    /// The gates that failed.
    pub fn failed_gates(&self) -> impl Iterator<Item = &GateResult> {
        self.gates.iter().filter(|gate| gate.outcome.failed)
    }

    /// The rows `select` shows (all when it is empty).
    pub fn selected<'c>(&'c self, select: &'c [glob::Pattern]) -> impl Iterator<Item = &'c Row> {
        self.rows.iter().filter(move |row| {
            let name = row.name.to_string();
            select.is_empty() || select.iter().any(|glob| glob.matches(&name))
        })
    }

    /// Why no verdict could be significant, when the numbers of runs are too
    /// small for the test to ever reach `alpha` (3 + 3 runs and fewer, 5
    /// pairs and fewer). A metric some runs lack has fewer values: its
    /// verdict shows its `n`.
    pub fn power_warning(&self) -> Option<String> {
        let (base, new) = (self.baseline.len(), self.candidate.len());
        if self.paired {
            let blind = base > 0 && !can_reach_paired(base, self.alpha);
            return blind.then(|| {
                format!(
                    "with {base} run pairs no change can reach p < {}: every verdict is ~ \
                     and no --fail-if on a change can fail; record at least 6 pairs \
                     (8 recommended)",
                    self.alpha
                )
            });
        }
        let blind = base > 0 && (base, new) != (1, 1) && !can_reach(base, new, self.alpha);
        blind.then(|| {
            format!(
                "with {} baseline and {} candidate runs no change can reach p < {}: \
             every verdict is ~ and no --fail-if on a change can fail; \
             record at least 4 runs a side (5 recommended)",
                self.baseline.len(),
                self.candidate.len(),
                self.alpha
            )
        })
    }
}

#[cfg(test)]
mod tests;
