//! Checking kernel-specific values: `tp_btf` arguments, the type of
//! `curtask`, task members for built-ins, and task-local storage.

use crate::frontend::ast::{Expr, ExprKind, Span};
use crate::frontend::check::Checker;
use crate::frontend::checked::*;
use crate::frontend::diag::ScriptError;
use crate::frontend::types::{Pointer, Space, Type};
use crate::providers;
use crate::vocab::kernel_types::{KTypeId, KernelKind, KernelType};
use crate::vocab::{ArgRead, BtfArg};

impl Checker<'_> {
    /// Whether this probe's pointers are BTF-typed for the verifier, so they
    /// can be read directly.
    pub(super) fn tracing_program(&self) -> bool {
        providers::of(&self.resolved().attach).btf_pointers()
    }

    /// Type `id` (a script definition shadowing a kernel type of its name).
    pub(super) fn kernel_type(&mut self, id: KTypeId, span: Span) -> Option<KernelType> {
        match self.types.get(id) {
            Ok(ty) => Some(ty),
            Err(message) => self.fail(span, &format!("kernel BTF: {message}")),
        }
    }

    /// `args.NAME` of a `tp_btf` or fentry probe: context slot `index`.
    pub(super) fn btf_arg(&mut self, args: &[BtfArg], field: &str, span: Span) -> Option<TExpr> {
        let Some(index) = args.iter().position(|a| a.name == field) else {
            let names: Vec<String> = args.iter().map(|a| a.name.clone()).collect();
            let probe = self.resolved().name.clone();
            let error = ScriptError::new(span, format!("{probe} has no argument `{field}`"))
                .with_help(format!("arguments: {}", names.join(", ")));
            self.error(error);
            return None;
        };
        self.btf_value(ArgRead::Slot(8 * index as u16), args[index].ty, span)
    }

    /// The value of kernel type `ty` in context slot `read`, as a typed
    /// expression (`retval` of fexit, BTF arguments).
    pub(crate) fn btf_value(&mut self, read: ArgRead, ty: KTypeId, span: Span) -> Option<TExpr> {
        let slot = TExpr {
            kind: TExprKind::Arg(read),
            ty: Type::U64,
            span,
        };
        let ty = self.value_type(ty, true, false, span)?;
        // Each slot is a u64; narrower values are truncated to their type.
        Some(TExpr {
            kind: TExprKind::Cast(Box::new(slot)),
            ty,
            span,
        })
    }

    /// The script type of a C value of type `id` held in a register;
    /// `btf` tells whether a pointer's BTF type is known to the verifier,
    /// `user` whether it points into user memory.
    pub(super) fn value_type(
        &mut self,
        id: KTypeId,
        btf: bool,
        user: bool,
        span: Span,
    ) -> Option<Type> {
        let ty = self.kernel_type(id, span)?;
        match ty.kind {
            KernelKind::Int { size, signed } | KernelKind::Enum { size, signed } => {
                Some(Type::Int { size, signed })
            }
            KernelKind::Bool => Some(Type::Int {
                size: 1,
                signed: false,
            }),
            KernelKind::Pointer(target) => Some(Type::Ptr(Pointer {
                target,
                name: self.types.name_of(target),
                btf,
                space: Space::of(user),
            })),
            _ => self.fail(
                span,
                &format!("values of type `{}` cannot be used", ty.name),
            ),
        }
    }

    /// The type of `curtask`: a task pointer, BTF-typed where the probe's
    /// pointers are, a plain address elsewhere.
    pub(crate) fn current_task_type(&mut self, span: Span) -> Option<Type> {
        let target = match self.types.named("struct task_struct") {
            Ok(id) => id,
            Err(message) => return self.fail(span, &format!("kernel BTF: {message}")),
        };
        Some(Type::Ptr(Pointer {
            target,
            name: "struct task_struct".into(),
            btf: self.tracing_program(),
            space: Space::Kernel,
        }))
    }

    /// A pointer to kernel type `name` (`struct bpf_iter__task`), read
    /// through `bpf_probe_read_kernel`.
    pub(crate) fn kernel_pointer(&mut self, name: &str, span: Span) -> Option<Type> {
        let target = self.type_named(name, span)?;
        Some(Type::Ptr(Pointer {
            target,
            name: name.into(),
            btf: false,
            space: Space::Kernel,
        }))
    }

    /// A task pointer argument of `func`.
    pub(crate) fn task_arg(&mut self, task: &Expr, func: &str) -> Option<TExpr> {
        let task = self.expr(task)?;
        if !task.ty.pointer().is_some_and(Pointer::is_task) {
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
        self.member_of(task, name, span)
    }

    /// `curtask->group_leader->start_time` under `--only-command`, for a
    /// probe the command's tree filters: the tree's entries hold it, so a
    /// process that got an exited member's pid is not taken for it.
    pub(super) fn command_identity(&mut self, span: Span) -> Option<TExpr> {
        let attach = &self.resolved().attach;
        if !self.options.filter.command
            || !providers::follows_command_tree(attach, self.probe.origin)
        {
            return None;
        }
        let curtask = Expr {
            kind: ExprKind::Ident("curtask".into()),
            span,
        };
        let task = self.expr(&curtask)?;
        let leader = self.task_member(task, "group_leader")?;
        self.task_member(leader, "start_time")
    }

    /// A record item's value as stored: a task pointer becomes its tid
    /// (`task->pid`), the value of a thread field.
    pub(super) fn record_value(&mut self, value: TExpr) -> Option<TExpr> {
        if value.ty.pointer().is_some_and(Pointer::is_task) {
            self.task_member(value, "pid")
        } else {
            Some(value)
        }
    }

    /// A map key that is a task pointer makes the map task-local storage,
    /// which the verifier accepts only with a BTF task pointer.
    pub(super) fn check_task_key(&mut self, key: &TExpr) -> Option<()> {
        match key.ty.pointer() {
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
                    .and_then(Type::pointer)
                    .is_some_and(Pointer::is_task)
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
