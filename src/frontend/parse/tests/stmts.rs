//! Statements, blocks and probe headers.

use super::*;
use crate::frontend::ast::BinOp;

fn kinds(body: &str) -> Vec<String> {
    stmts(body).iter().map(stmt_summary).collect()
}

/// One line per statement: its kind and its expressions as S-expressions.
fn stmt_summary(stmt: &Stmt) -> String {
    match &stmt.kind {
        StmtKind::Expr(expr) => sexpr(expr),
        StmtKind::Assign { target, op, value } => {
            let op = op.map_or("", BinOp::symbol);
            format!("{} {op}= {}", sexpr(target), sexpr(value))
        }
        StmtKind::If {
            cond,
            then,
            otherwise,
        } => {
            let otherwise = otherwise.as_ref().map_or(String::new(), |block| {
                format!(" else {}", block_summary(block))
            });
            format!("if {} {}{otherwise}", sexpr(cond), block_summary(then))
        }
        StmtKind::Unroll { count, body } => {
            format!("unroll {} {}", sexpr(count), block_summary(body))
        }
        StmtKind::While { cond, body } => format!("while {} {}", sexpr(cond), block_summary(body)),
        StmtKind::Break => "break".to_owned(),
        StmtKind::Continue => "continue".to_owned(),
        StmtKind::Return => "return".to_owned(),
        StmtKind::Record { name, record } => {
            let items: Vec<String> = record.items.iter().map(|i| sexpr(&i.value)).collect();
            format!("record {name} <{}>", items.join("; "))
        }
    }
}

fn block_summary(block: &Block) -> String {
    let stmts: Vec<String> = block.stmts.iter().map(stmt_summary).collect();
    format!("{{{}}}", stmts.join("; "))
}

/// Plain, `let`, map and compound assignments.
#[test]
fn assignments() {
    assert_eq!(
        kinds("$x = 1; let $y = 2; @m[k] = 3; @m[a, b] = 4; @ = 5"),
        ["$x = 1", "$y = 2", "@m[k] = 3", "@m[a b] = 4", "@ = 5"]
    );
}

/// Every compound assignment operator maps to its binary operator.
#[test]
fn compound_assignments() {
    let ops = ["+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>"];
    for op in ops {
        assert_eq!(kinds(&format!("$x {op}= 2")), [format!("$x {op}= 2")]);
    }
    assert_eq!(kinds("$x == 2"), ["(== $x 2)"]);
}

/// Increments and calls are expression statements.
#[test]
fn expression_statements() {
    assert_eq!(
        kinds("@c[comm]++; --$i; printf(\"%d\\n\", pid); exit()"),
        [
            "(post++ @c[comm])",
            "(pre-- $i)",
            "printf(\"%d\\n\" pid)",
            "exit()"
        ]
    );
}

/// `if` with `else if` and `else`; `else if` nests an `If` in a block.
#[test]
fn if_else_chains() {
    assert_eq!(
        kinds("if (a) { x() } else if (b) { y() } else { z() }"),
        ["if a {x()} else {if b {y()} else {z()}}"]
    );
    assert_eq!(kinds("if (a) { }"), ["if a {}"]);
}

/// Loops and jumps.
#[test]
fn loops_and_jumps() {
    assert_eq!(
        kinds("unroll(3) { $i++ } while ($i < 10) { if ($i) { break } continue; } return"),
        [
            "unroll 3 {(post++ $i)}",
            "while (< $i 10) {if $i {break}; continue}",
            "return"
        ]
    );
}

/// Semicolons are optional after the last statement and after blocks, and may repeat.
#[test]
fn semicolon_rules() {
    assert_eq!(kinds(";;a;; b"), ["a", "b"]);
    assert_eq!(kinds("if (a) { b } c"), ["if a {b}", "c"]);
    assert_eq!(kinds("if (a) { b; }; c;"), ["if a {b}", "c"]);
    assert!(parse("BEGIN { a b }", "t").is_err());
}

/// Keywords are not identifiers, but words merely starting with one are.
#[test]
fn keywords_need_a_boundary() {
    assert_eq!(
        kinds("iffy; returned; letter = 1"),
        ["iffy", "returned", "letter = 1"]
    );
}

/// Provider and parts of every probe form named in the dialect.
#[test]
fn probe_specs() {
    let cases: &[(&str, &str, &[&str])] = &[
        ("BEGIN", "BEGIN", &[]),
        ("END", "END", &[]),
        ("begin", "begin", &[]),
        ("end", "end", &[]),
        (
            "uprobe:/usr/lib/x86_64-linux-gnu/libc.so.6:malloc",
            "uprobe",
            &["/usr/lib/x86_64-linux-gnu/libc.so.6", "malloc"],
        ),
        ("uprobe:libc:mal*", "uprobe", &["libc", "mal*"]),
        (
            "uprobe:/usr/lib/*/libc.so.6:malloc",
            "uprobe",
            &["/usr/lib/*/libc.so.6", "malloc"],
        ),
        ("u:bash:readline", "u", &["bash", "readline"]),
        (
            "uretprobe:/bin/bash:readline",
            "uretprobe",
            &["/bin/bash", "readline"],
        ),
        (
            "uprobe:/bin/x:func+0x10",
            "uprobe",
            &["/bin/x", "func+0x10"],
        ),
        ("uprobe:./a.out:main", "uprobe", &["./a.out", "main"]),
        ("uprobe:bin/a.out:main", "uprobe", &["bin/a.out", "main"]),
        ("usdt:/bin/x::*probe2", "usdt", &["/bin/x", "", "*probe2"]),
        ("usdt::prov:name", "usdt", &["", "prov", "name"]),
        ("uprobe:/bin/x:\"f\"+4", "uprobe", &["/bin/x", "f+4"]),
        ("uprobe:/bin/x:0x401126", "uprobe", &["/bin/x", "0x401126"]),
        (
            "usdt:/path/lib.so:prov:name",
            "usdt",
            &["/path/lib.so", "prov", "name"],
        ),
        (
            "tracepoint:syscalls:sys_enter_*",
            "tracepoint",
            &["syscalls", "sys_enter_*"],
        ),
        ("t:sched:sched_switch", "t", &["sched", "sched_switch"]),
        (
            "rawtracepoint:sched_switch",
            "rawtracepoint",
            &["sched_switch"],
        ),
        ("kprobe:do_nanosleep", "kprobe", &["do_nanosleep"]),
        ("kretprobe:do_nanosleep", "kretprobe", &["do_nanosleep"]),
        ("fentry:vfs_read", "fentry", &["vfs_read"]),
        ("profile:hz:99", "profile", &["hz", "99"]),
        ("interval:ms:100", "interval", &["ms", "100"]),
        (
            "software:cpu-clock:1000000",
            "software",
            &["cpu-clock", "1000000"],
        ),
        ("hardware:cycles:100000", "hardware", &["cycles", "100000"]),
        (
            "uprobe:/bin/x:\"ns::f(int)\"",
            "uprobe",
            &["/bin/x", "ns::f(int)"],
        ),
    ];
    for &(text, provider, parts) in cases {
        let script = ok(&format!("{text} {{ }}"));
        let spec = &script.probes[0].specs[0];
        assert_eq!(spec.provider, provider, "{text}");
        assert_eq!(spec.parts, parts, "{text}");
        assert_eq!((spec.span.start, spec.span.end), (0, text.len()), "{text}");
        assert_eq!(spec.to_string().replace('"', ""), text.replace('"', ""));
    }
}

/// In a quoted part `\"` and `\\` stand for `"` and `\` (USDT probes
/// whose names hold quotes).
#[test]
fn quoted_parts_unescape() {
    let script = ok(r#"usdt:./p:test:"\"probe1\"" { }"#);
    assert_eq!(
        script.probes[0].specs[0].parts,
        ["./p", "test", "\"probe1\""]
    );
    let script = ok(r#"uprobe:/bin/x:"a\\b"+4 { }"#);
    assert_eq!(script.probes[0].specs[0].parts, ["/bin/x", "a\\b+4"]);
}

/// Specs separate by commas, newlines or both.
#[test]
fn multiple_specs() {
    let script = ok("kprobe:a, kprobe:b\nkprobe:c,\n  kprobe:d\n{ }");
    let names: Vec<String> = script.probes[0]
        .specs
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(names, ["kprobe:a", "kprobe:b", "kprobe:c", "kprobe:d"]);
}

/// A predicate after whitespace is not read as part of a path, even with `/`
/// inside it; without whitespace it still ends a non-path part.
#[test]
fn predicates() {
    let cases = [
        ("uprobe:/bin/bash:readline /pid == 1/ { }", "(== pid 1)"),
        (
            "uprobe:/bin/bash:readline\n/pid / 2 > 1/\n{ }",
            "(> (/ pid 2) 1)",
        ),
        ("kprobe:f/pid/{ }", "pid"),
        ("kprobe:f/a ? b : c/{ }", "(? a b c)"),
        ("kprobe:f/$x?1:2/{ }", "(? $x 1 2)"),
        ("BEGIN /$1 != 0/ { }", "(!= $1 0)"),
    ];
    for (source, predicate) in cases {
        let script = ok(source);
        let probe = &script.probes[0];
        assert_eq!(sexpr(probe.predicate.as_ref().expect(source)), predicate);
    }
}

/// Preprocessor lines and both comment styles are skipped.
#[test]
fn preprocessor_and_comments() {
    let source = "#!/usr/bin/env wprof\n#include <linux/sched.h>\n#define X \\\n  1\n\
                  // line comment { \n/* block { comment */ BEGIN /* c */ { a /* c */ + b // c\n }";
    let script = ok(source);
    assert_eq!(script.probes.len(), 1);
    assert_eq!(kinds_of(&script), ["(+ a b)"]);
}

/// An empty script (or only comments) has no probes.
#[test]
fn empty_script() {
    assert_eq!(ok("").probes.len(), 0);
    assert_eq!(ok("// nothing\n").probes.len(), 0);
}

fn kinds_of(script: &Script) -> Vec<String> {
    script.probes[0]
        .body
        .stmts
        .iter()
        .map(stmt_summary)
        .collect()
}

/// Compact spellings without optional spaces parse the same.
#[test]
fn compact_spelling() {
    let script = ok("interval:s:1{exit()}BEGIN{if(x){y=1}else{y=2}}");
    assert_eq!(script.probes.len(), 2);
    assert_eq!(script.probes[0].specs[0].parts, ["s", "1"]);
    let body: Vec<String> = script.probes[1]
        .body
        .stmts
        .iter()
        .map(stmt_summary)
        .collect();
    assert_eq!(body, ["if x {y = 1} else {y = 2}"]);
}
