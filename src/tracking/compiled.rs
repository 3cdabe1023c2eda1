//! The built-in trackers compiled from the real `probes/*.wp` (and the
//! generated `-S timer` and `-S pmu=` samplers) on a fake machine: the
//! record schemas that every test of tracker records starts from, so a field
//! renamed in a `.wp` file changes what those tests see.
//!
//! [`TrackerMachine`] is [`FakeMachine`] plus the kernel BTF the trackers
//! read: their `tp_btf` tracepoints and the struct members they follow,
//! typed as on Linux 6.x.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::capture::model::RecordSchema;
use crate::frontend::fake_machine::{FakeMachine, ids};
use crate::tracking::Tracking;
use crate::tracking::options::{Feature, parse_stack_arg};
use crate::tracking::trackers;
use crate::vocab::kernel_types::{KTypeId, KernelKind, KernelMember, KernelType};
use crate::vocab::{
    BtfArg, Environment, FunctionTarget, ObjectSymbol, TracepointField, UsdtTarget,
};

/// The `--pmu` counter the compiled trackers read.
pub const COUNTER: &str = "cpu-cycles";

/// The schemas of every tracker, with every stack kind and [`COUNTER`],
/// in the order the compiler gives them (as in a capture).
pub fn schemas() -> &'static [RecordSchema] {
    static SCHEMAS: OnceLock<Vec<RecordSchema>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let tracking = Tracking {
            features: Feature::ALL.into_iter().collect(),
            stacks: ["timer", "offcpu=1ms", "waker", "pmu=sw:cpu-clock@1000hz"]
                .iter()
                .flat_map(|s| parse_stack_arg(s).expect("a stack kind"))
                .collect(),
            pmu: vec![COUNTER.into()],
            ..Tracking::default()
        };
        let sources = trackers::sources(&tracking).expect("tracker sources");
        let options = tracking.compile_options().expect("compile options");
        let (_, compiled) = crate::driver::compile(&sources, &[], &TrackerMachine, &options)
            .unwrap_or_else(|e| panic!("the trackers compile: {}", e.render()));
        compiled.records
    })
}

/// The schema of the tracker record `name`.
#[track_caller]
pub fn schema(name: &str) -> &'static RecordSchema {
    let found = schemas().iter().find(|s| s.name == name);
    found.unwrap_or_else(|| panic!("no tracker records `{name}`"))
}

/// [`FakeMachine`] with the trackers' tracepoints and kernel types.
pub struct TrackerMachine;

/// Type ids beyond [`FakeMachine`]'s.
mod more_ids {
    use crate::vocab::kernel_types::KTypeId;
    pub const THREAD_INFO: KTypeId = KTypeId(100);
    pub const CHAR_PTR: KTypeId = KTypeId(101);
    pub const BINPRM: KTypeId = KTypeId(102);
    pub const BINPRM_PTR: KTypeId = KTypeId(103);
    pub const IRQACTION: KTypeId = KTypeId(104);
    pub const IRQACTION_PTR: KTypeId = KTypeId(105);
    pub const WORK: KTypeId = KTypeId(106);
    pub const WORK_PTR: KTypeId = KTypeId(107);
    pub const WORK_FUNC: KTypeId = KTypeId(108);
    pub const WORK_FUNC_PTR: KTypeId = KTypeId(109);
    pub const U32: KTypeId = KTypeId(110);
}
use more_ids::*;

fn member(name: &str, ty: KTypeId, offset: u32) -> KernelMember {
    KernelMember {
        name: name.into(),
        ty,
        offset_bits: offset * 8,
        bitfield_bits: None,
    }
}

fn structure(name: &str, size: u32, members: Vec<KernelMember>) -> KernelType {
    KernelType {
        name: name.into(),
        kind: KernelKind::Struct {
            union: false,
            size,
            members: members.into(),
        },
    }
}

impl Environment for TrackerMachine {
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

    /// The trackers' tracepoints with the arguments of Linux 6.x
    /// (`include/trace/events/{sched,irq,workqueue,task,syscalls}.h`).
    fn tp_btf_args(&self, name: &str) -> Result<Vec<BtfArg>, String> {
        let args = |list: &[(&str, KTypeId)]| {
            let args = list.iter().map(|&(name, ty)| BtfArg {
                name: name.into(),
                ty,
            });
            Ok(args.collect())
        };
        match name {
            "sched_waking" | "sched_wakeup_new" | "sched_process_exit" | "sched_process_free" => {
                args(&[("p", ids::TASK_PTR)])
            }
            "sched_process_fork" => args(&[("parent", ids::TASK_PTR), ("child", ids::TASK_PTR)]),
            "sched_process_exec" => args(&[
                ("p", ids::TASK_PTR),
                ("old_pid", ids::INT),
                ("bprm", BINPRM_PTR),
            ]),
            "task_rename" => args(&[("task", ids::TASK_PTR), ("comm", CHAR_PTR)]),
            "irq_handler_entry" => args(&[("irq", ids::INT), ("action", IRQACTION_PTR)]),
            "irq_handler_exit" => args(&[
                ("irq", ids::INT),
                ("action", IRQACTION_PTR),
                ("ret", ids::INT),
            ]),
            "softirq_entry" | "softirq_exit" => args(&[("vec_nr", ids::UINT)]),
            "workqueue_execute_start" => args(&[("work", WORK_PTR)]),
            "workqueue_execute_end" => args(&[("work", WORK_PTR), ("function", WORK_FUNC_PTR)]),
            // `struct pt_regs *regs`, `long ret`: the script reads neither.
            "sys_exit" => args(&[("regs", ids::VOID_PTR), ("ret", ids::U64)]),
            _ => FakeMachine.tp_btf_args(name),
        }
    }

    fn kernel_type(&self, id: KTypeId) -> Result<KernelType, String> {
        let pointer = |name: &str, to| KernelType {
            name: name.into(),
            kind: KernelKind::Pointer(to),
        };
        Ok(match id {
            ids::TASK => task_struct()?,
            THREAD_INFO => structure(
                "struct thread_info",
                32,
                vec![member("flags", ids::U64, 0), member("cpu", U32, 24)],
            ),
            U32 => KernelType {
                name: "unsigned int".into(),
                kind: KernelKind::Int {
                    size: 4,
                    signed: false,
                },
            },
            CHAR_PTR => pointer("char *", ids::CHAR),
            BINPRM => structure(
                "struct linux_binprm",
                256,
                vec![member("filename", CHAR_PTR, 96)],
            ),
            BINPRM_PTR => pointer("struct linux_binprm *", BINPRM),
            IRQACTION => structure("struct irqaction", 128, vec![member("name", CHAR_PTR, 80)]),
            IRQACTION_PTR => pointer("struct irqaction *", IRQACTION),
            WORK => structure(
                "struct work_struct",
                32,
                vec![member("func", WORK_FUNC_PTR, 24)],
            ),
            WORK_PTR => pointer("struct work_struct *", WORK),
            WORK_FUNC => KernelType {
                name: String::new(),
                kind: KernelKind::Other,
            },
            WORK_FUNC_PTR => pointer("work_func_t", WORK_FUNC),
            other => return FakeMachine.kernel_type(other),
        })
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

/// [`FakeMachine`]'s `struct task_struct` with the members only the
/// trackers read: `thread_info` (embedded, first as on x86-64) and `exit_code`.
fn task_struct() -> Result<KernelType, String> {
    let mut task = FakeMachine.kernel_type(ids::TASK)?;
    if let KernelKind::Struct { members, .. } = &mut task.kind {
        let mut more = members.to_vec();
        more.push(member("thread_info", THREAD_INFO, 600));
        more.push(member("exit_code", ids::INT, 640));
        *members = more.into();
    }
    Ok(task)
}
