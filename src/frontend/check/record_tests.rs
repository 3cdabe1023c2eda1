//! Checker tests for record blocks and spans against a fake machine: item
//! names and types, duplicate names, one stack per record, span keys and
//! ends, and records in BEGIN.

use crate::frontend::check::check;
use crate::frontend::checked::{CheckedProgram, RecordDecl, StackKind};
use crate::frontend::diag::ScriptError;
use crate::frontend::fake_machine::FakeMachine;
use crate::frontend::options::CompileOptions;
use crate::frontend::parse;
use crate::frontend::types::Type;

fn checked(source: &str) -> Result<CheckedProgram, Vec<ScriptError>> {
    checked_with(source, &CompileOptions::default())
}

fn checked_with(
    source: &str,
    options: &CompileOptions,
) -> Result<CheckedProgram, Vec<ScriptError>> {
    let script = parse::parse(source, "t.bt")
        .unwrap_or_else(|e| panic!("parse error in test script:\n{}", e.render()));
    check(&script, &FakeMachine, options)
}

/// The records of `source`, which must check.
#[track_caller]
fn records(source: &str) -> Vec<RecordDecl> {
    match checked(source) {
        Ok(program) => program.records,
        Err(errors) => panic!("unexpected errors: {errors:#?}"),
    }
}

/// Every error of `source` as (message, text under the caret).
#[track_caller]
fn errors(source: &str) -> Vec<(String, String)> {
    let errors = checked(source)
        .err()
        .unwrap_or_else(|| panic!("expected errors for {source}"));
    errors
        .iter()
        .map(|e| {
            (
                e.message.clone(),
                source[e.span.start..e.span.end].to_string(),
            )
        })
        .collect()
}

fn fields(record: &RecordDecl) -> Vec<(&str, &Type)> {
    record.fields.iter().map(|(n, t)| (n.as_str(), t)).collect()
}

/// Bare items take their own names: builtins, fields, `str(...)` of a field, variables.
#[test]
fn bare_items_are_named_after_themselves() {
    let r = records("tracepoint:syscalls:sys_exit_read < pid; comm; args.ret; cpu >");
    let names: Vec<&str> = fields(&r[0]).iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["pid", "comm", "ret", "cpu"]);
    assert_eq!(r[0].name, "sys_exit_read");
    assert!(!r[0].is_span);
    let r = records("uprobe:/bin/x:f < str(arg0); size = arg1 >");
    assert_eq!(
        fields(&r[0]),
        [("arg0", &Type::Str { len: 64 }), ("size", &Type::U64)]
    );
    assert_eq!(r[0].name, "f");
}

/// An expression that names nothing needs `name =`, with help saying so.
#[test]
fn rejects_unnamed_expression_items() {
    let source = "kprobe:f < arg0 + 1 >";
    let errors = checked(source).expect_err("an error");
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].message, "this item needs a name");
    assert_eq!(
        &source[errors[0].span.start..errors[0].span.end],
        "arg0 + 1"
    );
    assert_eq!(
        errors[0].help.as_deref(),
        Some("write it as `name = expression`")
    );
}

/// Two items with one name, named or implied, are an error on the second.
#[test]
fn rejects_duplicate_item_names() {
    assert_eq!(
        errors("kprobe:f < a = arg0; a = arg1 >"),
        [(
            "the record already has an item named `a`".to_string(),
            "a = arg1".to_string()
        )]
    );
    assert_eq!(
        errors("kprobe:f < pid; pid = arg0 >"),
        [(
            "the record already has an item named `pid`".to_string(),
            "pid = arg0".to_string()
        )]
    );
}

/// Items must be integers or strings.
#[test]
fn rejects_tuple_items() {
    let found = errors("kprobe:f < t = (arg0, arg1) >");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .0
            .starts_with("a record item must be an integer or a string"),
        "{found:?}"
    );
}

/// A record holds at most one stack keyword; each keyword sets its kind.
#[test]
fn one_stack_per_record() {
    let message = "a record holds one stack: use `stack` for user and kernel frames together";
    assert_eq!(
        errors("kprobe:f < stack; ustack >"),
        [(message.to_string(), "ustack".to_string())]
    );
    for (word, kind) in [
        ("stack", StackKind::Both),
        ("ustack", StackKind::User),
        ("kstack", StackKind::Kernel),
    ] {
        let r = records(&format!("kprobe:f < a = arg0; {word} >"));
        assert_eq!(r[0].stack, Some(kind), "{word}");
        assert_eq!(r[0].fields.len(), 1, "a stack is not a field");
    }
}

/// A span becomes one record: start fields then end fields, and the first stack.
#[test]
fn span_record_joins_both_ends() {
    let r = records("span io by arg0 { kprobe:a < fd = arg0; kstack > kprobe:b /1/ < n = arg1 > }");
    let span = r.iter().find(|r| r.is_span).expect("span record");
    assert_eq!((span.probe.as_str(), span.name.as_str()), ("span:io", "io"));
    assert_eq!(fields(span), [("fd", &Type::U64), ("n", &Type::U64)]);
    assert_eq!(span.stack, Some(StackKind::Kernel));
}

/// Integer keys of different widths unify across ends.
#[test]
fn span_keys_unify_integers() {
    let program = checked("span s by arg0 { kprobe:a < > kprobe:b /1/ }").expect("checks");
    assert_eq!(program.spans[0].key, Type::U64);
}

/// A key that is a tuple is rejected.
#[test]
fn rejects_tuple_span_key() {
    let found = errors("span s by (arg0, arg1) { kprobe:a < > kprobe:b /1/ }");
    assert!(!found.is_empty());
    assert!(
        found[0]
            .0
            .starts_with("a span key must be an integer or a string"),
        "{found:?}"
    );
}

/// A string key (`by comm`) is accepted and typed as a string.
#[test]
fn span_string_key() {
    let program = checked("span t by comm { kprobe:a < > kprobe:b /1/ }").expect("checks");
    assert!(matches!(program.spans[0].key, Type::Str { .. }));
}

/// Ends whose keys have different types (an integer `args.ret` at one end,
/// a string at the other) are rejected at the second end's key.
#[test]
fn rejects_conflicting_span_key_types() {
    let source =
        "span s by args.ret { tracepoint:syscalls:sys_exit_read < > tracepoint:sched:named /1/ }";
    let found = errors(source);
    let message = "span `s` has keys of type int64 elsewhere; this key is string[16]";
    assert_eq!(found, [(message.to_string(), "args.ret".to_string())]);
}

/// Records in BEGIN check: an instant record named BEGIN with its fields.
#[test]
fn records_in_begin() {
    let r = records("BEGIN < pid; x = 5 >");
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].probe.as_str(), r[0].name.as_str()),
        ("BEGIN", "BEGIN")
    );
    assert_eq!(
        fields(&r[0]).iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        ["pid", "x"]
    );
    assert!(
        errors("BEGIN < a = arg0 >")
            .iter()
            .any(|(_, at)| at == "arg0")
    );
}

/// Record items are checked like expressions: unknown maps and return-only values.
#[test]
fn record_items_are_checked_expressions() {
    assert_eq!(
        errors("kprobe:f < x = @m >"),
        [("@m is never assigned".to_string(), "@m".to_string())]
    );
    assert!(
        !errors("kprobe:f < retval >").is_empty(),
        "retval needs a return probe"
    );
}
