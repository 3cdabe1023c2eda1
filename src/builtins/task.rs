//! Built-ins about the current task: `pid`, `tid`, `uid`, `gid`,
//! `username`, `comm`, `cpid` and `curtask`.

use super::{Entry, Expression, Kind, Site, Written};
use crate::codegen::helpers::{GET_CURRENT_COMM, GET_CURRENT_PID_TGID, GET_CURRENT_UID_GID};
use crate::codegen::ir::{AluOp, Arg};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::check::Checker;
use crate::frontend::checked::{TCall, TExpr};
use crate::frontend::types::{COMM_LEN, Type};
use crate::vocab::GlobalSlot;

/// Which half of a helper's u64 a built-in is.
#[derive(Clone, Copy)]
pub enum Half {
    /// Bits 32..64: the pid of `pid_tgid`, the gid of `uid_gid`.
    High,
    /// Bits 0..32.
    Low,
}

/// `pid`, `tid`, `uid`, `gid`: one half of a helper's result.
pub struct HelperHalf {
    pub helper: u32,
    pub half: Half,
}

impl Expression for HelperHalf {
    fn check(&self, _cx: &mut Checker, site: &Site) -> Option<TExpr> {
        Some(u64_call(site))
    }

    fn lower(&self, cx: &mut Lowerer, _call: &TCall, _ty: &Type) -> Value {
        let reg = cx.call0(self.helper);
        match self.half {
            Half::High => cx.shift(reg, AluOp::Rsh, 32),
            Half::Low => cx.low32(reg),
        }
        Value::Int(reg)
    }
}

/// `username`: the uid, printed as the user's name.
pub struct Username;

impl Expression for Username {
    fn check(&self, _cx: &mut Checker, site: &Site) -> Option<TExpr> {
        Some(site.value(Vec::new(), Type::Username))
    }

    fn lower(&self, cx: &mut Lowerer, _call: &TCall, _ty: &Type) -> Value {
        let uid = cx.call0(GET_CURRENT_UID_GID);
        cx.low32(uid);
        Value::Int(uid)
    }
}

/// `comm`: the task's name, in a 16-byte buffer.
pub struct Comm;

impl Expression for Comm {
    fn check(&self, _cx: &mut Checker, site: &Site) -> Option<TExpr> {
        Some(site.value(Vec::new(), Type::Str { len: COMM_LEN }))
    }

    fn lower(&self, cx: &mut Lowerer, _call: &TCall, _ty: &Type) -> Value {
        let offset = cx.alloc(COMM_LEN);
        let args = vec![Arg::Frame(offset), Arg::Imm(i64::from(COMM_LEN))];
        cx.checked_call_unused(GET_CURRENT_COMM, args);
        Value::Mem(offset)
    }
}

/// `cpid`: the pid of the `-c` command, 0 without one.
pub struct Cpid;

impl Expression for Cpid {
    fn check(&self, _cx: &mut Checker, site: &Site) -> Option<TExpr> {
        Some(u64_call(site))
    }

    fn lower(&self, cx: &mut Lowerer, _call: &TCall, _ty: &Type) -> Value {
        Value::Int(cx.global(GlobalSlot::ChildPid))
    }
}

/// `curtask`: the current `struct task_struct *`, BTF-typed where the
/// probe's pointers are.
pub struct Curtask;

impl Expression for Curtask {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let ty = cx.current_task_type(site.span)?;
        Some(site.value(Vec::new(), ty))
    }

    fn lower(&self, cx: &mut Lowerer, _call: &TCall, _ty: &Type) -> Value {
        Value::Int(cx.curtask())
    }
}

/// A u64 built-in without arguments.
pub(super) fn u64_call(site: &Site) -> TExpr {
    site.value(Vec::new(), Type::U64)
}

pub(super) const TABLE: &[Entry] = &[
    Entry {
        name: "pid",
        written: Written::Word,
        indexed: false,
        signature: "pid",
        doc: "The process id (the kernel's tgid).",
        example: "tracepoint:syscalls:sys_enter_write { @[pid] = count(); }",
        kind: Kind::Expression(&HelperHalf {
            helper: GET_CURRENT_PID_TGID,
            half: Half::High,
        }),
    },
    Entry {
        name: "tid",
        written: Written::Word,
        indexed: false,
        signature: "tid",
        doc: "The thread id (the kernel's pid).",
        example: "tracepoint:syscalls:sys_enter_write { @[tid] = count(); }",
        kind: Kind::Expression(&HelperHalf {
            helper: GET_CURRENT_PID_TGID,
            half: Half::Low,
        }),
    },
    Entry {
        name: "uid",
        written: Written::Word,
        indexed: false,
        signature: "uid",
        doc: "The user id.",
        example: "tracepoint:syscalls:sys_enter_write { @[uid] = count(); }",
        kind: Kind::Expression(&HelperHalf {
            helper: GET_CURRENT_UID_GID,
            half: Half::Low,
        }),
    },
    Entry {
        name: "gid",
        written: Written::Word,
        indexed: false,
        signature: "gid",
        doc: "The group id.",
        example: "tracepoint:syscalls:sys_enter_write { @[gid] = count(); }",
        kind: Kind::Expression(&HelperHalf {
            helper: GET_CURRENT_UID_GID,
            half: Half::High,
        }),
    },
    Entry {
        name: "username",
        written: Written::Word,
        indexed: false,
        signature: "username",
        doc: "The user's name (the uid, named from /etc/passwd when printed).",
        example: "tracepoint:syscalls:sys_enter_write { @[username] = count(); }",
        kind: Kind::Expression(&Username),
    },
    Entry {
        name: "comm",
        written: Written::Word,
        indexed: false,
        signature: "comm",
        doc: "The thread's name (16 bytes).",
        example: "tracepoint:syscalls:sys_enter_write { @[comm] = count(); }",
        kind: Kind::Expression(&Comm),
    },
    Entry {
        name: "cpid",
        written: Written::Word,
        indexed: false,
        signature: "cpid",
        doc: "The pid of the command given with `-c` (0 without one).",
        example: "uprobe:/bin/x:f /pid == cpid/ { @calls = count(); }",
        kind: Kind::Expression(&Cpid),
    },
    Entry {
        name: "curtask",
        written: Written::Word,
        indexed: false,
        signature: "curtask",
        doc: "The current `struct task_struct *`; its fields are read from kernel BTF.",
        example: "tracepoint:syscalls:sys_enter_write { @[curtask->tgid] = count(); }",
        kind: Kind::Expression(&Curtask),
    },
];
