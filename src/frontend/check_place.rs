//! Checking reads of C data: `p->field`, `s.field`, `a[i]`, `*p` → a
//! place (memory a pointer reaches, or a struct or array held by value)
//! and the read of the value there, typed from the C type (kernel BTF,
//! debug info or the script's definitions).

use crate::frontend::ast::{Expr, ExprKind, Span, UnOp};
use crate::frontend::check::{Checker, RDONLY_CAST};
use crate::frontend::check_kernel::is_args;
use crate::frontend::checked::*;
use crate::frontend::diag::ScriptError;
use crate::frontend::types::{CObject, Pointer, Space, Type};
use crate::providers;
use crate::vocab::kernel_types::{
    FoundMember, KTypeId, KernelKind, close_names, find_member, member_names,
};

/// Kernel members renamed in a way no spelling distance finds:
/// (record, old name, new name, the Linux version that renamed it).
const RENAMED_MEMBERS: &[(&str, &str, &str, &str)] = &[
    ("struct cfs_rq", "nr_running", "nr_queued", "6.13"),
    ("struct cfs_rq", "h_nr_running", "h_nr_queued", "6.13"),
    ("struct task_struct", "state", "__state", "5.14"),
];

/// Where a C value lives.
pub(super) enum Base {
    /// Memory at the address `ptr` gives.
    Memory { ptr: TExpr, access: Access },
    /// A struct or array held by value in a frame buffer.
    Value(TExpr),
}

/// A C object: `offset_bits` into its base, of type `ty`.
pub(super) struct Place {
    base: Base,
    offset_bits: u32,
    ty: KTypeId,
    bitfield_bits: Option<u8>,
}

/// What an expression denotes: a place to read, or a value already.
enum Located {
    Place(Place),
    Value(TExpr),
}

impl Checker<'_> {
    /// The value of `p->f`, `s.f`, `a[i]` or `*p`.
    pub(super) fn located_value(&mut self, expr: &Expr) -> Option<TExpr> {
        match self.locate(expr)? {
            Located::Place(place) => self.read_place(place, expr.span),
            Located::Value(value) => Some(value),
        }
    }

    fn locate(&mut self, expr: &Expr) -> Option<Located> {
        let span = expr.span;
        match &expr.kind {
            ExprKind::Field {
                expr: base, field, ..
            } if !is_args(base) => {
                let container = self.container(base, field, span)?;
                self.member_place(container, field, span)
                    .map(Located::Place)
            }
            ExprKind::Index { expr: base, index } => {
                self.element(base, index, span).map(Located::Place)
            }
            ExprKind::Unary {
                op: UnOp::Deref,
                expr: inner,
            } => {
                let value = self.expr(inner)?;
                self.pointee(value, span).map(Located::Place)
            }
            _ => self.expr(expr).map(Located::Value),
        }
    }

    /// The struct or union `base` denotes, to take member `field` of.
    fn container(&mut self, base: &Expr, field: &str, span: Span) -> Option<Place> {
        let value = match self.locate(base)? {
            Located::Place(place) if self.is_record(place.ty) => return Some(place),
            Located::Place(place) => self.read_place(place, base.span)?,
            Located::Value(value) => value,
        };
        self.record_at(value, field, span)
    }

    /// Member `field` of the record `value` is or points to.
    pub(super) fn member_of(&mut self, value: TExpr, field: &str, span: Span) -> Option<TExpr> {
        let container = self.record_at(value, field, span)?;
        let place = self.member_place(container, field, span)?;
        self.read_place(place, span)
    }

    /// The record `value` is (held by value) or points to.
    fn record_at(&mut self, value: TExpr, field: &str, span: Span) -> Option<Place> {
        match &value.ty {
            Type::Ptr(ptr) if self.is_record(ptr.target) => {
                let ty = self.types.resolve(ptr.target);
                let access = self.access(ptr, ty);
                Some(Place {
                    base: Base::Memory { ptr: value, access },
                    offset_bits: 0,
                    ty,
                    bitfield_bits: None,
                })
            }
            Type::Object(object) if self.is_record(object.ty) => Some(Place {
                ty: object.ty,
                base: Base::Value(value),
                offset_bits: 0,
                bitfield_bits: None,
            }),
            Type::Ptr(ptr) if self.is_pointer(ptr.target) => self.fail(
                span,
                &format!(
                    "`{}` has no field `{field}`: dereference it first, `(*p)->{field}`",
                    value.ty
                ),
            ),
            other => self.fail(span, &format!("`{other}` has no field `{field}`")),
        }
    }

    fn is_record(&self, ty: KTypeId) -> bool {
        matches!(
            self.types.get(ty).map(|t| t.kind),
            Ok(KernelKind::Struct { .. })
        )
    }

    /// Pointer members of the struct `target` names are loaded directly:
    /// remember the kernel struct an untrusted view of it names
    /// ([`UntrustedViews`](crate::frontend::checked::UntrustedViews)).
    fn note_untrusted_view(&mut self, target: KTypeId) {
        if self.untrusted_views.structs.contains_key(&target) {
            return;
        }
        let env = self.env;
        let kfunc = *(self.rdonly_cast).get_or_init(|| env.kfunc_id(RDONLY_CAST));
        let name = match self.types.get(target) {
            Ok(ty) if !ty.name.is_empty() => ty.name,
            _ => return,
        };
        if let (Some(kfunc), Ok(id)) = (kfunc, env.kernel_type_named(&name)) {
            self.untrusted_views.kfunc = Some(kfunc);
            self.untrusted_views.structs.insert(target, id);
        }
    }

    fn is_pointer(&self, ty: KTypeId) -> bool {
        matches!(
            self.types.get(ty).map(|t| t.kind),
            Ok(KernelKind::Pointer(_))
        )
    }

    /// How memory `ptr` points to is read: directly where the verifier
    /// knows its BTF type, else with the probe-read helper of its space.
    /// The verifier tracks pointers to structs and unions only: a BTF
    /// pointer to anything else (`u64 *now` of `hrtimer_expire_entry`) is a
    /// plain number to it.
    fn access(&self, ptr: &Pointer, target: KTypeId) -> Access {
        if ptr.btf && self.tracing_program() && !target.is_script() && self.is_record(target) {
            Access::Direct
        } else {
            Access::of(ptr.space)
        }
    }

    /// Where member `field` of the record at `container` lives.
    pub(super) fn member_place(
        &mut self,
        container: Place,
        field: &str,
        span: Span,
    ) -> Option<Place> {
        let record = self.kernel_type(container.ty, span)?;
        let KernelKind::Struct { members, .. } = &record.kind else {
            return self.fail(span, &format!("`{}` has no field `{field}`", record.name));
        };
        let resolve = |id| Some(self.types.members(id));
        let Some(found) = find_member(members, field, &resolve) else {
            return self.no_member(&record.name, container.ty, field, span);
        };
        let FoundMember {
            ty,
            offset_bits,
            bitfield_bits,
        } = found;
        Some(Place {
            offset_bits: container.offset_bits + offset_bits,
            ty: self.types.resolve(ty),
            bitfield_bits,
            base: container.base,
        })
    }

    fn no_member<T>(&mut self, record: &str, id: KTypeId, field: &str, span: Span) -> Option<T> {
        let members = self.types.members(id);
        let resolve = |id| Some(self.types.members(id));
        let names = member_names(&members, &resolve);
        let renamed = RENAMED_MEMBERS.iter().find(|(r, old, new, _)| {
            *r == record && *old == field && names.iter().any(|n| n == new)
        });
        let mut error = ScriptError::new(span, format!("`{record}` has no field `{field}`"));
        if let Some((_, _, new, version)) = renamed {
            error = error.with_help(format!(
                "did you mean `{new}`? Linux {version} renamed `{field}` to `{new}`"
            ));
        } else {
            match close_names(field, &names).as_slice() {
                [] => {}
                [one] => error = error.with_help(format!("did you mean `{one}`?")),
                several => error = error.with_help(format!("close names: {}", several.join(", "))),
            }
        }
        self.error(error);
        None
    }

    /// Element `index` of the array or pointer `base` denotes.
    fn element(&mut self, base: &Expr, index: &Expr, span: Span) -> Option<Place> {
        let located = self.locate(base)?;
        let index = self.expr(index)?;
        if !index.ty.is_int() || index.ty.pointer().is_some() {
            return self.fail(
                index.span,
                &format!("an index must be an integer, not {}", index.ty),
            );
        }
        let value = match located {
            Located::Place(place) => match self.kernel_type(place.ty, span)?.kind {
                KernelKind::Array { elem, len } => {
                    return self.array_element(place, elem, len, index, span);
                }
                _ => self.read_place(place, base.span)?,
            },
            Located::Value(value) => value,
        };
        match &value.ty {
            Type::Ptr(ptr) => {
                let ptr = ptr.clone();
                self.pointer_element(value, &ptr, index, span)
            }
            Type::Object(object) => {
                let (ty, name) = (object.ty, object.name.clone());
                let KernelKind::Array { elem, len } = self.kernel_type(ty, span)?.kind else {
                    return self.fail(span, &format!("`{name}` cannot be indexed"));
                };
                let place = Place {
                    base: Base::Value(value),
                    offset_bits: 0,
                    ty,
                    bitfield_bits: None,
                };
                self.array_element(place, elem, len, index, span)
            }
            other => self.fail(
                span,
                &format!("{other} cannot be indexed: only arrays and pointers can"),
            ),
        }
    }

    /// Element `index` of the array (of `len` `elem`s) at `place`.
    fn array_element(
        &mut self,
        place: Place,
        elem: KTypeId,
        len: u32,
        index: TExpr,
        span: Span,
    ) -> Option<Place> {
        let stride = self.size_in(elem, span)?;
        let elem = self.types.resolve(elem);
        if let TExprKind::Int(n) = index.kind {
            if n >= u64::from(len) {
                let message = format!("the index {n} is out of bounds for array of size {len}");
                return self.fail(index.span, &message);
            }
            return Some(Place {
                offset_bits: place.offset_bits + 8 * stride * n as u32,
                ty: elem,
                bitfield_bits: None,
                base: place.base,
            });
        }
        let Base::Memory { ptr, access } = place.base else {
            let message = "an array held in a variable or map needs a constant index";
            return self.fail(index.span, message);
        };
        let start = offset_by(ptr, u64::from(place.offset_bits / 8), span);
        Some(Place {
            base: Base::Memory {
                ptr: scaled_add(start, index, stride, span),
                access: variable_offset(access),
            },
            offset_bits: 0,
            ty: elem,
            bitfield_bits: None,
        })
    }

    /// `ptr[index]`: the element `index` strides past the pointee.
    fn pointer_element(
        &mut self,
        value: TExpr,
        ptr: &Pointer,
        index: TExpr,
        span: Span,
    ) -> Option<Place> {
        let target = self.types.resolve(ptr.target);
        let stride = self.size_in(target, span)?;
        let access = self.access(ptr, target);
        let (ptr, offset_bits, access) = match index.kind {
            TExprKind::Int(n)
                if n.checked_mul(u64::from(stride) * 8)
                    .is_some_and(|b| b < 1 << 31) =>
            {
                (value, 8 * stride * n as u32, access)
            }
            _ => (
                scaled_add(value, index, stride, span),
                0,
                variable_offset(access),
            ),
        };
        Some(Place {
            base: Base::Memory { ptr, access },
            offset_bits,
            ty: target,
            bitfield_bits: None,
        })
    }

    /// `*value`: what a pointer points to; an integer reads 8 bytes at that
    /// address, as bpftrace does.
    pub(super) fn pointee(&mut self, value: TExpr, span: Span) -> Option<Place> {
        match &value.ty {
            Type::Ptr(ptr) => {
                let target = self.types.resolve(ptr.target);
                if matches!(self.kernel_type(target, span)?.kind, KernelKind::Void) {
                    return self.fail(
                        span,
                        &format!(
                            "cannot dereference `{}`: cast it to a typed pointer first",
                            value.ty
                        ),
                    );
                }
                let access = self.access(ptr, target);
                Some(Place {
                    base: Base::Memory { ptr: value, access },
                    offset_bits: 0,
                    ty: target,
                    bitfield_bits: None,
                })
            }
            ty if ty.is_int() => {
                let ty = self.type_named("uint64", span)?;
                let access = self.default_access();
                Some(Place {
                    base: Base::Memory { ptr: value, access },
                    offset_bits: 0,
                    ty,
                    bitfield_bits: None,
                })
            }
            other => self.fail(span, &format!("cannot dereference {other}")),
        }
    }

    /// Where an untyped address points: user memory in probes whose
    /// pointers do (uprobes, syscall tracepoints), kernel memory elsewhere.
    pub(super) fn default_access(&self) -> Access {
        if self.probe.resolved.as_ref().is_some_and(|p| p.user_memory) {
            Access::User
        } else {
            Access::Kernel
        }
    }

    /// The space of an address cast to a pointer: the probe's where it has
    /// one, unknown in probes that may interrupt either (see
    /// `Provider::memory_space_known`).
    pub(super) fn cast_space(&self) -> Space {
        let known = self
            .probe
            .resolved
            .as_ref()
            .is_none_or(|probe| providers::of(&probe.attach).memory_space_known());
        if known {
            self.default_access().space()
        } else {
            Space::Unknown
        }
    }

    fn size_in(&mut self, ty: KTypeId, span: Span) -> Option<u32> {
        match self.types.size_of(ty) {
            Ok(0) => Some(1),
            Ok(size) => Some(size),
            Err(message) => self.fail(span, &message),
        }
    }

    /// Reads the value at `place`: integers, pointers, `char` arrays as
    /// strings, structs and other arrays by value.
    pub(super) fn read_place(&mut self, place: Place, span: Span) -> Option<TExpr> {
        let ty = self.kernel_type(place.ty, span)?;
        let access = match &place.base {
            Base::Memory { access, .. } => Some(*access),
            Base::Value(_) => None,
        };
        let (load, result) = match ty.kind {
            KernelKind::Int { size, signed } | KernelKind::Enum { size, signed } => (
                self.scalar_load(&place, size, signed, span)?,
                Type::Int { size, signed },
            ),
            KernelKind::Bool => (
                self.scalar_load(&place, 1, false, span)?,
                Type::Int {
                    size: 1,
                    signed: false,
                },
            ),
            KernelKind::Pointer(target) => {
                if let Base::Memory {
                    ptr,
                    access: Access::Direct,
                } = &place.base
                    && let Type::Ptr(base) = &ptr.ty
                    && self.is_record(target)
                {
                    let base = base.target;
                    self.note_untrusted_view(base);
                }
                let pointer = Pointer {
                    target,
                    name: self.types.name_of(target),
                    btf: access == Some(Access::Direct),
                    space: access.unwrap_or_else(|| self.default_access()).space(),
                };
                (
                    Load::Int {
                        size: 8,
                        signed: false,
                    },
                    Type::Ptr(pointer),
                )
            }
            KernelKind::Array { elem, len } if self.is_char(elem) => {
                (Load::Bytes(len), Type::Str { len })
            }
            KernelKind::Struct { .. } | KernelKind::Array { .. } => {
                let object = self.object(place.ty, span)?;
                (Load::Bytes(object.layout.size()), Type::Object(object))
            }
            KernelKind::Float { .. } => {
                return self.fail(span, "floating-point values cannot be read");
            }
            _ => {
                return self.fail(
                    span,
                    &format!("values of type `{}` cannot be read", ty.name),
                );
            }
        };
        let offset = place.offset_bits / 8;
        let kind = match place.base {
            Base::Memory { ptr, access } => TExprKind::MemoryRead {
                ptr: Box::new(ptr),
                offset,
                load,
                access,
            },
            Base::Value(value) => TExprKind::ValueRead {
                value: Box::new(value),
                offset,
                load,
            },
        };
        Some(TExpr {
            kind,
            ty: result,
            span,
        })
    }

    /// How an integer at `place` loads: whole, or as a bitfield.
    fn scalar_load(&mut self, place: &Place, size: u8, signed: bool, span: Span) -> Option<Load> {
        let Some(bits) = place.bitfield_bits else {
            if !place.offset_bits.is_multiple_of(8) {
                return self.fail(span, "this member does not start on a byte");
            }
            return Some(Load::Int { size, signed });
        };
        let shift = (place.offset_bits % 8) as u8;
        let bytes = (u32::from(shift) + u32::from(bits)).div_ceil(8);
        if bytes > 8 {
            return self.fail(span, "bitfields that span more than 8 bytes cannot be read");
        }
        Some(Load::Bits {
            bytes: bytes as u8,
            shift,
            bits,
        })
    }

    /// Whether `ty` is plain `char`: arrays of it are strings.
    fn is_char(&self, ty: KTypeId) -> bool {
        self.types.get(ty).is_ok_and(|t| t.is_char())
    }

    /// A struct, union or array value of type `ty`.
    pub(super) fn object(&mut self, ty: KTypeId, span: Span) -> Option<CObject> {
        match self.types.layout_of(ty) {
            Ok(layout) => Some(CObject {
                ty,
                name: self.types.name_of(ty),
                layout,
            }),
            Err(message) => self.fail(span, &message),
        }
    }
}

/// The access through a pointer moved by a runtime offset: the verifier
/// refuses variable offsets on BTF pointers, so those are probe-read.
fn variable_offset(access: Access) -> Access {
    match access {
        Access::Direct => Access::Kernel,
        other => other,
    }
}

/// `ptr + bytes` as an address.
fn offset_by(ptr: TExpr, bytes: u64, span: Span) -> TExpr {
    if bytes == 0 {
        return ptr;
    }
    add(
        ptr,
        TExpr {
            kind: TExprKind::Int(bytes),
            ty: Type::U64,
            span,
        },
        span,
    )
}

/// `ptr + index * stride` as an address.
pub(super) fn scaled_add(ptr: TExpr, index: TExpr, stride: u32, span: Span) -> TExpr {
    let scaled = match stride {
        1 => index,
        _ => TExpr {
            kind: TExprKind::Binary {
                op: crate::frontend::ast::BinOp::Mul,
                lhs: Box::new(index),
                rhs: Box::new(TExpr {
                    kind: TExprKind::Int(u64::from(stride)),
                    ty: Type::U64,
                    span,
                }),
            },
            ty: Type::U64,
            span,
        },
    };
    add(ptr, scaled, span)
}

fn add(lhs: TExpr, rhs: TExpr, span: Span) -> TExpr {
    let ty = lhs.ty.clone();
    TExpr {
        kind: TExprKind::Binary {
            op: crate::frontend::ast::BinOp::Add,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
        },
        ty,
        span,
    }
}
