use std::collections::HashMap;

use super::*;
use crate::analysis::gate::parse;

const BASE: [f64; 5] = [10.0, 10.2, 9.9, 10.1, 10.05];

fn runs(factor: f64) -> Vec<f64> {
    BASE.iter().map(|v| v * factor).collect()
}

/// A time metric observed over 5 + 5 runs (medians compared).
fn compared(baseline: &[f64], candidate: &[f64]) -> Observation {
    let median = |values: &[f64]| {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted[sorted.len() / 2]
    };
    Observation {
        dimension: Dimension::Time,
        baseline: Some(median(baseline) * 1e6),
        candidate: median(candidate) * 1e6,
        verdict: Verdict::permutation(baseline, candidate, 0.05),
    }
}

fn evaluate(text: &str, metrics: &HashMap<String, Observation>) -> Result<GateOutcome, GateError> {
    parse(text)
        .expect("valid gate")
        .evaluate(|name| metrics.get(&name.to_string()).copied())
}

fn metrics(entries: &[(&str, Observation)]) -> HashMap<String, Observation> {
    entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// A significant 15% slowdown fails `> +10%`; the same size of noise or a
/// 15% improvement does not.
#[test]
fn fails_only_on_significant_regressions() {
    let slower = metrics(&[("span:request.p99", compared(&BASE, &runs(1.15)))]);
    let outcome = evaluate("span:request.p99 > +10%", &slower).expect("evaluates");
    assert!(outcome.failed);
    let explanation = &outcome.conditions[0].explanation;
    assert!(explanation.contains("(+15.0%)"), "{explanation}");
    assert!(explanation.contains("+ (p=0.008 n=5+5)"), "{explanation}");
    assert_eq!(outcome.conditions[0].condition, "span:request.p99 > +10%");

    let faster = metrics(&[("span:request.p99", compared(&BASE, &runs(0.85)))]);
    assert!(
        !evaluate("span:request.p99 > +10%", &faster)
            .expect("ok")
            .failed
    );
    assert!(
        evaluate("span:request.p99 < -10%", &faster)
            .expect("ok")
            .failed
    );

    // Interleaved runs whose medians differ by 12%: not significant.
    let noisy = [9.0, 11.3, 9.1, 11.2, 10.0];
    let noise = [10.2, 8.9, 11.4, 11.2, 9.2];
    let mut observation = compared(&noisy, &noise);
    observation.baseline = Some(10.0e6);
    observation.candidate = 11.2e6;
    let outcome = evaluate(
        "span:request.p99 > +10%",
        &metrics(&[("span:request.p99", observation)]),
    )
    .expect("ok");
    assert!(!outcome.failed, "{outcome:?}");
    assert!(outcome.conditions[0].explanation.contains("~ (p="));
}

/// A significant change below the threshold passes.
#[test]
fn small_significant_change_passes() {
    let observed = metrics(&[("thread:worker.oncpu", compared(&BASE, &runs(1.04)))]);
    let outcome = evaluate("thread:worker.oncpu > +5%", &observed).expect("ok");
    assert!(!outcome.failed);
    assert!(
        evaluate("thread:worker.oncpu > +3%", &observed)
            .expect("ok")
            .failed
    );
}

/// Budgets compare the candidate alone, without baseline or test.
#[test]
fn budgets_compare_the_candidate() {
    let observation = Observation {
        dimension: Dimension::Time,
        baseline: None,
        candidate: 6.2e6,
        verdict: None,
    };
    let observed = metrics(&[("span:request.p99", observation)]);
    let outcome = evaluate("span:request.p99 > 5ms", &observed).expect("ok");
    assert!(outcome.failed);
    assert_eq!(
        outcome.conditions[0].explanation,
        "span:request.p99 is 6.2ms"
    );
    assert!(
        !evaluate("span:request.p99 > 10ms", &observed)
            .expect("ok")
            .failed
    );
    assert!(
        evaluate("span:request.p99 < 10ms", &observed)
            .expect("ok")
            .failed
    );
}

/// Without a verdict the threshold alone decides, and the outcome says so.
#[test]
fn untested_changes_use_the_threshold() {
    let observation = Observation {
        dimension: Dimension::Number,
        baseline: Some(1000.0),
        candidate: 1001.0,
        verdict: None,
    };
    let outcome = evaluate(
        "record:malloc.count > +0%",
        &metrics(&[("record:malloc.count", observation)]),
    )
    .expect("ok");
    assert!(outcome.failed);
    assert!(outcome.conditions[0].explanation.contains("not tested"));
    let delta = evaluate(
        "record:malloc.count > +5",
        &metrics(&[("record:malloc.count", observation)]),
    )
    .expect("ok");
    assert!(!delta.failed);
}

/// `&&` needs both conditions, `||` either; every condition is reported.
#[test]
fn combines_outcomes() {
    let observed = metrics(&[
        ("span:request.p50", compared(&BASE, &runs(1.15))),
        ("span:request.p99", compared(&BASE, &runs(1.01))),
    ]);
    let both = evaluate(
        "span:request.p50 > +10% && span:request.p99 > +10%",
        &observed,
    )
    .expect("ok");
    assert!(!both.failed);
    assert_eq!(
        both.conditions.iter().map(|c| c.holds).collect::<Vec<_>>(),
        [true, false]
    );
    let either = evaluate(
        "span:request.p50 > +10% || span:request.p99 > +10%",
        &observed,
    )
    .expect("ok");
    assert!(either.failed);
}

/// Unknown metrics, wrong units and changes without a baseline are errors
/// at the right column.
#[test]
fn evaluation_errors_name_the_column() {
    let observed = metrics(&[(
        "span:request.p99",
        Observation {
            dimension: Dimension::Time,
            baseline: None,
            candidate: 1.0,
            verdict: None,
        },
    )]);
    let cases = [
        (
            "span:reqest.p99 > 5ms",
            1,
            "no metric `span:reqest.p99` in the captures",
        ),
        (
            "span:request.p99 > 5MB",
            20,
            "the threshold is a size but span:request.p99 is a duration",
        ),
        (
            "span:request.p99 > 5",
            20,
            "the threshold is a plain number",
        ),
        ("span:request.p99 > +10%", 20, "a change needs a baseline"),
    ];
    for (text, column, message) in cases {
        let e = evaluate(text, &observed).expect_err(text);
        assert_eq!(e.column(), column, "{text}");
        assert!(e.message.starts_with(message), "{text}: {}", e.message);
    }
}

/// A zero baseline makes any increase infinite, and no change 0%.
#[test]
fn zero_baseline() {
    assert_eq!(relative_change(0.0, 3.0), f64::INFINITY);
    assert_eq!(relative_change(0.0, 0.0), 0.0);
    assert_eq!(relative_change(-2.0, -1.0), 0.5);
}

/// Values print in readable units.
#[test]
fn formats_values() {
    assert_eq!(format_value(1_500_000.0, Dimension::Time), "1.5ms");
    assert_eq!(format_value(999.0, Dimension::Time), "999ns");
    assert_eq!(format_value(377_856.0, Dimension::Time), "377.9us");
    assert_eq!(format_value(17_472.0, Dimension::Time), "17.47us");
    assert_eq!(format_value(12_288.0, Dimension::Bytes), "12KiB");
    assert_eq!(format_value(0.931, Dimension::Ratio), "93.1%");
    assert_eq!(format_value(42.0, Dimension::Number), "42");
    assert_eq!(format_value(0.25, Dimension::Number), "0.250");
}
