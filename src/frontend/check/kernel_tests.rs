//! Checker tests for kernel (BTF) types against the fake machine's
//! `task_struct` and `tp_btf:sched_switch`.

use std::cell::Cell;
use std::path::{Path, PathBuf};

use crate::frontend::check::check;
use crate::frontend::checked::*;
use crate::frontend::diag::ScriptError;
use crate::frontend::fake_machine::{FakeMachine, ids};
use crate::frontend::options::CompileOptions;
use crate::frontend::parse;
use crate::frontend::types::{Pointer, Space, Type};
use crate::vocab::kernel_types::{KTypeId, KernelType};
use crate::vocab::{
    BtfArg, Environment, FunctionTarget, ObjectSymbol, TracepointField, UsdtTarget,
};

#[track_caller]
fn checked(source: &str, options: &CompileOptions) -> Result<CheckedProgram, Vec<ScriptError>> {
    let script = parse::parse(source, "t.bt")
        .unwrap_or_else(|e| panic!("parse error in test script:\n{}", e.render()));
    check(&script, &FakeMachine, options)
}

/// The value of the first statement `$x = EXPR` of the only probe.
#[track_caller]
fn value_of(probe: &str, expr: &str) -> TExpr {
    let program = checked(
        &format!("{probe} {{ $x = {expr}; }}"),
        &CompileOptions::default(),
    )
    .unwrap_or_else(|errors| panic!("unexpected errors: {errors:#?}"));
    match &program.probes[0].body[0].kind {
        TStmtKind::AssignVar { value, .. } => value.clone(),
        other => panic!("not an assignment: {other:?}"),
    }
}

/// The single error of `source`: message, line:column, and help.
#[track_caller]
fn error(source: &str) -> (String, String, Option<String>) {
    let errors = checked(source, &CompileOptions::default()).expect_err("an error");
    assert_eq!(errors.len(), 1, "expected one error: {errors:#?}");
    let e = &errors[0];
    let line = source[..e.span.start].matches('\n').count() + 1;
    let column = e.span.start - source[..e.span.start].rfind('\n').map_or(0, |i| i + 1) + 1;
    (
        e.message.clone(),
        format!("{line}:{column}"),
        e.help.clone(),
    )
}

fn task_ptr(btf: bool) -> Type {
    Type::Ptr(Pointer {
        target: ids::TASK,
        name: "struct task_struct".into(),
        btf,
        space: Space::Kernel,
    })
}

/// tp_btf arguments are typed from BTF: bool, task pointers, u32.
#[test]
fn types_tp_btf_arguments() {
    let probe = "tp_btf:sched_switch";
    assert_eq!(value_of(probe, "args.prev").ty, task_ptr(true));
    assert_eq!(value_of(probe, "args->next").ty, task_ptr(true));
    let preempt = value_of(probe, "args.preempt");
    assert_eq!(
        preempt.ty,
        Type::Int {
            size: 1,
            signed: false
        }
    );
    assert!(
        matches!(preempt.kind, TExprKind::Cast(ref slot) if matches!(slot.kind, TExprKind::Arg(crate::vocab::ArgRead::Slot(0))))
    );
}

/// Member chains add byte offsets; loads through BTF pointers in tp_btf are direct.
#[test]
fn member_offsets_and_direct_loads() {
    let probe = "tp_btf:sched_switch";
    let tgid = value_of(probe, "args.next->real_parent->tgid");
    assert_eq!(
        tgid.ty,
        Type::Int {
            size: 4,
            signed: true
        }
    );
    let TExprKind::MemoryRead {
        ptr,
        offset,
        load,
        access,
    } = &tgid.kind
    else {
        panic!("a kernel read: {tgid:?}");
    };
    assert_eq!(
        (*offset, *load, *access),
        (
            104,
            Load::Int {
                size: 4,
                signed: true
            },
            Access::Direct
        )
    );
    assert!(matches!(
        &ptr.kind,
        TExprKind::MemoryRead { offset: 112, .. }
    ));
    let comm = value_of(probe, "args.prev->comm");
    assert_eq!(comm.ty, Type::Str { len: 16 });
    assert!(matches!(
        comm.kind,
        TExprKind::MemoryRead {
            offset: 200,
            load: Load::Bytes(16),
            ..
        }
    ));
    // Embedded structs and anonymous unions.
    let vruntime = value_of(probe, "args.prev->se.vruntime");
    assert!(matches!(
        vruntime.kind,
        TExprKind::MemoryRead { offset: 308, .. }
    ));
    let wake_cpu = value_of(probe, "args.prev->wake_cpu");
    assert!(matches!(
        wake_cpu.kind,
        TExprKind::MemoryRead { offset: 400, .. }
    ));
}

/// Casts and curtask outside tp_btf read through bpf_probe_read_kernel.
#[test]
fn casts_and_curtask_elsewhere_use_probe_read() {
    let probe = "tracepoint:syscalls:sys_enter_write";
    let cast = value_of(probe, "((struct task_struct *)args.buf)->pid");
    assert!(matches!(
        cast.kind,
        TExprKind::MemoryRead {
            access: Access::User,
            offset: 100,
            ..
        }
    ));
    assert_eq!(value_of(probe, "curtask").ty, task_ptr(false));
    assert_eq!(
        value_of("tp_btf:sched_wakeup", "curtask").ty,
        task_ptr(true)
    );
    let cast_in_tp_btf = value_of("tp_btf:sched_wakeup", "((struct task_struct *)1)->pid");
    assert!(matches!(
        cast_in_tp_btf.kind,
        TExprKind::MemoryRead {
            access: Access::Kernel,
            ..
        }
    ));
}

/// An address cast to a pointer where the probe may interrupt either space
/// (BEGIN, profile, interval) is read with bpf_probe_read, as in bpftrace, and
/// so are pointers read through it; a cast pointer keeps its own space, and
/// uprobes read user memory.
#[test]
fn casts_of_addresses_of_unknown_space_use_bpf_probe_read() {
    let access = |probe: &str, expr: &str| match value_of(probe, expr).kind {
        TExprKind::MemoryRead { access, .. } => access,
        other => panic!("{probe} {expr}: not a read: {other:?}"),
    };
    for probe in ["BEGIN", "profile:hz:99", "interval:s:1"] {
        let pid = "((struct task_struct *)8)->pid";
        assert_eq!(access(probe, pid), Access::Any, "{probe}");
        let parent = "((struct task_struct *)8)->real_parent->pid";
        assert_eq!(access(probe, parent), Access::Any, "{probe}");
    }
    let from_curtask = "((struct task_struct *)curtask)->pid";
    assert_eq!(access("BEGIN", from_curtask), Access::Kernel);
    let from_arg = "((struct task_struct *)arg0)->pid";
    assert_eq!(access("uprobe:/bin/x:f", from_arg), Access::User);
}

/// Unknown members and arguments are errors at their position, with close names.
#[test]
fn unknown_members_list_close_names() {
    let (message, at, help) = error("tp_btf:sched_switch {\n  $x = args.next->tgd;\n}");
    assert_eq!(message, "`struct task_struct` has no field `tgd`");
    assert_eq!(at, "2:8");
    assert_eq!(help.as_deref(), Some("close names: tgid, pid"));
    let (message, at, help) = error("tp_btf:sched_switch { $x = args.nxt; }");
    assert_eq!(message, "tp_btf:sched_switch has no argument `nxt`");
    assert_eq!(at, "1:28");
    assert_eq!(
        help.as_deref(),
        Some("arguments: preempt, prev, next, prev_state")
    );
    let (message, at, _) = error("tp_btf:sched_swich { }");
    assert_eq!(
        message,
        "no BTF tracepoint `sched_swich`; close names: sched_switch"
    );
    assert_eq!(at, "1:1");
}

/// Structs are read by value, bitfields masked out of their bytes; void
/// pointers have no members.
#[test]
fn reads_structs_and_bitfields() {
    let se = value_of("tp_btf:sched_switch", "args.prev->se");
    assert!(matches!(se.ty, Type::Object(_)), "{:?}", se.ty);
    assert!(matches!(
        se.kind,
        TExprKind::MemoryRead {
            offset: 300,
            load: Load::Bytes(_),
            ..
        }
    ));
    let bit = value_of("tp_btf:sched_switch", "args.prev->sched_reset_on_fork");
    assert!(
        matches!(
            bit.kind,
            TExprKind::MemoryRead {
                offset: 500,
                load: Load::Bits {
                    bytes: 1,
                    shift: 0,
                    bits: 1,
                },
                ..
            }
        ),
        "{bit:?}"
    );
    let (message, ..) = error("tp_btf:sched_switch { $x = args.prev->stack->x; }");
    assert_eq!(message, "`void *` has no field `x`");
}

/// Maps keyed by a BTF task are task storage; other task keys and
/// aggregations there are errors.
#[test]
fn task_storage_keys() {
    let program = checked(
        "tp_btf:sched_switch { @t[args.next] = 1; @t[curtask] += 2; delete(@t[args.prev]); }",
        &CompileOptions::default(),
    )
    .expect("task storage checks");
    assert_eq!(program.maps[0].key, Some(task_ptr(true)));
    let (message, at, _) = error("tracepoint:syscalls:sys_enter_write { @t[curtask] = 1; }");
    assert!(message.contains("task-local storage"), "{message}");
    assert_eq!(at, "1:42");
    let (message, ..) = error("tp_btf:sched_switch { @t[args.next] = count(); }");
    assert!(message.contains("cannot hold aggregations"), "{message}");
}

/// Task pointers in records are thread fields holding `task->pid`.
#[test]
fn task_record_items_store_tid() {
    let program = checked(
        "tp_btf:sched_switch < next = args.next; f = ksym(1) >",
        &CompileOptions::default(),
    )
    .expect("record checks");
    assert_eq!(
        program.records[0].fields[0],
        ("next".into(), task_ptr(true))
    );
    assert_eq!(
        program.records[0].fields[1],
        ("f".into(), Type::KernelSymbol)
    );
    let record = program.probes[0].record.as_ref().expect("a record");
    assert!(matches!(
        &record.values[0],
        RecordValue::Expr(TExpr {
            kind: TExprKind::MemoryRead { offset: 100, .. },
            ..
        })
    ));
}

/// selected() is constant true without filters and reads the task's
/// members with them.
#[test]
fn selected_needs_filters() {
    let value = value_of("tp_btf:sched_switch", "selected(args.next)");
    assert!(matches!(value.kind, TExprKind::Int(1)));
    let mut options = CompileOptions::default();
    options.filter.names.push("sleep*".into());
    let program = checked(
        "tp_btf:sched_switch { $x = selected(args.next); }",
        &options,
    )
    .expect("selected checks");
    let TStmtKind::AssignVar { value, .. } = &program.probes[0].body[0].kind else {
        panic!("an assignment");
    };
    let TExprKind::Call(call) = &value.kind else {
        panic!("selected: {value:?}");
    };
    // tgid, pid, flags, comm, then the group leader's comm and start time.
    assert_eq!(call.args.len(), 6);
    assert!(matches!(
        call.args[4].kind,
        TExprKind::MemoryRead { offset: 200, .. }
    ));
    assert!(matches!(
        call.args[5].kind,
        TExprKind::MemoryRead { offset: 128, .. }
    ));
    let (message, ..) = error("tp_btf:sched_switch { $x = selected(1); }");
    assert_eq!(
        message,
        "selected() needs a `struct task_struct *`, not int64"
    );
}

/// Under `--only-command` a user's probe carries its task's leader start
/// time (`curtask->group_leader->start_time`) for the tree's gate; BEGIN
/// and timers, which the tree does not filter, do not, nor does any probe
/// without the option.
#[test]
fn command_identity_of_filtered_probes() {
    let source = "tracepoint:syscalls:sys_enter_write { } BEGIN { } interval:s:1 { }";
    let identities = |options: &CompileOptions| -> Vec<bool> {
        let program = checked(source, options).expect("the script checks");
        (program.probes.iter())
            .map(|p| p.command_identity.is_some())
            .collect()
    };
    assert_eq!(identities(&CompileOptions::default()), [false; 3]);
    let mut options = CompileOptions::default();
    options.filter.command = true;
    assert_eq!(identities(&options), [true, false, false]);
    let program = checked(source, &options).expect("the script checks");
    let start = program.probes[0]
        .command_identity
        .as_ref()
        .expect("an identity");
    assert!(matches!(
        start.kind,
        TExprKind::MemoryRead { offset: 128, .. }
    ));
}

/// The fake machine, counting the kernel types the checker looks up.
#[derive(Default)]
struct CountingMachine {
    kernel_types: Cell<usize>,
}

impl Environment for CountingMachine {
    fn expand_tracepoints(
        &self,
        category: &str,
        name: &str,
    ) -> Result<Vec<(String, String)>, String> {
        FakeMachine.expand_tracepoints(category, name)
    }
    fn tracepoint_fields(
        &self,
        category: &str,
        name: &str,
    ) -> Result<Vec<TracepointField>, String> {
        FakeMachine.tracepoint_fields(category, name)
    }
    fn functions(
        &self,
        binary: &str,
        pattern: &str,
    ) -> Result<(PathBuf, Vec<FunctionTarget>), String> {
        FakeMachine.functions(binary, pattern)
    }
    fn usdt(
        &self,
        binary: &str,
        provider: Option<&str>,
        name: &str,
    ) -> Result<(PathBuf, Vec<UsdtTarget>), String> {
        FakeMachine.usdt(binary, provider, name)
    }
    fn tp_btf_args(&self, name: &str) -> Result<Vec<BtfArg>, String> {
        FakeMachine.tp_btf_args(name)
    }
    fn kernel_type(&self, id: KTypeId) -> Result<KernelType, String> {
        self.kernel_types.set(self.kernel_types.get() + 1);
        FakeMachine.kernel_type(id)
    }
    fn kernel_type_named(&self, name: &str) -> Result<KTypeId, String> {
        FakeMachine.kernel_type_named(name)
    }
    fn kernel_symbol(&self, name: &str) -> Result<u64, String> {
        FakeMachine.kernel_symbol(name)
    }
    fn object_symbol(&self, binary: &Path, name: &str) -> Result<ObjectSymbol, String> {
        FakeMachine.object_symbol(binary, name)
    }
    fn code_address(&self, binary: &Path, file_offset: u64) -> Result<u64, String> {
        FakeMachine.code_address(binary, file_offset)
    }
    fn cgroup_id(&self, path: &str) -> Result<u64, String> {
        FakeMachine.cgroup_id(path)
    }
}

/// Kernel types looked up to check `args.next->real_parent->…->pid` with
/// `depth` links.
fn lookups_for_chain(depth: usize) -> usize {
    let chain = "->real_parent".repeat(depth);
    let source = format!("tp_btf:sched_switch {{ $x = args.next{chain}->pid; }}");
    let script = parse::parse(&source, "t.bt").expect("parses");
    let machine = CountingMachine::default();
    check(&script, &machine, &CompileOptions::default()).expect("checks");
    machine.kernel_types.get()
}

/// A `->` chain is checked in time linear in its depth (each link used to
/// check the whole chain below it twice: 2^depth).
#[test]
fn member_chains_check_in_linear_time() {
    let short = lookups_for_chain(8);
    let long = lookups_for_chain(16);
    assert!(
        long <= 2 * short + 16,
        "depth 8: {short} lookups, 16: {long}"
    );
}
