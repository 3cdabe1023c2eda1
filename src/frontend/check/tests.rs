//! Checker tests against a fake machine: type inference for maps and
//! variables, and the user mistakes the checker reports.

use crate::frontend::checked::{CheckedProgram, MapDecl, MapValueKind};
use crate::frontend::diag::ScriptError;
use crate::frontend::fake_machine::FakeMachine;
use crate::frontend::parse;
use crate::frontend::types::Type;
use crate::vocab::AggFunc;

/// Parses and checks `source` against [`FakeMachine`].
#[track_caller]
fn check(source: &str) -> Result<CheckedProgram, Vec<ScriptError>> {
    let script = parse::parse(source, "t.bt")
        .unwrap_or_else(|e| panic!("parse error in test script:\n{}", e.render()));
    super::check(&script, &FakeMachine, &Default::default())
}

/// Checks `source`, which must have no errors.
#[track_caller]
fn checks(source: &str) -> CheckedProgram {
    check(source).unwrap_or_else(|errors| panic!("unexpected errors: {errors:#?}"))
}

/// The single error `source` must produce: its message, the text under the caret, and its help.
#[track_caller]
fn error(source: &str) -> (String, String, Option<String>) {
    let errors = check(source)
        .err()
        .unwrap_or_else(|| panic!("expected an error for {source}"));
    assert_eq!(errors.len(), 1, "expected one error: {errors:#?}");
    let e = &errors[0];
    (
        e.message.clone(),
        source[e.span.start..e.span.end].to_string(),
        e.help.clone(),
    )
}

fn map<'a>(program: &'a CheckedProgram, name: &str) -> &'a MapDecl {
    program
        .maps
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no map {name}"))
}

fn str_ty(len: u32) -> Type {
    Type::Str { len }
}

/// A map's key and value types come from assignments in every probe; strings
/// settle on the longest buffer and integers widen to 64 bits.
#[test]
fn infers_map_types_across_probes() {
    let program = checks(
        r#"BEGIN { @s["a"] = "hello"; @n = (int8)1; } END { @s["bb"] = comm; @n = (uint32)2; @c[pid, "x"] = count(); }"#,
    );
    let s = map(&program, "@s");
    assert_eq!(s.key, Some(str_ty(3)));
    assert_eq!(s.value, MapValueKind::Plain(str_ty(16)));
    assert_eq!(map(&program, "@n").value, MapValueKind::Plain(Type::U64));
    let c = map(&program, "@c");
    assert_eq!(c.key, Some(Type::Tuple(vec![Type::U64, str_ty(2)])));
    assert_eq!(c.value, MapValueKind::Aggregate(AggFunc::Count));
    assert!(!c.read_in_kernel);
}

/// A map read in one probe takes the type assigned in a later probe.
#[test]
fn map_read_before_its_assignment_in_text_order() {
    let program = checks(r#"BEGIN { printf("%s\n", @name); } END { @name = comm; }"#);
    let name = map(&program, "@name");
    assert_eq!(name.value, MapValueKind::Plain(str_ty(16)));
    assert!(name.read_in_kernel);
}

/// Storing a string where an integer was stored is an error on the second store.
#[test]
fn rejects_conflicting_map_values() {
    let (message, at, _) = error(r#"BEGIN { @x = 1; } END { @x = "s"; }"#);
    assert_eq!(message, "@x holds int64 elsewhere; cannot store string[2]");
    assert_eq!(at, "@x");
}

/// A map that is an aggregation in one place cannot hold plain values or another aggregation.
#[test]
fn rejects_aggregation_mixed_with_plain_values() {
    let (message, _, _) = error("BEGIN { @x = count(); @x = 5; }");
    assert_eq!(
        message,
        "@x holds count() elsewhere; cannot also hold values of type int64"
    );
    let (message, _, _) = error("BEGIN { @x = count(); @x = sum(1); }");
    assert_eq!(
        message,
        "@x holds count() elsewhere; cannot also hold sum()"
    );
}

/// Keys must agree in type, and a map has keys everywhere or nowhere.
#[test]
fn rejects_key_type_mismatch() {
    let (message, at, _) = error(r#"BEGIN { @m[1] = 1; @m["a"] = 2; }"#);
    assert_eq!(
        message,
        "@m has keys of type int64 elsewhere; this key is string[2]"
    );
    assert_eq!(at, r#"@m["a"]"#);
    let (message, _, _) = error("BEGIN { @m = 1; @m[1] = 2; }");
    assert_eq!(
        message,
        "@m is used with no key elsewhere and with int64 keys here"
    );
    let (message, _, _) = error("BEGIN { @m[1] = 1; @v = @m; }");
    assert_eq!(message, "@m needs a key");
}

/// A variable's type is what all its assignments in the probe settle on.
#[test]
fn infers_variable_types_across_assignments() {
    let program = checks(
        r#"BEGIN { $s = "ab"; $s = "abcdef"; $n = (int8)1; $n = 300; printf("%s %d\n", $s, $n); }"#,
    );
    assert_eq!(program.probes[0].variables, vec![str_ty(7), Type::I64]);
    let (message, at, _) = error(r#"BEGIN { $x = 1; $x = "s"; }"#);
    assert_eq!(message, "$x holds int64 elsewhere; cannot assign string[2]");
    assert_eq!(at, "$x");
}

/// A variable whose assignment fails to check is reported once, at the
/// assignment, not again at each use (runqlen.bt on Linux 6.13+: one
/// error for `nr_running`, as bpftrace prints).
#[test]
fn failed_assignment_is_reported_once() {
    let (message, at, _) = error("BEGIN { $x = nosuch; $x = $x > 0 ? $x - 1 : 0; @ = $x; }");
    assert_eq!(message, "unknown identifier `nosuch`");
    assert_eq!(at, "nosuch");
}

/// Variables are local to their probe block: the same name may differ in type.
#[test]
fn variables_are_per_probe() {
    let program = checks(r#"BEGIN { $x = 1; } END { $x = "s"; }"#);
    assert_eq!(program.probes[0].variables, vec![Type::I64]);
    assert_eq!(program.probes[1].variables, vec![str_ty(2)]);
    let (message, at, _) = error("BEGIN { $y = 1; } END { @z = $y; }");
    assert_eq!(message, "$y is used before it is assigned");
    assert_eq!(at, "$y");
}

/// `retval` exists only in return probes; `argN` only where arguments are.
#[test]
fn rejects_retval_outside_return_probes() {
    checks("uretprobe:/bin/x:f { @r = retval; }");
    let (message, at, _) = error("uprobe:/bin/x:f { @r = retval; }");
    assert_eq!(
        message,
        "`retval` is only available in uretprobe, kretprobe and fexit probes"
    );
    assert_eq!(at, "retval");
    let (message, _, _) = error("BEGIN { @r = retval; }");
    assert_eq!(
        message,
        "`retval` is only available in uretprobe, kretprobe and fexit probes"
    );
    let (message, _, _) = error("uretprobe:/bin/x:f { @r = arg0; }");
    assert_eq!(
        message,
        "`arg0` is not available here: return probes have `retval` instead"
    );
}

/// An unknown tracepoint field is an error whose help lists the probe's fields.
#[test]
fn rejects_unknown_tracepoint_field_listing_fields() {
    let (message, at, help) = error("tracepoint:syscalls:sys_enter_openat { @ = args.nope; }");
    assert_eq!(
        message,
        "tracepoint:syscalls:sys_enter_openat has no field `nope`"
    );
    assert_eq!(at, "args.nope");
    assert_eq!(help.as_deref(), Some("fields: dfd, filename, flags"));
}

/// Tracepoint fields are typed from their format: signedness, pointers as integers.
#[test]
fn types_tracepoint_fields() {
    let program =
        checks("tracepoint:syscalls:sys_enter_write { @fd = args.fd; @buf = str(args.buf); }");
    assert_eq!(map(&program, "@fd").value, MapValueKind::Plain(Type::U64));
    assert_eq!(map(&program, "@buf").value, MapValueKind::Plain(str_ty(64)));
}

/// A wildcard checks the body once per matching tracepoint; a field only one
/// of them has is an error for the other.
#[test]
fn wildcard_checks_each_tracepoint() {
    let program = checks("tracepoint:syscalls:sys_enter_* { @[probe] = count(); }");
    let names: Vec<&str> = program.probes.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "tracepoint:syscalls:sys_enter_openat",
            "tracepoint:syscalls:sys_enter_write"
        ]
    );
    let (message, _, help) = error("tracepoint:syscalls:sys_enter_* { @ = args.count; }");
    assert_eq!(
        message,
        "tracepoint:syscalls:sys_enter_openat has no field `count`"
    );
    assert_eq!(help.as_deref(), Some("fields: dfd, filename, flags"));
}

/// `break` and `continue` need an enclosing loop.
#[test]
fn rejects_break_outside_loop() {
    checks("BEGIN { $i = 0; while ($i < 3) { $i++; if ($i == 2) { continue; } break; } }");
    let (message, at, _) = error("BEGIN { if (1) { break; } }");
    assert_eq!(message, "`break` outside of a loop");
    assert_eq!(at, "break");
    let (message, _, _) = error("BEGIN { continue; }");
    assert_eq!(message, "`continue` outside of a loop");
}

/// Aggregations are assigned to maps only; hist-like maps are print-only, while
/// count/sum/min/max maps read as integers.
#[test]
fn rejects_aggregations_as_values() {
    let (message, at, _) = error("BEGIN { $x = count(); }");
    assert_eq!(
        message,
        "count() must be assigned to a map: `@x = count(...)`"
    );
    assert_eq!(at, "count()");
    let (message, at, _) = error("BEGIN { @h = hist(1); @x = @h; }");
    assert_eq!(message, "@h holds hist() values, which can only be printed");
    assert_eq!(at, "@h");
    let program = checks("BEGIN { @c = count(); @x = @c + 1; }");
    assert_eq!(map(&program, "@x").value, MapValueKind::Plain(Type::I64));
    assert!(map(&program, "@c").read_in_kernel);
}

/// Aggregation arguments are checked: count() takes none, sum() one integer,
/// lhist() literal bounds.
#[test]
fn checks_aggregation_arguments() {
    assert_eq!(
        error("BEGIN { @x = count(1); }").0,
        "count() takes no arguments"
    );
    assert_eq!(
        error("BEGIN { @x = sum(); }").0,
        "sum() takes one integer argument"
    );
    assert_eq!(
        error("BEGIN { @x = sum(comm); }").0,
        "sum() needs an integer, not string[16]"
    );
    assert_eq!(
        error("BEGIN { @x = lhist(1, 10, 0, 1); }").0,
        "lhist() needs min < max and a positive step"
    );
    let program = checks("BEGIN { @x = lhist(5, 0, 100, 10); }");
    let lhist = AggFunc::Lhist {
        min: 0,
        max: 100,
        step: 10,
    };
    assert_eq!(map(&program, "@x").value, MapValueKind::Aggregate(lhist));
}

/// printf needs a literal format whose conversions match the arguments in number and kind.
#[test]
fn checks_printf_format_and_arguments() {
    checks(r#"BEGIN { printf("%d %s %x %%\n", pid, comm, 255); }"#);
    let (message, at, _) = error(r#"BEGIN { printf("%d %d\n", 1); }"#);
    assert_eq!(
        message,
        "the format has 2 conversions but 1 arguments follow"
    );
    assert_eq!(at, r#"printf("%d %d\n", 1)"#);
    let (message, at, _) = error(r#"BEGIN { printf("%d\n", comm); }"#);
    assert_eq!(message, "printf cannot format string[16] here");
    assert_eq!(at, "comm");
    let (message, _, _) = error(r#"BEGIN { $f = "x"; printf($f); }"#);
    assert_eq!(message, "printf() needs a format string literal first");
    let (message, at, _) = error(r#"BEGIN { printf("%q %d\n", 1); }"#);
    assert_eq!(
        message,
        "bad printf format: unknown conversion `%q` at byte 0"
    );
    assert_eq!(at, r#""%q %d\n""#);
}

/// debugf() takes what the kernel's `bpf_trace_printk` formats (at most 3
/// integers or strings, no precision, no `%c`) and warns as bpftrace does.
#[test]
fn checks_debugf_against_trace_printk() {
    let program = checks(r#"BEGIN { debugf("%s %-5lld %x", comm, pid, 255); }"#);
    assert!(program.warnings[0].contains("not recommended for production"));
    let (message, _, _) = error(r#"BEGIN { debugf("%d %d %d %d", 1, 2, 3, 4); }"#);
    assert_eq!(
        message,
        "debugf() takes at most 3 arguments after the format"
    );
    let (message, _, help) = error(r#"BEGIN { debugf("%.2d", 1); }"#);
    assert_eq!(message, "debugf() cannot print a precision");
    assert!(help.is_some_and(|h| h.contains("%s")));
    let (message, _, _) = error(r#"BEGIN { debugf("%c", 65); }"#);
    assert_eq!(message, "debugf() cannot print `%c`");
    let (message, at, _) = error(r#"BEGIN { debugf("%s", 1); }"#);
    assert_eq!(message, "debugf()'s `%s` prints strings, not int64");
    assert_eq!(at, "1");
}

/// Several independent mistakes are all reported, in source order.
#[test]
fn reports_every_error() {
    let errors =
        check("BEGIN { break; } END { @x = retval; $y = nope; }").expect_err("three errors");
    let messages: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(
        messages,
        [
            "`break` outside of a loop",
            "`retval` is only available in uretprobe, kretprobe and fexit probes",
            "unknown identifier `nope`",
        ]
    );
}

/// Conditions and operators need integers; strings compare only with `==`/`!=`.
#[test]
fn checks_operand_types() {
    checks(r#"BEGIN { if (comm == "sh") { @a = 1; } }"#);
    let (message, at, _) = error("BEGIN { if (comm) { @a = 1; } }");
    assert_eq!(message, "a condition must be an integer, not string[16]");
    assert_eq!(at, "comm");
    let (message, _, _) = error(r#"BEGIN { @a = comm < "x"; }"#);
    assert_eq!(message, "`<` cannot combine string[16] and string[2]");
}

/// unroll counts outside 1..=100 name the bound broken, in bpftrace's words.
#[test]
fn unroll_bounds_are_named() {
    let (message, under, _) = error("BEGIN { unroll(101) { @x = 1; } }");
    assert_eq!(
        (message.as_str(), under.as_str()),
        ("unroll maximum value is 100", "101")
    );
    let (message, _, _) = error("BEGIN { unroll(0) { @x = 1; } }");
    assert_eq!(message, "unroll minimum value is 1");
    let (message, _, _) = error("BEGIN { $n = 2; unroll($n) { @x = 1; } }");
    assert_eq!(message, "unroll needs an integer literal from 1 to 100");
}

/// A ternary statement runs one branch for its effect, so branches without a
/// value (printf) are accepted; a ternary used as a value still needs values.
#[test]
fn ternary_statement_branches_need_no_value() {
    checks(r#"BEGIN { $a = 1; $a == 1 ? printf("yes\n") : printf("no\n"); }"#);
    let (message, under, _) = error(r#"BEGIN { $b = 1 ? printf("yes\n") : 2; }"#);
    assert_eq!(message, "printf() has no value");
    assert_eq!(under, r#"printf("yes\n")"#);
}

/// buf() values compare with `==` and `!=` only.
#[test]
fn buffers_compare_for_equality_only() {
    checks(r#"BEGIN { $a = buf("hi", 2); $b = buf("bye", 3); @e = $a == $b; @n = $a != $b; }"#);
    let (message, _, _) = error(r#"BEGIN { $a = buf("hi", 2); @l = $a < $a; }"#);
    assert_eq!(message, "`<` cannot combine buffer[2] and buffer[2]");
}

/// buf() of an array takes all its bytes (byte arrays other than `char`
/// ones too, as bpftrace keeps them arrays); with a length, at most those.
#[test]
fn buf_of_arrays() {
    let program = checks(
        "struct S { int d[4]; unsigned char u[3]; char c[3]; } uprobe:/bin/x:f { $s = (struct S *)arg0; @d = buf($s->d); @u = buf($s->u); @c = buf($s->c, 3); @two = buf($s->d, 2); }",
    );
    for (name, len) in [("@d", 16), ("@u", 3), ("@c", 3), ("@two", 2)] {
        assert_eq!(
            map(&program, name).value,
            MapValueKind::Plain(Type::Buffer { len }),
            "{name}"
        );
    }
}

/// ntop() and macaddr() take `unsigned char` arrays as they take `char` ones.
#[test]
fn byte_arrays_are_addresses() {
    checks(
        "struct S { unsigned char a6[16]; unsigned char a4[4]; unsigned char m[6]; } uprobe:/bin/x:f { $s = (struct S *)arg0; @a = ntop($s->a6); @b = ntop($s->a4); @m = macaddr($s->m); }",
    );
    let (message, _, _) = error(
        "struct S { unsigned char a5[5]; } uprobe:/bin/x:f { $s = (struct S *)arg0; @a = ntop($s->a5); }",
    );
    assert_eq!(
        message,
        "ntop() needs an integer or a 4- or 16-byte address, not unsigned char[5]"
    );
}

/// buf() of a string the script makes or of an address without a length is
/// bpftrace's refusal, on the call.
#[test]
fn buf_needs_a_length_except_for_arrays() {
    for (source, kind) in [
        (r#"BEGIN { @b = buf("hi"); }"#, "string"),
        (r#"BEGIN { $s = "hi"; @b = buf($s); }"#, "string"),
        (
            "struct S { char c[3]; } uprobe:/bin/x:f { $s = (struct S *)arg0; @b = buf($s->c); }",
            "string",
        ),
        ("BEGIN { @b = buf(0); }", "integer"),
    ] {
        let (message, under, help) = error(source);
        assert_eq!(
            message,
            format!("buf() expects a length argument for non-array type {kind}")
        );
        assert!(under.starts_with("buf(") && under.ends_with(')'), "{under}");
        assert_eq!(
            help.as_deref(),
            Some("give the bytes to take: `buf(x, len)`")
        );
    }
}
