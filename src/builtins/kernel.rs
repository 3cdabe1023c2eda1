//! Built-ins on kernel memory: `ksym(addr)` and `selected(task)`.

use super::{Entry, Expression, Kind, Site, Written};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::check::Checker;
use crate::frontend::checked::{TCall, TExpr, TExprKind};
use crate::frontend::types::Type;

/// `ksym(addr)`: an address printed as its kernel symbol (a cast to the
/// symbol type; user space names it).
pub struct Ksym;

impl Expression for Ksym {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let [addr] = site.args else {
            return cx.fail(site.span, "ksym() takes one kernel address");
        };
        let addr = cx.expr(addr)?;
        if !addr.ty.is_int() {
            return cx.fail(
                addr.span,
                &format!("ksym() needs an address, not {}", addr.ty),
            );
        }
        Some(TExpr {
            kind: TExprKind::Cast(Box::new(addr)),
            ty: Type::KernelSymbol,
            span: site.span,
        })
    }
}

/// `selected(task)`: whether the task passes the command line's task
/// filters (1 when there are none). The call's args are the task's tgid,
/// pid, flags, comm and its group leader's comm.
pub struct Selected;

/// The members of the task `selected()` reads, in its args' order; the
/// group leader's `comm` follows them.
const TASK_MEMBERS: [&str; 4] = ["tgid", "pid", "flags", "comm"];

impl Expression for Selected {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let [task] = site.args else {
            return cx.fail(site.span, "selected() takes one `struct task_struct *`");
        };
        let task = cx.task_arg(task, "selected()")?;
        if cx.options.filter.is_empty() {
            return Some(TExpr {
                kind: TExprKind::Int(1),
                ty: Type::I64,
                span: site.span,
            });
        }
        let leader = cx.task_member(task.clone(), "group_leader")?;
        let mut args = Vec::new();
        for member in TASK_MEMBERS {
            args.push(cx.task_member(task.clone(), member)?);
        }
        args.push(cx.task_member(leader, "comm")?);
        Some(site.value(args, Type::I64))
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, _ty: &Type) -> Value {
        Value::Int(cx.selected(&call.args))
    }
}

pub(super) const TABLE: &[Entry] = &[
    Entry {
        name: "ksym",
        written: Written::Call,
        indexed: false,
        signature: "ksym(addr)",
        doc: "A kernel address, printed as the name of its symbol.",
        example: "kprobe:call_rcu { @[ksym(arg1)] = count(); }",
        kind: Kind::Expression(&Ksym),
    },
    Entry {
        name: "selected",
        written: Written::Call,
        indexed: false,
        signature: "selected(task)",
        doc: "1 when the task passes the task filters (`-p`, `-n`, `--tid`, ...), else 0.",
        example: "tp_btf:sched_switch /selected(args.next)/ { @[args.next->comm] = count(); }",
        kind: Kind::Expression(&Selected),
    },
];
