//! A log-linear histogram of `u64` values (durations in ns, sizes in bytes)
//! for percentiles over streams whose size is not known in advance.
//!
//! # Why this and not a t-digest
//! Comparisons and budgets need a guarantee: "p99 is 5.00 ms ± 0.4%" whatever
//! the distribution. A log-linear histogram gives one by construction (below);
//! a t-digest's error depends on the data and the compression and is not
//! bounded per value. Merging histograms (runs, threads) is exact, which
//! t-digests are not. The price is memory fixed by the value range instead of
//! the data: at most 59 KB, about 25 KB for nanosecond durations up to seconds.
//!
//! # Buckets
//! With `p` precision bits, values below `2^p` have one bucket each (exact).
//! A value `v ≥ 2^p` with `e = ⌊log2 v⌋` falls in a bucket of width
//! `2^(e-p)` starting at `m · 2^(e-p)`, `m = v >> (e-p)` in `[2^p, 2^(p+1))`.
//! A bucket is reported by its midpoint, so the reported value differs from
//! any value of the bucket by at most half a width, `2^(e-p-1)`, and relative
//! to the value (at least `m · 2^(e-p)`) by at most `1/(2m) ≤ 2^-(p+1)`:
//! 0.39% with the default 7 bits. The minimum, maximum, count and sum are
//! kept exactly.
//!
//! # Percentile definition
//! Nearest rank: the `q`-quantile of `n` values is the `⌈q·n⌉`-th smallest
//! (the first for `q = 0`), as `hdrhistogram` and most latency tools report
//! it. It is always a value that occurred (up to the bucket error), never an
//! interpolation between two.

/// Relative error bound `2^-(p+1)` with the default `p`: 0.39%.
pub const DEFAULT_PRECISION_BITS: u32 = 7;

/// Percentiles, min, max, mean and count of a stream of values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogHistogram {
    precision: u32,
    counts: Vec<u64>,
    count: u64,
    min: u64,
    max: u64,
    sum: u128,
}

impl Default for LogHistogram {
    fn default() -> Self {
        Self::with_precision(DEFAULT_PRECISION_BITS)
    }
}

impl LogHistogram {
    /// An empty histogram with the default precision.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty histogram whose reported values are within `2^-(bits+1)` of
    /// the true ones; `bits` is clamped to 1..=16.
    pub fn with_precision(bits: u32) -> Self {
        LogHistogram {
            precision: bits.clamp(1, 16),
            counts: Vec::new(),
            count: 0,
            min: u64::MAX,
            max: 0,
            sum: 0,
        }
    }

    /// The largest relative error of a reported percentile.
    pub fn relative_error(&self) -> f64 {
        0.5f64.powi(self.precision as i32 + 1)
    }

    /// Records one value.
    pub fn record(&mut self, value: u64) {
        self.record_n(value, 1);
    }

    /// Records `n` occurrences of `value`.
    pub fn record_n(&mut self, value: u64, n: u64) {
        if n == 0 {
            return;
        }
        let index = self.index(value);
        if index >= self.counts.len() {
            self.counts.resize(index + 1, 0);
        }
        self.counts[index] += n;
        self.count += n;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
        self.sum += u128::from(value) * u128::from(n);
    }

    /// Adds every value of `other` (of any precision: its buckets are
    /// re-recorded at their reported values).
    pub fn merge(&mut self, other: &LogHistogram) {
        if other.count == 0 {
            return;
        }
        if other.precision == self.precision {
            if other.counts.len() > self.counts.len() {
                self.counts.resize(other.counts.len(), 0);
            }
            for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
                *mine += theirs;
            }
            self.count += other.count;
            self.sum += other.sum;
        } else {
            let (sum, min, max) = (self.sum, self.min, self.max);
            for (index, &n) in other.counts.iter().enumerate() {
                self.record_n(other.representative(index), n);
            }
            self.sum = sum + other.sum;
            self.min = min;
            self.max = max;
        }
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Whether `other` buckets values as this one does (same precision).
    pub fn same_buckets(&self, other: &LogHistogram) -> bool {
        self.precision == other.precision
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The smallest value, `None` when empty.
    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    /// The largest value, `None` when empty.
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    /// The exact sum of all values.
    pub fn sum(&self) -> u128 {
        self.sum
    }

    /// The exact mean, `None` when empty.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// The nearest-rank `q`-quantile (`q` in 0..=1, e.g. 0.99 for p99), within
    /// [`LogHistogram::relative_error`]; `None` when empty or `q` is not a
    /// number.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 || q.is_nan() {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).clamp(1, self.count);
        if rank == 1 {
            return Some(self.min);
        }
        if rank == self.count {
            return Some(self.max);
        }
        let mut seen = 0;
        for (index, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(self.representative(index).clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }

    /// The non-empty buckets in ascending order: (reported value, count).
    /// Histograms of equal precision have equal values for equal buckets.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(index, &n)| (self.representative(index), n))
    }

    fn index(&self, value: u64) -> usize {
        let p = self.precision;
        if value < 1 << p {
            return value as usize;
        }
        let shift = 63 - value.leading_zeros() - p;
        ((u64::from(shift) << p) + (value >> shift)) as usize
    }

    /// The midpoint of bucket `index`.
    fn representative(&self, index: usize) -> u64 {
        let p = self.precision;
        let index = index as u64;
        if index < 1 << p {
            return index;
        }
        let shift = (index >> p) - 1;
        let mantissa = index - (shift << p);
        let low = mantissa << shift;
        low + ((1u64 << shift) >> 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nearest rank of sorted values, the definition the histogram follows.
    fn exact_quantile(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    /// Small values are exact: the nearest-rank definition by hand.
    #[test]
    fn small_values_are_exact() {
        let mut h = LogHistogram::new();
        for v in 1..=100 {
            h.record(v);
        }
        assert_eq!(h.quantile(0.5), Some(50));
        assert_eq!(h.quantile(0.9), Some(90));
        assert_eq!(h.quantile(0.99), Some(99));
        assert_eq!(h.quantile(0.991), Some(100));
        assert_eq!(h.quantile(0.0), Some(1));
        assert_eq!(h.quantile(1.0), Some(100));
        assert_eq!(h.mean(), Some(50.5));
        assert_eq!(h.sum(), 5050);
    }

    /// Over many magnitudes every quantile stays within the proven bound.
    #[test]
    fn error_is_bounded() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut values = Vec::new();
        let mut h = LogHistogram::new();
        for _ in 0..100_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Log-uniform from 1 ns to ~70 s.
            let value = (1u64 << (state % 36)) | ((state >> 40) % 1024);
            values.push(value);
            h.record(value);
        }
        values.sort_unstable();
        let bound = h.relative_error();
        assert!((bound - 0.0039).abs() < 0.0001);
        for q in [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999] {
            let exact = exact_quantile(&values, q) as f64;
            let got = h.quantile(q).expect("not empty") as f64;
            assert!(
                (got - exact).abs() / exact <= bound,
                "q={q}: {got} vs {exact}"
            );
        }
        assert_eq!(h.max(), values.last().copied());
        assert_eq!(h.min(), values.first().copied());
    }

    /// Memory depends on the largest value, not on how many were recorded.
    #[test]
    fn memory_does_not_grow_with_count() {
        let mut h = LogHistogram::new();
        for i in 0..1_000_000u64 {
            h.record(i % 1_000_000_000 * 997);
        }
        let buckets = h.counts.len();
        for i in 0..1_000_000u64 {
            h.record(i % 1_000_000_000 * 997);
        }
        assert_eq!(h.counts.len(), buckets);
        assert!(buckets * 8 < 40_000, "{buckets} buckets");
        let mut full = LogHistogram::new();
        full.record(u64::MAX);
        assert!(full.counts.len() * 8 <= 59 * 1024, "{}", full.counts.len());
        assert_eq!(full.quantile(0.5), Some(u64::MAX));
    }

    /// Buckets come out in ascending order with their counts.
    #[test]
    fn lists_buckets() {
        let mut h = LogHistogram::with_precision(2);
        for v in [3, 1, 1, 100, 101] {
            h.record(v);
        }
        // 100 and 101 share the bucket [96, 112) reported at its midpoint.
        assert_eq!(h.buckets().collect::<Vec<_>>(), [(1, 2), (3, 1), (104, 2)]);
    }

    /// Merging equals recording everything in one histogram.
    #[test]
    fn merge_is_exact() {
        let (mut a, mut b, mut all) = (
            LogHistogram::new(),
            LogHistogram::new(),
            LogHistogram::new(),
        );
        for v in (0..5000).map(|i| i * 7919 % 100_003) {
            if v % 3 == 0 {
                a.record(v)
            } else {
                b.record(v)
            }
            all.record(v);
        }
        a.merge(&b);
        assert_eq!(a, all);
        let mut coarse = LogHistogram::with_precision(3);
        coarse.merge(&all);
        assert_eq!(
            (coarse.count(), coarse.sum(), coarse.max()),
            (all.count(), all.sum(), all.max())
        );
    }

    /// An empty histogram has no quantiles; NaN is not a quantile.
    #[test]
    fn empty_has_no_quantiles() {
        let mut h = LogHistogram::new();
        assert_eq!(
            (h.quantile(0.5), h.mean(), h.min(), h.max()),
            (None, None, None, None)
        );
        h.record(5);
        assert_eq!(h.quantile(f64::NAN), None);
        h.record_n(9, 0);
        assert_eq!(h.count(), 1);
    }
}
