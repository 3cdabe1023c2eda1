//! Positional parameters: `$1`..`$N` and `$#` are replaced by the command
//! line's values before checking, as bpftrace does: numbers become integers,
//! anything else (and a missing parameter) a string.

use crate::frontend::ast::{Block, Expr, ExprKind, Script, StmtKind};

/// Replace every positional parameter in `script` with its value from `params`.
pub fn substitute(script: &mut Script, params: &[String]) {
    for probe in &mut script.probes {
        if let Some(predicate) = &mut probe.predicate {
            expr(predicate, params);
        }
        block(&mut probe.body, params);
    }
}

fn block(block: &mut Block, params: &[String]) {
    for stmt in &mut block.stmts {
        match &mut stmt.kind {
            StmtKind::Expr(e) => expr(e, params),
            StmtKind::Assign { target, value, .. } => {
                expr(target, params);
                expr(value, params);
            }
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                expr(cond, params);
                self::block(then, params);
                if let Some(otherwise) = otherwise {
                    self::block(otherwise, params);
                }
            }
            StmtKind::Unroll { count: cond, body } | StmtKind::While { cond, body } => {
                expr(cond, params);
                self::block(body, params);
            }
            StmtKind::Record { record, .. } => {
                record
                    .items
                    .iter_mut()
                    .for_each(|i| expr(&mut i.value, params));
            }
            StmtKind::Break | StmtKind::Continue | StmtKind::Return => {}
        }
    }
}

fn expr(e: &mut Expr, params: &[String]) {
    match &mut e.kind {
        ExprKind::Positional(n) => {
            let index = (*n as usize).checked_sub(1);
            let value = index.and_then(|i| params.get(i)).map_or("", String::as_str);
            e.kind = match parse_int(value) {
                Some(number) => ExprKind::Int(number),
                None => ExprKind::Str(value.to_string()),
            };
        }
        ExprKind::PositionalCount => e.kind = ExprKind::Int(params.len() as u64),
        ExprKind::Map { keys: list, .. }
        | ExprKind::Call { args: list, .. }
        | ExprKind::Tuple(list) => list.iter_mut().for_each(|x| expr(x, params)),
        ExprKind::Unary { expr: inner, .. }
        | ExprKind::Field { expr: inner, .. }
        | ExprKind::TupleIndex { expr: inner, .. }
        | ExprKind::Cast { expr: inner, .. }
        | ExprKind::IncDec { target: inner, .. } => expr(inner, params),
        ExprKind::Binary { lhs, rhs, .. }
        | ExprKind::Index {
            expr: lhs,
            index: rhs,
        } => {
            expr(lhs, params);
            expr(rhs, params);
        }
        ExprKind::Ternary {
            cond,
            then,
            otherwise,
        } => {
            expr(cond, params);
            expr(then, params);
            expr(otherwise, params);
        }
        ExprKind::Int(_)
        | ExprKind::Str(_)
        | ExprKind::Bool(_)
        | ExprKind::Ident(_)
        | ExprKind::Var(_)
        | ExprKind::Type(_) => {}
    }
}

fn parse_int(text: &str) -> Option<u64> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::parse::parse;

    /// Numeric parameters become integers, others strings, `$#` the count.
    #[test]
    fn replaces_parameters() {
        let mut script = parse(r#"BEGIN { printf("%d %s %d\n", $1, $2, $#); }"#, "t").unwrap();
        substitute(&mut script, &["42".into(), "abc".into()]);
        let StmtKind::Expr(Expr {
            kind: ExprKind::Call { args, .. },
            ..
        }) = &script.probes[0].body.stmts[0].kind
        else {
            panic!("printf call expected");
        };
        assert_eq!(args[1].kind, ExprKind::Int(42));
        assert_eq!(args[2].kind, ExprKind::Str("abc".into()));
        assert_eq!(args[3].kind, ExprKind::Int(2));
    }

    /// `$0` names no parameter: it is empty like a missing one (a fuzzer found
    /// it overflowing the index).
    #[test]
    fn dollar_zero_is_empty() {
        let mut script = parse(r#"BEGIN { printf("%s", $0); }"#, "t").unwrap();
        substitute(&mut script, &["42".into()]);
        let StmtKind::Expr(Expr {
            kind: ExprKind::Call { args, .. },
            ..
        }) = &script.probes[0].body.stmts[0].kind
        else {
            panic!("printf call expected");
        };
        assert_eq!(args[1].kind, ExprKind::Str(String::new()));
    }
}
