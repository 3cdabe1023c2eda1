//! Checking updates: `x op= v`, `x++`/`--x` as statements and as values, and
//! map assignments that read the map they assign (`@n = @n + 1`). A map
//! updated only this way holds integers, and reads 0 before its first write.

use crate::frontend::ast::{BinOp, Expr, ExprKind, Span};
use crate::frontend::check::Checker;
use crate::frontend::checked::{MapValueKind, TExpr, TExprKind, TStmt, TStmtKind};
use crate::frontend::types::Type;

impl Checker<'_> {
    /// `target op= value`.
    pub(super) fn compound(
        &mut self,
        target: &Expr,
        op: BinOp,
        value: Expr,
        span: Span,
    ) -> Option<TStmtKind> {
        if let ExprKind::Map { name, keys } = &target.kind {
            self.declare_int_map(name, keys, target.span)?;
        }
        let kind = ExprKind::Binary {
            op,
            lhs: Box::new(target.clone()),
            rhs: Box::new(value),
        };
        self.assign(target, &Expr { kind, span })
    }

    /// `target++` or `target--` as a statement: `target += 1`.
    pub(super) fn inc_dec(
        &mut self,
        target: &Expr,
        increment: bool,
        span: Span,
    ) -> Option<TStmtKind> {
        let op = if increment { BinOp::Add } else { BinOp::Sub };
        let one = Expr {
            kind: ExprKind::Int(1),
            span,
        };
        self.compound(target, op, one, span)
    }

    /// `x++`, `++x`, `x--`, `--x` used as a value: the update runs, then the
    /// value is the new one (prefix) or the one from before (postfix, kept
    /// in a hidden variable of the block).
    pub(super) fn inc_dec_value(
        &mut self,
        target: &Expr,
        increment: bool,
        prefix: bool,
        span: Span,
    ) -> Option<TExpr> {
        // The update is checked first: it declares a map no one else assigns.
        let update = TStmt {
            kind: self.inc_dec(target, increment, span)?,
            span,
        };
        // The update (`x + 1`) already rejected a target that is no integer.
        let current = self.expr(target)?;
        if prefix {
            return Some(sequence(vec![update], current));
        }
        let hidden = format!("{} at {}", if increment { "++" } else { "--" }, span.start);
        let before = self.declare_var(&hidden, &current.ty, span)?;
        let ty = current.ty.clone();
        let keep = TStmt {
            kind: TStmtKind::AssignVar {
                var: before,
                value: current,
            },
            span,
        };
        let value = TExpr {
            kind: TExprKind::Var(before),
            ty,
            span,
        };
        Some(sequence(vec![keep, update], value))
    }

    /// Declares `@name` (with these keys) as a map of integers, as its first
    /// update or read-modify-write does.
    pub(super) fn declare_int_map(&mut self, name: &str, keys: &[Expr], span: Span) -> Option<()> {
        let key = self.map_key(keys, span)?;
        self.declare_map(
            name,
            key.as_ref().map(|k| &k.ty),
            MapValueKind::Plain(Type::I64),
            span,
        )?;
        Some(())
    }
}

/// `effects` for their effect, then `value`.
fn sequence(effects: Vec<TStmt>, value: TExpr) -> TExpr {
    TExpr {
        ty: value.ty.clone(),
        span: value.span,
        kind: TExprKind::Sequence {
            effects,
            value: Box::new(value),
        },
    }
}

#[cfg(test)]
mod tests {
    use crate::frontend::checked::{CheckedProgram, MapValueKind, TExprKind, TStmtKind};
    use crate::frontend::diag::ScriptError;
    use crate::frontend::fake_machine::FakeMachine;
    use crate::frontend::parse;
    use crate::frontend::types::Type;

    fn check(source: &str) -> Result<CheckedProgram, Vec<ScriptError>> {
        let script = parse::parse(source, "t.bt").expect("test scripts parse");
        crate::frontend::check::check(&script, &FakeMachine, &Default::default())
    }

    fn plain_int(program: &CheckedProgram, name: &str) -> bool {
        program
            .maps
            .iter()
            .any(|m| m.name == name && m.value == MapValueKind::Plain(Type::I64))
    }

    /// A map read in its own first assignment is a map of integers (it reads 0).
    #[test]
    fn self_referencing_map_assignment_declares_an_int_map() {
        let program = check("BEGIN { @n = @n + 1; @m[1, \"a\"] = @m[1, \"a\"] * 2; }")
            .unwrap_or_else(|e| panic!("{e:#?}"));
        assert!(plain_int(&program, "@n") && plain_int(&program, "@m"));
    }

    /// `x++` as a value keeps the old value in a hidden variable, updates,
    /// then reads it; `++x` updates and reads the target.
    #[test]
    fn inc_dec_values_are_sequences() {
        let program = check("BEGIN { $x = 1; $y = $x++; $z = --@c; }").expect("checks");
        let values: Vec<usize> = program.probes[0]
            .body
            .iter()
            .filter_map(|s| match &s.kind {
                TStmtKind::AssignVar { value, .. } => match &value.kind {
                    TExprKind::Sequence { effects, value } => {
                        assert!(matches!(
                            value.kind,
                            TExprKind::Var(_) | TExprKind::MapRead { .. }
                        ));
                        Some(effects.len())
                    }
                    _ => None,
                },
                _ => None,
            })
            .collect();
        assert_eq!(values, [2, 1]);
        assert!(plain_int(&program, "@c"));
    }

    /// `++` on a string is an error naming the type.
    #[test]
    fn inc_dec_of_a_string_is_an_error() {
        let errors = check("BEGIN { $s = \"a\"; $t = $s++; }").expect_err("a string");
        let messages: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(messages, ["`+` cannot combine string[2] and int64"]);
    }
}
