//! Parser tests: trees for every syntax form, spans, rendered errors (insta
//! snapshots), robustness on garbage and deep nesting, and the sample scripts
//! under `tests/frontend/`.

use super::*;
use crate::frontend::ast::{Expr, ExprKind};

/// Parses `source` or fails the test with the rendered errors.
#[track_caller]
fn ok(source: &str) -> Script {
    parse(source, "test.bt").unwrap_or_else(|errors| panic!("{}", errors.render()))
}

/// Renders the errors of a script that must not parse.
#[track_caller]
fn rendered_error(source: &str) -> String {
    match parse(source, "bad.bt") {
        Ok(script) => panic!("expected an error, parsed {script:?}"),
        Err(errors) => errors.render(),
    }
}

/// The statements of `BEGIN { body }`.
#[track_caller]
fn stmts(body: &str) -> Vec<Stmt> {
    let mut script = ok(&format!("BEGIN {{ {body} }}"));
    script.probes.remove(0).body.stmts
}

/// The expression of `BEGIN { expr }` as an S-expression.
#[track_caller]
fn tree(expr: &str) -> String {
    match &stmts(expr)[..] {
        [
            Stmt {
                kind: StmtKind::Expr(expr),
                ..
            },
        ] => sexpr(expr),
        other => panic!("not one expression statement: {other:?}"),
    }
}

/// Compact prefix notation so precedence tests read like the trees they check.
fn sexpr(expr: &Expr) -> String {
    match &expr.kind {
        ExprKind::Int(n) => n.to_string(),
        ExprKind::Str(s) => format!("{s:?}"),
        ExprKind::Bool(b) => b.to_string(),
        ExprKind::Ident(name) => name.clone(),
        ExprKind::Var(name) => format!("${name}"),
        ExprKind::Positional(n) => format!("${n}"),
        ExprKind::PositionalCount => "$#".to_owned(),
        ExprKind::Map { name, keys } if keys.is_empty() => format!("@{name}"),
        ExprKind::Map { name, keys } => format!("@{name}{}", list("[", keys, "]")),
        ExprKind::Call { name, args } => format!("{name}{}", list("(", args, ")")),
        ExprKind::Unary { op, expr } => format!("({op:?} {})", sexpr(expr)),
        ExprKind::Binary { op, lhs, rhs } => {
            format!("({} {} {})", op.symbol(), sexpr(lhs), sexpr(rhs))
        }
        ExprKind::Ternary {
            cond,
            then,
            otherwise,
        } => format!("(? {} {} {})", sexpr(cond), sexpr(then), sexpr(otherwise)),
        ExprKind::Field { expr, field, arrow } => {
            format!(
                "({} {} {field})",
                if *arrow { "->" } else { "." },
                sexpr(expr)
            )
        }
        ExprKind::TupleIndex { expr, index } => format!("(. {} {index})", sexpr(expr)),
        ExprKind::Index { expr, index } => format!("([] {} {})", sexpr(expr), sexpr(index)),
        ExprKind::Tuple(items) => list("(tuple ", items, ")"),
        ExprKind::Cast { ty, expr } => {
            let stars = "*".repeat(ty.pointer_depth.into());
            format!("(cast {}{stars} {})", ty.name, sexpr(expr))
        }
        ExprKind::Type(ty) => format!("(type {}{})", ty.name, "*".repeat(ty.pointer_depth.into())),
        ExprKind::IncDec {
            target,
            increment,
            prefix,
        } => {
            let op = if *increment { "++" } else { "--" };
            let place = if *prefix { "pre" } else { "post" };
            format!("({place}{op} {})", sexpr(target))
        }
    }
}

fn list(open: &str, items: &[Expr], close: &str) -> String {
    let items: Vec<String> = items.iter().map(sexpr).collect();
    format!("{open}{}{close}", items.join(" "))
}

mod exprs;
mod records;
mod robustness;
mod stmts;
