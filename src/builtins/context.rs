//! Built-ins about where the probe fired: `probe`, `func`, `retval`,
//! `argN`, `sargN`, `args`, `reg(name)`, `cpu`, `numaid`, `rand`.
//! Arguments are read as the probe's provider says
//! ([`crate::providers::Provider::arg`]).

use super::{Entry, Expression, Kind, Site, Written};
use crate::codegen::helpers::{GET_NUMA_NODE_ID, GET_PRANDOM_U32, GET_SMP_PROCESSOR_ID};
use crate::codegen::ir::{AluOp, Src};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::ast::{Expr, ExprKind};
use crate::frontend::check::Checker;
use crate::frontend::checked::{TCall, TExpr, TExprKind};
use crate::frontend::diag::ScriptError;
use crate::frontend::types::Type;
use crate::providers;
use crate::vocab::{Context, x86_64};

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

/// `sargN`: argument N passed on the stack (after the six in registers),
/// at a kprobe's or uprobe's function entry: the u64 at `sp + 8 * (N + 1)`
/// (the return address is at `sp`). The call's const is N.
pub struct Sarg;

impl Expression for Sarg {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let probe = cx.resolved();
        let at_entry = matches!(probe.context, Context::PtRegs) && !probe.is_return;
        if !at_entry {
            let message = format!(
                "`sarg{}` is only available in kprobe and uprobe probes",
                site.index
            );
            return cx.fail(site.span, &message);
        }
        let mut call = TCall::new(site.id, Vec::new());
        call.consts = vec![u64::from(site.index)];
        Some(TExpr {
            kind: TExprKind::Call(Box::new(call)),
            ty: Type::U64,
            span: site.span,
        })
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, _ty: &Type) -> Value {
        let sp = cx.context_u64(x86_64::STACK_POINTER);
        let offset = 8 * (call.consts[0] + 1);
        let offset = cx.constant(offset);
        cx.alu(AluOp::Add, sp, Src::Reg(offset));
        let user = cx.probe.user_memory;
        Value::Int(cx.read_u64(sp, user))
    }
}

/// `reg(name)`: a register of the interrupted task, in probes whose context
/// holds them (kprobe, uprobe, usdt, perf events). The call's const is its
/// offset in `struct pt_regs`.
pub struct Reg;

impl Expression for Reg {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let [
            Expr {
                kind: ExprKind::Str(name),
                ..
            },
        ] = site.args
        else {
            return cx.fail(site.span, "reg() takes a register name as a string literal");
        };
        let Some(offset) = x86_64::pt_regs_offset(name) else {
            let error = ScriptError::new(
                site.span,
                format!("'{name}' is not a valid register on this architecture (x86_64)"),
            )
            .with_help(format!("registers: {}", x86_64::pt_regs_names().join(", ")));
            cx.error(error);
            return None;
        };
        if !providers::of(&cx.resolved().attach).registers() {
            let probe = cx.resolved().name.clone();
            let message = format!(
                "reg() reads the registers of kprobe, uprobe, usdt and perf event probes; `{probe}` has none"
            );
            return cx.fail(site.span, &message);
        }
        let mut call = TCall::new(site.id, Vec::new());
        call.consts = vec![u64::from(offset)];
        Some(TExpr {
            kind: TExprKind::Call(Box::new(call)),
            ty: Type::U64,
            span: site.span,
        })
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, _ty: &Type) -> Value {
        Value::Int(cx.context_u64(call.consts[0] as u16))
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
        name: "sarg",
        written: Written::Word,
        indexed: true,
        signature: "sargN",
        doc: "Argument N passed on the stack, at a kprobe's or uprobe's function entry.",
        example: "uprobe:/bin/x:f { printf(\"%d\\n\", sarg0); }",
        kind: Kind::Expression(&Sarg),
    },
    Entry {
        name: "reg",
        written: Written::Call,
        indexed: false,
        signature: "reg(name)",
        doc: "A register of the interrupted task (`ip`, `sp`, `ax`, `di`, ...), where the probe has them.",
        example: "uprobe:/bin/x:f { @[reg(\"sp\") % 16] = count(); }",
        kind: Kind::Expression(&Reg),
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
        name: "numaid",
        written: Written::Word,
        indexed: false,
        signature: "numaid",
        doc: "The NUMA node of the CPU the probe runs on.",
        example: "profile:hz:99 { @[numaid] = count(); }",
        kind: Kind::Expression(&Helper0 {
            helper: GET_NUMA_NODE_ID,
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
