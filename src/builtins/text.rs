//! Built-ins on strings: `str(ptr[, len])` and `strncmp(a, b, n)`.

use super::{Entry, Expression, Kind, Site, Written};
use crate::codegen::helpers::{PROBE_READ_KERNEL_STR, PROBE_READ_USER_STR};
use crate::codegen::ir::{AluOp, Arg, Base, Cond, Inst, Src};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::ast::{Expr, ExprKind};
use crate::frontend::check::Checker;
use crate::frontend::checked::{TCall, TExpr, TExprKind};
use crate::frontend::types::{STRING_LEN, Type};

/// `str(ptr[, len])`: a string read from kernel or user memory (the probe's
/// context says which), into a buffer of `len + 1` bytes when `len` is a
/// literal, else 64. The call's args are the pointer and the length; a
/// string argument is returned as it is.
pub struct Str;

impl Expression for Str {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let (ptr, len) = match site.args {
            [ptr] => (ptr, None),
            [ptr, len] => (ptr, Some(len)),
            _ => return cx.fail(site.span, "str() takes a pointer and an optional length"),
        };
        let ptr = cx.expr(ptr)?;
        if matches!(ptr.ty, Type::Str { .. }) {
            return Some(ptr);
        }
        if !ptr.ty.is_int() {
            return cx.fail(ptr.span, &format!("str() needs a pointer, not {}", ptr.ty));
        }
        let mut args = vec![ptr];
        let buffer = match len {
            None => STRING_LEN,
            Some(len) => {
                let len = cx.expr(len)?;
                let buffer = match len.kind {
                    TExprKind::Int(n) => (n as u32).clamp(1, STRING_LEN),
                    _ => STRING_LEN,
                };
                args.push(len);
                buffer
            }
        };
        Some(site.value(args, Type::Str { len: buffer }))
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, ty: &Type) -> Value {
        let pointer = cx.int_expr(&call.args[0]);
        let buffer_len = ty.size();
        let size = match call.args.get(1) {
            None => Arg::Imm(i64::from(buffer_len)),
            Some(len) => {
                // A NUL fits after `len` characters, and the verifier needs a bounded size.
                let requested = cx.int_expr(len);
                let size = cx.vreg();
                cx.mov(size, requested);
                cx.alu(AluOp::Add, size, Src::Imm(1));
                let within = cx.label();
                cx.branch(Cond::Le, size, Src::Imm(buffer_len as i32), within);
                cx.mov_imm(size, buffer_len as i32);
                cx.emit(Inst::Bind(within));
                Arg::Reg(size)
            }
        };
        let buffer = cx.alloc(buffer_len);
        cx.zero(Base::Frame, buffer, buffer_len);
        let helper = if cx.probe.user_memory {
            PROBE_READ_USER_STR
        } else {
            PROBE_READ_KERNEL_STR
        };
        let args = vec![Arg::Frame(buffer), size, Arg::Reg(pointer)];
        cx.emit(Inst::Call {
            helper,
            args,
            ret: None,
        });
        Value::Mem(buffer)
    }

    fn names_items_after_arg(&self) -> bool {
        true
    }
}

/// `strncmp(a, b, n)`: 0 when the strings agree in their first `n` bytes,
/// else 1. The call's args are the strings, its const the length.
pub struct Strncmp;

impl Expression for Strncmp {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let [
            lhs,
            rhs,
            Expr {
                kind: ExprKind::Int(limit),
                ..
            },
        ] = site.args
        else {
            return cx.fail(
                site.span,
                "strncmp() takes two strings and an integer literal length",
            );
        };
        let (lhs, rhs) = (cx.expr(lhs)?, cx.expr(rhs)?);
        for side in [&lhs, &rhs] {
            if !matches!(side.ty, Type::Str { .. }) {
                return cx.fail(
                    side.span,
                    &format!("strncmp() compares strings, not {}", side.ty),
                );
            }
        }
        let mut call = TCall::new(site.id, vec![lhs, rhs]);
        call.consts = vec![(*limit).min(u64::from(u32::MAX))];
        Some(TExpr {
            kind: TExprKind::Call(Box::new(call)),
            ty: Type::I64,
            span: site.span,
        })
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, _ty: &Type) -> Value {
        let limit = call.consts[0] as u32;
        let equal = cx.strings_equal(&call.args[0], &call.args[1], limit);
        cx.alu(AluOp::Xor, equal, Src::Imm(1));
        Value::Int(equal)
    }
}

pub(super) const TABLE: &[Entry] = &[
    Entry {
        name: "str",
        written: Written::Call,
        indexed: false,
        signature: "str(ptr[, len])",
        doc: "The NUL-terminated string at `ptr` (at most `len` bytes, else 64).",
        example: "tracepoint:syscalls:sys_enter_openat { printf(\"%s\\n\", str(args.filename)); }",
        kind: Kind::Expression(&Str),
    },
    Entry {
        name: "strncmp",
        written: Written::Call,
        indexed: false,
        signature: "strncmp(a, b, n)",
        doc: "0 when strings `a` and `b` agree in their first `n` bytes, else 1.",
        example: "tracepoint:syscalls:sys_enter_write /strncmp(comm, \"bash\", 4) == 0/ { @ = count(); }",
        kind: Kind::Expression(&Strncmp),
    },
];
