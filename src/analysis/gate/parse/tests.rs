use super::*;

fn condition(text: &str) -> Condition {
    let gate = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    let conditions = gate.conditions();
    assert_eq!(conditions.len(), 1, "{text}");
    conditions[0].clone()
}

fn metric(kind: Option<MetricKind>, subject: &str, stat: &str) -> MetricName {
    MetricName {
        kind,
        subject: subject.to_owned(),
        stat: stat.to_owned(),
    }
}

fn error(text: &str) -> GateError {
    parse(text).expect_err(text)
}

/// The issue's examples parse to the metric, operator and threshold meant.
#[test]
fn parses_the_issue_examples() {
    let cases = [
        (
            "span:request.p99 > +10%",
            metric(Some(MetricKind::Span), "request", "p99"),
            Op::Greater,
            Threshold::Relative(0.10),
        ),
        (
            "thread:worker.oncpu > +5%",
            metric(Some(MetricKind::Thread), "worker", "oncpu"),
            Op::Greater,
            Threshold::Relative(0.05),
        ),
        (
            "func:parse_json.total > +5%",
            metric(Some(MetricKind::Func), "parse_json", "total"),
            Op::Greater,
            Threshold::Relative(0.05),
        ),
        (
            "record:malloc.count > +0%",
            metric(Some(MetricKind::Record), "malloc", "count"),
            Op::Greater,
            Threshold::Relative(0.0),
        ),
        (
            "cpu.context_switches > +20%",
            metric(None, "cpu", "context_switches"),
            Op::Greater,
            Threshold::Relative(0.20),
        ),
        (
            "span:request.p99 < 5ms",
            metric(Some(MetricKind::Span), "request", "p99"),
            Op::Less,
            Threshold::Budget(Quantity {
                value: 5e6,
                dimension: Dimension::Time,
            }),
        ),
    ];
    for (text, expected_metric, op, threshold) in cases {
        let c = condition(text);
        assert_eq!(
            (c.metric, c.op, c.threshold),
            (expected_metric, op, threshold),
            "{text}"
        );
    }
}

/// Units scale to ns, bytes and plain numbers; signs make changes.
#[test]
fn parses_units_and_signs() {
    let budget = |value, dimension| Threshold::Budget(Quantity { value, dimension });
    let cases = [
        ("a.b >= 250us", budget(250e3, Dimension::Time)),
        ("a.b >= 2µs", budget(2e3, Dimension::Time)),
        ("a.b >= 1.5s", budget(1.5e9, Dimension::Time)),
        ("a.b >= 40ns", budget(40.0, Dimension::Time)),
        ("a.b <= 4KiB", budget(4096.0, Dimension::Bytes)),
        ("a.b <= 2MB", budget(2e6, Dimension::Bytes)),
        ("a.b <= 1GiB", budget(1073741824.0, Dimension::Bytes)),
        ("a.b < 90%", budget(0.9, Dimension::Ratio)),
        ("a.b > 1200", budget(1200.0, Dimension::Number)),
        ("a.b > 3k", budget(3000.0, Dimension::Number)),
        (
            "a.b > -2ms",
            Threshold::Delta(Quantity {
                value: -2e6,
                dimension: Dimension::Time,
            }),
        ),
        ("a.b < -15%", Threshold::Relative(-0.15)),
    ];
    for (text, threshold) in cases {
        assert_eq!(condition(text).threshold, threshold, "{text}");
    }
}

/// Names with dots, colons and quotes; percentiles with decimals.
#[test]
fn parses_awkward_names() {
    let cases = [
        ("span:http.request.p99 > +1%", "http.request", "p99"),
        ("span:request.p99.9 > +1%", "request", "p99.9"),
        (
            "func:std::fmt::write.total > +1%",
            "std::fmt::write",
            "total",
        ),
        ("thread:kworker/0:1.oncpu > +1%", "kworker/0:1", "oncpu"),
        (
            "func:\"operator<(a, b)\".self > +1%",
            "operator<(a, b)",
            "self",
        ),
    ];
    for (text, subject, stat) in cases {
        let c = condition(text);
        assert_eq!(
            (c.metric.subject.as_str(), c.metric.stat.as_str()),
            (subject, stat),
            "{text}"
        );
        let again = parse(&format!("{} > +1%", c.metric)).expect("the canonical form parses");
        assert_eq!(again.conditions()[0].metric, c.metric, "{text}");
    }
}

/// `&&` binds tighter than `||`; parentheses and words work too.
#[test]
fn combines_conditions() {
    let gate = parse("a.x > 1 || a.y > 2 && (a.z > 3 or a.w > 4)").expect("valid");
    assert_eq!(gate.conditions().len(), 4);
    match &gate.root {
        Node::Or(left, right) => {
            assert!(matches!(**left, Node::Condition(_)));
            assert!(matches!(**right, Node::And(_, _)));
        }
        other => panic!("{other:?}"),
    }
    assert!(parse("a.x > 1 and a.y > 2").is_ok());
    assert!(parse("  a.x>1&&a.y<2  ").is_ok());
}

/// Each malformed expression gets a message naming its column.
#[test]
fn errors_name_the_column() {
    let cases = [
        ("spam:request.p99 > +10%", 1, "unknown metric kind `spam`"),
        ("span:request > +10%", 6, "`request` is not a metric"),
        (
            "span:request.p99 +10%",
            18,
            "expected a comparison, found `+10%`",
        ),
        ("span:request.p99 == +10%", 18, "expected a comparison"),
        ("span:request.p99 >", 19, "expected a threshold"),
        ("span:request.p99 > ten", 20, "expected a threshold"),
        ("span:request.p99 > 5 ms", 22, "unexpected `ms`"),
        ("span:request.p99 > 5parsecs", 21, "unknown unit `parsecs`"),
        ("(a.b > 1", 1, "this `(` is not closed"),
        ("func:\"open.self > 1", 6, "this quote is not closed"),
        ("a.b > 1 a.c > 2", 9, "unexpected `a.c`"),
        ("", 1, "expected a metric"),
        ("über.x > 1 ||", 14, "expected a metric"),
    ];
    for (text, column, message) in cases {
        let e = error(text);
        assert_eq!(e.column(), column, "{text}: {e}");
        assert!(e.message.starts_with(message), "{text}: {}", e.message);
        assert!(e.to_string().contains(&format!("(column {column})")), "{e}");
    }
}

/// Errors render through miette with a caret under the problem.
#[test]
fn renders_with_miette() {
    let report = miette::Report::new(error("span:request.p99 > 5furlongs"));
    let mut out = String::new();
    miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor())
        .render_report(&mut out, report.as_ref())
        .expect("renders");
    assert!(out.contains("unknown unit `furlongs`"), "{out}");
    assert!(out.contains("span:request.p99 > 5furlongs"), "{out}");
    assert!(out.contains("units are ns"), "{out}");
}
