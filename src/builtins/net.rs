//! Built-ins on network-order data: `ntop([af, ]addr)` (an address printed
//! as text), `pton(text)` (its bytes), `macaddr(ptr)` and `bswap(n)`.

use std::net::IpAddr;

use super::{Entry, Expression, Kind, Site, Written};
use crate::codegen::ir::{AluOp, Base, Src};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::ast::{Expr, ExprKind};
use crate::frontend::check::Checker;
use crate::frontend::checked::{TCall, TExpr, TExprKind};
use crate::frontend::types::Type;
use crate::vocab::ValueType;

/// `AF_INET` and `AF_INET6` on Linux.
const AF_INET: u64 = 2;
const AF_INET6: u64 = 10;

/// `ntop([af, ]addr)`: an address family and 16 address bytes. `addr` is an
/// integer (an IPv4 address as stored in memory: its low 4 bytes), a
/// 4- or 16-byte string or array (`char[4]`, `u8[16]` fields) or `pton(text)`.
/// The call's args are the family (when given) then the address; its const
/// says whether the family was given.
pub struct Ntop;

impl Expression for Ntop {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let (family, addr) = match site.args {
            [addr] => (None, addr),
            [family, addr] => (Some(family), addr),
            _ => {
                return cx.fail(
                    site.span,
                    "ntop() takes an optional address family and an address",
                );
            }
        };
        let addr = match pton_literal(cx, addr) {
            Some(bytes) => bytes?,
            None => cx.expr(addr)?,
        };
        let implied = match (byte_array_len(&addr.ty), &addr.ty) {
            (Some(4), _) => AF_INET,
            (Some(16), _) => AF_INET6,
            (None, ty) if ty.is_int() => AF_INET,
            (_, ty) => {
                let message =
                    format!("ntop() needs an integer or a 4- or 16-byte address, not {ty}");
                return cx.fail(addr.span, &message);
            }
        };
        let family = match family {
            Some(family) => cx.int_arg(family, "ntop")?,
            None => TExpr {
                kind: TExprKind::Int(implied),
                ty: Type::U64,
                span: site.span,
            },
        };
        Some(site.value(vec![family, addr], Type::Inet))
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, _ty: &Type) -> Value {
        let family = cx.int_expr(&call.args[0]);
        let buffer = cx.alloc(24);
        cx.zero(Base::Frame, buffer, 24);
        cx.store(Base::Frame, buffer, Src::Reg(family));
        let addr = &call.args[1];
        match cx.expr(addr) {
            Value::Int(value) => cx.store_sized(
                Base::Frame,
                buffer + 8,
                Src::Reg(value),
                crate::codegen::ir::Size::U32,
            ),
            Value::Mem(bytes) => cx.copy(
                (Base::Frame, buffer + 8),
                (Base::Frame, bytes),
                addr.ty.size().min(16),
            ),
        }
        Value::Mem(buffer)
    }
}

/// The bytes of a `char` or other byte array value (`char[4]`, `u8[16]`);
/// `None` for other types.
fn byte_array_len(ty: &Type) -> Option<u32> {
    match ty {
        Type::Str { len } => Some(*len),
        Type::Object(object) if matches!(object.layout, ValueType::Array { .. }) => {
            Some(object.layout.size())
        }
        _ => None,
    }
}

/// `ntop(pton("..."))`: the address bytes as a string of 4 or 16 bytes, or
/// `None` when `expr` is not a `pton()` call.
fn pton_literal(cx: &mut Checker, expr: &Expr) -> Option<Option<TExpr>> {
    let ExprKind::Call { name, args } = &expr.kind else {
        return None;
    };
    if name != "pton" {
        return None;
    }
    Some(pton_bytes(cx, args, expr).map(|bytes| TExpr {
        ty: Type::Str {
            len: bytes.len() as u32,
        },
        kind: TExprKind::Bytes(bytes),
        span: expr.span,
    }))
}

/// The bytes of `pton("text")`: 4 for an IPv4 address, 16 for IPv6.
fn pton_bytes(cx: &mut Checker, args: &[Expr], call: &Expr) -> Option<Vec<u8>> {
    let [
        Expr {
            kind: ExprKind::Str(text),
            ..
        },
    ] = args
    else {
        return cx.fail(call.span, "pton() takes an address as a string literal");
    };
    match text.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => Some(v4.octets().to_vec()),
        Ok(IpAddr::V6(v6)) => Some(v6.octets().to_vec()),
        Err(_) => cx.fail(
            call.span,
            &format!("pton() expects a valid IPv4/IPv6 address, got `{text}`"),
        ),
    }
}

/// `pton(text)` anywhere but in `ntop()`: its bytes would be a byte array,
/// which has no value type here.
pub struct Pton;

impl Expression for Pton {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        cx.fail(
            site.span,
            "pton() gives address bytes, usable here only as ntop()'s address: `ntop(pton(\"::1\"))`",
        )
    }
}

/// `bswap(n)`: `n`'s bytes reversed, as an unsigned integer of its size
/// (a literal is 8 bytes: cast it, `bswap((uint16)0x1234)`).
pub struct Bswap;

impl Expression for Bswap {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let [value] = site.args else {
            return cx.fail(site.span, "bswap() takes one integer");
        };
        let value = cx.int_arg(value, "bswap")?;
        let size = match value.ty {
            Type::Int { size, .. } => size,
            _ => 8,
        };
        let ty = Type::Int {
            size,
            signed: false,
        };
        if let TExprKind::Int(n) = value.kind {
            let bytes = &n.to_le_bytes()[..usize::from(size)];
            let swapped = bytes.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
            return Some(TExpr {
                kind: TExprKind::Int(swapped),
                ty,
                span: site.span,
            });
        }
        Some(site.value(vec![value], ty))
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, ty: &Type) -> Value {
        let value = cx.int_expr(&call.args[0]);
        let size = match ty {
            Type::Int { size, .. } => *size,
            _ => 8,
        };
        Value::Int(cx.byte_swap(value, size))
    }
}

/// `macaddr(addr)`: 6 bytes at a pointer or of a 6-byte string, printed as
/// `AA:BB:CC:DD:EE:FF`.
pub struct Macaddr;

impl Expression for Macaddr {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let [addr] = site.args else {
            return cx.fail(site.span, "macaddr() takes a pointer or a 6-byte array");
        };
        if let ExprKind::Str(_) = addr.kind {
            return cx.fail(addr.span, "macaddr() does not take string literals");
        }
        let addr = cx.expr(addr)?;
        match (byte_array_len(&addr.ty), &addr.ty) {
            (Some(6), _) => {}
            (None, ty) if ty.is_int() => {}
            (_, ty) => {
                let message = format!("macaddr() needs a pointer or a 6-byte array, not {ty}");
                return cx.fail(addr.span, &message);
            }
        }
        Some(site.value(vec![addr], Type::MacAddr))
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, _ty: &Type) -> Value {
        let addr = &call.args[0];
        let bytes = match cx.expr(addr) {
            Value::Mem(bytes) => bytes,
            Value::Int(pointer) => {
                let buffer = cx.alloc(8);
                cx.store(Base::Frame, buffer, Src::Imm(0));
                let user = cx.reads_user_memory(addr);
                cx.read_memory(buffer, 6, pointer, user);
                buffer
            }
        };
        let mac = cx.load(Base::Frame, bytes);
        cx.alu(AluOp::Lsh, mac, Src::Imm(16));
        cx.alu(AluOp::Rsh, mac, Src::Imm(16));
        Value::Int(mac)
    }
}

pub(super) const TABLE: &[Entry] = &[
    Entry {
        name: "ntop",
        written: Written::Call,
        indexed: false,
        signature: "ntop([af, ]addr)",
        doc: "An IPv4 or IPv6 address (an integer, 4 or 16 bytes, or `pton()`), printed as text.",
        example: "BEGIN { printf(\"%s %s\\n\", ntop(0x0100007f), ntop(10, pton(\"fe80::1\"))); exit(); }",
        kind: Kind::Expression(&Ntop),
    },
    Entry {
        name: "pton",
        written: Written::Call,
        indexed: false,
        signature: "pton(text)",
        doc: "The bytes of an IPv4 or IPv6 address written as text, for ntop().",
        example: "BEGIN { printf(\"%s\\n\", ntop(pton(\"127.0.0.1\"))); exit(); }",
        kind: Kind::Expression(&Pton),
    },
    Entry {
        name: "bswap",
        written: Written::Call,
        indexed: false,
        signature: "bswap(n)",
        doc: "An integer with its bytes reversed (the width of its type: cast to pick one).",
        example: "BEGIN { printf(\"%x\\n\", bswap((uint16)0x1234)); exit(); }",
        kind: Kind::Expression(&Bswap),
    },
    Entry {
        name: "macaddr",
        written: Written::Call,
        indexed: false,
        signature: "macaddr(addr)",
        doc: "6 bytes at a pointer or of a 6-byte array, printed as a MAC address.",
        example: "uprobe:/bin/x:f { printf(\"%s\\n\", macaddr(arg0)); }",
        kind: Kind::Expression(&Macaddr),
    },
];
