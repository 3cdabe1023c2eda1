//! Checking expressions: variables, maps, operators, fields, casts; names
//! and calls go to their built-ins (`crate::builtins`).

use crate::builtins;
use crate::frontend::ast::{BinOp, Expr, ExprKind, Span, TypeName, UnOp};
use crate::frontend::check::Checker;
use crate::frontend::check_kernel::is_args;
use crate::frontend::checked::*;
use crate::frontend::diag::ScriptError;
use crate::frontend::types::{STRING_LEN, Type};
use crate::vocab::{AggFunc, Context, FieldKind};

impl Checker<'_> {
    /// An expression used as a truth value.
    pub(super) fn condition(&mut self, expr: &Expr) -> TExpr {
        match self.expr(expr) {
            Some(e) if e.ty.is_int() => e,
            Some(e) => {
                self.error(ScriptError::new(
                    e.span,
                    format!("a condition must be an integer, not {}", e.ty),
                ));
                int(0, e.span)
            }
            None => int(0, expr.span),
        }
    }

    pub(crate) fn expr(&mut self, expr: &Expr) -> Option<TExpr> {
        let span = expr.span;
        let (kind, ty) = match &expr.kind {
            ExprKind::Int(n) => (TExprKind::Int(*n), Type::I64),
            ExprKind::Bool(b) => (TExprKind::Int(u64::from(*b)), Type::I64),
            ExprKind::Str(s) => (
                TExprKind::Str(s.clone()),
                Type::Str {
                    len: s.len() as u32 + 1,
                },
            ),
            ExprKind::Ident(name) => return self.ident(name, span),
            ExprKind::Var(name) => return self.var(name, span),
            ExprKind::Positional(_) | ExprKind::PositionalCount => {
                return self.fail(span, "positional parameters are replaced before checking; none was given for this one");
            }
            ExprKind::Map { name, keys } => return self.map_read(name, keys, span),
            ExprKind::Call { name, args } => return self.call_expr(name, args, span),
            ExprKind::Unary { op, expr } => return self.unary(*op, expr, span),
            ExprKind::Binary { op, lhs, rhs } => return self.binary(*op, lhs, rhs, span),
            ExprKind::Ternary {
                cond,
                then,
                otherwise,
            } => {
                let cond = self.condition(cond);
                let then = self.expr(then)?;
                let otherwise = self.expr(otherwise)?;
                let Some(ty) = then.ty.unify(&otherwise.ty) else {
                    return self.fail(
                        span,
                        &format!(
                            "the branches of `?:` differ: {} and {}",
                            then.ty, otherwise.ty
                        ),
                    );
                };
                let kind = TExprKind::Ternary {
                    cond: Box::new(cond),
                    then: Box::new(then),
                    otherwise: Box::new(otherwise),
                };
                (kind, ty)
            }
            ExprKind::Field { expr, field, .. } => return self.field(expr, field, span),
            ExprKind::TupleIndex { expr, index } => {
                let tuple = self.expr(expr)?;
                let Type::Tuple(fields) = &tuple.ty else {
                    return self.fail(span, &format!("`.{index}` needs a tuple, not {}", tuple.ty));
                };
                let Some(ty) = fields.get(*index as usize).cloned() else {
                    return self.fail(
                        span,
                        &format!("tuple index {index} is out of range for {}", tuple.ty),
                    );
                };
                (
                    TExprKind::TupleIndex {
                        expr: Box::new(tuple),
                        index: *index as usize,
                    },
                    ty,
                )
            }
            ExprKind::Index { .. } => {
                return self.fail(
                    span,
                    "indexing needs typed pointers (BTF), which probe contexts here do not provide",
                );
            }
            ExprKind::Tuple(items) => {
                let items = items
                    .iter()
                    .map(|e| self.expr(e))
                    .collect::<Option<Vec<_>>>()?;
                if let Some(bad) = items.iter().find(|e| e.ty == Type::Void) {
                    return self.fail(bad.span, "a tuple element needs a value");
                }
                let ty = Type::Tuple(items.iter().map(|e| e.ty.clone()).collect());
                (TExprKind::Tuple(items), ty)
            }
            ExprKind::Cast { ty, expr } => return self.cast(ty, expr, span),
            ExprKind::IncDec {
                target,
                increment,
                prefix,
            } => return self.inc_dec_value(target, *increment, *prefix, span),
        };
        Some(TExpr { kind, ty, span })
    }

    pub(crate) fn fail<T>(&mut self, span: Span, message: &str) -> Option<T> {
        self.error(ScriptError::new(span, message.to_string()));
        None
    }

    /// A bare word: a built-in variable.
    fn ident(&mut self, name: &str, span: Span) -> Option<TExpr> {
        match builtins::expression(name, false) {
            Some(found) => found.hooks.check(self, &found.site(&[], span)),
            None => self.fail(span, &format!("unknown identifier `{name}`")),
        }
    }

    /// `$name`, whose type is what every assignment in the probe settles on.
    fn var(&mut self, name: &str, span: Span) -> Option<TExpr> {
        let Some(&id) = self.probe.vars.get(name) else {
            return self.fail(span, &format!("${name} is used before it is assigned"));
        };
        let ty = self
            .var_type(name)
            .unwrap_or_else(|| self.probe.var_list[id.0].clone());
        Some(TExpr {
            kind: TExprKind::Var(id),
            ty,
            span,
        })
    }

    fn map_read(&mut self, name: &str, keys: &[Expr], span: Span) -> Option<TExpr> {
        let map = self.lookup_map(name, span)?;
        let key = self.map_key(keys, span)?;
        let decl = &mut self.maps[map.0];
        if decl.key.is_some() != key.is_some() {
            let message = if key.is_some() {
                "has no keys"
            } else {
                "needs a key"
            };
            let name = decl.name.clone();
            return self.fail(span, &format!("{name} {message}"));
        }
        decl.read_in_kernel = true;
        let ty = match &decl.value {
            MapValueKind::Plain(ty) => ty.clone(),
            MapValueKind::Aggregate(
                AggFunc::Count | AggFunc::Sum | AggFunc::Min | AggFunc::Max,
            ) => Type::I64,
            MapValueKind::Aggregate(agg) => {
                let message = format!(
                    "{} holds {}() values, which can only be printed",
                    decl.name,
                    agg.name()
                );
                return self.fail(span, &message);
            }
        };
        Some(TExpr {
            kind: TExprKind::MapRead {
                map,
                key: key.map(Box::new),
            },
            ty,
            span,
        })
    }

    fn unary(&mut self, op: UnOp, inner: &Expr, span: Span) -> Option<TExpr> {
        let expr = self.expr(inner)?;
        if !expr.ty.is_int() {
            return self.fail(span, &format!("operator needs an integer, not {}", expr.ty));
        }
        let ty = match op {
            UnOp::Not => Type::I64,
            UnOp::Neg => Type::I64,
            UnOp::BitNot => expr.ty.clone(),
            UnOp::Deref | UnOp::AddrOf => {
                return self.fail(span, "pointer dereference needs typed pointers (BTF), which probe contexts here do not provide");
            }
        };
        Some(TExpr {
            kind: TExprKind::Unary {
                op,
                expr: Box::new(expr),
            },
            ty,
            span,
        })
    }

    fn binary(&mut self, op: BinOp, lhs: &Expr, rhs: &Expr, span: Span) -> Option<TExpr> {
        let lhs = self.expr(lhs)?;
        let rhs = self.expr(rhs)?;
        let strings = matches!(lhs.ty, Type::Str { .. }) && matches!(rhs.ty, Type::Str { .. });
        let ty = if strings && matches!(op, BinOp::Eq | BinOp::Ne) {
            Type::I64
        } else if lhs.ty.is_int() && rhs.ty.is_int() {
            if op.is_comparison() || matches!(op, BinOp::LogicalAnd | BinOp::LogicalOr) {
                Type::I64
            } else {
                Type::Int {
                    size: 8,
                    signed: lhs.ty.is_signed() && rhs.ty.is_signed(),
                }
            }
        } else {
            let message = format!("`{}` cannot combine {} and {}", op.symbol(), lhs.ty, rhs.ty);
            return self.fail(span, &message);
        };
        Some(TExpr {
            kind: TExprKind::Binary {
                op,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
            },
            ty,
            span,
        })
    }

    fn field(&mut self, base: &Expr, field: &str, span: Span) -> Option<TExpr> {
        if !is_args(base) {
            return self.kernel_member(base, field, span);
        }
        if let Context::Btf(args) | Context::Function { args, .. } = &self.resolved().context {
            return self.btf_arg(&args.clone(), field, span);
        }
        let Context::Tracepoint(fields) = &self.resolved().context else {
            return self.fail(span, "`args.FIELD` is only available in tracepoint probes");
        };
        let Some(found) = fields.iter().find(|f| f.name == field).cloned() else {
            let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
            let probe = self.resolved().name.clone();
            let error = ScriptError::new(span, format!("{probe} has no field `{field}`"))
                .with_help(format!("fields: {}", names.join(", ")));
            self.error(error);
            return None;
        };
        let ty = match found.kind {
            FieldKind::Int { signed, .. } => Type::Int { size: 8, signed },
            FieldKind::CharArray(len) => Type::Str { len },
            FieldKind::DataLocString => Type::Str { len: STRING_LEN },
            FieldKind::Pointer { .. } => Type::U64,
        };
        Some(TExpr {
            kind: TExprKind::Field(found),
            ty,
            span,
        })
    }

    fn cast(&mut self, ty: &TypeName, inner: &Expr, span: Span) -> Option<TExpr> {
        let expr = self.expr(inner)?;
        if ty.pointer_depth > 0 && ty.name.starts_with("struct ") {
            return self.kernel_cast(ty, expr, span);
        }
        let target = match (ty.name.as_str(), ty.pointer_depth) {
            (name, 0) => int_type(name),
            _ => None,
        };
        let Some(target) = target else {
            return self.fail(
                ty.span,
                &format!(
                    "cannot cast to `{}`: only integer types are known here",
                    ty.name
                ),
            );
        };
        if !expr.ty.is_int() {
            return self.fail(span, &format!("cannot cast {} to {}", expr.ty, target));
        }
        Some(TExpr {
            kind: TExprKind::Cast(Box::new(expr)),
            ty: target,
            span,
        })
    }

    /// A call with a value: a built-in function.
    fn call_expr(&mut self, name: &str, args: &[Expr], span: Span) -> Option<TExpr> {
        if let Some(found) = builtins::expression(name, true) {
            return found.hooks.check(self, &found.site(args, span));
        }
        match builtins::misplaced_call(name) {
            Some(why) => self.fail(span, &why),
            None => self.fail(span, &format!("unknown function `{name}`")),
        }
    }

    /// The argument of an aggregation, which must be an integer.
    pub(crate) fn int_arg(&mut self, arg: &Expr, func: &str) -> Option<TExpr> {
        let arg = self.expr(arg)?;
        if !arg.ty.is_int() {
            return self.fail(
                arg.span,
                &format!("{func}() needs an integer, not {}", arg.ty),
            );
        }
        Some(arg)
    }

    /// A call as a statement: a built-in statement, or a value discarded.
    pub(super) fn call_stmt(&mut self, name: &str, args: &[Expr], span: Span) -> Option<TStmtKind> {
        if let Some(found) = builtins::statement(name) {
            let call = found.hooks.check(self, &found.site(args, span))?;
            return Some(TStmtKind::Call(call));
        }
        let value = self.call_expr(name, args, span)?;
        Some(TStmtKind::Expr(value))
    }

    /// `clear(@m)`, `zero(@m)`, `print(@m)`: a map named without a key.
    pub(crate) fn whole_map(&mut self, func: &str, args: &[Expr], span: Span) -> Option<MapRef> {
        match args.first() {
            Some(Expr {
                kind: ExprKind::Map { name, keys },
                span: map_span,
            }) if keys.is_empty() => self.lookup_map(name, *map_span),
            _ => self.fail(span, &format!("{func}() takes a map such as `@name`")),
        }
    }
}

fn int(n: u64, span: Span) -> TExpr {
    TExpr {
        kind: TExprKind::Int(n),
        ty: Type::I64,
        span,
    }
}

fn int_type(name: &str) -> Option<Type> {
    let (signed, bits) = match name {
        "int8" | "int16" | "int32" | "int64" => (true, &name[3..]),
        "uint8" | "uint16" | "uint32" | "uint64" => (false, &name[4..]),
        "char" => (true, "8"),
        "short" => (true, "16"),
        "int" => (true, "32"),
        "long" => (true, "64"),
        "bool" => (false, "8"),
        _ => return None,
    };
    let bits: u8 = bits.parse().ok()?;
    Some(Type::Int {
        size: bits / 8,
        signed,
    })
}
