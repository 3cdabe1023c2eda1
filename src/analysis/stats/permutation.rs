//! The two-sided permutation test (Fisher-Pitman) of a difference of means:
//! is the candidate's mean run value different from the baseline's by more
//! than a reshuffle of the same runs would make it?
//!
//! Under the null hypothesis the runs are exchangeable: every split of the
//! pooled values into `n_baseline` and `n_candidate` is equally likely. The
//! p-value is the share of splits whose `|mean(candidate) − mean(baseline)|`
//! is at least the observed one.
//!
//! - Up to [`EXACT_SPLITS`] splits (5 + 5 runs: 252, 8 + 8: 12 870) every
//!   split is counted: the false-alarm rate is at most `alpha` for any
//!   distribution of the run values, ties included. As with Mann-Whitney the
//!   smallest two-sided p is 2 / C(n, n_baseline): 0.008 for 5 + 5, 0.029
//!   for 4 + 4, 0.1 for 3 + 3 (which can never be significant).
//! - More splits: [`SAMPLED_PERMUTATIONS`] random splits from a fixed seed
//!   (reproducible), p = (1 + splits as extreme) / (1 + splits drawn), which
//!   never understates p (Phipson and Smyth, 2010).
//!
//! # Why not Mann-Whitney on the runs
//! The ranks of 5 + 5 runs throw away by how much runs differ: one baseline
//! run slowed by a busy machine as far as the candidate's runs costs as much
//! as a candidate run twice as fast. Measured on the CI recipe under load,
//! run values spread by a few percent with an occasional slow run; in that
//! regime (simulated, 2000 experiments a case) this test finds a 10% change
//! 8–9 points more often than the U test at the same false-alarm rate, whose
//! exact levels for 5 + 5 jump from 0.032 to 0.056 (it wastes a third of
//! `alpha`).

/// Splits counted one by one up to this many.
pub const EXACT_SPLITS: u64 = 20_000;

/// Random splits drawn beyond [`EXACT_SPLITS`].
pub const SAMPLED_PERMUTATIONS: u64 = 10_000;

/// The seed of the sampled splits: the same values give the same p.
const SEED: u64 = 0x5eed_0f9e_7a11;

/// The result of a permutation test.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PermutationTest {
    /// `mean(candidate) − mean(baseline)`.
    pub difference: f64,
    pub n_baseline: usize,
    pub n_candidate: usize,
    /// Two-sided p-value.
    pub p_value: f64,
    /// Splits counted (all of them when `exact`).
    pub splits: u64,
    pub exact: bool,
    /// Tested on run pairs' differences (`paired`), the sides' sizes both
    /// the number of pairs.
    pub paired: bool,
}

/// Tests `baseline` against `candidate`; `None` when either is empty or a
/// value is not finite.
pub fn permutation_test(baseline: &[f64], candidate: &[f64]) -> Option<PermutationTest> {
    let (n_a, n_b) = (baseline.len(), candidate.len());
    let finite = baseline.iter().chain(candidate).all(|v| v.is_finite());
    if n_a == 0 || n_b == 0 || !finite {
        return None;
    }
    let pooled: Vec<f64> = baseline.iter().chain(candidate).copied().collect();
    let split = Split::new(&pooled, n_a);
    let observed = split.distance(baseline.iter().sum());
    let total = binomial(pooled.len(), n_a);
    let exact = total.is_some_and(|t| t <= EXACT_SPLITS) && pooled.len() < 64;
    let (as_extreme, splits) = if exact {
        split.count_exact(observed)
    } else {
        split.count_sampled(observed)
    };
    let p_value = match exact {
        true => as_extreme as f64 / splits as f64,
        false => (1 + as_extreme) as f64 / (1 + splits) as f64,
    };
    Some(PermutationTest {
        difference: candidate.iter().sum::<f64>() / n_b as f64
            - baseline.iter().sum::<f64>() / n_a as f64,
        n_baseline: n_a,
        n_candidate: n_b,
        p_value: p_value.min(1.0),
        splits,
        exact,
        paired: false,
    })
}

/// The pooled values and how they are split.
struct Split<'a> {
    pooled: &'a [f64],
    n_baseline: usize,
    total: f64,
    /// Differences this close to the observed one count as equal to it:
    /// sums in another order differ in the last bits.
    tolerance: f64,
}

impl<'a> Split<'a> {
    fn new(pooled: &'a [f64], n_baseline: usize) -> Self {
        let largest = pooled.iter().fold(0.0, |m: f64, v| m.max(v.abs()));
        Split {
            pooled,
            n_baseline,
            total: pooled.iter().sum(),
            tolerance: largest * 1e-9,
        }
    }

    /// `|mean(rest) − mean(baseline)|` when the baseline's values sum to
    /// `baseline_sum`.
    fn distance(&self, baseline_sum: f64) -> f64 {
        let n_b = (self.pooled.len() - self.n_baseline) as f64;
        ((self.total - baseline_sum) / n_b - baseline_sum / self.n_baseline as f64).abs()
    }

    fn as_extreme(&self, baseline_sum: f64, observed: f64) -> bool {
        self.distance(baseline_sum) >= observed - self.tolerance
    }

    /// (splits at least as extreme, all splits), every subset of
    /// `n_baseline` positions in turn (Gosper's next-combination step).
    fn count_exact(&self, observed: f64) -> (u64, u64) {
        let n = self.pooled.len() as u32;
        let (mut mask, end) = ((1u64 << self.n_baseline) - 1, 1u64 << n);
        let (mut extreme, mut splits) = (0, 0);
        while mask < end {
            let mut bits = mask;
            let mut sum = 0.0;
            while bits != 0 {
                sum += self.pooled[bits.trailing_zeros() as usize];
                bits &= bits - 1;
            }
            extreme += u64::from(self.as_extreme(sum, observed));
            splits += 1;
            let lowest = mask & mask.wrapping_neg();
            let carried = mask + lowest;
            mask = (((carried ^ mask) >> 2) / lowest) | carried;
        }
        (extreme, splits)
    }

    /// (random splits at least as extreme, splits drawn).
    fn count_sampled(&self, observed: f64) -> (u64, u64) {
        let mut rng = fastrand::Rng::with_seed(SEED);
        let mut order = self.pooled.to_vec();
        let mut extreme = 0;
        for _ in 0..SAMPLED_PERMUTATIONS {
            // A partial Fisher-Yates shuffle draws the baseline's positions.
            for i in 0..self.n_baseline {
                let j = rng.usize(i..order.len());
                order.swap(i, j);
            }
            let sum = order[..self.n_baseline].iter().sum();
            extreme += u64::from(self.as_extreme(sum, observed));
        }
        (extreme, SAMPLED_PERMUTATIONS)
    }
}

/// `C(n, k)`, `None` past `u64`.
fn binomial(n: usize, k: usize) -> Option<u64> {
    let k = k.min(n - k) as u64;
    (0..k).try_fold(1u64, |c, i| {
        let c = c.checked_mul(n as u64 - i)?;
        Some(c / (i + 1))
    })
}

#[cfg(test)]
mod tests;
