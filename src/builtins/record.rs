//! Record items that are not expressions: the stacks (`stack`, `ustack`,
//! `kstack`, `stack(KIND)`), the `--pmu` counters (`pmu`) and a task's
//! identity (`identity(task)`).

use super::{Entry, Kind, RecordItem, Site, Written};
use crate::frontend::ast::{BinOp, Expr, ExprKind, RecordItem as Item, Span};
use crate::frontend::check::Checker;
use crate::frontend::check_record::RecordItems;
use crate::frontend::checked::{OffcpuStack, SwitchStack};
use crate::frontend::checked::{RecordValue, StackKind};
use crate::frontend::diag::ScriptError;
use crate::frontend::options::STACK_KINDS;
use crate::frontend::types::{Pointer, Type};
use crate::vocab::AttachPoint;

/// `stack`, `ustack`, `kstack`: the stack of the event, one per record.
pub struct Stack(pub StackKind);

impl RecordItem for Stack {
    fn check(&self, cx: &mut Checker, site: &Site, items: &mut RecordItems) -> Option<()> {
        if site.called {
            return stack_of_kind(cx, site, items);
        }
        set_stack(cx, items, Some(self.0), site.span);
        Some(())
    }
}

/// `stack(KIND)`: both stacks, only when `-S KIND` is on;
/// `stack(offcpu, NEXT)` at a context switch; `stack(offcpu, pending)`.
fn stack_of_kind(cx: &mut Checker, site: &Site, items: &mut RecordItems) -> Option<()> {
    let kind = match site.args {
        [
            Expr {
                kind: ExprKind::Ident(kind),
                ..
            },
            rest @ ..,
        ] if STACK_KINDS.contains(&kind.as_str()) && (rest.is_empty() || kind == "offcpu") => {
            Some(kind)
        }
        _ => {
            let message = format!(
                "`stack(KIND)` takes one of {}; `stack(offcpu, NEXT)` the task switched in, \
                 or `pending`",
                STACK_KINDS.join(", ")
            );
            cx.error(ScriptError::new(site.span, message).with_label("unknown stack kind"));
            None
        }
    };
    let on = kind.is_some_and(|kind| cx.options.stacks.contains(kind));
    if let [_, next] = site.args {
        if matches!(&next.kind, ExprKind::Ident(name) if name == "pending") {
            return pending_stack(cx, next.span, items);
        }
        let switch = switch_stack(cx, next)?;
        items.offcpu_stack = on.then(|| OffcpuStack::Switch(Box::new(switch)));
    }
    set_stack(cx, items, on.then_some(StackKind::Both), site.span);
    Some(())
}

/// `stack(offcpu, NEXT)`: `NEXT` is a task, in a `sched_switch` probe
/// (where the current task is the one switched out).
fn switch_stack(cx: &mut Checker, next: &Expr) -> Option<SwitchStack> {
    let at_switch = matches!(
        &cx.resolved().attach,
        AttachPoint::TpBtf { name } | AttachPoint::RawTracepoint { name } if name == "sched_switch"
    );
    if !at_switch {
        return cx.fail(
            next.span,
            "`stack(offcpu, NEXT)` is the off-CPU stack at a context switch: use it in `tp_btf:sched_switch`",
        );
    }
    let value = cx.expr(next)?;
    if !value.ty.pointer().is_some_and(Pointer::is_task) {
        return cx.fail(
            next.span,
            "`NEXT` is the task switched in: a `struct task_struct *`",
        );
    }
    let selected = |task: Expr| Expr {
        kind: ExprKind::Call {
            name: "selected".into(),
            args: vec![task],
        },
        span: next.span,
    };
    let curtask = Expr {
        kind: ExprKind::Ident("curtask".into()),
        span: next.span,
    };
    Some(SwitchStack {
        next: value,
        prev_selected: cx.expr(&selected(curtask))?,
        next_selected: cx.expr(&selected(next.clone()))?,
    })
}

/// `stack(offcpu, pending)`: the user stack of the long blocks the current
/// task is returning from, at `sys_exit`; only under `-S offcpu=DUR`, which
/// defers those stacks to the return (`docs/unwinding.md`).
fn pending_stack(cx: &mut Checker, span: Span, items: &mut RecordItems) -> Option<()> {
    let at_sys_exit = matches!(
        &cx.resolved().attach,
        AttachPoint::TpBtf { name } | AttachPoint::RawTracepoint { name } if name == "sys_exit"
    );
    if !at_sys_exit {
        return cx.fail(
            span,
            "`stack(offcpu, pending)` is taken at a system call's return: use it in `tp_btf:sys_exit`",
        );
    }
    if cx.options.offcpu_min_block_ns.is_none() {
        return cx.fail(
            span,
            "`stack(offcpu, pending)` needs `-S offcpu=DUR` (without a threshold no stack is deferred)",
        );
    }
    items.offcpu_stack = Some(OffcpuStack::Pending);
    set_stack(cx, items, Some(StackKind::User), span);
    Some(())
}

fn set_stack(cx: &mut Checker, items: &mut RecordItems, stack: Option<StackKind>, span: Span) {
    if std::mem::replace(&mut items.has_stack_item, true) {
        cx.error(ScriptError::new(
            span,
            "a record holds one stack: use `stack` for user and kernel frames together",
        ));
    }
    items.stack = stack;
}

/// `pmu`: every `--pmu` counter on the current CPU, as three fields each
/// (value, time enabled, time running) named after the counter.
pub struct Pmu;

impl RecordItem for Pmu {
    fn check(&self, cx: &mut Checker, site: &Site, items: &mut RecordItems) -> Option<()> {
        cx.reads_counters = true;
        for (index, counter) in cx.options.pmu.clone().iter().enumerate() {
            for suffix in ["", ":enabled", ":running"] {
                let name = format!("{}:{}{suffix}", items.counter_prefix, counter.name);
                cx.add_field(&mut items.fields, name, Type::U64, site.span)?;
            }
            items.values.push(RecordValue::Counter(index));
        }
        Some(())
    }
}

/// `identity(TASK)`: the items `tid`, `pid`, `ppid`, `comm`, `pcomm` (its
/// process's name) and `kthread` (0 or 1) of the task, the fields of the
/// trackers' `task` record (docs/system-tracking.md).
pub struct Identity;

impl RecordItem for Identity {
    fn check(&self, cx: &mut Checker, site: &Site, items: &mut RecordItems) -> Option<()> {
        let [task] = site.args else {
            return cx.fail(site.span, "identity() takes one `struct task_struct *`");
        };
        for item in identity_items(task, site.span) {
            cx.add_item(items, &item)?;
        }
        Some(())
    }
}

/// The items `identity(task)` stands for, as expressions on `task`.
fn identity_items(task: &Expr, span: Span) -> Vec<Item> {
    let node = |kind| Expr { kind, span };
    let member = |base: Expr, field: &str| {
        node(ExprKind::Field {
            expr: Box::new(base),
            field: field.into(),
            arrow: true,
        })
    };
    let binary = |op, lhs, rhs| {
        node(ExprKind::Binary {
            op,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
        })
    };
    const PF_KTHREAD_BIT: u64 = 21;
    let kthread = binary(
        BinOp::BitAnd,
        binary(
            BinOp::Shr,
            member(task.clone(), "flags"),
            node(ExprKind::Int(PF_KTHREAD_BIT)),
        ),
        node(ExprKind::Int(1)),
    );
    [
        ("tid", member(task.clone(), "pid")),
        ("pid", member(task.clone(), "tgid")),
        ("ppid", member(member(task.clone(), "real_parent"), "tgid")),
        ("comm", member(task.clone(), "comm")),
        (
            "pcomm",
            member(member(task.clone(), "group_leader"), "comm"),
        ),
        ("kthread", kthread),
    ]
    .into_iter()
    .map(|(name, value)| Item {
        name: Some(name.into()),
        value,
        span,
    })
    .collect()
}

pub(super) const TABLE: &[Entry] = &[
    Entry {
        name: "stack",
        written: Written::WordOrCall,
        indexed: false,
        signature: "stack, stack(KIND), stack(offcpu, NEXT)",
        doc: "The user and kernel stacks of the event; `stack(KIND)` only with `-S KIND`; \
              `stack(offcpu, NEXT)` at `sched_switch`: the off-CPU stack of the task switched \
              out, or with `-S offcpu=DUR` that of `NEXT` when it was off the CPU at least DUR.",
        example: "uprobe:/bin/x:f < size = arg0; stack >",
        kind: Kind::RecordItem(&Stack(StackKind::Both)),
    },
    Entry {
        name: "ustack",
        written: Written::Word,
        indexed: false,
        signature: "ustack",
        doc: "The user stack of the event.",
        example: "uprobe:/bin/x:f < ustack >",
        kind: Kind::RecordItem(&Stack(StackKind::User)),
    },
    Entry {
        name: "kstack",
        written: Written::Word,
        indexed: false,
        signature: "kstack",
        doc: "The kernel stack of the event.",
        example: "tracepoint:syscalls:sys_enter_write < kstack >",
        kind: Kind::RecordItem(&Stack(StackKind::Kernel)),
    },
    Entry {
        name: "pmu",
        written: Written::Word,
        indexed: false,
        signature: "pmu",
        doc: "The `--pmu` counters on the current CPU: value, time enabled and time running.",
        example: "tracepoint:syscalls:sys_enter_write < pmu >",
        kind: Kind::RecordItem(&Pmu),
    },
    Entry {
        name: "identity",
        written: Written::Call,
        indexed: false,
        signature: "identity(task)",
        doc: "A task's tid, pid, ppid, comm, pcomm and kthread, as the `task` record holds them.",
        example: "tp_btf:sched_wakeup < identity(args.p) >",
        kind: Kind::RecordItem(&Identity),
    },
];
