//! Built-ins about C types: `sizeof(TYPE)` and `sizeof(expr)`.

use super::{Entry, Expression, Kind, Site, Written};
use crate::frontend::ast::ExprKind;
use crate::frontend::check::Checker;
use crate::frontend::checked::{TExpr, TExprKind};
use crate::frontend::types::Type;

/// `sizeof(TYPE)` or `sizeof(expr)`: bytes of a type, or of an
/// expression's type (not evaluated), as bpftrace counts them. Checked
/// into an integer literal.
pub struct Sizeof;

impl Expression for Sizeof {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let [arg] = site.args else {
            return cx.fail(site.span, "sizeof() takes one type or expression");
        };
        let size = match &arg.kind {
            ExprKind::Type(ty) => {
                let id = cx.named_type(ty)?;
                cx.type_size(id, ty.span)?
            }
            // A bare word that is no built-in or constant may name a type (`sizeof(pid_t)`).
            ExprKind::Ident(name) if cx.is_type_name(name) => {
                let id = cx.type_named(name, arg.span)?;
                cx.type_size(id, arg.span)?
            }
            _ => cx.expr(arg)?.ty.c_size(),
        };
        Some(TExpr {
            kind: TExprKind::Int(u64::from(size)),
            ty: Type::I64,
            span: site.span,
        })
    }
}

pub(super) const TABLE: &[Entry] = &[Entry {
    name: "sizeof",
    written: Written::Call,
    indexed: false,
    signature: "sizeof(TYPE), sizeof(expr)",
    doc: "Bytes of a type (integer, struct from the script or BTF) or of an expression's type.",
    example: "struct S { int a; char b; } BEGIN { printf(\"%d %d\\n\", sizeof(struct S), sizeof(uint16)); exit(); }",
    kind: Kind::Expression(&Sizeof),
}];
