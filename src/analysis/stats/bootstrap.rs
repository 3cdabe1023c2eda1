//! Percentile bootstrap confidence interval of `statistic(candidate) −
//! statistic(baseline)`: resample each side with replacement, recompute the
//! difference, and take the central `level` share of the resampled
//! differences (nearest rank). Seeded, so a report is reproducible.

/// What the bootstrap compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Statistic {
    /// The middle value; the mean of the two middle values for even counts.
    Median,
    Mean,
}

impl Statistic {
    /// The statistic of `values` (reordered in place); NaN when empty.
    pub fn of(self, values: &mut [f64]) -> f64 {
        if values.is_empty() {
            return f64::NAN;
        }
        match self {
            Statistic::Mean => values.iter().sum::<f64>() / values.len() as f64,
            Statistic::Median => {
                let len = values.len();
                let (below, upper, _) = values.select_nth_unstable_by(len / 2, f64::total_cmp);
                if len.is_multiple_of(2) {
                    let lower = below.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    (lower + *upper) / 2.0
                } else {
                    *upper
                }
            }
        }
    }
}

/// A confidence interval of a difference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BootstrapCi {
    pub statistic: Statistic,
    /// The difference on the original samples.
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
    /// The coverage, e.g. 0.95.
    pub level: f64,
    pub resamples: usize,
}

impl BootstrapCi {
    /// Whether the interval lies entirely on one side of zero.
    pub fn excludes_zero(&self) -> bool {
        self.low > 0.0 || self.high < 0.0
    }
}

/// The `level` interval of `statistic(candidate) − statistic(baseline)` from
/// `resamples` resamples; `None` when a side is empty, a value is NaN, or
/// `level` is not in (0, 1).
pub fn bootstrap_difference(
    baseline: &[f64],
    candidate: &[f64],
    statistic: Statistic,
    level: f64,
    resamples: usize,
    seed: u64,
) -> Option<BootstrapCi> {
    let valid = |values: &[f64]| !values.is_empty() && values.iter().all(|v| !v.is_nan());
    let usable = valid(baseline) && valid(candidate) && level > 0.0 && level < 1.0;
    if !usable || resamples == 0 {
        return None;
    }
    let estimate = statistic.of(&mut candidate.to_vec()) - statistic.of(&mut baseline.to_vec());
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut scratch_a = vec![0.0; baseline.len()];
    let mut scratch_b = vec![0.0; candidate.len()];
    let mut differences: Vec<f64> = (0..resamples)
        .map(|_| {
            resample(&mut rng, baseline, &mut scratch_a);
            resample(&mut rng, candidate, &mut scratch_b);
            statistic.of(&mut scratch_b) - statistic.of(&mut scratch_a)
        })
        .collect();
    differences.sort_unstable_by(f64::total_cmp);
    let tail = (1.0 - level) / 2.0;
    Some(BootstrapCi {
        statistic,
        estimate,
        low: nearest_rank(&differences, tail),
        high: nearest_rank(&differences, 1.0 - tail),
        level,
        resamples,
    })
}

fn resample(rng: &mut fastrand::Rng, from: &[f64], into: &mut [f64]) {
    for slot in into.iter_mut() {
        *slot = from[rng.usize(..from.len())];
    }
}

fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Medians of odd and even counts, and means.
    #[test]
    fn statistics() {
        assert_eq!(Statistic::Median.of(&mut [5.0, 1.0, 3.0]), 3.0);
        assert_eq!(Statistic::Median.of(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(Statistic::Median.of(&mut [7.0]), 7.0);
        assert_eq!(Statistic::Mean.of(&mut [1.0, 2.0, 6.0]), 3.0);
        assert!(Statistic::Mean.of(&mut []).is_nan());
    }

    /// The same seed gives the same interval; another seed another one.
    #[test]
    fn seeded() {
        let a = [10.0, 11.0, 9.5, 10.2, 10.8];
        let b = [11.0, 12.5, 11.2, 10.9, 12.0];
        let run = |statistic, seed| bootstrap_difference(&a, &b, statistic, 0.95, 2000, seed);
        assert_eq!(run(Statistic::Mean, 1), run(Statistic::Mean, 1));
        assert_ne!(run(Statistic::Mean, 1), run(Statistic::Mean, 2));
        let ci = run(Statistic::Median, 1).expect("valid");
        assert_eq!(ci.estimate, 11.2 - 10.2);
        assert!(ci.low <= ci.estimate && ci.estimate <= ci.high);
    }

    /// Clearly shifted samples exclude zero; samples of one distribution do not.
    #[test]
    fn separates_shift_from_noise() {
        let base: Vec<f64> = (0..20).map(|i| 100.0 + f64::from(i % 7)).collect();
        let shifted: Vec<f64> = base.iter().map(|v| v + 20.0).collect();
        let same: Vec<f64> = base.iter().rev().copied().collect();
        for statistic in [Statistic::Median, Statistic::Mean] {
            let up =
                bootstrap_difference(&base, &shifted, statistic, 0.95, 5000, 7).expect("valid");
            assert!(
                up.excludes_zero() && up.low > 15.0 && up.high < 25.0,
                "{up:?}"
            );
            let flat = bootstrap_difference(&base, &same, statistic, 0.95, 5000, 7).expect("valid");
            assert!(!flat.excludes_zero(), "{flat:?}");
        }
    }

    /// 95% intervals of a mean difference cover the true difference in about
    /// 95% of repeated experiments (percentile bootstrap, n = 30 per side).
    #[test]
    fn coverage_is_near_nominal() {
        let mut rng = fastrand::Rng::with_seed(99);
        let mut normal = || {
            // Irwin-Hall: the sum of 12 uniforms minus 6 is close to N(0, 1).
            (0..12).map(|_| rng.f64()).sum::<f64>() - 6.0
        };
        let trials = 300;
        let mut covered = 0;
        for trial in 0..trials {
            let a: Vec<f64> = (0..30).map(|_| 50.0 + 5.0 * normal()).collect();
            let b: Vec<f64> = (0..30).map(|_| 53.0 + 5.0 * normal()).collect();
            let ci =
                bootstrap_difference(&a, &b, Statistic::Mean, 0.95, 1000, trial).expect("valid");
            covered += usize::from(ci.low <= 3.0 && 3.0 <= ci.high);
        }
        let coverage = covered as f64 / trials as f64;
        assert!((0.89..=0.99).contains(&coverage), "coverage {coverage}");
    }

    /// Empty sides, NaN values and impossible levels give no interval.
    #[test]
    fn rejects_bad_input() {
        let ok = [1.0, 2.0];
        assert!(bootstrap_difference(&[], &ok, Statistic::Mean, 0.95, 10, 0).is_none());
        assert!(bootstrap_difference(&ok, &[f64::NAN], Statistic::Mean, 0.95, 10, 0).is_none());
        assert!(bootstrap_difference(&ok, &ok, Statistic::Mean, 1.0, 10, 0).is_none());
        assert!(bootstrap_difference(&ok, &ok, Statistic::Mean, 0.95, 0, 0).is_none());
    }
}
