//! Checking expressions: variables, maps, operators, fields, casts; names
//! and calls go to their built-ins (`crate::builtins`).

use crate::builtins;
use crate::frontend::ast::{BinOp, Expr, ExprKind, Span, UnOp};
use crate::frontend::check::Checker;
use crate::frontend::check_kernel::is_args;
use crate::frontend::check_types::Arith;
use crate::frontend::checked::*;
use crate::frontend::diag::ScriptError;
use crate::frontend::preprocess;
use crate::frontend::types::{Pointer, STRING_LEN, Space, Type};
use crate::providers;
use crate::vocab::kernel_types::KernelKind;
use crate::vocab::{
    AggFunc, ArgRead, Context, FieldKind, FunctionParam, PassedIn, TracepointField,
};

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
            ExprKind::Field {
                expr: base, field, ..
            } if is_args(base) => {
                return self.args_field(field, span);
            }
            ExprKind::Field { .. }
            | ExprKind::Index { .. }
            | ExprKind::Unary {
                op: UnOp::Deref, ..
            } => return self.located_value(expr),
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
            ExprKind::Type(ty) => {
                return self.fail(ty.span, &format!("`{}` is a type, not a value", ty.name));
            }
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

    /// A bare word: a built-in variable, else an enum constant of the
    /// script or the kernel.
    fn ident(&mut self, name: &str, span: Span) -> Option<TExpr> {
        if let Some(found) = builtins::expression(name, false) {
            return found.hooks.check(self, &found.site(&[], span));
        }
        match self.enum_constant(name, span)? {
            Some(constant) => Some(constant),
            None => {
                let error = ScriptError::new(span, format!("unknown identifier `{name}`"));
                match preprocess::header_defining(name) {
                    Some(header) => self.error(error.with_help(format!(
                        "`{name}` is a macro of the kernel's <{header}>: add `#include <{header}>`"
                    ))),
                    None => self.error(error),
                }
                None
            }
        }
    }

    /// `$name`, whose type is what every assignment in the probe settles on.
    fn var(&mut self, name: &str, span: Span) -> Option<TExpr> {
        let Some(&id) = self.probe.vars.get(name) else {
            if self.probe.unchecked_vars.contains(name) {
                return None;
            }
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
            UnOp::Deref => unreachable!("dereferences are places"),
            UnOp::AddrOf => {
                let error = ScriptError::new(
                    span,
                    "`&` (address-of) is not supported, as in bpftrace 0.17".to_string(),
                )
                .with_help(
                    "use the pointer a value was read through; a member's address is the \
                     pointer plus the member's offset: `(uint64)$p + 8`",
                );
                self.error(error);
                return None;
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
        let (lhs, rhs) = match self.pointer_arithmetic(op, lhs, rhs, span) {
            Arith::Pointer(moved) => return Some(moved),
            Arith::Failed => return None,
            Arith::Plain(lhs, rhs) => (lhs, rhs),
        };
        let strings = matches!(lhs.ty, Type::Str { .. }) && matches!(rhs.ty, Type::Str { .. });
        let ty = if let Some(ty) = self.object_comparison(op, &lhs, &rhs, span) {
            ty
        } else if strings && matches!(op, BinOp::Eq | BinOp::Ne) {
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

    /// `args.NAME`: a tracepoint field, a `tp_btf` argument, or a
    /// function parameter named by debug info.
    fn args_field(&mut self, field: &str, span: Span) -> Option<TExpr> {
        match &self.resolved().context {
            Context::Btf(args) | Context::Function { args, .. } => {
                return self.btf_arg(&args.clone(), field, span);
            }
            Context::Tracepoint(fields) => {
                let fields = fields.clone();
                return self.tracepoint_field(&fields, field, span);
            }
            _ => {}
        }
        let probe = self.resolved();
        match providers::of(&probe.attach).function_params(probe, self.env) {
            Some(params) => self.param(params, field, span),
            None => self.fail(
                span,
                "`args.FIELD` is only available in tracepoint, tp_btf, fentry and uprobe probes",
            ),
        }
    }

    fn tracepoint_field(
        &mut self,
        fields: &[TracepointField],
        field: &str,
        span: Span,
    ) -> Option<TExpr> {
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
            FieldKind::Pointer { user } => self.field_pointer(&found.c_type, user),
        };
        Some(TExpr {
            kind: TExprKind::Field(found),
            ty,
            span,
        })
    }

    /// A tracepoint pointer field typed from its C type text resolved
    /// against BTF (`struct __kernel_timespec *`); a plain address when
    /// the pointee is unknown.
    fn field_pointer(&mut self, c_type: &str, user: bool) -> Type {
        let resolved = self.types.parse_type(c_type);
        match resolved.map(|id| self.types.get(id).map(|t| t.kind)) {
            Ok(Ok(KernelKind::Pointer(target))) => Type::Ptr(Pointer {
                target,
                name: self.types.name_of(target),
                btf: false,
                space: Space::of(user),
            }),
            _ => Type::U64,
        }
    }

    /// `args.NAME` of a function whose parameters debug info names.
    fn param(
        &mut self,
        params: Result<Vec<FunctionParam>, String>,
        field: &str,
        span: Span,
    ) -> Option<TExpr> {
        let params = match params {
            Ok(params) => params,
            Err(why) => {
                return self.fail(
                    span,
                    &format!("`args` needs the function's debug info: {why}"),
                );
            }
        };
        let Some(param) = params.iter().find(|p| p.name == field) else {
            let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
            let probe = self.resolved().name.clone();
            let error = ScriptError::new(span, format!("{probe} has no parameter `{field}`"))
                .with_help(format!("parameters: {}", names.join(", ")));
            self.error(error);
            return None;
        };
        let read = match &param.passed {
            Ok(PassedIn::Register(n)) => {
                let probe = self.resolved();
                providers::of(&probe.attach).arg(probe, u32::from(*n))
            }
            Ok(PassedIn::Stack(offset)) if self.resolved().function_entry => {
                Ok(ArgRead::Stack(*offset))
            }
            Ok(PassedIn::Stack(_)) => Err(
                "it is passed on the stack, where it is found only at the function's entry (not at an offset)".into(),
            ),
            Err(why) => Err(why.clone()),
        };
        let read = match read {
            Ok(read) => read,
            Err(why) => {
                return self.fail(span, &format!("parameter `{field}` cannot be read: {why}"));
            }
        };
        let value = TExpr {
            kind: TExprKind::Arg(read),
            ty: Type::U64,
            span,
        };
        let ty = self.value_type(param.ty, false, true, span)?;
        Some(TExpr {
            kind: TExprKind::Cast(Box::new(value)),
            ty,
            span,
        })
    }

    /// A call with a value: a built-in function.
    fn call_expr(&mut self, name: &str, args: &[Expr], span: Span) -> Option<TExpr> {
        if let Some(found) = builtins::expression(name, true) {
            return found.hooks.check(self, &found.site(args, span));
        }
        if let Some(why) = builtins::misplaced_call(name) {
            return self.fail(span, &why);
        }
        let error = ScriptError::new(span, format!("unknown function `{name}`"));
        match builtins::unsupported(name) {
            Some(why) => self.error(error.with_help(why)),
            None => self.error(error),
        }
        None
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
