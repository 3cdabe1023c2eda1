//! `hist()` and `lhist()` bucket indices, which BPF code computes and user
//! space labels (`output::hist`).
//!
//! `hist`: 0 holds negative values, 1 holds 0, and `k + 2` holds
//! `[2^k, 2^(k+1))`, so 2 is `[1]`, 3 is `[2, 4)`, 12 is `[1K, 2K)`. bpftrace 0.17
//! computes log2 with five shifts (16, 8, 4, 2, 1), so every value from 2^31 up
//! lands in `[2G, 4G)`, index 33: codegen reproduces that cap.
//!
//! `lhist(v, min, max, step)`: with `n = (max - min) / step`, 0 holds `v < min`,
//! `i` in `1..=n` holds `[min + (i-1)*step, min + i*step)`, and `n + 1` holds the
//! rest, labelled `[max, ...)` (even when `max - min` is not a multiple of step).

/// Largest log2 bpftrace 0.17's `hist()` computes (see the module docs).
pub const HIST_MAX_LOG2: u32 = 31;

/// The `hist()` bucket index of `value`, as the BPF code generator
/// computes it (`codegen::lower_map`).
#[cfg(test)]
pub fn hist_bucket(value: i64) -> u64 {
    match value {
        v if v < 0 => 0,
        0 => 1,
        v => u64::from(v.ilog2().min(HIST_MAX_LOG2)) + 2,
    }
}

/// Number of `lhist` buckets (including the two open-ended ones).
pub fn lhist_len(min: i64, max: i64, step: i64) -> u64 {
    lhist_inner(min, max, step) + 2
}

/// `n`, the number of closed `lhist` buckets; 0 for a nonsensical range.
pub fn lhist_inner(min: i64, max: i64, step: i64) -> u64 {
    if step <= 0 || max <= min {
        return 0;
    }
    ((i128::from(max) - i128::from(min)) / i128::from(step)) as u64
}

/// The `lhist()` bucket index of `value`, as the BPF code generator
/// computes it.
#[cfg(test)]
pub fn lhist_bucket(value: i64, min: i64, max: i64, step: i64) -> u64 {
    let n = lhist_inner(min, max, step);
    if value < min {
        return 0;
    }
    if value >= max || step <= 0 {
        return n + 1;
    }
    let i = ((i128::from(value) - i128::from(min)) / i128::from(step)) as u64 + 1;
    i.min(n + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Negative → 0, 0 → 1, 1 → 2, [2, 4) → 3, [1K, 2K) → 12.
    #[test]
    fn hist_buckets() {
        let cases = [
            (-5, 0),
            (i64::MIN, 0),
            (0, 1),
            (1, 2),
            (2, 3),
            (3, 3),
            (4, 4),
            (1023, 11),
            (1024, 12),
        ];
        for (v, want) in cases {
            assert_eq!(hist_bucket(v), want, "hist_bucket({v})");
        }
    }

    /// bpftrace 0.17 puts 2^32, 2^40, 2^62 and i64::MAX all in `[2G, 4G)` (index 33).
    #[test]
    fn hist_caps_at_2g() {
        for v in [
            1i64 << 31,
            (1 << 32) - 1,
            1 << 32,
            1 << 40,
            1 << 62,
            i64::MAX,
        ] {
            assert_eq!(hist_bucket(v), 33, "hist_bucket({v})");
        }
        assert_eq!(hist_bucket((1 << 31) - 1), 32);
    }

    /// lhist(v, 0, 25, 10): 24 and 25 both land in `[25, ...)` (bpftrace 0.17).
    #[test]
    fn lhist_buckets() {
        assert_eq!(lhist_bucket(-1, 0, 100, 10), 0);
        assert_eq!(lhist_bucket(0, 0, 100, 10), 1);
        assert_eq!(lhist_bucket(99, 0, 100, 10), 10);
        assert_eq!(lhist_bucket(100, 0, 100, 10), 11);
        assert_eq!(lhist_bucket(24, 0, 25, 10), 3);
        assert_eq!(lhist_bucket(25, 0, 25, 10), 3);
        assert_eq!(lhist_bucket(3, 10, 40, 10), 0);
        assert_eq!(lhist_len(0, 25, 10), 4);
    }
}
