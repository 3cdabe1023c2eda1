//! Built-ins on memory: `selected(task)`, `path(p)` (a kernel path's
//! text) and `uptr(p)`/`kptr(p)` (which memory a pointer points into).

use super::{Entry, Expression, Kind, Site, Written};
use crate::codegen::helpers::D_PATH;
use crate::codegen::ir::{Arg, Base};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::check::Checker;
use crate::frontend::checked::{TCall, TExpr, TExprKind};
use crate::frontend::diag::ScriptError;
use crate::frontend::types::Type;
use crate::vocab::AttachPoint;

/// `selected(task)`: whether the task passes the command line's task
/// filters (1 when there are none). The call's args are the task's tgid,
/// pid, flags, comm and its group leader's comm and start time.
pub struct Selected;

/// The members of the task `selected()` reads, in its args' order; the
/// group leader's `comm` and `start_time` follow them.
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
        args.push(cx.task_member(leader.clone(), "comm")?);
        args.push(cx.task_member(leader, "start_time")?);
        Some(site.value(args, Type::I64))
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, _ty: &Type) -> Value {
        Value::Int(cx.selected(&call.args))
    }
}

/// `path(p)`: the text of a `struct path *` (`bpf_d_path`), in fentry and
/// fexit probes of the functions the kernel allows it in (the verifier
/// says which).
pub struct Path;

impl Expression for Path {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        if !matches!(cx.resolved().attach, AttachPoint::Fentry { .. }) {
            let error = ScriptError::new(
                site.span,
                "path() can only be used in fentry and fexit (kfunc, kretfunc) probes",
            )
            .with_help("bpf_d_path, which path() calls, is a helper of BPF tracing programs only");
            cx.error(error);
            return None;
        }
        let [path] = site.args else {
            return cx.fail(site.span, "path() takes one `struct path *`");
        };
        let path = cx.expr(path)?;
        // An fentry argument is BTF-typed for the verifier even when the
        // script sees a u64 (`arg0`); the verifier checks it is a path.
        let is_path = match path.ty.pointer() {
            Some(pointer) => pointer.name == "struct path",
            None => matches!(path.ty, Type::Int { .. }),
        };
        if !is_path {
            let message = format!("path() needs a `struct path *`, not {}", path.ty);
            return cx.fail(path.span, &message);
        }
        let len = cx.options.string_len();
        Some(site.value(vec![path], Type::Str { len }))
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, ty: &Type) -> Value {
        let path = cx.int_expr(&call.args[0]);
        let Type::Str { len } = *ty else {
            unreachable!("path() is checked into a string")
        };
        let buffer = cx.alloc(len);
        cx.zero(Base::Frame, buffer, ty.size());
        let args = vec![Arg::Reg(path), Arg::Frame(buffer), Arg::Imm(i64::from(len))];
        cx.checked_call_unused(D_PATH, args);
        Value::Mem(buffer)
    }
}

/// `uptr(p)` and `kptr(p)`: `p`, read as a pointer into user (or kernel)
/// memory by `str()`, `buf()`, `macaddr()` and `join()` that take it
/// directly. The call's arg is `p`.
pub struct AddressSpace {
    pub user: bool,
}

impl Expression for AddressSpace {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let name = if self.user { "uptr" } else { "kptr" };
        let [pointer] = site.args else {
            return cx.fail(site.span, &format!("{name}() takes one pointer"));
        };
        let pointer = cx.expr(pointer)?;
        if !pointer.ty.is_int() {
            let message = format!("{name}() needs a pointer or an integer, not {}", pointer.ty);
            return cx.fail(pointer.span, &message);
        }
        let ty = pointer.ty.clone();
        Some(site.value(vec![pointer], ty))
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, _ty: &Type) -> Value {
        Value::Int(cx.int_expr(&call.args[0]))
    }

    fn user_memory(&self) -> Option<bool> {
        Some(self.user)
    }
}

pub(super) const TABLE: &[Entry] = &[
    Entry {
        name: "selected",
        written: Written::Call,
        indexed: false,
        signature: "selected(task)",
        doc: "1 when the task passes the task filters (`-p`, `-n`, `--tid`, ...), else 0.",
        example: "tp_btf:sched_switch /selected(args.next)/ { @[args.next->comm] = count(); }",
        kind: Kind::Expression(&Selected),
    },
    Entry {
        name: "path",
        written: Written::Call,
        indexed: false,
        signature: "path(p)",
        doc: "The text of a `struct path *` (fentry/fexit probes of functions bpf_d_path allows).",
        example: "fentry:vfs_open { printf(\"%s\\n\", path(args->path)); }",
        kind: Kind::Expression(&Path),
    },
    Entry {
        name: "uptr",
        written: Written::Call,
        indexed: false,
        signature: "uptr(p)",
        doc: "`p`, read as a pointer into user memory by str(), buf(), macaddr() and join().",
        example: "kprobe:do_sys_openat2 { printf(\"%s\\n\", str(uptr(arg1))); }",
        kind: Kind::Expression(&AddressSpace { user: true }),
    },
    Entry {
        name: "kptr",
        written: Written::Call,
        indexed: false,
        signature: "kptr(p)",
        doc: "`p`, read as a pointer into kernel memory by str(), buf(), macaddr() and join().",
        example: "uprobe:/bin/x:f { printf(\"%s\\n\", str(kptr(arg0))); }",
        kind: Kind::Expression(&AddressSpace { user: false }),
    },
];
