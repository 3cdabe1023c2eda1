//! Checking expressions over kernel (BTF) types: `tp_btf` arguments, member
//! access through kernel pointers (`p->field`, `s.field`), pointer casts,
//! the type of `curtask` and task members for built-ins.

use crate::frontend::ast::{Expr, ExprKind, Span, TypeName};
use crate::frontend::check::Checker;
use crate::frontend::checked::*;
use crate::frontend::diag::ScriptError;
use crate::frontend::types::{KernelPtr, Type};
use crate::providers;
use crate::vocab::kernel_types::{
    FoundMember, KTypeId, KernelKind, KernelMember, KernelType, close_names, find_member,
    member_names,
};
use crate::vocab::{ArgRead, BtfArg};

/// A kernel object in memory: `offset_bits` into what `ptr` points to.
struct Place {
    ptr: TExpr,
    offset_bits: u32,
    ty: KTypeId,
    bitfield_bits: Option<u8>,
}

impl Checker<'_> {
    /// Whether this probe's pointers are BTF-typed for the verifier, so they
    /// can be read directly.
    fn tracing_program(&self) -> bool {
        providers::of(&self.resolved().attach).btf_pointers()
    }

    fn kernel_type(&mut self, id: KTypeId, span: Span) -> Option<KernelType> {
        match self.env.kernel_type(id) {
            Ok(ty) => Some(ty),
            Err(message) => self.fail(span, &format!("kernel BTF: {message}")),
        }
    }

    /// `args.NAME` of a `tp_btf` probe: context slot `index`.
    pub(super) fn btf_arg(&mut self, args: &[BtfArg], field: &str, span: Span) -> Option<TExpr> {
        let Some(index) = args.iter().position(|a| a.name == field) else {
            let names: Vec<String> = args.iter().map(|a| a.name.clone()).collect();
            let probe = self.resolved().name.clone();
            let error = ScriptError::new(span, format!("{probe} has no argument `{field}`"))
                .with_help(format!("arguments: {}", names.join(", ")));
            self.error(error);
            return None;
        };
        let slot = TExpr {
            kind: TExprKind::Arg(ArgRead::Slot(8 * index as u16)),
            ty: Type::U64,
            span,
        };
        let ty = self.value_type(args[index].ty, true, span)?;
        // Each slot is a u64; narrower arguments are truncated to their type.
        Some(TExpr {
            kind: TExprKind::Cast(Box::new(slot)),
            ty,
            span,
        })
    }

    /// The script type of a kernel value of type `id` held in a register;
    /// `btf` tells whether a pointer's BTF type is known to the verifier.
    fn value_type(&mut self, id: KTypeId, btf: bool, span: Span) -> Option<Type> {
        let ty = self.kernel_type(id, span)?;
        match ty.kind {
            KernelKind::Int { size, signed } | KernelKind::Enum { size, signed } => {
                Some(Type::Int { size, signed })
            }
            KernelKind::Bool => Some(Type::Int {
                size: 1,
                signed: false,
            }),
            KernelKind::Pointer(target) => {
                let name = self.kernel_type(target, span)?.name;
                Some(Type::KernelPtr(KernelPtr { target, name, btf }))
            }
            _ => self.fail(
                span,
                &format!("values of type `{}` cannot be used", ty.name),
            ),
        }
    }

    /// `base.field` or `base->field` on a kernel struct or pointer.
    pub(super) fn kernel_member(&mut self, base: &Expr, field: &str, span: Span) -> Option<TExpr> {
        let place = self.place(base, field, span)?;
        self.read_place(place, span)
    }

    /// Where `base.field` lives: `base` is an embedded struct (itself a
    /// place) or a pointer to a struct.
    fn place(&mut self, base: &Expr, field: &str, span: Span) -> Option<Place> {
        let value = match &base.kind {
            ExprKind::Field {
                expr, field: inner, ..
            } if !is_args(expr) => {
                // `base` is checked once: an embedded struct stays a place,
                // anything else is read here (checking `base` again as an
                // expression would redo its whole chain, 2^depth times).
                let inner = self.place(expr, inner, base.span)?;
                let ty = self.kernel_type(inner.ty, base.span)?;
                if matches!(ty.kind, KernelKind::Struct { .. }) {
                    return self.member_place(inner, field, span);
                }
                self.read_place(inner, base.span)?
            }
            _ => self.expr(base)?,
        };
        let Type::KernelPtr(ptr) = &value.ty else {
            return self.fail(span, &format!("`{}` has no field `{field}`", value.ty));
        };
        let container = Place {
            ty: ptr.target,
            offset_bits: 0,
            bitfield_bits: None,
            ptr: value,
        };
        self.member_place(container, field, span)
    }

    /// Where member `field` of the struct at `container` lives.
    fn member_place(&mut self, container: Place, field: &str, span: Span) -> Option<Place> {
        let ty = self.kernel_type(container.ty, span)?;
        let KernelKind::Struct { members, .. } = &ty.kind else {
            return self.fail(span, &format!("`{}` has no field `{field}`", ty.name));
        };
        let resolve = |id| match self.env.kernel_type(id).map(|t| t.kind) {
            Ok(KernelKind::Struct { members, .. }) => Some(members),
            _ => None,
        };
        let Some(found) = find_member(members, field, &resolve) else {
            return self.no_member(&ty.name, members, field, span);
        };
        let FoundMember {
            ty: member_ty,
            offset_bits,
            bitfield_bits,
        } = found;
        Some(Place {
            offset_bits: container.offset_bits + offset_bits,
            ty: member_ty,
            bitfield_bits,
            ptr: container.ptr,
        })
    }

    fn no_member<T>(
        &mut self,
        struct_name: &str,
        members: &[KernelMember],
        field: &str,
        span: Span,
    ) -> Option<T> {
        let resolve = |id| match self.env.kernel_type(id).map(|t| t.kind) {
            Ok(KernelKind::Struct { members, .. }) => Some(members),
            _ => None,
        };
        let names = member_names(members, &resolve);
        let close = close_names(field, &names);
        let mut error = ScriptError::new(span, format!("`{struct_name}` has no field `{field}`"));
        if !close.is_empty() {
            error = error.with_help(format!("close names: {}", close.join(", ")));
        }
        self.error(error);
        None
    }

    /// Read the value at `place`: integers, pointers and `char[N]`.
    fn read_place(&mut self, place: Place, span: Span) -> Option<TExpr> {
        if place.bitfield_bits.is_some() || !place.offset_bits.is_multiple_of(8) {
            return self.fail(span, "bitfield members cannot be read");
        }
        let ty = self.kernel_type(place.ty, span)?;
        let direct = self.tracing_program() && place.ptr.ty.kernel_ptr().is_some_and(|p| p.btf);
        let (load, result) = match ty.kind {
            KernelKind::Struct { .. } => {
                return self.fail(
                    span,
                    &format!(
                        "`{}` is a struct: read one of its fields with `.NAME`",
                        ty.name
                    ),
                );
            }
            KernelKind::Array { elem, len } => {
                let elem = self.kernel_type(elem, span)?;
                if !matches!(elem.kind, KernelKind::Int { size: 1, .. }) {
                    return self.fail(
                        span,
                        &format!("only `char` arrays can be read, not `{}`", ty.name),
                    );
                }
                (KernelLoad::CharArray(len), Type::Str { len })
            }
            _ => {
                let result = self.value_type(place.ty, direct, span)?;
                let (size, signed) = match &result {
                    Type::Int { size, signed } => (*size, *signed),
                    _ => (8, false),
                };
                (KernelLoad::Int { size, signed }, result)
            }
        };
        Some(TExpr {
            kind: TExprKind::KernelRead {
                ptr: Box::new(place.ptr),
                offset: place.offset_bits / 8,
                load,
                direct,
            },
            ty: result,
            span,
        })
    }

    /// The type of `curtask`: a task pointer, BTF-typed where the probe's
    /// pointers are, a plain address elsewhere.
    pub(crate) fn current_task_type(&mut self, span: Span) -> Option<Type> {
        let target = self.task_type(span)?;
        Some(Type::KernelPtr(KernelPtr {
            target,
            name: "struct task_struct".into(),
            btf: self.tracing_program(),
        }))
    }

    fn task_type(&mut self, span: Span) -> Option<KTypeId> {
        match self.env.kernel_type_named("struct task_struct") {
            Ok(id) => Some(id),
            Err(message) => self.fail(span, &format!("kernel BTF: {message}")),
        }
    }

    /// `(struct NAME *)expr`: an address becomes a typed pointer whose reads
    /// go through `bpf_probe_read_kernel`.
    pub(super) fn kernel_cast(&mut self, ty: &TypeName, expr: TExpr, span: Span) -> Option<TExpr> {
        if ty.pointer_depth != 1 || !expr.ty.is_int() {
            return self.fail(
                span,
                &format!(
                    "cannot cast {} to `{}` with {} `*`",
                    expr.ty, ty.name, ty.pointer_depth
                ),
            );
        }
        let target = match self.env.kernel_type_named(&ty.name) {
            Ok(id) => id,
            Err(message) => return self.fail(ty.span, &format!("kernel BTF: {message}")),
        };
        let result = Type::KernelPtr(KernelPtr {
            target,
            name: ty.name.clone(),
            btf: false,
        });
        Some(TExpr {
            kind: TExprKind::Cast(Box::new(expr)),
            ty: result,
            span,
        })
    }

    /// A task pointer argument of `func`.
    pub(crate) fn task_arg(&mut self, task: &Expr, func: &str) -> Option<TExpr> {
        let task = self.expr(task)?;
        if !task.ty.kernel_ptr().is_some_and(KernelPtr::is_task) {
            return self.fail(
                task.span,
                &format!("{func} needs a `struct task_struct *`, not {}", task.ty),
            );
        }
        Some(task)
    }

    /// `task->NAME` for a task pointer checked elsewhere (selected, thread fields).
    pub(crate) fn task_member(&mut self, task: TExpr, name: &str) -> Option<TExpr> {
        let span = task.span;
        let container = Place {
            ty: task.ty.kernel_ptr()?.target,
            offset_bits: 0,
            bitfield_bits: None,
            ptr: task,
        };
        let place = self.member_place(container, name, span)?;
        self.read_place(place, span)
    }

    /// A record item's value as stored: a task pointer becomes its tid
    /// (`task->pid`), the value of a thread field.
    pub(super) fn record_value(&mut self, value: TExpr) -> Option<TExpr> {
        if value.ty.kernel_ptr().is_some_and(KernelPtr::is_task) {
            self.task_member(value, "pid")
        } else {
            Some(value)
        }
    }

    /// A map key that is a task pointer makes the map task-local storage,
    /// which the verifier accepts only with a BTF task pointer.
    pub(super) fn check_task_key(&mut self, key: &TExpr) -> Option<()> {
        match key.ty.kernel_ptr() {
            Some(ptr) if ptr.is_task() && !(ptr.btf && self.tracing_program()) => self.fail(
                key.span,
                "a map keyed by a task is task-local storage, which needs a task pointer the \
                 verifier knows: a `tp_btf` argument or `curtask` in a `tp_btf` probe",
            ),
            _ => Some(()),
        }
    }

    /// Task-local storage holds plain values: aggregations need per-key
    /// maps user space can print.
    pub(super) fn check_task_storage_maps(&mut self) {
        let bad: Vec<(String, Span)> = self
            .maps
            .iter()
            .filter(|m| {
                m.key
                    .as_ref()
                    .and_then(Type::kernel_ptr)
                    .is_some_and(KernelPtr::is_task)
                    && matches!(m.value, MapValueKind::Aggregate(_))
            })
            .map(|m| (m.name.clone(), m.span))
            .collect();
        for (name, span) in bad {
            let error = ScriptError::new(
                span,
                format!(
                    "{name} is keyed by a task (task-local storage), which cannot hold aggregations"
                ),
            )
            .with_help("store plain values (`@m[task] += 1`), or key by `task->pid`");
            self.error(error);
        }
    }
}

/// Whether `expr` is the `args` of `args.NAME`.
pub(super) fn is_args(expr: &Expr) -> bool {
    matches!(&expr.kind, ExprKind::Ident(name) if name == "args")
}

#[cfg(test)]
#[path = "check/kernel_tests.rs"]
mod kernel_tests;
