//! Output stage: turns `hist()` and `lhist()` `(bucket index, count)` pairs
//! (indices as [`crate::vocab::hist`] defines them) into bpftrace 0.17's
//! histogram rows.

use crate::vocab::hist::lhist_inner;

/// Width of the `@` bar of the fullest bucket.
const BAR_WIDTH: u64 = 52;

/// A number as bpftrace labels buckets: with the largest of K, M, G, T, P, E
/// that divides it exactly (`1K`, `1025K`, `3M`), else plainly (`1000`, `1536`).
pub fn size_label(n: i128) -> String {
    const UNITS: [(u32, &str); 6] = [
        (60, "E"),
        (50, "P"),
        (40, "T"),
        (30, "G"),
        (20, "M"),
        (10, "K"),
    ];
    for (shift, suffix) in UNITS {
        let unit = 1i128 << shift;
        if n >= unit && n % unit == 0 {
            return format!("{}{suffix}", n / unit);
        }
    }
    n.to_string()
}

/// The label of a `hist()` bucket.
pub fn hist_label(index: u64) -> String {
    match index {
        0 => "(..., 0)".into(),
        1 => "[0]".into(),
        2 => "[1]".into(),
        i => {
            let k = (i - 2).min(126);
            let lo = size_label(1i128 << k);
            let hi = size_label(1i128 << (k + 1));
            format!("[{lo}, {hi})")
        }
    }
}

/// The label of an `lhist()` bucket.
pub fn lhist_label(index: u64, min: i64, max: i64, step: i64) -> String {
    let n = lhist_inner(min, max, step);
    if index == 0 {
        return format!("(..., {})", size_label(min.into()));
    }
    if index > n {
        return format!("[{}, ...)", size_label(max.into()));
    }
    let lo = i128::from(min) + i128::from(index - 1) * i128::from(step);
    format!(
        "[{}, {})",
        size_label(lo),
        size_label(lo + i128::from(step))
    )
}

/// Which histogram and how to print it.
pub(crate) struct HistLayout<'a> {
    /// Labels a bucket index.
    pub label: &'a dyn Fn(u64) -> String,
    /// One past the largest valid bucket index; others are ignored.
    pub len: u64,
    /// Printed counts are divided by this (bars use the raw counts).
    pub div: u64,
}

/// Sum of all bucket counts: what histograms of different keys are sorted by.
pub fn hist_total(buckets: &[(u64, u64)]) -> u128 {
    buckets.iter().map(|&(_, c)| u128::from(c)).sum()
}

/// Appends the rows from the first to the last non-empty bucket, e.g.
/// `[4, 8)                 1 |@@@@…@@|`: label left in 16 columns, count right
/// in 8, the bar scaled so the fullest bucket has 52 `@`.
pub(crate) fn write_hist(out: &mut Vec<u8>, buckets: &[(u64, u64)], layout: &HistLayout) {
    let mut counts = std::collections::BTreeMap::new();
    for &(index, count) in buckets.iter().filter(|&&(i, c)| i < layout.len && c > 0) {
        let slot = counts.entry(index).or_insert(0u64);
        *slot = slot.saturating_add(count);
    }
    let (Some((&first, _)), Some((&last, _))) = (counts.first_key_value(), counts.last_key_value())
    else {
        return;
    };
    let max = counts.values().copied().max().unwrap_or(1).max(1);
    for index in first..=last {
        let count = counts.get(&index).copied().unwrap_or(0);
        let bar = (u128::from(count) * u128::from(BAR_WIDTH) / u128::from(max)) as usize;
        let row = format!(
            "{:<16}{:>8} |{}{}|\n",
            (layout.label)(index),
            count / layout.div.max(1),
            "@".repeat(bar),
            " ".repeat(BAR_WIDTH as usize - bar),
        );
        out.extend_from_slice(row.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(buckets: &[(u64, u64)], div: u64) -> String {
        let label = |i| hist_label(i);
        let layout = HistLayout {
            label: &label,
            len: 66,
            div,
        };
        let mut out = Vec::new();
        write_hist(&mut out, buckets, &layout);
        String::from_utf8(out).unwrap()
    }

    fn bar(n: usize) -> String {
        format!("|{}{}|", "@".repeat(n), " ".repeat(52 - n))
    }

    /// The capped bucket and the open-ended lhist bucket are labelled as bpftrace does.
    #[test]
    fn edge_labels() {
        assert_eq!(hist_label(33), "[2G, 4G)");
        assert_eq!(lhist_label(3, 0, 25, 10), "[25, ...)");
    }

    /// Labels as bpftrace prints them: `(..., 0)`, `[0]`, `[1]`, `[2, 4)`, `[512, 1K)`, `[512M, 1G)`.
    #[test]
    fn hist_labels() {
        assert_eq!(hist_label(0), "(..., 0)");
        assert_eq!(hist_label(1), "[0]");
        assert_eq!(hist_label(2), "[1]");
        assert_eq!(hist_label(3), "[2, 4)");
        assert_eq!(hist_label(11), "[512, 1K)");
        assert_eq!(hist_label(12), "[1K, 2K)");
        assert_eq!(hist_label(22), "[1M, 2M)");
        assert_eq!(hist_label(31), "[512M, 1G)");
        assert_eq!(hist_label(65), "[8E, 16E)");
    }

    /// lhist labels use units only on exact multiples: `[9000, 10000)`, `[512, 1K)`, `[1536, 3K)`, `[1025K, 2049K)`.
    #[test]
    fn lhist_labels() {
        assert_eq!(lhist_label(10, 0, 10000, 1000), "[9000, 10000)");
        assert_eq!(lhist_label(11, 0, 10000, 1000), "[10000, ...)");
        assert_eq!(lhist_label(2, 0, 1024, 512), "[512, 1K)");
        assert_eq!(lhist_label(2, 0, 3072, 1536), "[1536, 3K)");
        assert_eq!(lhist_label(2, 1024, 4194304, 1048576), "[1025K, 2049K)");
        assert_eq!(lhist_label(0, 10, 40, 10), "(..., 10)");
        assert_eq!(lhist_label(5, 0, 4096, 1024), "[4K, ...)");
    }

    /// hist(0), hist(-5), hist(1)×3, hist(2), hist(3): bars 17/17/52/34 (floor of count*52/max).
    #[test]
    fn renders_scaled_bars() {
        let out = render(&[(0, 1), (1, 1), (2, 3), (3, 2)], 1);
        let want = format!(
            "(..., 0)               1 {}\n[0]                    1 {}\n[1]                    3 {}\n[2, 4)                 2 {}\n",
            bar(17),
            bar(17),
            bar(52),
            bar(34)
        );
        assert_eq!(out, want);
    }

    /// Empty buckets between the first and last non-empty one print with count 0.
    #[test]
    fn keeps_inner_empty_buckets() {
        let out = render(&[(12, 1), (9, 1)], 1);
        assert_eq!(out.lines().count(), 4);
        assert!(out.starts_with("[128, 256)             1 |"));
        assert!(out.contains(
            "[256, 512)             0 |                                                    |"
        ));
    }

    /// `print(@h, 0, 2)` divides printed counts but scales bars on raw counts.
    #[test]
    fn divides_counts_not_bars() {
        let out = render(&[(6, 2), (9, 1)], 2);
        assert!(out.starts_with(&format!("[16, 32)               1 {}", bar(52))));
        assert!(out.ends_with(&format!("[128, 256)             0 {}\n", bar(26))));
    }

    /// A count wider than 8 columns and a label wider than 16 just push the row right.
    #[test]
    fn wide_fields() {
        let label = |i| lhist_label(i, 0, 4000000, 1000000);
        let layout = HistLayout {
            label: &label,
            len: 6,
            div: 1,
        };
        let mut out = Vec::new();
        write_hist(&mut out, &[(3, 123456789)], &layout);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("[2000000, 3000000)123456789 {}\n", bar(52))
        );
    }
}
