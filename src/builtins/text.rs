//! Built-ins on strings and bytes: `str(ptr[, len])`, `strncmp(a, b, n)`,
//! `strcontains(haystack, needle)`, `buf(ptr[, len])` and `strerror(errno)`.

use super::{Entry, Expression, Kind, Site, Written};
use crate::codegen::ir::{AluOp, Arg, Base, Cond, Inst, Src};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::ast::{Expr, ExprKind, Span};
use crate::frontend::check::Checker;
use crate::frontend::checked::{TCall, TExpr, TExprKind};
use crate::frontend::diag::ScriptError;
use crate::frontend::types::Type;
use crate::vocab::ValueType;

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
        let most = cx.options.string_len();
        let buffer = match len {
            None => most,
            Some(len) => {
                let len = cx.expr(len)?;
                let buffer = match len.kind {
                    // `n` characters and their NUL.
                    TExprKind::Int(n) => (n.saturating_add(1).min(u64::from(most))) as u32,
                    _ => most,
                };
                args.push(len);
                buffer
            }
        };
        Some(site.value(args, Type::Str { len: buffer }))
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, ty: &Type) -> Value {
        let pointer = cx.int_expr(&call.args[0]);
        // The string's own length bounds the read (`BPFTRACE_STRLEN`); its
        // buffer is rounded up to whole words.
        let Type::Str { len: read_len } = *ty else {
            unreachable!("str() is checked into a string")
        };
        let buffer_len = ty.size();
        let size = match call.args.get(1) {
            None => Arg::Imm(i64::from(read_len)),
            Some(len) => {
                // A NUL fits after `len` characters, and the verifier needs a bounded size.
                let requested = cx.int_expr(len);
                let size = cx.vreg();
                cx.mov(size, requested);
                cx.alu(AluOp::Add, size, Src::Imm(1));
                let within = cx.label();
                cx.branch(Cond::Le, size, Src::Imm(read_len as i32), within);
                cx.mov_imm(size, read_len as i32);
                cx.emit(Inst::Bind(within));
                Arg::Reg(size)
            }
        };
        let buffer = cx.alloc(buffer_len);
        cx.zero(Base::Frame, buffer, buffer_len);
        let helper = cx.string_read_helper(&call.args[0]);
        let args = vec![Arg::Frame(buffer), size, Arg::Reg(pointer)];
        cx.checked_call_unused(helper, args);
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

/// `strcontains(haystack, needle)`: 1 when `needle` occurs in `haystack`,
/// else 0; folded when both are literals. The call's args are the strings.
pub struct Strcontains;

impl Expression for Strcontains {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let [haystack, needle] = site.args else {
            return cx.fail(site.span, "strcontains() takes two strings");
        };
        let (haystack, needle) = (cx.expr(haystack)?, cx.expr(needle)?);
        for side in [&haystack, &needle] {
            if !matches!(side.ty, Type::Str { .. }) {
                let message = format!("strcontains() searches strings, not {}", side.ty);
                return cx.fail(side.span, &message);
            }
        }
        if let (TExprKind::Str(h), TExprKind::Str(n)) = (&haystack.kind, &needle.kind) {
            return Some(TExpr {
                kind: TExprKind::Int(u64::from(h.contains(n.as_str()))),
                ty: Type::I64,
                span: site.span,
            });
        }
        Some(site.value(vec![haystack, needle], Type::I64))
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, _ty: &Type) -> Value {
        Value::Int(cx.string_contains(&call.args[0], &call.args[1]))
    }
}

/// `strerror(errno)`: an errno, printed as its message.
pub struct Strerror;

impl Expression for Strerror {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let [errno] = site.args else {
            return cx.fail(site.span, "strerror() takes one errno value");
        };
        let errno = cx.expr(errno)?;
        if !errno.ty.is_int() {
            let message = format!("strerror() needs an integer, not {}", errno.ty);
            return cx.fail(errno.span, &message);
        }
        Some(TExpr {
            kind: TExprKind::Cast(Box::new(errno)),
            ty: Type::Strerror,
            span: site.span,
        })
    }
}

/// `buf(x)` of a string or an address: bpftrace's refusal, and the fix.
fn needs_length(cx: &mut Checker, ty: &Type, span: Span) -> Option<TExpr> {
    let kind = match ty {
        Type::Str { .. } => "string",
        Type::Ptr(_) => "pointer",
        _ => "integer",
    };
    let message = format!("buf() expects a length argument for non-array type {kind}");
    cx.error(ScriptError::new(span, message).with_help("give the bytes to take: `buf(x, len)`"));
    None
}

/// `buf(ptr[, len])`: `len` bytes (at most `BPFTRACE_STRLEN`, 64 by default) read from memory
/// at `ptr` or taken from a string or an array (all of it without `len`), printed with non-printable bytes
/// escaped (`%r` in printf). The call's args are the source and the length
/// (when not a literal); its const the literal length.
pub struct Buf;

impl Expression for Buf {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let (source, len) = match site.args {
            [source] => (source, None),
            [source, len] => (source, Some(len)),
            _ => return cx.fail(site.span, "buf() takes a pointer or string and a length"),
        };
        let source = cx.expr(source)?;
        // The most bytes taken, and how many without a length: a string's
        // whole buffer counts (bytes past its NUL are zeros, as
        // `buf("ok_key", 8)` shows in bpftrace); an array's bytes
        // (`buf($s->ints)`, `uint8_t` ones too) are taken whole without a
        // length, as bpftrace takes them. Strings (`char` arrays included)
        // and addresses need a length, as in bpftrace.
        let (whole, natural) = match &source.ty {
            Type::Str { .. } => (Some(source.ty.size()), None),
            Type::Object(object) if matches!(object.layout, ValueType::Array { .. }) => {
                (Some(object.layout.size()), Some(object.layout.size()))
            }
            ty if ty.is_int() => (None, None),
            ty => {
                let message = format!("buf() reads a pointer, a string or an array, not {ty}");
                return cx.fail(source.span, &message);
            }
        };
        let mut args = vec![source];
        let len = match (len, natural) {
            (None, Some(natural)) => natural,
            (None, None) => return needs_length(cx, &args[0].ty, site.span),
            (Some(len), _) => {
                let len = cx.expr(len)?;
                if !len.ty.is_int() {
                    let message = format!("buf()'s length must be an integer, not {}", len.ty);
                    return cx.fail(len.span, &message);
                }
                let most = cx.options.string_len();
                match len.kind {
                    TExprKind::Int(n) => n.min(u64::from(most)) as u32,
                    _ => {
                        args.push(len);
                        most
                    }
                }
            }
        };
        let len = whole.map_or(len, |whole| len.min(whole));
        let mut call = TCall::new(site.id, args);
        call.consts = vec![u64::from(len)];
        Some(TExpr {
            kind: TExprKind::Call(Box::new(call)),
            ty: Type::Buffer { len },
            span: site.span,
        })
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, ty: &Type) -> Value {
        let len = call.consts[0] as u32;
        let buffer = cx.alloc(ty.size());
        cx.zero(Base::Frame, buffer, ty.size());
        let kept = match call.args.get(1) {
            Some(len_expr) => {
                let requested = cx.int_expr(len_expr);
                cx.clamp(requested, len)
            }
            None => cx.constant(u64::from(len)),
        };
        cx.store(Base::Frame, buffer, Src::Reg(kept));
        let source = &call.args[0];
        match cx.expr(source) {
            Value::Mem(string) => {
                let bytes = len.next_multiple_of(8).min(source.ty.size());
                cx.copy((Base::Frame, buffer + 8), (Base::Frame, string), bytes);
            }
            Value::Int(address) => {
                let user = cx.reads_user_memory(source);
                cx.read_memory(buffer + 8, len, address, user);
            }
        }
        Value::Mem(buffer)
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
    Entry {
        name: "strcontains",
        written: Written::Call,
        indexed: false,
        signature: "strcontains(haystack, needle)",
        doc: "1 when string `needle` occurs in string `haystack`, else 0.",
        example: "tracepoint:syscalls:sys_enter_openat /strcontains(str(args.filename), \"lib\")/ { @ = count(); }",
        kind: Kind::Expression(&Strcontains),
    },
    Entry {
        name: "buf",
        written: Written::Call,
        indexed: false,
        signature: "buf(ptr[, len])",
        doc: "`len` raw bytes (at most 64) at `ptr` or of a string, printed escaped (`%r`, `%rx`, `%rh`).",
        example: "tracepoint:syscalls:sys_enter_write { printf(\"%r\\n\", buf(args.buf, 16)); }",
        kind: Kind::Expression(&Buf),
    },
    Entry {
        name: "strerror",
        written: Written::Call,
        indexed: false,
        signature: "strerror(errno)",
        doc: "An errno value, printed as its message (`No such file or directory`).",
        example: "tracepoint:syscalls:sys_exit_read /args.ret < 0/ { @[strerror(-args.ret)] = count(); }",
        kind: Kind::Expression(&Strerror),
    },
];
