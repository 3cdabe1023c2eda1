//! Built-ins between addresses and symbol names: `ksym(addr)` and
//! `usym(addr)` (printed as names by user space), `kaddr(name)` and
//! `uaddr(name)` (names resolved to addresses when compiling).

use super::{Entry, Expression, Kind, Site, Written};
use crate::codegen::ir::{AluOp, Base, Src};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::ast::Expr;
use crate::frontend::check::Checker;
use crate::frontend::checked::{TCall, TExpr, TExprKind};
use crate::frontend::diag::ScriptError;
use crate::frontend::types::{Pointer, Space, Type};
use crate::vocab::{AttachPoint, x86_64};

/// `ksym(addr)`: an address printed as its kernel symbol (a cast to the
/// symbol type; user space names it).
pub struct Ksym;

impl Expression for Ksym {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let addr = address_arg(cx, site, "ksym")?;
        Some(TExpr {
            kind: TExprKind::Cast(Box::new(addr)),
            ty: Type::KernelSymbol,
            span: site.span,
        })
    }
}

/// `usym(addr)`: a user address and the current process, printed as the
/// function containing it. The call's arg is the address.
pub struct Usym;

impl Expression for Usym {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let addr = address_arg(cx, site, "usym")?;
        cx.values.user_addresses = true;
        Some(site.value(vec![addr], Type::UserSymbol))
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, _ty: &Type) -> Value {
        let addr = cx.int_expr(&call.args[0]);
        let buffer = cx.alloc(16);
        cx.store(Base::Frame, buffer, Src::Reg(addr));
        let process = cx.remember_thread();
        cx.alu(AluOp::Rsh, process, Src::Imm(32));
        cx.store(Base::Frame, buffer + 8, Src::Reg(process));
        Value::Mem(buffer)
    }
}

/// The one integer argument of `ksym`/`usym`.
fn address_arg(cx: &mut Checker, site: &Site, name: &str) -> Option<TExpr> {
    let [addr] = site.args else {
        return cx.fail(site.span, &format!("{name}() takes one address"));
    };
    let addr = cx.expr(addr)?;
    if !addr.ty.is_int() {
        let message = format!("{name}() needs an address, not {}", addr.ty);
        return cx.fail(addr.span, &message);
    }
    Some(addr)
}

/// `kaddr(name)`: the address of a kernel symbol, from `/proc/kallsyms`
/// when compiling. A symbol not found stops the run (not `--dump-bpf`).
pub struct Kaddr;

impl Expression for Kaddr {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let name = symbol_name(cx, site, "kaddr")?;
        let addr = match cx.env.kernel_symbol(&name) {
            Ok(addr) => addr,
            Err(why) => {
                // bpftrace's wording, which its runtime tests read.
                let message = format!("Failed to resolve kernel symbol `{name}`: {why}");
                cx.defer_error(ScriptError::new(site.span, message));
                0
            }
        };
        Some(TExpr {
            kind: TExprKind::Int(addr),
            ty: Type::U64,
            span: site.span,
        })
    }
}

/// The string literal naming a symbol (`str($1)` of a parameter counts).
fn symbol_name(cx: &mut Checker, site: &Site, name: &str) -> Option<String> {
    let usage = format!("{name}() takes a symbol name as a string literal");
    let [Expr { .. }] = site.args else {
        return cx.fail(site.span, &usage);
    };
    let arg = cx.expr(&site.args[0])?;
    match arg.kind {
        TExprKind::Str(text) => Some(text),
        _ => cx.fail(arg.span, &usage),
    }
}

/// `uaddr(name)`: the address of a data symbol of the probed binary. In a
/// position-independent binary it is found relative to the probe's own
/// instruction pointer (bpftrace gives the link-time value, which points
/// nowhere there); the call's const is the distance, else the address.
pub struct Uaddr;

impl Expression for Uaddr {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let name = symbol_name(cx, site, "uaddr")?;
        let (binary, offset, returns) = match &cx.resolved().attach {
            AttachPoint::Uprobe {
                binary,
                offset,
                retprobe,
                ..
            } => (binary.clone(), *offset, *retprobe),
            AttachPoint::Usdt { binary, offset, .. } => (binary.clone(), *offset, false),
            _ => {
                return cx.fail(
                    site.span,
                    "uaddr() is only available in uprobe and usdt probes",
                );
            }
        };
        let symbol = match cx.env.object_symbol(&binary, &name) {
            Ok(symbol) => symbol,
            Err(why) => {
                let message = format!("could not resolve symbol `{name}`: {why}");
                return cx.fail(site.span, &message);
            }
        };
        let ty = symbol_pointer(cx, symbol.size, site)?;
        if !symbol.relocatable {
            return Some(TExpr {
                kind: TExprKind::Int(symbol.address),
                ty,
                span: site.span,
            });
        }
        if returns {
            let error = ScriptError::new(site.span, "uaddr() in a uretprobe of a position-independent binary cannot know where the binary is loaded")
                .with_help("use it in a uprobe or usdt probe, where the probed instruction locates the binary");
            cx.error(error);
            return None;
        }
        let probe = match cx.env.code_address(&binary, offset) {
            Ok(probe) => probe,
            Err(why) => return cx.fail(site.span, why.as_str()),
        };
        let mut call = TCall::new(site.id, Vec::new());
        call.consts = vec![symbol.address.wrapping_sub(probe)];
        Some(TExpr {
            kind: TExprKind::Call(Box::new(call)),
            ty,
            span: site.span,
        })
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, _ty: &Type) -> Value {
        let ip = cx.context_u64(x86_64::RIP);
        let distance = cx.constant(call.consts[0]);
        cx.alu(AluOp::Add, ip, Src::Reg(distance));
        Value::Int(ip)
    }
}

/// `uaddr`'s type, as bpftrace's: a user pointer to the signed integer of
/// the symbol's size (`int32 *` for an `int`), 8 bytes for other sizes.
fn symbol_pointer(cx: &mut Checker, size: u64, site: &Site) -> Option<Type> {
    let name = match size {
        1 => "int8",
        2 => "int16",
        4 => "int32",
        _ => "int64",
    };
    match cx.types.named(name) {
        Ok(target) => Some(Type::Ptr(Pointer {
            target,
            name: name.into(),
            btf: false,
            space: Space::User,
        })),
        Err(why) => cx.fail(site.span, &why),
    }
}

pub(super) const TABLE: &[Entry] = &[
    Entry {
        name: "ksym",
        written: Written::Call,
        indexed: false,
        signature: "ksym(addr)",
        doc: "A kernel address, printed as the name of its function.",
        example: "kprobe:call_rcu { @[ksym(arg1)] = count(); }",
        kind: Kind::Expression(&Ksym),
    },
    Entry {
        name: "usym",
        written: Written::Call,
        indexed: false,
        signature: "usym(addr)",
        doc: "A user address of the current process, printed as the name of its function (also after the process exits).",
        example: "uprobe:/bin/x:f { @[usym(reg(\"ip\"))] = count(); }",
        kind: Kind::Expression(&Usym),
    },
    Entry {
        name: "kaddr",
        written: Written::Call,
        indexed: false,
        signature: "kaddr(name)",
        doc: "The address of a kernel symbol, from /proc/kallsyms.",
        example: "BEGIN { printf(\"%s\\n\", ksym(kaddr(\"do_nanosleep\"))); exit(); }",
        kind: Kind::Expression(&Kaddr),
    },
    Entry {
        name: "uaddr",
        written: Written::Call,
        indexed: false,
        signature: "uaddr(name)",
        doc: "The address of a data symbol of the probed binary (relocated in position-independent ones).",
        example: "uprobe:/bin/x:f { printf(\"%x\\n\", uaddr(\"counter\")); }",
        kind: Kind::Expression(&Uaddr),
    },
];
