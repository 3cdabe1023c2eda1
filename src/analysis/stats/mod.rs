//! Statistics for comparing captures.
//!
//! - [`LogHistogram`]: percentiles of a stream in memory bounded by the value
//!   range, not the event count, with a proven relative error;
//! - [`mann_whitney`]: the two-sided Mann-Whitney U test (exact distribution
//!   for small samples, ties included; normal approximation for large ones),
//!   also on two histograms ([`mann_whitney_binned`]);
//! - [`permutation_test`]: the two-sided permutation test of the difference
//!   of two samples' means (exact up to 20 000 splits, sampled beyond), the
//!   verdict of runs' values;
//! - [`paired_signed_rank_test`]: the sign-flip test of the signed ranks of
//!   run pairs' differences (`--paired`), which a machine slowing both runs
//!   of a pair alike does not disturb, and one run slowed alone little;
//! - [`bootstrap_difference`]: a percentile bootstrap confidence interval of a
//!   difference of medians or means, reproducible from its seed;
//! - [`Verdict`]: significant increase, decrease, or `~` (no significant
//!   change), with the evidence.

mod bootstrap;
mod histogram;
mod mann_whitney;
mod paired;
mod permutation;
mod verdict;

pub use bootstrap::{BootstrapCi, Statistic, bootstrap_difference};
pub use histogram::LogHistogram;
pub use mann_whitney::{MannWhitney, Method, mann_whitney, mann_whitney_binned};
pub use paired::{can_reach_paired, paired_signed_rank_test};
pub use permutation::{PermutationTest, permutation_test};
pub use verdict::{Change, Evidence, Verdict, can_reach};
