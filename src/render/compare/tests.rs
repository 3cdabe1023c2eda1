use super::*;
use crate::analysis::gate::{GateKind, parse, parse_budget};
use crate::analysis::stats::Change;
use crate::capture::model::RecordKind;
use crate::render::filter::Filter;
use crate::render::output::Destination;
use crate::render::source::FakeCapture;
use crate::render::{Captures, Render};

/// Spans per run.
const REQUESTS: u64 = 200;

/// One run of a server: `REQUESTS` `request` spans of about 1 ms × `factor`
/// (±10%, from `seed`), and `retries` `retry` spans.
fn run(factor: f64, seed: u64, retries: u64) -> FakeCapture {
    let mut capture = FakeCapture::new();
    let server = capture.add_thread(10, 10, "server", "server");
    let request = capture.add_schema("request", RecordKind::Span, &[], false);
    let retry = capture.add_schema("retry", RecordKind::Span, &[], false);
    let mut rng = fastrand::Rng::with_seed(seed);
    for i in 0..REQUESTS {
        let duration = 1e6 * factor * (0.9 + 0.2 * rng.f64());
        let ts_ns = 1_000_000 + i * 4_000_000;
        capture
            .add_event(ts_ns, server, request, vec![])
            .duration_ns = Some(duration as u64);
        if i < retries {
            capture
                .add_event(ts_ns + 1, server, retry, vec![])
                .duration_ns = Some(500);
        }
    }
    capture
}

/// `count` runs scaled by `factor`, seeds from `seed`.
fn runs(count: u64, factor: f64, seed: u64) -> Vec<FakeCapture> {
    (0..count).map(|i| run(factor, seed + i, 1)).collect()
}

fn gates(texts: &[&str]) -> Vec<Gate> {
    (texts.iter())
        .map(|text| match text.contains(" < ") {
            true => parse_budget(text).expect("a budget"),
            false => parse(text).expect("a gate"),
        })
        .collect()
}

fn captures(fakes: &[FakeCapture]) -> Vec<Capture<'_>> {
    (fakes.iter())
        .map(|fake| Capture::test(fake, Filter::default()))
        .collect()
}

fn compare(
    baseline: &[FakeCapture],
    candidate: &[FakeCapture],
    gate_texts: &[&str],
) -> Result<Comparison, RenderError> {
    let options = CompareOptions {
        gates: gates(gate_texts),
        ..CompareOptions::default()
    };
    Comparison::of(&captures(baseline), &captures(candidate), &options)
}

fn compare_paired(
    baseline: &[FakeCapture],
    candidate: &[FakeCapture],
) -> Result<Comparison, RenderError> {
    let options = CompareOptions {
        paired: true,
        ..CompareOptions::default()
    };
    Comparison::of(&captures(baseline), &captures(candidate), &options)
}

#[track_caller]
fn row<'c>(comparison: &'c Comparison, name: &str) -> &'c Row {
    let row = comparison.rows.iter().find(|r| r.name.to_string() == name);
    row.unwrap_or_else(|| panic!("no row {name}"))
}

/// The nearest-rank median of one run's request durations.
fn true_p50(capture: &FakeCapture) -> f64 {
    let mut durations: Vec<u64> = (capture.events.iter())
        .filter(|e| e.record.0 == 0)
        .filter_map(|e| e.duration_ns)
        .collect();
    durations.sort_unstable();
    durations[durations.len().div_ceil(2) - 1] as f64
}

/// Runs 15% slower are a significant increase of every percentile (all five
/// above all five: p = 2/252), with each side's value the median of its
/// runs' own medians; the unchanged count is `~`.
#[test]
fn slower_runs_are_a_significant_increase() {
    let (baseline, candidate) = (runs(5, 1.0, 1), runs(5, 1.15, 100));
    let comparison = compare(&baseline, &candidate, &[]).expect("compares");
    let p50 = row(&comparison, "span:request.p50");
    assert_eq!(
        p50.verdict.map(|v| v.to_string()).as_deref(),
        Some("+ (p=0.008 n=5+5)")
    );
    let mut medians: Vec<f64> = baseline.iter().map(true_p50).collect();
    medians.sort_by(f64::total_cmp);
    let base = p50.baseline.as_ref().expect("a baseline");
    assert!(
        (base.median - medians[2]).abs() <= medians[2] * 0.004,
        "{base:?} {medians:?}"
    );
    let change = p50.change.expect("a change");
    assert!((0.12..0.18).contains(&change), "{change}");
    let count = row(&comparison, "span:request.count");
    assert_eq!(count.verdict.map(|v| v.change), Some(Change::Unchanged));
    assert_eq!(count.candidate.runs, vec![REQUESTS as f64; 5]);
    assert_eq!(comparison.power_warning(), None);
}

/// The gates: a significant regression past the threshold fails, a larger
/// threshold or an improvement passes, budgets compare the candidate.
#[test]
fn gates_fail_on_significant_regressions_only() {
    let baseline = runs(5, 1.0, 1);
    let gate_texts = [
        "span:request.p50 > +5%",
        "span:request.p99 > +30%",
        "span:request.p99 < 2ms",
        "span:request.p50 < 1ms",
    ];
    let slower = compare(&baseline, &runs(5, 1.15, 100), &gate_texts).expect("compares");
    let failed: Vec<bool> = slower.gates.iter().map(|g| g.outcome.failed).collect();
    assert_eq!(failed, [true, false, false, true]);
    assert_eq!(slower.gates[2].kind, GateKind::Budget);
    let (head, details) = slower.gates[0].summary();
    assert_eq!(head, "FAIL  --fail-if 'span:request.p50 > +5%'");
    assert!(details[0].ends_with("+ (p=0.008 n=5+5)"), "{details:?}");
    let faster = compare(&baseline, &runs(5, 0.85, 100), &gate_texts[..1]).expect("compares");
    assert!(!faster.gates[0].outcome.failed);
    let p50 = row(&faster, "span:request.p50");
    assert_eq!(p50.verdict.map(|v| v.change), Some(Change::Decrease));
    let same = compare(&baseline, &runs(5, 1.0, 100), &gate_texts[..1]).expect("compares");
    assert!(!same.gates[0].outcome.failed);
    let p50 = row(&same, "span:request.p50");
    assert_eq!(p50.verdict.map(|v| v.symbol()), Some("~"));
}

/// With one run a side, percentiles are tested on the per-event durations
/// and other metrics are not tested.
#[test]
fn one_run_a_side_tests_the_events() {
    let comparison = compare(&runs(1, 1.0, 1), &runs(1, 1.15, 2), &[]).expect("compares");
    let p99 = row(&comparison, "span:request.p99");
    let verdict = p99.verdict.expect("a per-event verdict");
    assert_eq!(verdict.change, Change::Increase);
    assert!(verdict.to_string().ends_with("n=200+200)"), "{verdict}");
    assert_eq!(row(&comparison, "span:request.count").verdict, None);
}

/// A count missing from a run is 0 there; a percentile missing from a run
/// leaves that run out.
#[test]
fn absent_values() {
    let mut candidate = runs(5, 1.0, 100);
    candidate[0] = run(1.0, 100, 0);
    candidate[1] = run(1.0, 101, 0);
    let comparison = compare(&runs(5, 1.0, 1), &candidate, &[]).expect("compares");
    assert_eq!(
        row(&comparison, "span:retry.count").candidate.runs,
        [0.0, 0.0, 1.0, 1.0, 1.0]
    );
    assert_eq!(
        row(&comparison, "span:retry.p50").candidate.runs,
        [500.0; 3]
    );
}

/// Captures with different task filters show the difference and leave the
/// system metrics uncompared; a gate on one is an error; metrics of one
/// side only are listed apart.
#[test]
fn differences_leave_metrics_uncompared() {
    let mut candidate = runs(5, 1.0, 100);
    for capture in &mut candidate {
        capture.info.settings.filters = vec!["-p 10".into()];
        capture.add_schema("extra", RecordKind::Instant, &[], false);
    }
    let comparison = compare(&runs(5, 1.0, 1), &candidate, &[]).expect("compares");
    assert_eq!(comparison.differences.len(), 1);
    assert_eq!(comparison.differences[0].what, "filters");
    let switches = row(&comparison, "cpu.context_switches");
    assert_eq!(switches.uncompared, Some("the task filters differ"));
    assert_eq!((switches.verdict, switches.change), (None, None));
    let only: Vec<&str> = comparison
        .one_sided
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    // Idle and busy times exist only without task filters.
    let expected = [
        "cpu.idle",
        "cpu.oncpu",
        "record:extra.count",
        "record:extra.rate",
    ];
    assert_eq!(only, expected);
    let error = compare(
        &runs(5, 1.0, 1),
        &candidate,
        &["cpu.context_switches > +5%"],
    )
    .expect_err("not comparable");
    assert_eq!(
        error.chain(),
        "--fail-if `cpu.context_switches > +5%`: `cpu.context_switches` is not compared: \
         the task filters differ (column 1)"
    );
    let error =
        compare(&runs(5, 1.0, 1), &candidate, &["record:extra.count > +0%"]).expect_err("one side");
    assert!(
        error
            .chain()
            .contains("is in the candidate captures but not in the baseline")
    );
}

/// A damaged capture, captures of different scripts and a gate on an
/// unknown metric are errors naming the problem.
#[test]
fn bad_input_is_refused() {
    let mut damaged = runs(5, 1.0, 100);
    damaged[3].damage = Some("cut short after byte 4096".into());
    let error = compare(&runs(5, 1.0, 1), &damaged, &[]).expect_err("damaged");
    assert_eq!(
        error.chain(),
        "cannot compare test.data: cut short after byte 4096; record it again"
    );
    let mut other = runs(5, 1.0, 100);
    other[4].info.script = "span other { }".into();
    let error = compare(&runs(5, 1.0, 1), &other, &[]).expect_err("scripts");
    assert!(
        error
            .chain()
            .contains("were recorded with different scripts"),
        "{}",
        error.chain()
    );
    let error = compare(
        &runs(5, 1.0, 1),
        &runs(5, 1.0, 9),
        &["span:reqest.p99 > +5%"],
    )
    .expect_err("unknown metric");
    assert!(
        error
            .chain()
            .contains("no metric `span:reqest.p99` in the captures")
    );
}

/// Too few runs for any verdict to be significant are said to be so; 5 + 5
/// runs are enough even when a metric is missing from some of them.
#[test]
fn warns_about_too_few_runs() {
    let comparison = compare(&runs(3, 1.0, 1), &runs(3, 1.5, 100), &[]).expect("compares");
    let warning = comparison.power_warning().expect("a warning");
    assert!(
        warning.starts_with("with 3 baseline and 3 candidate runs no change"),
        "{warning}"
    );
    let comparison = compare(&runs(1, 1.0, 1), &runs(5, 1.5, 100), &[]).expect("compares");
    assert!(comparison.power_warning().is_some());
    let mut sparse = runs(5, 1.0, 100);
    for (i, capture) in sparse.iter_mut().take(3).enumerate() {
        *capture = run(1.0, 100 + i as u64, 0);
    }
    let comparison = compare(&runs(5, 1.0, 1), &sparse, &[]).expect("compares");
    let retry = row(&comparison, "span:retry.p50")
        .verdict
        .expect("a verdict");
    assert!(!retry.could_detect());
    assert_eq!(comparison.power_warning(), None);
}

/// The outputs: text and Markdown tables and JSON, written through the
/// `Render` trait from one comparison of the captures.
#[test]
fn outputs() {
    let (baseline, candidate) = (runs(5, 1.0, 1), runs(5, 1.15, 100));
    let captures = Captures::new(captures(&candidate), captures(&baseline));
    let options = CompareOptions {
        gates: gates(&["span:request.p50 > +5%", "span:request.p99 < 2ms"]),
        select: vec![glob::Pattern::new("span:request.*").expect("a glob")],
        ..CompareOptions::default()
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let write = |render: &dyn Render, name: &str| {
        let path = dir.path().join(name);
        render
            .render(&captures, &Destination::File(path.clone()))
            .expect("written");
        std::fs::read_to_string(path).expect("read back")
    };
    let table = |format| CompareTable {
        format,
        options: options.clone(),
    };
    insta::assert_snapshot!("text", write(&table(TableFormat::Text), "t.txt"));
    insta::assert_snapshot!("markdown", write(&table(TableFormat::Markdown), "t.md"));
    let json = CompareJson {
        options: options.clone(),
    };
    insta::assert_snapshot!("json", write(&json, "t.json"));
}

/// `paired`: 8 pairs 10% slower, one pair slowed 40% on both sides by the
/// machine, are a significant increase pair by pair (p = 2/256) where the
/// unpaired test of the same runs sees `~`; sides of different sizes are
/// an error, and 5 pairs draw the warning that nothing can be significant
/// (nor can their verdicts).
#[test]
fn paired_runs_are_tested_pair_by_pair() {
    let machine = |pair: u64| if pair == 4 { 1.4 } else { 1.0 };
    let base: Vec<FakeCapture> = (0..8).map(|i| run(machine(i), 1 + i, 1)).collect();
    let new: Vec<FakeCapture> = (0..8).map(|i| run(1.1 * machine(i), 50 + i, 1)).collect();
    let paired = compare_paired(&base, &new).expect("compares");
    let verdict = row(&paired, "span:request.p50").verdict.expect("a verdict");
    assert_eq!(verdict.to_string(), "+ (p=0.008 n=8 pairs)");
    assert_eq!(paired.power_warning(), None);
    let unpaired = compare(&base, &new, &[]).expect("compares");
    let verdict = row(&unpaired, "span:request.p50")
        .verdict
        .expect("a verdict");
    assert_eq!(verdict.change, Change::Unchanged, "{verdict}");
    let error = compare_paired(&base, &new[..7]).expect_err("unpaired");
    assert!(
        error.chain().contains(
            "--paired needs as many baseline captures as candidate \
             captures, one pair per run (got 8 baseline and 7 candidate captures)"
        ),
        "{}",
        error.chain()
    );
    let five = compare_paired(&base[..5], &new[..5]).expect("compares");
    let warning = five.power_warning().expect("a warning");
    assert!(warning.starts_with("with 5 run pairs no change can reach p < 0.05"));
    let verdict = row(&five, "span:request.p50").verdict.expect("a verdict");
    assert!(!verdict.could_detect());
}
