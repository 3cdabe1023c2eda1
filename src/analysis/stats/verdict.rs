//! The verdict on one metric of a comparison: did the candidate change
//! significantly against the baseline, in which direction, and on what
//! evidence. Printed as benchstat does: `~` when the change is not
//! significant, with the p-value and sample sizes.

use std::fmt;

use super::bootstrap::{BootstrapCi, Statistic, bootstrap_difference};
use super::histogram::LogHistogram;
use super::mann_whitney::{MannWhitney, Method, mann_whitney_binned};
use super::paired::{can_reach_paired, paired_signed_rank_test};
use super::permutation::{PermutationTest, permutation_test};

/// Resamples of a bootstrap verdict: enough for stable 95% bounds.
pub const BOOTSTRAP_RESAMPLES: usize = 10_000;

/// The direction of a significant change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The candidate is significantly larger.
    Increase,
    /// The candidate is significantly smaller.
    Decrease,
    /// No significant change (`~`).
    Unchanged,
}

/// What the verdict rests on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Evidence {
    /// The runs' values (several runs a side).
    Permutation(PermutationTest),
    /// The events of one run a side.
    MannWhitney(MannWhitney),
    Bootstrap(BootstrapCi),
}

/// The significance verdict of one metric.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Verdict {
    pub change: Change,
    pub evidence: Evidence,
    /// The significance level, e.g. 0.05.
    pub alpha: f64,
}

impl Verdict {
    /// Decides by the two-sided permutation test of the runs' mean values
    /// at level `alpha`; `None` when a side is empty or a value is not
    /// finite.
    pub fn permutation(baseline: &[f64], candidate: &[f64], alpha: f64) -> Option<Verdict> {
        Some(Self::from_permutation(
            permutation_test(baseline, candidate)?,
            alpha,
        ))
    }

    /// Decides by the two-sided paired signed-rank test of `(baseline,
    /// candidate)` run pairs at level `alpha`; `None` without pairs or with
    /// a value that is not finite.
    pub fn paired_signed_rank(pairs: &[(f64, f64)], alpha: f64) -> Option<Verdict> {
        Some(Self::from_permutation(
            paired_signed_rank_test(pairs)?,
            alpha,
        ))
    }

    fn from_permutation(test: PermutationTest, alpha: f64) -> Verdict {
        let change = match (test.p_value < alpha, test.difference > 0.0) {
            (false, _) => Change::Unchanged,
            (true, true) => Change::Increase,
            (true, false) => Change::Decrease,
        };
        Verdict {
            change,
            evidence: Evidence::Permutation(test),
            alpha,
        }
    }

    /// Decides by the Mann-Whitney U test of two histograms (per-event
    /// distributions of one run each); `None` when one is empty or their
    /// precisions differ.
    pub fn mann_whitney_binned(
        baseline: &LogHistogram,
        candidate: &LogHistogram,
        alpha: f64,
    ) -> Option<Verdict> {
        Some(Self::from_test(
            mann_whitney_binned(baseline, candidate)?,
            alpha,
        ))
    }

    fn from_test(test: MannWhitney, alpha: f64) -> Verdict {
        let change = match (test.p_value < alpha, test.candidate_larger()) {
            (false, _) => Change::Unchanged,
            (true, true) => Change::Increase,
            (true, false) => Change::Decrease,
        };
        Verdict {
            change,
            evidence: Evidence::MannWhitney(test),
            alpha,
        }
    }

    /// Decides by whether the `1 − alpha` bootstrap interval of the
    /// difference of `statistic`s excludes zero.
    pub fn bootstrap(
        baseline: &[f64],
        candidate: &[f64],
        statistic: Statistic,
        alpha: f64,
        seed: u64,
    ) -> Option<Verdict> {
        let ci = bootstrap_difference(
            baseline,
            candidate,
            statistic,
            1.0 - alpha,
            BOOTSTRAP_RESAMPLES,
            seed,
        )?;
        let change = if ci.low > 0.0 {
            Change::Increase
        } else if ci.high < 0.0 {
            Change::Decrease
        } else {
            Change::Unchanged
        };
        Some(Verdict {
            change,
            evidence: Evidence::Bootstrap(ci),
            alpha,
        })
    }

    pub fn is_significant(&self) -> bool {
        self.change != Change::Unchanged
    }

    /// Whether any outcome of the test could have been significant: with
    /// 3 + 3 runs the smallest possible two-sided p is 0.1, so nothing is
    /// ever significant at 0.05 and a `~` says nothing.
    pub fn could_detect(&self) -> bool {
        match self.evidence {
            Evidence::MannWhitney(test) if test.method == Method::Exact => {
                can_reach(test.n_baseline, test.n_candidate, self.alpha)
            }
            Evidence::Permutation(test) if test.exact && test.paired => {
                can_reach_paired(test.n_baseline, self.alpha)
            }
            Evidence::Permutation(test) if test.exact => {
                can_reach(test.n_baseline, test.n_candidate, self.alpha)
            }
            _ => true,
        }
    }

    /// `+`, `-` or `~`.
    pub fn symbol(&self) -> &'static str {
        match self.change {
            Change::Increase => "+",
            Change::Decrease => "-",
            Change::Unchanged => "~",
        }
    }
}

/// Whether an exact two-sided rank or permutation test of `a` against `b`
/// values can reach p < `alpha` at all: its smallest p is 2 / C(a + b, a).
pub fn can_reach(a: usize, b: usize, alpha: f64) -> bool {
    let arrangements = (1..=a).fold(1.0, |c, k| c * (b + k) as f64 / k as f64);
    2.0 / arrangements < alpha
}

impl fmt::Display for Verdict {
    /// `~ (p=0.690 n=5+5)`, `+ (p=0.008 n=5+5)`, `+ (p=0.008 n=8 pairs)`,
    /// `- (95% CI -3.1 … -1.2)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (p_value, n_baseline, n_candidate) = match self.evidence {
            Evidence::Permutation(test) if test.paired => {
                let (symbol, pairs) = (self.symbol(), test.n_baseline);
                return write!(f, "{symbol} (p={:.3} n={pairs} pairs)", test.p_value);
            }
            Evidence::Permutation(test) => (test.p_value, test.n_baseline, test.n_candidate),
            Evidence::MannWhitney(test) => (test.p_value, test.n_baseline, test.n_candidate),
            Evidence::Bootstrap(ci) => {
                return write!(
                    f,
                    "{} ({:.0}% CI {:+.4} … {:+.4})",
                    self.symbol(),
                    ci.level * 100.0,
                    ci.low,
                    ci.high
                );
            }
        };
        let symbol = self.symbol();
        write!(f, "{symbol} (p={p_value:.3} n={n_baseline}+{n_candidate})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 5 + 5 runs shifted apart are a significant increase (p = 2/252), and
    /// reversed a decrease; interleaved runs are `~`.
    #[test]
    fn run_verdicts() {
        let base = [10.0, 10.2, 9.9, 10.1, 10.05];
        let slower = [11.5, 11.7, 11.4, 11.6, 11.55];
        let up = Verdict::permutation(&base, &slower, 0.05).expect("valid");
        assert_eq!(up.change, Change::Increase);
        assert_eq!(up.to_string(), "+ (p=0.008 n=5+5)");
        let down = Verdict::permutation(&slower, &base, 0.05).expect("valid");
        assert_eq!(down.change, Change::Decrease);
        let noise = [10.05, 9.95, 10.15, 10.0, 10.1];
        let same = Verdict::permutation(&base, &noise, 0.05).expect("valid");
        assert_eq!(same.change, Change::Unchanged);
        assert!(same.to_string().starts_with("~ (p="));
        assert!(same.could_detect());
    }

    /// Three runs a side can never reach p < 0.05: the verdict says so.
    #[test]
    fn too_few_runs_cannot_detect() {
        let verdict =
            Verdict::permutation(&[1.0, 2.0, 3.0], &[7.0, 8.0, 9.0], 0.05).expect("valid");
        assert_eq!(verdict.change, Change::Unchanged);
        assert!(!verdict.could_detect());
        let four = Verdict::permutation(&[1.0, 2.0, 3.0, 4.0], &[7.0, 8.0, 9.0, 10.0], 0.05)
            .expect("valid");
        assert!(four.could_detect() && four.is_significant());
    }

    /// Two runs' per-event latencies: a 15% slower distribution is a
    /// significant increase, a reshuffle of the same values is `~`.
    #[test]
    fn binned_verdicts() {
        let (mut base, mut slow, mut same) = (
            LogHistogram::new(),
            LogHistogram::new(),
            LogHistogram::new(),
        );
        for i in 0..2000u64 {
            let latency = 1_000_000 + (i * 7919) % 400_000;
            base.record(latency);
            slow.record(latency * 115 / 100);
            same.record(1_000_000 + (i * 104_729) % 400_000);
        }
        let up = Verdict::mann_whitney_binned(&base, &slow, 0.05).expect("valid");
        assert_eq!(up.change, Change::Increase);
        assert!(up.to_string().ends_with("n=2000+2000)"), "{up}");
        let flat = Verdict::mann_whitney_binned(&base, &same, 0.05).expect("valid");
        assert_eq!(flat.change, Change::Unchanged, "{flat}");
        assert!(Verdict::mann_whitney_binned(&base, &LogHistogram::new(), 0.05).is_none());
    }

    /// Bootstrap verdicts follow the side of zero the interval is on.
    #[test]
    fn bootstrap_verdicts() {
        let base: Vec<f64> = (0..30).map(|i| 100.0 + f64::from(i % 5)).collect();
        let faster: Vec<f64> = base.iter().map(|v| v * 0.85).collect();
        let verdict =
            Verdict::bootstrap(&base, &faster, Statistic::Median, 0.05, 1).expect("valid");
        assert_eq!(verdict.change, Change::Decrease);
        assert!(verdict.to_string().starts_with("- (95% CI -"), "{verdict}");
        let same = Verdict::bootstrap(&base, &base, Statistic::Mean, 0.05, 1).expect("valid");
        assert_eq!(same.symbol(), "~");
    }
}
