//! Checking expressions: names to builtins, operator typing, and the
//! functions the language offers.

use crate::frontend::ast::{BinOp, Expr, ExprKind, Span, TypeName, UnOp};
use crate::frontend::check::Checker;
use crate::frontend::check_kernel::is_args;
use crate::frontend::checked::*;
use crate::frontend::diag::ScriptError;
use crate::frontend::types::{COMM_LEN, STRING_LEN, Type};
use crate::providers;
use crate::vocab::{Context, FieldKind, printf_format as printf};

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

    pub(super) fn expr(&mut self, expr: &Expr) -> Option<TExpr> {
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
            ExprKind::IncDec { .. } => {
                return self.fail(
                    span,
                    "`++`/`--` changes a variable or map; use it as a statement",
                );
            }
        };
        Some(TExpr { kind, ty, span })
    }

    pub(super) fn fail<T>(&mut self, span: Span, message: &str) -> Option<T> {
        self.error(ScriptError::new(span, message.to_string()));
        None
    }

    fn ident(&mut self, name: &str, span: Span) -> Option<TExpr> {
        let builtin = |b: Builtin, ty: Type| {
            Some(TExpr {
                kind: TExprKind::Builtin(b),
                ty,
                span,
            })
        };
        match name {
            "pid" => builtin(Builtin::Pid, Type::U64),
            "tid" => builtin(Builtin::Tid, Type::U64),
            "uid" => builtin(Builtin::Uid, Type::U64),
            "gid" => builtin(Builtin::Gid, Type::U64),
            "comm" => builtin(Builtin::Comm, Type::Str { len: COMM_LEN }),
            "nsecs" => builtin(Builtin::Nsecs, Type::U64),
            "elapsed" => builtin(Builtin::Elapsed, Type::U64),
            "cpu" => builtin(Builtin::Cpu, Type::U64),
            "cpid" => builtin(Builtin::Cpid, Type::U64),
            "rand" => builtin(Builtin::Rand, Type::U64),
            "probe" => builtin(Builtin::Probe, Type::Probe),
            "curtask" => self.curtask(span),
            "retval" => {
                let probe = self.resolved();
                let Some(read) = providers::of(&probe.attach).retval(probe) else {
                    return self.fail(
                        span,
                        "`retval` is only available in uretprobe, kretprobe and fexit probes",
                    );
                };
                Some(TExpr {
                    kind: TExprKind::Arg(read),
                    ty: Type::U64,
                    span,
                })
            }
            "func" => match self.resolved().func.clone() {
                Some(func) => Some(TExpr {
                    ty: Type::Str {
                        len: func.len() as u32 + 1,
                    },
                    kind: TExprKind::Str(func),
                    span,
                }),
                None => self.fail(
                    span,
                    "`func` is only available in uprobe, usdt, kprobe and fentry probes",
                ),
            },
            "args" => self.fail(span, "`args` needs a field: `args.NAME`"),
            _ => match name.strip_prefix("arg").and_then(|n| n.parse::<u32>().ok()) {
                Some(n) => self.arg(n, span),
                None => self.fail(span, &format!("unknown identifier `{name}`")),
            },
        }
    }

    fn arg(&mut self, n: u32, span: Span) -> Option<TExpr> {
        let probe = self.resolved();
        match providers::of(&probe.attach).arg(probe, n) {
            Ok(read) => Some(TExpr {
                kind: TExprKind::Arg(read),
                ty: Type::U64,
                span,
            }),
            Err(why) => self.fail(span, &format!("`arg{n}` is not available here: {why}")),
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
        if let Context::Btf(args) = &self.resolved().context {
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

    /// Calls that return a value.
    fn call_expr(&mut self, name: &str, args: &[Expr], span: Span) -> Option<TExpr> {
        match name {
            "str" => self.str_call(args, span),
            "strncmp" => self.strncmp(args, span),
            "ksym" => self.ksym(args, span),
            "selected" => self.selected(args, span),
            "count" | "sum" | "min" | "max" | "avg" | "stats" | "hist" | "lhist" => self.fail(
                span,
                &format!("{name}() must be assigned to a map: `@x = {name}(...)`"),
            ),
            _ if is_statement_call(name) => self.fail(span, &format!("{name}() has no value")),
            _ => self.fail(span, &format!("unknown function `{name}`")),
        }
    }

    fn strncmp(&mut self, args: &[Expr], span: Span) -> Option<TExpr> {
        let [
            lhs,
            rhs,
            Expr {
                kind: ExprKind::Int(limit),
                ..
            },
        ] = args
        else {
            return self.fail(
                span,
                "strncmp() takes two strings and an integer literal length",
            );
        };
        let (lhs, rhs) = (self.expr(lhs)?, self.expr(rhs)?);
        for side in [&lhs, &rhs] {
            if !matches!(side.ty, Type::Str { .. }) {
                return self.fail(
                    side.span,
                    &format!("strncmp() compares strings, not {}", side.ty),
                );
            }
        }
        let kind = TExprKind::StrNcmp {
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
            limit: (*limit).min(u64::from(u32::MAX)) as u32,
        };
        Some(TExpr {
            kind,
            ty: Type::I64,
            span,
        })
    }

    fn str_call(&mut self, args: &[Expr], span: Span) -> Option<TExpr> {
        let (ptr, len) = match args {
            [ptr] => (ptr, None),
            [ptr, len] => (ptr, Some(len)),
            _ => return self.fail(span, "str() takes a pointer and an optional length"),
        };
        let ptr = self.expr(ptr)?;
        if matches!(ptr.ty, Type::Str { .. }) {
            return Some(ptr);
        }
        if !ptr.ty.is_int() {
            return self.fail(ptr.span, &format!("str() needs a pointer, not {}", ptr.ty));
        }
        let (len, buffer) = match len {
            None => (None, STRING_LEN),
            Some(len) => {
                let len = self.expr(len)?;
                let buffer = match len.kind {
                    TExprKind::Int(n) => (n as u32).clamp(1, STRING_LEN),
                    _ => STRING_LEN,
                };
                (Some(Box::new(len)), buffer)
            }
        };
        let user = self.resolved().user_memory;
        Some(TExpr {
            kind: TExprKind::ReadStr {
                ptr: Box::new(ptr),
                len,
                user,
            },
            ty: Type::Str { len: buffer },
            span,
        })
    }

    /// `count()`, `sum(x)` ... on the right of a map assignment.
    /// `None` when `name` is not an aggregation; `Some(None)` on error.
    pub(super) fn aggregate(
        &mut self,
        name: &str,
        args: &[Expr],
        span: Span,
    ) -> Option<Option<(AggFunc, Option<TExpr>)>> {
        let func = match name {
            "count" => AggFunc::Count,
            "sum" => AggFunc::Sum,
            "min" => AggFunc::Min,
            "max" => AggFunc::Max,
            "avg" => AggFunc::Avg,
            "stats" => AggFunc::Stats,
            "hist" => AggFunc::Hist,
            "lhist" => return Some(self.lhist(args, span)),
            _ => return None,
        };
        let expected = usize::from(func != AggFunc::Count);
        if args.len() != expected {
            let what = if expected == 0 {
                "no arguments"
            } else {
                "one integer argument"
            };
            self.error(ScriptError::new(span, format!("{name}() takes {what}")));
            return Some(None);
        }
        let arg = match args.first() {
            None => None,
            Some(arg) => match self.int_arg(arg, name) {
                Some(arg) => Some(arg),
                None => return Some(None),
            },
        };
        Some(Some((func, arg)))
    }

    fn lhist(&mut self, args: &[Expr], span: Span) -> Option<(AggFunc, Option<TExpr>)> {
        let [value, min, max, step] = args else {
            return self.fail(span, "lhist() takes a value, min, max and step");
        };
        let value = self.int_arg(value, "lhist")?;
        let mut constant = |e: &Expr, what: &str| match e.kind {
            ExprKind::Int(n) => Some(n as i64),
            _ => self.fail(
                e.span,
                &format!("lhist() {what} must be an integer literal"),
            ),
        };
        let (min, max, step) = (
            constant(min, "min")?,
            constant(max, "max")?,
            constant(step, "step")?,
        );
        if step <= 0 || max <= min {
            return self.fail(span, "lhist() needs min < max and a positive step");
        }
        if (max - min) / step > 1000 {
            return self.fail(span, "lhist() would have more than 1000 buckets");
        }
        Some((AggFunc::Lhist { min, max, step }, Some(value)))
    }

    fn int_arg(&mut self, arg: &Expr, func: &str) -> Option<TExpr> {
        let arg = self.expr(arg)?;
        if !arg.ty.is_int() {
            return self.fail(
                arg.span,
                &format!("{func}() needs an integer, not {}", arg.ty),
            );
        }
        Some(arg)
    }

    /// Calls used as statements.
    pub(super) fn call_stmt(&mut self, name: &str, args: &[Expr], span: Span) -> Option<TStmtKind> {
        let emit = match name {
            "printf" => self.printf(args, span)?,
            "print" => self.print(args, span)?,
            "exit" => {
                self.no_args(name, args, span)?;
                Emit::Exit
            }
            "time" => match args {
                [] => Emit::Time("%H:%M:%S\n".into()),
                [
                    Expr {
                        kind: ExprKind::Str(format),
                        ..
                    },
                ] => Emit::Time(format.clone()),
                _ => return self.fail(span, "time() takes an optional format string literal"),
            },
            "clear" | "zero" => {
                let map = self.whole_map(name, args, span)?;
                if name == "clear" {
                    Emit::Clear(map)
                } else {
                    Emit::Zero(map)
                }
            }
            "delete" => return self.delete(args, span),
            _ => {
                let value = self.call_expr(name, args, span)?;
                return Some(TStmtKind::Expr(value));
            }
        };
        Some(TStmtKind::Emit(emit))
    }

    fn no_args(&mut self, name: &str, args: &[Expr], span: Span) -> Option<()> {
        if args.is_empty() {
            Some(())
        } else {
            self.fail(span, &format!("{name}() takes no arguments"))
        }
    }

    /// `clear(@m)`, `zero(@m)`, `print(@m)`: a map named without a key.
    fn whole_map(&mut self, func: &str, args: &[Expr], span: Span) -> Option<MapRef> {
        match args.first() {
            Some(Expr {
                kind: ExprKind::Map { name, keys },
                span: map_span,
            }) if keys.is_empty() => self.lookup_map(name, *map_span),
            _ => self.fail(span, &format!("{func}() takes a map such as `@name`")),
        }
    }

    fn delete(&mut self, args: &[Expr], span: Span) -> Option<TStmtKind> {
        let (name, keys, map_span) = match args {
            [
                Expr {
                    kind: ExprKind::Map { name, keys },
                    span: s,
                },
            ] => (name, keys.clone(), *s),
            [
                Expr {
                    kind: ExprKind::Map { name, keys },
                    span: s,
                },
                key,
            ] if keys.is_empty() => (name, vec![key.clone()], *s),
            _ => {
                return self.fail(
                    span,
                    "delete() takes a map element: `delete(@m[key])` or `delete(@m, key)`",
                );
            }
        };
        let map = self.lookup_map(name, map_span)?;
        let key = self.map_key(&keys, map_span)?;
        Some(TStmtKind::Delete { map, key })
    }

    fn print(&mut self, args: &[Expr], span: Span) -> Option<Emit> {
        if let Some(Expr {
            kind: ExprKind::Map { keys, .. },
            ..
        }) = args.first()
            && keys.is_empty()
        {
            let map = self.whole_map("print", args, span)?;
            let mut constant = |e: Option<&Expr>| match e.map(|e| &e.kind) {
                None => Some(0),
                Some(ExprKind::Int(n)) => Some(*n),
                Some(_) => self.fail(span, "print()'s top and div must be integer literals"),
            };
            let (top, div) = (constant(args.get(1))?, constant(args.get(2))?);
            if args.len() > 3 {
                return self.fail(span, "print() takes a map and optional top and div");
            }
            return Some(Emit::PrintMap { map, top, div });
        }
        let [value] = args else {
            return self.fail(span, "print() takes a map or one value");
        };
        let value = self.expr(value)?;
        Some(Emit::PrintValue(value))
    }

    fn printf(&mut self, args: &[Expr], span: Span) -> Option<Emit> {
        let Some((
            Expr {
                kind: ExprKind::Str(format),
                span: format_span,
            },
            rest,
        )) = args.split_first()
        else {
            return self.fail(span, "printf() needs a format string literal first");
        };
        let specs = match printf::parse_format(format) {
            Ok(specs) => specs,
            Err(error) => return self.fail(*format_span, &format!("bad printf format: {error}")),
        };
        let wanted: Vec<bool> = printf::specs(&specs)
            .map(|s| s.arg_kind() == printf::ArgKind::Text)
            .collect();
        if wanted.len() != rest.len() {
            let message = format!(
                "the format has {} conversions but {} arguments follow",
                wanted.len(),
                rest.len()
            );
            return self.fail(span, &message);
        }
        let mut checked = Vec::new();
        for (arg, wants_string) in rest.iter().zip(wanted) {
            let arg = self.expr(arg)?;
            let ok = match &arg.ty {
                Type::Str { .. } => wants_string,
                Type::Tuple(_) | Type::Void => false,
                _ => true,
            };
            if !ok {
                return self.fail(arg.span, &format!("printf cannot format {} here", arg.ty));
            }
            checked.push(arg);
        }
        Some(Emit::Printf {
            format: format.clone(),
            args: checked,
        })
    }
}

fn is_statement_call(name: &str) -> bool {
    matches!(
        name,
        "printf" | "print" | "exit" | "time" | "clear" | "zero" | "delete"
    )
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
