//! Checking what C types do to expressions: casts (to integers, and of
//! integers to pointers of any type), pointer arithmetic scaled by the
//! pointee's size, comparing structs and arrays held by value, enum
//! constants, and the types `sizeof` names.

use crate::frontend::ast::{BinOp, Expr, Span, TypeName};
use crate::frontend::check::Checker;
use crate::frontend::check_place::scaled_add;
use crate::frontend::checked::*;
use crate::frontend::types::{Pointer, Type};
use crate::vocab::kernel_types::{KTypeId, KernelKind};

impl Checker<'_> {
    /// The C type a cast or `sizeof` names.
    pub(crate) fn named_type(&mut self, ty: &TypeName) -> Option<KTypeId> {
        let mut id = self.type_named(&ty.name, ty.span)?;
        for _ in 0..ty.pointer_depth {
            id = self.types.pointer_to(id);
        }
        Some(id)
    }

    /// `sizeof` of type `id`.
    pub(crate) fn type_size(&mut self, id: KTypeId, span: Span) -> Option<u32> {
        match self.types.size_of(id) {
            Ok(size) => Some(size),
            Err(message) => self.fail(span, &message),
        }
    }

    /// Whether a bare word names a type rather than a value: no built-in
    /// or enum constant is called so, and some type is.
    pub(crate) fn is_type_name(&mut self, name: &str) -> bool {
        crate::builtins::expression(name, false).is_none()
            && !matches!(self.types.enum_constant(name), Ok(Some(_)))
            && self.types.named(name).is_ok()
    }

    /// The type called `name`, or an error at `span`.
    pub(crate) fn type_named(&mut self, name: &str, span: Span) -> Option<KTypeId> {
        match self.types.named(name) {
            Ok(id) => Some(self.types.resolve(id)),
            Err(message) => {
                let help = if name.contains(' ') || !self.env.has_btf() {
                    "define it in the script (`struct NAME { ... }`), or check the kernel's BTF \
                     (/sys/kernel/btf/vmlinux) has it"
                } else {
                    "integer types are int8..int64 and uint8..uint64; records are written \
                     `struct NAME`"
                };
                let error = crate::frontend::diag::ScriptError::new(span, message).with_help(help);
                self.error(error);
                None
            }
        }
    }

    /// `(type)expr`: an integer converted to another integer type, or an
    /// address (or pointer) typed as a pointer to any type.
    pub(super) fn cast(&mut self, ty: &TypeName, inner: &Expr, span: Span) -> Option<TExpr> {
        let expr = self.expr(inner)?;
        let target = self.named_type(ty)?;
        if !expr.ty.is_int() {
            return self.fail(
                span,
                &format!(
                    "cannot cast {} to `{}`",
                    expr.ty,
                    self.types.name_of(target)
                ),
            );
        }
        let result = match self.kernel_type(target, ty.span)?.kind {
            KernelKind::Pointer(pointee) => {
                let space = match &expr.ty {
                    Type::Ptr(ptr) => ptr.space,
                    _ => self.cast_space(),
                };
                Type::Ptr(Pointer {
                    target: pointee,
                    name: self.types.name_of(pointee),
                    btf: false,
                    space,
                })
            }
            KernelKind::Int { size, signed } | KernelKind::Enum { size, signed } => {
                Type::Int { size, signed }
            }
            KernelKind::Bool => Type::Int {
                size: 1,
                signed: false,
            },
            _ => {
                let name = self.types.name_of(target);
                let message = format!("cannot cast to `{name}`: casts give integers or pointers");
                return self.fail(ty.span, &message);
            }
        };
        Some(TExpr {
            kind: TExprKind::Cast(Box::new(expr)),
            ty: result,
            span,
        })
    }

    /// `ptr + n`, `n + ptr`, `ptr - n`: moves by `n` pointees, as in C.
    pub(super) fn pointer_arithmetic(
        &mut self,
        op: BinOp,
        lhs: TExpr,
        rhs: TExpr,
        span: Span,
    ) -> Arith {
        let plain = |t: &Type| t.is_int() && t.pointer().is_none();
        let (ptr, count, negate) = match (op, &lhs.ty, &rhs.ty) {
            (BinOp::Add | BinOp::Sub, Type::Ptr(_), Type::Ptr(_)) => {
                let message = format!(
                    "`{}` on two pointers is not supported: cast one to an integer, `(uint64)p`",
                    op.symbol()
                );
                self.fail::<()>(span, &message);
                return Arith::Failed;
            }
            (BinOp::Add, Type::Ptr(_), r) if plain(r) => (lhs, rhs, false),
            (BinOp::Sub, Type::Ptr(_), r) if plain(r) => (lhs, rhs, true),
            (BinOp::Add, l, Type::Ptr(_)) if plain(l) => (rhs, lhs, false),
            _ => return Arith::Plain(lhs, rhs),
        };
        let Some(pointer) = ptr.ty.pointer().cloned() else {
            unreachable!("matched a pointer above");
        };
        let stride = match self.types.size_of(self.types.resolve(pointer.target)) {
            Ok(0) | Err(_) => 1,
            Ok(size) => size,
        };
        let count = if negate { negated(count) } else { count };
        let mut moved = scaled_add(ptr, count, stride, span);
        moved.ty = Type::Ptr(pointer);
        Arith::Pointer(moved)
    }

    /// The type of comparing two structs, arrays or `buf()` values held by
    /// value: equal when their bytes are.
    pub(super) fn object_comparison(
        &mut self,
        op: BinOp,
        lhs: &TExpr,
        rhs: &TExpr,
        span: Span,
    ) -> Option<Type> {
        match (&lhs.ty, &rhs.ty) {
            (Type::Object(a), Type::Object(b)) if matches!(op, BinOp::Eq | BinOp::Ne) => {
                if a.layout == b.layout {
                    Some(Type::I64)
                } else {
                    self.fail(
                        span,
                        &format!("cannot compare `{}` with `{}`", a.name, b.name),
                    )
                }
            }
            // Equal when their kept lengths and bytes are (bpftrace compares
            // them as memory too).
            (Type::Buffer { .. }, Type::Buffer { .. }) if matches!(op, BinOp::Eq | BinOp::Ne) => {
                Some(Type::I64)
            }
            _ => None,
        }
    }

    /// An enum constant of the script or the kernel, as an integer.
    pub(super) fn enum_constant(&mut self, name: &str, span: Span) -> Option<Option<TExpr>> {
        match self.types.enum_constant(name) {
            Ok(found) => Some(found.map(|value| TExpr {
                kind: TExprKind::Int(value as u64),
                ty: Type::I64,
                span,
            })),
            Err(message) => self.fail(span, &message),
        }
    }
}

/// What `+` or `-` on its operands is.
pub(super) enum Arith {
    /// Pointer arithmetic, already scaled.
    Pointer(TExpr),
    /// An error was reported.
    Failed,
    /// Neither operand is a pointer: ordinary arithmetic on these.
    Plain(TExpr, TExpr),
}

/// `-n` for an index counting backwards.
fn negated(count: TExpr) -> TExpr {
    let span = count.span;
    TExpr {
        kind: TExprKind::Unary {
            op: crate::frontend::ast::UnOp::Neg,
            expr: Box::new(count),
        },
        ty: Type::I64,
        span,
    }
}
