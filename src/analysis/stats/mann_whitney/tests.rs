use super::*;

fn close(got: f64, expected: f64) -> bool {
    (got - expected).abs() <= 1e-9 * expected.max(1e-12) + 1e-12
}

/// The published table for 5 + 5 (two-sided α = 0.05: U ≤ 2 rejects), with
/// the exact p-values counted by hand: 2/252, 8/252 and 14/252.
#[test]
fn matches_the_5_plus_5_table() {
    let cases: [(&[f64], &[f64], f64, f64); 3] = [
        (
            &[1., 2., 3., 4., 5.],
            &[6., 7., 8., 9., 10.],
            25.0,
            2.0 / 252.0,
        ),
        (
            &[1., 2., 3., 4., 7.],
            &[5., 6., 8., 9., 10.],
            23.0,
            8.0 / 252.0,
        ),
        (
            &[1., 2., 3., 5., 7.],
            &[4., 6., 8., 9., 10.],
            22.0,
            14.0 / 252.0,
        ),
    ];
    for (baseline, candidate, u, p) in cases {
        let result = mann_whitney(baseline, candidate).expect("valid samples");
        assert_eq!(result.method, Method::Exact);
        assert_eq!(result.u, u);
        assert!(close(result.p_value, p), "{} vs {p}", result.p_value);
        assert!(result.candidate_larger());
        // Swapping the samples mirrors U and keeps p.
        let swapped = mann_whitney(candidate, baseline).expect("valid samples");
        assert_eq!(swapped.u, 25.0 - u);
        assert!(close(swapped.p_value, p));
        assert!(!swapped.candidate_larger());
    }
}

/// Real-valued runs: scipy 1.17 `mannwhitneyu(method="exact")` gives 0.031746.
#[test]
fn matches_scipy_exact() {
    let baseline = [10.2, 11.5, 9.8, 10.9, 10.1];
    let candidate = [11.9, 12.4, 10.7, 12.8, 11.6];
    let result = mann_whitney(&baseline, &candidate).expect("valid");
    assert_eq!(result.u, 23.0);
    assert!(close(result.p_value, 0.031746031746031744));
}

/// With ties, the exact p equals brute-force enumeration of all assignments.
#[test]
fn exact_with_ties_matches_enumeration() {
    let cases: [(&[f64], &[f64]); 4] = [
        (&[1., 2., 2., 3., 3.], &[2., 3., 4., 4., 5.]),
        (&[7., 7., 7., 7., 7.], &[7., 7., 7., 7., 8.]),
        (&[1., 1., 1.], &[1., 1., 1., 2., 2.]),
        (&[0.0, -0.0, 1.0, 2.0], &[0.0, 2.0, 2.0, 3.0, 3.0, 3.0]),
    ];
    for (baseline, candidate) in cases {
        let result = mann_whitney(baseline, candidate).expect("valid");
        assert_eq!(result.method, Method::Exact);
        let expected = enumerate_p(baseline, candidate);
        assert!(
            close(result.p_value, expected),
            "{baseline:?} {candidate:?}: {} vs {expected}",
            result.p_value
        );
    }
}

/// `2U` of `picked` against the rest of `pooled`, straight from the definition.
fn doubled_u(pooled: &[f64], picked: &[bool]) -> u64 {
    let side = |want: bool| {
        pooled
            .iter()
            .zip(picked)
            .filter(move |(_, p)| **p == want)
            .map(|(v, _)| *v)
    };
    side(true)
        .map(|x| {
            side(false)
                .map(|y| match x.partial_cmp(&y).expect("no NaN") {
                    std::cmp::Ordering::Greater => 2,
                    std::cmp::Ordering::Equal => 1,
                    std::cmp::Ordering::Less => 0,
                })
                .sum::<u64>()
        })
        .sum()
}

/// Two-sided p by enumerating every way to pick the candidate's values.
fn enumerate_p(baseline: &[f64], candidate: &[f64]) -> f64 {
    let pooled: Vec<f64> = baseline.iter().chain(candidate).copied().collect();
    let n = pooled.len();
    let observed = doubled_u(
        &pooled,
        &(0..n).map(|i| i >= baseline.len()).collect::<Vec<_>>(),
    );
    let (mut at_most, mut at_least, mut total) = (0u64, 0u64, 0u64);
    for mask in 0u32..1 << n {
        if mask.count_ones() as usize != candidate.len() {
            continue;
        }
        let picked: Vec<bool> = (0..n).map(|i| mask >> i & 1 == 1).collect();
        let u = doubled_u(&pooled, &picked);
        total += 1;
        at_most += u64::from(u <= observed);
        at_least += u64::from(u >= observed);
    }
    (2.0 * at_most.min(at_least) as f64 / total as f64).min(1.0)
}

/// Large samples with ties: scipy 1.17 `method="asymptotic"` (tie and
/// continuity corrections) gives U = 889.5, p = 0.044491346786392.
#[test]
fn matches_scipy_normal_approximation() {
    let baseline = [
        103., 90., 108., 109., 80., 87., 101., 97., 100., 91., 109., 108., 101., 111., 105., 91.,
        104., 90., 109., 100., 98., 93., 112., 98., 96., 96., 105., 104., 104., 104., 121., 96.,
        95., 92., 106., 111., 99., 92., 92., 107.,
    ];
    let candidate = [
        111., 109., 97., 106., 105., 106., 113., 106., 111., 105., 107., 110., 89., 101., 99., 98.,
        101., 119., 95., 114., 87., 101., 106., 110., 111., 112., 101., 99., 113., 102., 91., 93.,
        95., 109., 105.,
    ];
    let result = mann_whitney(&baseline, &candidate).expect("valid");
    assert_eq!(result.method, Method::Normal);
    assert_eq!(result.u, 889.5);
    assert!(
        close(result.p_value, 0.04449134678639196),
        "{}",
        result.p_value
    );
}

/// The approximation itself on a small tied sample: scipy gives 0.261736.
#[test]
fn normal_approximation_with_ties() {
    let baseline = [3., 1., 4., 1., 5., 9., 2., 6.];
    let candidate = [5., 3., 5., 8., 9., 7., 9., 3., 2., 3.];
    let pooled = Pooled::new(&baseline, &candidate);
    let doubled = pooled.candidate_wins_doubled();
    assert_eq!(doubled, 106);
    let p = normal_p(&pooled.ties, baseline.len(), candidate.len(), doubled);
    assert!(close(p, 0.2617363764241847), "{p}");
}

/// On histograms whose buckets are exact (values below 256), the binned test
/// equals the test of the raw values, exact and approximate alike.
#[test]
fn binned_equals_raw_when_buckets_are_exact() {
    let cases: [(&[u64], &[u64]); 3] = [
        (&[1, 2, 3, 4, 5], &[6, 7, 8, 9, 10]),
        (&[3, 3, 5, 9, 9, 9], &[4, 9, 9, 12, 12]),
        (&[10; 40], &[11; 40]),
    ];
    for (baseline, candidate) in cases {
        let histogram = |values: &[u64]| {
            let mut h = LogHistogram::new();
            values.iter().for_each(|&v| h.record(v));
            h
        };
        let raw = |values: &[u64]| values.iter().map(|&v| v as f64).collect::<Vec<_>>();
        let binned = mann_whitney_binned(&histogram(baseline), &histogram(candidate));
        assert_eq!(
            binned,
            mann_whitney(&raw(baseline), &raw(candidate)),
            "{baseline:?}"
        );
    }
    let coarse = LogHistogram::with_precision(3);
    let mut fine = LogHistogram::new();
    fine.record(1);
    assert!(mann_whitney_binned(&coarse, &fine).is_none());
}

/// Identical samples give p = 1; empty or NaN input gives no test.
#[test]
fn degenerate_inputs() {
    let same = mann_whitney(&[4.0; 5], &[4.0; 5]).expect("valid");
    assert_eq!((same.u, same.p_value), (12.5, 1.0));
    let many = mann_whitney(&[4.0; 40], &[4.0; 40]).expect("valid");
    assert_eq!((many.method, many.p_value), (Method::Normal, 1.0));
    assert!(mann_whitney(&[], &[1.0]).is_none());
    assert!(mann_whitney(&[1.0, f64::NAN], &[1.0]).is_none());
}

/// scipy as a live oracle on random samples of several sizes, when installed.
#[test]
fn agrees_with_scipy_when_installed() {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import scipy"])
        .output();
    if !probe.is_ok_and(|out| out.status.success()) {
        eprintln!("skipped: python3 with scipy is not installed (pip install scipy)");
        return;
    }
    let mut state = 0x853c_49e6_748f_ea9b_u64;
    let mut next = |scale: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % scale) as f64
    };
    // Exact cases without ties (scipy's exact method assumes none), then
    // normal-approximation cases with many ties.
    let sizes = [
        (5, 5, 1e9),
        (7, 4, 1e9),
        (8, 8, 1e9),
        (50, 45, 40.0),
        (200, 150, 1000.0),
    ];
    let mut ours = Vec::new();
    let mut script = String::from("from scipy.stats import mannwhitneyu\n");
    for (n_a, n_b, scale) in sizes {
        let baseline: Vec<f64> = (0..n_a).map(|_| next(scale as u64)).collect();
        let candidate: Vec<f64> = (0..n_b)
            .map(|_| next(scale as u64) + scale / 10.0)
            .collect();
        let result = mann_whitney(&baseline, &candidate).expect("valid");
        let method = match result.method {
            Method::Exact => "exact",
            Method::Normal => "asymptotic",
        };
        script.push_str(&format!(
            "r = mannwhitneyu({candidate:?}, {baseline:?}, alternative='two-sided', method='{method}')\nprint(r.statistic, r.pvalue)\n"
        ));
        ours.push(result);
    }
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for (result, line) in ours.iter().zip(text.lines()) {
        let mut fields = line
            .split_whitespace()
            .map(|f| f.parse::<f64>().expect("a number"));
        let (u, p) = (fields.next().expect("U"), fields.next().expect("p"));
        assert_eq!(result.u, u, "{result:?}");
        assert!((result.p_value - p).abs() < 1e-9, "{result:?} vs {p}");
    }
    assert_eq!(text.lines().count(), ours.len());
}
