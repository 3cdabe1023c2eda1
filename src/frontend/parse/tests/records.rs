//! Record blocks (`< items >`) and spans: item forms, their spans, record
//! blocks with actions, span keys and ends, and where errors point.

use super::*;
use crate::frontend::ast::{Record, SpanBlock};

/// The record of the only probe of `source`.
#[track_caller]
fn record(source: &str) -> Record {
    let mut script = ok(source);
    assert_eq!(script.probes.len(), 1, "{script:?}");
    script.probes.remove(0).record.expect("a record block")
}

/// `name=sexpr` (or `sexpr` for bare items), one per item.
fn items(record: &Record) -> Vec<String> {
    let item = |i: &crate::frontend::ast::RecordItem| match &i.name {
        Some(name) => format!("{name}={}", sexpr(&i.value)),
        None => sexpr(&i.value),
    };
    record.items.iter().map(item).collect()
}

/// The only span of `source`.
#[track_caller]
fn span_block(source: &str) -> SpanBlock {
    let mut script = ok(source);
    assert_eq!(script.spans.len(), 1, "{script:?}");
    script.spans.remove(0)
}

/// The single error of a script that must not parse: message and error position.
#[track_caller]
fn error_at(source: &str) -> (String, usize) {
    match parse(source, "bad.bt") {
        Ok(script) => panic!("expected an error, parsed {script:?}"),
        Err(errors) => {
            assert_eq!(errors.errors.len(), 1, "{}", errors.render());
            (
                errors.errors[0].message.clone(),
                errors.errors[0].span.start,
            )
        }
    }
}

/// Named, bare, builtin, field, call and stack items parse in order, with
/// optional and repeated semicolons.
#[test]
fn parses_record_items() {
    let r = record("uprobe:libc:malloc /pid == 1/ < size = arg0; stack >");
    assert_eq!(items(&r), ["size=arg0", "stack"]);
    let r =
        record("tracepoint:a:b <; pid;; comm; args.ret; f = str(args.filename); ustack; kstack; >");
    assert_eq!(
        items(&r),
        [
            "pid",
            "comm",
            "(. args ret)",
            "f=str((. args filename))",
            "ustack",
            "kstack"
        ]
    );
    assert!(record("kprobe:f < >").items.is_empty());
    assert_eq!(items(&record("kretprobe:f < retval >")), ["retval"]);
}

/// Record and item spans cover their source text.
#[test]
fn record_spans_cover_source_text() {
    let source = "kprobe:f < size = arg0 + 1; stack > { @n = count(); }";
    let r = record(source);
    assert_eq!(
        &source[r.span.start..r.span.end],
        "< size = arg0 + 1; stack >"
    );
    let text: Vec<&str> = r
        .items
        .iter()
        .map(|i| &source[i.span.start..i.span.end])
        .collect();
    assert_eq!(text, ["size = arg0 + 1", "stack"]);
}

/// A record block may be followed by an action block, which keeps its statements.
#[test]
fn record_with_actions() {
    let mut script = ok("kprobe:f < a = arg0 > { @n = count(); printf(\"x\\n\"); }");
    let probe = script.probes.remove(0);
    assert_eq!(items(&probe.record.expect("record")), ["a=arg0"]);
    assert_eq!(probe.body.stmts.len(), 2);
}

/// `==`, `<`, `<<`, ternaries and parenthesised `>` work inside records.
#[test]
fn operators_inside_records() {
    let r = record(
        "kprobe:f < eq = arg0 == 1; lt = arg0 < 2; sh = arg0 << 3; big = (arg0 > 4096); t = arg0 ? 1 : 2 >",
    );
    assert_eq!(
        items(&r),
        [
            "eq=(== arg0 1)",
            "lt=(< arg0 2)",
            "sh=(<< arg0 3)",
            "big=(> arg0 4096)",
            "t=(? arg0 1 2)",
        ]
    );
}

/// An unparenthesised `>` closes the record, so the error points just after it.
#[test]
fn greater_than_inside_a_record_needs_parentheses() {
    let source = "kprobe:f < big = arg0 > 4096 >";
    let (message, at) = error_at(source);
    assert_eq!(at, source.find("4096").unwrap());
    assert!(message.contains("found `4096`"), "{message}");
    let source = "kprobe:f < x = arg1 >> 2 >";
    let (message, at) = error_at(source);
    assert_eq!(at, source.find(">>").unwrap() + 1);
    assert!(message.contains("found `>`"), "{message}");
}

/// An unclosed record is an error pointing at the last character of the script.
#[test]
fn rejects_unclosed_record() {
    let source = "kprobe:f < a = arg0; b = arg1";
    let (message, at) = error_at(source);
    assert_eq!(message, "expected `;`, found end of script");
    assert_eq!(at, source.len() - 1);
}

/// A span names its key expression and both ends, each with predicate and record.
#[test]
fn parses_span_with_key_and_ends() {
    let source = "span io by arg0 { kprobe:start /pid == 1/ < fd = arg0 > kretprobe:start < ret = retval > }";
    let s = span_block(source);
    assert_eq!(s.name, "io");
    assert_eq!(s.key.as_ref().map(sexpr).as_deref(), Some("arg0"));
    assert_eq!(s.start.specs[0].parts, ["start"]);
    assert_eq!(
        s.start.predicate.as_ref().map(sexpr).as_deref(),
        Some("(== pid 1)")
    );
    assert_eq!(
        items(s.start.record.as_ref().expect("start record")),
        ["fd=arg0"]
    );
    assert_eq!(s.end.specs[0].provider, "kretprobe");
    assert!(s.end.predicate.is_none());
    assert_eq!(
        items(s.end.record.as_ref().expect("end record")),
        ["ret=retval"]
    );
    assert_eq!(&source[s.span.start..s.span.end], source);
}

/// Without `by`, a span has no key (the thread); several probes may start it.
#[test]
fn parses_span_without_key() {
    let s = span_block("span rw { kprobe:a, kprobe:b < > kretprobe:a }");
    assert!(s.key.is_none());
    assert_eq!(s.start.specs.len(), 2);
    assert_eq!(s.end.specs.len(), 1);
    assert!(s.end.record.is_none());
}

/// `span` is only a keyword before a name: a probe and a span may share a script.
#[test]
fn spans_and_probes_mix() {
    let script = ok("BEGIN { } span s { kprobe:a < > kretprobe:a } kprobe:x < pid >");
    assert_eq!((script.probes.len(), script.spans.len()), (2, 1));
}

/// A span needs exactly two ends.
#[test]
fn rejects_span_with_one_end() {
    let source = "span s { kprobe:a < pid > }";
    let (_, at) = error_at(source);
    assert_eq!(at, source.rfind('}').unwrap());
}

/// Both ends may be bare probes, as documented (`START_PROBE [/pred/] [< items >]`).
#[test]
fn span_ends_without_records() {
    let s = span_block("span nap { uprobe:/bin/x:nap uretprobe:/bin/x:nap }");
    assert_eq!((s.start.specs.len(), s.end.specs.len()), (1, 1));
}

/// A start predicate may be followed directly by the end probe.
#[test]
fn span_start_predicate_before_end_probe() {
    let s = span_block("span nap { uprobe:/bin/x:nap /pid == 1/ uretprobe:/bin/x:nap }");
    assert_eq!(
        s.start.predicate.as_ref().map(sexpr).as_deref(),
        Some("(== pid 1)")
    );
    assert_eq!(s.end.specs[0].provider, "uretprobe");
}

/// `record NAME < items >` is a statement, also under an `if` and before others.
#[test]
fn parses_record_statements() {
    let body = stmts("if (pid == 1) { record hit < pid; n = arg0 > } record other <>; @x = 1");
    let StmtKind::If { then, .. } = &body[0].kind else {
        panic!("not an if: {body:?}")
    };
    let StmtKind::Record { name, record } = &then.stmts[0].kind else {
        panic!("not a record: {then:?}")
    };
    assert_eq!(
        (name.as_str(), items(record)),
        ("hit", vec!["pid".into(), "n=arg0".into()])
    );
    assert!(
        matches!(&body[1].kind, StmtKind::Record { name, record } if name == "other" && record.items.is_empty())
    );
    assert_eq!(body.len(), 3);
}

/// `record` is a keyword: a record statement without a name or items is
/// a syntax error naming what is missing, with how to write one.
#[test]
fn rejects_incomplete_record_statements() {
    let source = "BEGIN { record < pid > }";
    let (message, at) = error_at(source);
    assert_eq!(message, "expected record name, found `<`");
    assert_eq!(at, source.find('<').unwrap());
    let source = "BEGIN { record hit pid }";
    let (message, at) = error_at(source);
    assert_eq!(message, "expected `<`, found `pid`");
    assert_eq!(at, source.find("pid").unwrap());
    let rendered = rendered_error(source);
    assert!(
        rendered.contains("help: a record statement is written `record NAME < item; item; ... >`"),
        "{rendered}"
    );
}
