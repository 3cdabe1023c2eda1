//! Expression trees: precedence, associativity, postfix/prefix forms, literals, spans.

use super::*;
use crate::frontend::ast::{Span, TypeName};

/// `*` binds tighter than `+`, and `+` tighter than comparisons.
#[test]
fn multiplication_binds_tighter_than_addition() {
    assert_eq!(tree("a + b * c"), "(+ a (* b c))");
    assert_eq!(tree("a * b + c"), "(+ (* a b) c)");
    assert_eq!(tree("a + b < c * d"), "(< (+ a b) (* c d))");
}

/// Every binary level in order, lowest first, nests to the right.
#[test]
fn full_precedence_ladder() {
    assert_eq!(
        tree("a || b && c | d ^ e & f == g < h << i + j * k"),
        "(|| a (&& b (| c (^ d (& e (== f (< g (<< h (+ i (* j k))))))))))"
    );
    assert_eq!(
        tree("a * b + c << d < e != f & g ^ h | i && j || k"),
        "(|| (&& (| (^ (& (!= (< (<< (+ (* a b) c) d) e) f) g) h) i) j) k)"
    );
}

/// Operators of one level associate to the left.
#[test]
fn binary_operators_are_left_associative() {
    assert_eq!(tree("a - b - c"), "(- (- a b) c)");
    assert_eq!(tree("a / b % c * d"), "(* (% (/ a b) c) d)");
    assert_eq!(tree("a << b >> c"), "(>> (<< a b) c)");
    assert_eq!(tree("a == b != c"), "(!= (== a b) c)");
    assert_eq!(tree("a <= b >= c > d"), "(> (>= (<= a b) c) d)");
    assert_eq!(tree("a || b || c"), "(|| (|| a b) c)");
}

/// `?:` is the loosest operator and nests to the right.
#[test]
fn ternary_is_lowest_and_right_associative() {
    assert_eq!(tree("a || b ? c + 1 : d"), "(? (|| a b) (+ c 1) d)");
    assert_eq!(tree("a ? b : c ? d : e"), "(? a b (? c d e))");
    assert_eq!(tree("a ? b ? c : d : e"), "(? a (? b c d) e)");
}

/// Parentheses override precedence; commas make tuples.
#[test]
fn parentheses_and_tuples() {
    assert_eq!(tree("(a + b) * c"), "(* (+ a b) c)");
    assert_eq!(tree("((a))"), "a");
    assert_eq!(tree("(a, b + 1, \"s\")"), "(tuple a (+ b 1) \"s\")");
    assert_eq!(tree("(a, (b, c)).1.0"), "(. (. (tuple a (tuple b c)) 1) 0)");
}

/// Prefix operators bind looser than postfix ones and tighter than binary ones.
#[test]
fn unary_operators() {
    assert_eq!(tree("!a == b"), "(== (Not a) b)");
    assert_eq!(tree("-a * b"), "(* (Neg a) b)");
    assert_eq!(tree("~a & b"), "(& (BitNot a) b)");
    assert_eq!(tree("*p->next"), "(Deref (-> p next))");
    assert_eq!(tree("&x[1]"), "(AddrOf ([] x 1))");
    assert_eq!(tree("!!-~x"), "(Not (Not (Neg (BitNot x))))");
    assert_eq!(tree("a - -b"), "(- a (Neg b))");
}

/// Casts to integer and struct pointer types, including nested stars.
#[test]
fn casts() {
    assert_eq!(tree("(uint32)x + 1"), "(+ (cast uint32 x) 1)");
    assert_eq!(tree("(int8)-1"), "(cast int8 (Neg 1))");
    assert_eq!(
        tree("(struct task_struct *)curtask->mm"),
        "(cast struct task_struct* (-> curtask mm))"
    );
    assert_eq!(tree("(uint8 **)arg0"), "(cast uint8** arg0)");
    assert_eq!(tree("(x) - 1"), "(- x 1)");
    let StmtKind::Expr(expr) = &stmts("(struct sock*)arg0")[0].kind else {
        panic!("not an expression");
    };
    let ExprKind::Cast { ty, .. } = &expr.kind else {
        panic!("not a cast: {expr:?}");
    };
    let expected = TypeName {
        name: "struct sock".to_owned(),
        pointer_depth: 1,
        span: Span::new(9, 21),
    };
    assert_eq!(ty, &expected);
}

/// Field access, arrows, indexing, tuple indices and calls chain left to right.
#[test]
fn postfix_chains() {
    assert_eq!(tree("args.filename"), "(. args filename)");
    assert_eq!(tree("args->ret"), "(-> args ret)");
    assert_eq!(tree("a->b.c[2]->d"), "(-> ([] (. (-> a b) c) 2) d)");
    assert_eq!(tree("$t.0"), "(. $t 0)");
    assert_eq!(
        tree("str(args.argv[0], 16)"),
        "str(([] (. args argv) 0) 16)"
    );
    assert_eq!(tree("exit()"), "exit()");
    assert_eq!(tree("@x[1][2]"), "([] @x[1] 2)");
}

/// `++`/`--` before and after maps and variables.
#[test]
fn increments_and_decrements() {
    assert_eq!(tree("@x[pid]++"), "(post++ @x[pid])");
    assert_eq!(tree("$i--"), "(post-- $i)");
    assert_eq!(tree("++@"), "(pre++ @)");
    assert_eq!(tree("--$i"), "(pre-- $i)");
    assert_eq!(tree("$i++ + 1"), "(+ (post++ $i) 1)");
}

/// Maps, variables, positionals and builtins keep their names as written.
#[test]
fn names() {
    assert_eq!(tree("@"), "@");
    assert_eq!(tree("@start[tid]"), "@start[tid]");
    assert_eq!(tree("@m[comm, pid]"), "@m[comm pid]");
    assert_eq!(tree("$x + $1 + $#"), "(+ (+ $x $1) $#)");
    assert_eq!(tree("arg0 + retval + cpu"), "(+ (+ arg0 retval) cpu)");
    assert_eq!(tree("true || false"), "(|| true false)");
}

/// Decimal, hex, octal, separators and exponents.
#[test]
fn integer_literals() {
    assert_eq!(tree("1234"), "1234");
    assert_eq!(tree("0x1F"), "31");
    assert_eq!(tree("0XfF"), "255");
    assert_eq!(tree("017"), "15");
    assert_eq!(tree("0"), "0");
    assert_eq!(tree("1_000_000"), "1000000");
    assert_eq!(tree("0xffff_ffff"), "4294967295");
    assert_eq!(tree("1e6"), "1000000");
    assert_eq!(tree("5E3"), "5000");
    assert_eq!(tree("18446744073709551615"), "18446744073709551615");
}

/// String escapes are decoded.
#[test]
fn string_escapes() {
    let ExprKind::Str(text) = single_expr(r#""a\n\t\\\"\x41\101\0\'z\r""#).kind else {
        panic!("not a string");
    };
    assert_eq!(text, "a\n\t\\\"AA\0'z\r");
    assert_eq!(tree(r#""""#), r#""""#);
}

/// Every node records the bytes it came from.
#[test]
fn spans_cover_source_text() {
    let source = "BEGIN { $x = (a + b) * c; }";
    let script = ok(source);
    let stmt = &script.probes[0].body.stmts[0];
    assert_eq!(&source[stmt.span.start..stmt.span.end], "$x = (a + b) * c");
    let StmtKind::Assign { target, value, .. } = &stmt.kind else {
        panic!("not an assignment");
    };
    assert_eq!(target.span, Span::new(8, 10));
    assert_eq!(&source[value.span.start..value.span.end], "(a + b) * c");
    let ExprKind::Binary { lhs, rhs, .. } = &value.kind else {
        panic!("not binary");
    };
    assert_eq!(&source[lhs.span.start..lhs.span.end], "(a + b)");
    assert_eq!(&source[rhs.span.start..rhs.span.end], "c");
    assert_eq!(script.probes[0].body.span, Span::new(6, 27));
    assert_eq!(script.probes[0].span, Span::new(0, 27));
}

/// Spans stop at the last token, not at following whitespace.
#[test]
fn spans_exclude_trailing_whitespace() {
    let source = "BEGIN { a ? b : c   ; f(x)   }";
    let script = ok(source);
    for stmt in &script.probes[0].body.stmts {
        let text = &source[stmt.span.start..stmt.span.end];
        assert_eq!(text, text.trim(), "{stmt:?}");
    }
}

fn single_expr(source: &str) -> Expr {
    match stmts(source).remove(0).kind {
        StmtKind::Expr(expr) => expr,
        other => panic!("not an expression statement: {other:?}"),
    }
}
