//! Checker tests for record blocks and spans against a fake machine: item
//! names and types, duplicate names, one stack per record, span keys and
//! ends, and records in BEGIN.

use crate::capture::model::RecordOrigin;
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

/// Options with the given `-S` kinds and `--pmu` counters.
fn options(stacks: &[&str], pmu: &[&str]) -> CompileOptions {
    let pmu: Vec<String> = pmu.iter().map(|p| p.to_string()).collect();
    CompileOptions {
        stacks: stacks.iter().map(|s| s.to_string()).collect(),
        pmu: crate::frontend::pmu::parse_counters(&pmu).expect("known counters"),
        ..CompileOptions::default()
    }
}

/// The records of `source` checked with `options`.
#[track_caller]
fn records_with(source: &str, options: &CompileOptions) -> Vec<RecordDecl> {
    match checked_with(source, options) {
        Ok(program) => program.records,
        Err(errors) => panic!("unexpected errors: {errors:#?}"),
    }
}

/// A `record NAME` statement is one record kind named NAME, shared by every
/// attach point and every statement of that name.
#[test]
fn record_statements_share_one_kind_per_name() {
    let r = records(
        "kprobe:f, kprobe:g { if (arg0) { record hit < a = arg0; comm > } } \
         kprobe:h { record hit < a = 1; comm >; record miss < > }",
    );
    assert_eq!(r.len(), 2, "{r:#?}");
    assert_eq!(
        (r[0].name.as_str(), r[0].probe.as_str()),
        ("hit", "kprobe:f")
    );
    assert_eq!(
        fields(&r[0]),
        [("a", &Type::U64), ("comm", &Type::Str { len: 16 })]
    );
    assert_eq!((r[1].name.as_str(), r[1].fields.len()), ("miss", 0));
}

/// Statements of one name with other items are an error on the second.
#[test]
fn rejects_record_statements_with_other_items() {
    let source = "kprobe:f { record hit < a = arg0 > }\nkprobe:g { record hit < b = arg0 > }";
    let found = errors(source);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0].0,
        "record `hit` is recorded elsewhere with other items: every `record hit` must record the same items"
    );
    assert_eq!(found[0].1, "record hit < b = arg0 >");
    assert_eq!(
        errors("kprobe:f { record x < stack > } kprobe:g { record x < > }").len(),
        1
    );
}

/// `stack(KIND)` captures only when `-S KIND` is on; otherwise the record
/// has no stack at all.
#[test]
fn stack_kind_follows_options() {
    let source = "kprobe:f < a = arg0; stack(offcpu) >";
    assert_eq!(records(source)[0].stack, None);
    let on = records_with(source, &options(&["offcpu"], &[]));
    assert_eq!(on[0].stack, Some(StackKind::Both));
    assert_eq!(on[0].fields.len(), 1);
    let other = records_with(source, &options(&["waker"], &[]));
    assert_eq!(other[0].stack, None);
}

/// An unknown stack kind is an error listing the valid ones.
#[test]
fn rejects_unknown_stack_kind() {
    assert_eq!(
        errors("kprobe:f < stack(oncpu) >"),
        [(
            "`stack(KIND)` takes one of timer, offcpu, waker, probe, pmu; \
             `stack(offcpu, NEXT)` the task switched in, or `pending`"
                .to_string(),
            "stack(oncpu)".to_string()
        )]
    );
}

/// `stack(offcpu, pending)` belongs at `sys_exit`, and only with a
/// threshold: elsewhere it is an error naming the place.
#[test]
fn pending_stacks_only_at_sys_exit() {
    let threshold = CompileOptions {
        offcpu_min_block_ns: Some(1_000_000),
        ..options(&["offcpu"], &[])
    };
    let script = parse::parse("kprobe:f < stack(offcpu, pending) >", "t.bt").expect("parses");
    let errors = check(&script, &FakeMachine, &threshold).expect_err("not at sys_exit");
    assert_eq!(
        errors[0].message,
        "`stack(offcpu, pending)` is taken at a system call's return: use it in `tp_btf:sys_exit`"
    );
}

/// With `-S probe`, script records without a stack item get one; records
/// with a stack item (even one that is off) and tracker records do not.
#[test]
fn probe_stacks_apply_to_script_records_only() {
    let probe = options(&["probe"], &[]);
    let r = records_with("kprobe:f < a = arg0 > kprobe:g { record r < > }", &probe);
    assert_eq!(
        (r[0].stack, r[1].stack),
        (Some(StackKind::Both), Some(StackKind::Both))
    );
    let r = records_with("kprobe:f < stack(offcpu) >", &probe);
    assert_eq!(r[0].stack, None);
    let mut script = parse::parse("kprobe:f < a = arg0 >", "t.bt").expect("parses");
    script.probes[0].origin = RecordOrigin::Tracker;
    let program = check(&script, &FakeMachine, &probe).expect("checks");
    assert_eq!(program.records[0].stack, None);
    assert_eq!(program.records[0].origin, RecordOrigin::Tracker);
}

/// `pmu` adds value, enabled and running per counter, `pmu_end:` at the end
/// of a span, and nothing without counters.
#[test]
fn pmu_items_expand_per_counter() {
    let counters = options(&[], &["sw:page-faults", "cycles"]);
    let program = checked_with("kprobe:f < a = arg0; pmu >", &counters).expect("checks");
    let names: Vec<&str> = fields(&program.records[0])
        .iter()
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(
        names,
        [
            "a",
            "pmu:sw:page-faults",
            "pmu:sw:page-faults:enabled",
            "pmu:sw:page-faults:running",
            "pmu:cycles",
            "pmu:cycles:enabled",
            "pmu:cycles:running"
        ]
    );
    assert_eq!(program.counters.len(), 2);
    let span = records_with(
        "span s { kprobe:a < pmu > kretprobe:a < pmu > }",
        &options(&[], &["cycles"]),
    );
    let names: Vec<&str> = fields(&span[0]).iter().map(|(n, _)| *n).collect();
    assert_eq!(names[0], "pmu:cycles");
    assert_eq!(names[3], "pmu_end:cycles");
    let none = checked_with("kprobe:f < pmu >", &CompileOptions::default()).expect("checks");
    assert!(none.records[0].fields.is_empty() && none.counters.is_empty());
    let unused = checked_with("kprobe:f < pid >", &counters).expect("checks");
    assert!(
        unused.counters.is_empty(),
        "no maps for counters nobody reads"
    );
}
