//! The two-sided Mann-Whitney U test (Wilcoxon rank-sum): do two samples come
//! from the same distribution, or does one tend to be larger?
//!
//! `U` counts the pairs `(a, b)` with `b > a`, ties counting one half: the
//! candidate's "wins" over the baseline. Under the null hypothesis each
//! assignment of the pooled values to the two samples is equally likely.
//!
//! - Small samples (`n_a + n_b ≤` [`EXACT_LIMIT`]): the exact distribution of
//!   `U`, by counting assignments with a dynamic program over the groups of
//!   tied values. Conditioning on the ties makes it exact with ties too (the
//!   approach of benchstat), where the classic table assumes none. The
//!   normal approximation is badly off here: for 5 + 5 runs the smallest
//!   possible two-sided p is 2/252 = 0.0079, where the normal approximation
//!   says 0.012.
//! - Larger samples: the normal approximation with tie correction of the
//!   variance and a continuity correction (scipy's `method="asymptotic"`).
//!
//! The two-sided p-value is `min(1, 2·min(P(U ≤ u), P(U ≥ u)))`.
//!
//! [`mann_whitney_binned`] runs the same test on two [`LogHistogram`]s (e.g.
//! the span durations of one run against another's), values in one bucket
//! counting as ties: memory and time depend on the buckets, not the events.

use super::histogram::LogHistogram;

/// Up to this many values in total the exact distribution is used.
pub const EXACT_LIMIT: usize = 60;

/// How the p-value was computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// The exact distribution of `U` given the ties.
    Exact,
    /// The normal approximation with tie and continuity corrections.
    Normal,
}

/// The result of a Mann-Whitney U test.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MannWhitney {
    /// Pairs where the candidate is larger (ties count ½); `n_a·n_b/2` when
    /// neither tends to be larger.
    pub u: f64,
    pub n_baseline: usize,
    pub n_candidate: usize,
    /// Two-sided p-value.
    pub p_value: f64,
    pub method: Method,
}

impl MannWhitney {
    /// Whether the candidate tends to be larger than the baseline.
    pub fn candidate_larger(&self) -> bool {
        self.u * 2.0 > (self.n_baseline * self.n_candidate) as f64
    }
}

/// Tests `baseline` against `candidate`; `None` when either is empty or a
/// value is NaN.
pub fn mann_whitney(baseline: &[f64], candidate: &[f64]) -> Option<MannWhitney> {
    let (n_a, n_b) = (baseline.len(), candidate.len());
    if n_a == 0 || n_b == 0 || baseline.iter().chain(candidate).any(|v| v.is_nan()) {
        return None;
    }
    Some(Pooled::new(baseline, candidate).test(n_a, n_b))
}

/// Tests two histograms' values (bucket by bucket, a bucket's values tied);
/// `None` when either is empty or their precisions differ.
pub fn mann_whitney_binned(
    baseline: &LogHistogram,
    candidate: &LogHistogram,
) -> Option<MannWhitney> {
    if baseline.is_empty() || candidate.is_empty() || !baseline.same_buckets(candidate) {
        return None;
    }
    let mut groups: std::collections::BTreeMap<u64, (usize, usize)> = Default::default();
    for (value, n) in baseline.buckets() {
        groups.entry(value).or_default().0 += n as usize;
    }
    for (value, n) in candidate.buckets() {
        let group = groups.entry(value).or_default();
        group.0 += n as usize;
        group.1 += n as usize;
    }
    let pooled = Pooled {
        ties: groups.into_values().collect(),
    };
    Some(pooled.test(baseline.count() as usize, candidate.count() as usize))
}

/// The pooled values in order, as groups of equal values.
struct Pooled {
    /// Per group of tied values in ascending order: (size, candidates in it).
    ties: Vec<(usize, usize)>,
}

impl Pooled {
    fn new(baseline: &[f64], candidate: &[f64]) -> Self {
        let mut all: Vec<(f64, bool)> = baseline
            .iter()
            .map(|&v| (v, false))
            .chain(candidate.iter().map(|&v| (v, true)))
            .collect();
        all.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        let mut ties: Vec<(usize, usize)> = Vec::new();
        let mut previous = None;
        for (value, is_candidate) in all {
            // -0.0 and 0.0 are one value.
            if previous != Some(value) || ties.is_empty() {
                ties.push((0, 0));
                previous = Some(value);
            }
            let group = ties.last_mut().expect("a group was just pushed");
            group.0 += 1;
            group.1 += usize::from(is_candidate);
        }
        Pooled { ties }
    }

    /// The test of `n_a` baseline against `n_b` candidate values.
    fn test(&self, n_a: usize, n_b: usize) -> MannWhitney {
        let u_doubled = self.candidate_wins_doubled();
        let (p_value, method) = if n_a + n_b <= EXACT_LIMIT {
            (exact_p(&self.ties, n_b, n_a, u_doubled), Method::Exact)
        } else {
            (normal_p(&self.ties, n_a, n_b, u_doubled), Method::Normal)
        };
        MannWhitney {
            u: u_doubled as f64 / 2.0,
            n_baseline: n_a,
            n_candidate: n_b,
            p_value,
            method,
        }
    }

    /// `2U` of the candidate: for each candidate value, 2 per smaller
    /// baseline value and 1 per equal one.
    fn candidate_wins_doubled(&self) -> u64 {
        let mut baseline_below = 0u64;
        let mut doubled = 0u64;
        for &(size, candidates) in &self.ties {
            let baselines = (size - candidates) as u64;
            doubled += candidates as u64 * (2 * baseline_below + baselines);
            baseline_below += baselines;
        }
        doubled
    }
}

/// Exact two-sided p of `2U = observed` for `picked` values drawn among the
/// pooled ones (the candidate's), `others` left (the baseline's).
fn exact_p(ties: &[(usize, usize)], picked: usize, others: usize, observed: u64) -> f64 {
    let max_doubled = 2 * picked * others;
    // ways[i][u]: assignments of the groups so far with `i` picked and `2U = u`.
    let mut ways = vec![vec![0f64; max_doubled + 1]; picked + 1];
    ways[0][0] = 1.0;
    let mut placed = 0usize;
    for &(size, _) in ties {
        let mut next = vec![vec![0f64; max_doubled + 1]; picked + 1];
        // Rows with more picked than placed values are empty.
        for (i, row) in ways.iter().enumerate().take(placed + 1) {
            let others_below = placed - i;
            for (k, choose) in binomials(size).into_iter().enumerate() {
                let taken = i + k;
                if taken > picked || size - k + others_below > others {
                    continue;
                }
                let gain = 2 * k * others_below + k * (size - k);
                for (u, &count) in row.iter().enumerate() {
                    if count > 0.0 {
                        next[taken][u + gain] += count * choose;
                    }
                }
            }
        }
        ways = next;
        placed += size;
    }
    let distribution = &ways[picked];
    let total: f64 = distribution.iter().sum();
    let observed = observed as usize;
    let at_most: f64 = distribution[..=observed].iter().sum();
    let at_least: f64 = distribution[observed..].iter().sum();
    (2.0 * at_most.min(at_least) / total).min(1.0)
}

/// `C(n, k)` for k in 0..=n.
fn binomials(n: usize) -> Vec<f64> {
    let mut row = vec![1f64; n + 1];
    for k in 1..n {
        row[k] = row[k - 1] * (n - k + 1) as f64 / k as f64;
    }
    row.iter_mut().for_each(|c| *c = c.round());
    row
}

/// Normal approximation of the two-sided p with tie-corrected variance and
/// continuity correction.
fn normal_p(ties: &[(usize, usize)], n_a: usize, n_b: usize, u_doubled: u64) -> f64 {
    let (n_a, n_b) = (n_a as f64, n_b as f64);
    let n = n_a + n_b;
    let tie_term: f64 = ties
        .iter()
        .map(|&(t, _)| {
            let t = t as f64;
            t * t * t - t
        })
        .sum();
    let variance = n_a * n_b / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)));
    if variance <= 0.0 {
        return 1.0;
    }
    let distance = (u_doubled as f64 / 2.0 - n_a * n_b / 2.0).abs();
    let z = ((distance - 0.5).max(0.0)) / variance.sqrt();
    libm::erfc(z / std::f64::consts::SQRT_2).min(1.0)
}

#[cfg(test)]
mod tests;
