//! Analysis: what a capture means, as numbers and profiles.
//!
//! Each module is pure (no capture, no I/O beyond a caller's writer) and has
//! one job; `docs/analysis.md` tells how the renderers and the CLI wire them:
//!
//! - [`folded`]: weighted stacks → folded-stack lines (flamegraph.pl input);
//! - [`flamegraph`]: folded lines → flame graph SVG (inferno), plain or
//!   differential;
//! - [`pprof`]: symbolized frames and weighted samples → gzipped `profile.proto`;
//! - [`stats`]: percentiles in bounded memory, permutation and Mann-Whitney U
//!   tests, bootstrap confidence intervals and the significance verdict of a
//!   comparison;
//! - [`gate`]: `--fail-if` expressions, parsed and evaluated against metrics;
//! - [`wallclock`]: scheduler events → per-thread on-CPU, off-CPU (by state),
//!   wake-up latency, switches and coverage of a window.

pub mod flamegraph;
pub mod folded;
pub mod gate;
pub mod pprof;
pub mod stats;
pub mod wallclock;

/// The sum of times or counts, saturating: a damaged or hostile capture can
/// hold values (timestamps, durations, counter readings, drop counts) whose
/// sum does not fit.
pub fn saturating_sum(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, u64::saturating_add)
}
