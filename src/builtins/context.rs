//! Built-ins about where the probe fired: `probe`, `func`, `retval`,
//! `argN`, `args`, `ctx`, `cpu`, `rand`. Arguments are read as the probe's
//! provider says ([`crate::providers::Provider::arg`]).

use super::{Entry, Expression, Kind, Site, Written};
use crate::codegen::helpers::{GET_PRANDOM_U32, GET_SMP_PROCESSOR_ID};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::check::Checker;
use crate::frontend::checked::{TCall, TExpr, TExprKind};
use crate::frontend::types::Type;
use crate::providers;
use crate::vocab::Context;

/// `probe`: the probe that fired, sent as its index and printed as its name.
pub struct Probe;

impl Expression for Probe {
    fn check(&self, _cx: &mut Checker, site: &Site) -> Option<TExpr> {
        Some(site.value(Vec::new(), Type::Probe))
    }

    fn lower(&self, cx: &mut Lowerer, _call: &TCall, _ty: &Type) -> Value {
        Value::Int(cx.constant(cx.probe_index as u64))
    }
}

/// `func`: the probed function's name, a string known when compiling.
pub struct Func;

impl Expression for Func {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        match cx.resolved().func.clone() {
            Some(func) => Some(TExpr {
                ty: Type::Str {
                    len: func.len() as u32 + 1,
                },
                kind: TExprKind::Str(func),
                span: site.span,
            }),
            None => cx.fail(
                site.span,
                "`func` is only available in uprobe, usdt, kprobe and fentry probes",
            ),
        }
    }
}

/// `retval`: the return value, where the probe's provider has one.
pub struct Retval;

impl Expression for Retval {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let probe = cx.resolved();
        let Some(read) = providers::of(&probe.attach).retval(probe) else {
            return cx.fail(
                site.span,
                "`retval` is only available in uretprobe, kretprobe and fexit probes",
            );
        };
        // fexit knows the function's return type from BTF.
        if let Context::Function { ret, .. } = probe.context {
            if ret.0 == 0 {
                return cx.fail(site.span, &format!("{} returns void", probe.name));
            }
            return cx.btf_value(read, ret, site.span);
        }
        Some(TExpr {
            kind: TExprKind::Arg(read),
            ty: Type::U64,
            span: site.span,
        })
    }
}

/// `argN`: argument N, where the probe's provider has it.
pub struct Arg;

impl Expression for Arg {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let n = site.index;
        let probe = cx.resolved();
        match providers::of(&probe.attach).arg(probe, n) {
            Ok(read) => Some(TExpr {
                kind: TExprKind::Arg(read),
                ty: Type::U64,
                span: site.span,
            }),
            Err(why) => cx.fail(site.span, &format!("`arg{n}` is not available here: {why}")),
        }
    }
}

/// `args` alone: only its fields (`args.NAME`) have values.
pub struct Args;

impl Expression for Args {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        cx.fail(site.span, "`args` needs a field: `args.NAME`")
    }
}

/// `ctx`: the program's context, a pointer to the type its provider names
/// (`struct pt_regs`, `struct bpf_iter__task`...), read member by member.
pub struct Ctx;

impl Expression for Ctx {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let probe = cx.resolved();
        let named = providers::of(&probe.attach).context_type(&probe.attach);
        let name = match named {
            Ok(name) => name,
            Err(why) => return cx.fail(site.span, &why),
        };
        let ty = cx.kernel_pointer(name, site.span)?;
        Some(site.value(Vec::new(), ty))
    }

    fn lower(&self, cx: &mut Lowerer, _call: &TCall, _ty: &Type) -> Value {
        Value::Int(cx.context())
    }
}

/// A u64 from a helper that takes no arguments.
pub struct Helper0 {
    pub helper: u32,
}

impl Expression for Helper0 {
    fn check(&self, _cx: &mut Checker, site: &Site) -> Option<TExpr> {
        Some(site.value(Vec::new(), Type::U64))
    }

    fn lower(&self, cx: &mut Lowerer, _call: &TCall, _ty: &Type) -> Value {
        Value::Int(cx.call0(self.helper))
    }
}

pub(super) const TABLE: &[Entry] = &[
    Entry {
        name: "probe",
        written: Written::Word,
        indexed: false,
        signature: "probe",
        doc: "The probe that fired, as written after wildcard expansion.",
        example: "tracepoint:syscalls:sys_enter_* { @[probe] = count(); }",
        kind: Kind::Expression(&Probe),
    },
    Entry {
        name: "func",
        written: Written::Word,
        indexed: false,
        signature: "func",
        doc: "The probed function's name (uprobe, usdt, kprobe, fentry).",
        example: "uprobe:/bin/x:f* { @[func] = count(); }",
        kind: Kind::Expression(&Func),
    },
    Entry {
        name: "retval",
        written: Written::Word,
        indexed: false,
        signature: "retval",
        doc: "The return value (uretprobe, kretprobe, fexit).",
        example: "uretprobe:/bin/x:f { @ret = hist(retval); }",
        kind: Kind::Expression(&Retval),
    },
    Entry {
        name: "arg",
        written: Written::Word,
        indexed: true,
        signature: "argN",
        doc: "Argument N of the probed function or USDT probe, as a u64.",
        example: "uprobe:/bin/x:f { @bytes = sum(arg1); }",
        kind: Kind::Expression(&Arg),
    },
    Entry {
        name: "args",
        written: Written::Word,
        indexed: false,
        signature: "args.NAME",
        doc: "The fields of a tracepoint, typed from its format (or BTF for tp_btf).",
        example: "tracepoint:syscalls:sys_enter_openat { @[str(args.filename)] = count(); }",
        kind: Kind::Expression(&Args),
    },
    Entry {
        name: "ctx",
        written: Written::Word,
        indexed: false,
        signature: "ctx",
        doc: "The probe's context: `struct bpf_iter__task *` in iter:task, `struct pt_regs *` in kprobes and uprobes.",
        example: "iter:task { printf(\"%s\\n\", ctx->task->comm); }",
        kind: Kind::Expression(&Ctx),
    },
    Entry {
        name: "cpu",
        written: Written::Word,
        indexed: false,
        signature: "cpu",
        doc: "The CPU the probe runs on.",
        example: "profile:hz:99 { @[cpu] = count(); }",
        kind: Kind::Expression(&Helper0 {
            helper: GET_SMP_PROCESSOR_ID,
        }),
    },
    Entry {
        name: "rand",
        written: Written::Word,
        indexed: false,
        signature: "rand",
        doc: "A pseudo-random u32.",
        example: "BEGIN { @r = rand; exit(); }",
        kind: Kind::Expression(&Helper0 {
            helper: GET_PRANDOM_U32,
        }),
    },
];
