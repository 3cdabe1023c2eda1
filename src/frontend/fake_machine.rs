//! A fake machine for front-end tests: the checker asks it what a real
//! system would answer from tracefs and ELF files.

use std::path::{Path, PathBuf};

use crate::vocab::kernel_types::{KTypeId, KernelKind, KernelMember, KernelType, close_names};
use crate::vocab::{
    BtfArg, BtfFunction, Environment, FieldKind, FunctionTarget, KernelFunction,
    KernelFunctionMatches, ObjectSymbol, TracepointField, UsdtArgSpec, UsdtTarget,
};

/// A machine with a few tracepoints (`syscalls:sys_enter_openat`,
/// `syscalls:sys_enter_write`, `syscalls:sys_exit_read`, `sched:named`),
/// every function in every binary, 64 bytes at address 0x401000, file offset 0x1000, every
/// kernel function (64 bytes; wildcards see `vfs_read`, `vfs_readv`,
/// `vfs_write`; these three are typed in BTF as `vfs_read` is; `vfs_open` only
/// by its name), and a little
/// kernel BTF: `struct task_struct` (see [`kernel_type`]), `struct
/// bpf_iter__task`, the BTF tracepoints `sched_switch` and `sched_wakeup`
/// and the kfunc `bpf_rdonly_cast`;
/// the kernel symbol `do_nanosleep`, and a 4-byte data symbol `counter` at
/// 0x4010 in every binary (relocatable in binaries whose name ends in `pie`),
/// and the root cgroup `/sys/fs/cgroup` (id 1).
pub struct FakeMachine;

/// Type ids of the fake kernel BTF.
pub mod ids {
    use crate::vocab::kernel_types::KTypeId;
    pub const INT: KTypeId = KTypeId(1);
    pub const UINT: KTypeId = KTypeId(2);
    pub const CHAR: KTypeId = KTypeId(3);
    pub const COMM: KTypeId = KTypeId(4);
    pub const TASK: KTypeId = KTypeId(5);
    pub const TASK_PTR: KTypeId = KTypeId(6);
    pub const BOOL: KTypeId = KTypeId(7);
    pub const U64: KTypeId = KTypeId(8);
    pub const SCHED_ENTITY: KTypeId = KTypeId(9);
    pub const ANON_UNION: KTypeId = KTypeId(10);
    pub const VOID_PTR: KTypeId = KTypeId(11);
    pub const ITER_TASK: KTypeId = KTypeId(12);
    pub const MM: KTypeId = KTypeId(13);
    pub const MM_PTR: KTypeId = KTypeId(14);
    /// The kfunc `bpf_rdonly_cast`.
    pub const RDONLY_CAST: u32 = 15;
}

/// `struct task_struct` of the fake kernel: byte offsets chosen for tests.
fn task_struct() -> KernelKind {
    let member = |name: &str, ty, offset: u32| KernelMember {
        name: name.into(),
        ty,
        offset_bits: offset * 8,
        bitfield_bits: None,
    };
    let mut members = vec![
        member("__state", ids::UINT, 0),
        member("flags", ids::UINT, 4),
        member("prio", ids::INT, 8),
        member("pid", ids::INT, 100),
        member("tgid", ids::INT, 104),
        member("real_parent", ids::TASK_PTR, 112),
        member("group_leader", ids::TASK_PTR, 120),
        member("start_time", ids::U64, 128),
        member("comm", ids::COMM, 200),
        member("se", ids::SCHED_ENTITY, 300),
        member("", ids::ANON_UNION, 400),
        member("stack", ids::VOID_PTR, 408),
        member("mm", ids::MM_PTR, 416),
    ];
    members.push(KernelMember {
        bitfield_bits: Some(1),
        ..member("sched_reset_on_fork", ids::UINT, 500)
    });
    KernelKind::Struct {
        union: false,
        size: 4096,
        members: members.into(),
    }
}

/// The kernel functions wildcards expand to (any other name exists too).
const KERNEL_FUNCTIONS: [&str; 3] = ["vfs_read", "vfs_readv", "vfs_write"];

const TRACEPOINTS: [(&str, &str); 4] = [
    ("syscalls", "sys_enter_openat"),
    ("syscalls", "sys_enter_write"),
    ("syscalls", "sys_exit_read"),
    ("sched", "named"),
];

impl Environment for FakeMachine {
    fn expand_tracepoints(
        &self,
        category: &str,
        name: &str,
    ) -> Result<Vec<(String, String)>, String> {
        let matches = |tp: &str| match name.strip_suffix('*') {
            Some(prefix) => tp.starts_with(prefix),
            None => tp == name,
        };
        let found: Vec<(String, String)> = TRACEPOINTS
            .iter()
            .filter(|(cat, tp)| *cat == category && matches(tp))
            .map(|(cat, tp)| (cat.to_string(), tp.to_string()))
            .collect();
        if found.is_empty() {
            Err(format!("tracepoint not found: {category}:{name}"))
        } else {
            Ok(found)
        }
    }

    fn tracepoint_fields(
        &self,
        _category: &str,
        name: &str,
    ) -> Result<Vec<TracepointField>, String> {
        let field = |name: &str, offset, kind: FieldKind| TracepointField {
            name: name.into(),
            offset,
            c_type: match kind {
                FieldKind::Pointer { .. } => "const char *".into(),
                _ => "long".into(),
            },
            kind,
        };
        let int = FieldKind::Int {
            size: 8,
            signed: true,
        };
        Ok(match name {
            "sys_exit_read" => vec![field("ret", 16, int)],
            "named" => vec![field("ret", 16, FieldKind::CharArray(16))],
            "sys_enter_openat" => vec![
                field("dfd", 16, int.clone()),
                field("filename", 24, FieldKind::Pointer { user: true }),
                field("flags", 32, int),
            ],
            _ => vec![
                field(
                    "fd",
                    16,
                    FieldKind::Int {
                        size: 4,
                        signed: false,
                    },
                ),
                field("buf", 24, FieldKind::Pointer { user: true }),
                field(
                    "count",
                    32,
                    FieldKind::Int {
                        size: 8,
                        signed: false,
                    },
                ),
            ],
        })
    }

    fn functions(
        &self,
        binary: &str,
        pattern: &str,
    ) -> Result<(PathBuf, Vec<FunctionTarget>), String> {
        let target = FunctionTarget {
            name: pattern.into(),
            address: 0x401000,
            file_offset: 0x1000,
            size: 64,
            demangled: None,
        };
        Ok((PathBuf::from(binary), vec![target]))
    }

    fn usdt(
        &self,
        _: &str,
        _: Option<&str>,
        name: &str,
    ) -> Result<(PathBuf, Vec<UsdtTarget>), String> {
        let arg = UsdtArgSpec::Constant(1);
        let target = UsdtTarget {
            provider: "p".into(),
            name: name.into(),
            file_offset: 0,
            semaphore_offset: 0,
            args: vec![arg],
        };
        Ok((PathBuf::from("/bin/x"), vec![target]))
    }

    fn kernel_functions(
        &self,
        module: Option<&str>,
        pattern: &str,
    ) -> Result<KernelFunctionMatches, String> {
        if module.is_some_and(|m| m != "vmlinux") {
            return Err(format!(
                "no kernel module `{}` is loaded",
                module.unwrap_or_default()
            ));
        }
        let function = |name: &str| KernelFunction {
            name: name.into(),
            module: None,
            size: 64,
        };
        let functions = match pattern.strip_suffix('*') {
            Some(prefix) => KERNEL_FUNCTIONS
                .iter()
                .filter(|f| f.starts_with(prefix))
                .map(|f| function(f))
                .collect(),
            None => vec![function(pattern)],
        };
        Ok(KernelFunctionMatches {
            functions,
            note: None,
            absent: None,
        })
    }

    fn btf_functions(&self, pattern: &str) -> Result<Vec<BtfFunction>, String> {
        let arg = |name: &str, ty| BtfArg {
            name: name.into(),
            ty,
        };
        let function = |name: &str| BtfFunction {
            name: name.into(),
            args: vec![
                arg("file", ids::VOID_PTR),
                arg("buf", ids::VOID_PTR),
                arg("count", ids::U64),
                arg("pos", ids::VOID_PTR),
            ],
            ret: ids::INT,
        };
        // Named, not matched by wildcards: `path()`'s example probes it.
        if pattern == "vfs_open" {
            return Ok(vec![BtfFunction {
                name: pattern.into(),
                // A plain address: the fake BTF has no `struct path`.
                args: vec![arg("path", ids::U64), arg("file", ids::VOID_PTR)],
                ret: ids::INT,
            }]);
        }
        let glob = glob::Pattern::new(pattern).map_err(|e| e.to_string())?;
        let found: Vec<BtfFunction> = KERNEL_FUNCTIONS
            .iter()
            .filter(|name| glob.matches(name))
            .map(|name| function(name))
            .collect();
        match found.is_empty() {
            true => Err(format!("no kernel function matches `{pattern}` in BTF")),
            false => Ok(found),
        }
    }

    fn tp_btf_args(&self, name: &str) -> Result<Vec<BtfArg>, String> {
        let arg = |name: &str, ty| BtfArg {
            name: name.into(),
            ty,
        };
        match name {
            "sched_switch" => Ok(vec![
                arg("preempt", ids::BOOL),
                arg("prev", ids::TASK_PTR),
                arg("next", ids::TASK_PTR),
                arg("prev_state", ids::UINT),
            ]),
            "sched_wakeup" => Ok(vec![arg("p", ids::TASK_PTR)]),
            _ => {
                let known = ["sched_switch".to_string(), "sched_wakeup".to_string()];
                Err(format!(
                    "no BTF tracepoint `{name}`; close names: {}",
                    close_names(name, &known).join(", ")
                ))
            }
        }
    }

    fn kernel_type(&self, id: KTypeId) -> Result<KernelType, String> {
        let named = |name: &str, kind| KernelType {
            name: name.into(),
            kind,
        };
        let int = |size, signed| KernelKind::Int { size, signed };
        let single = |name: &str, ty, offset: u32| KernelMember {
            name: name.into(),
            ty,
            offset_bits: offset * 8,
            bitfield_bits: None,
        };
        Ok(match id {
            ids::INT => named("int", int(4, true)),
            ids::UINT => named("unsigned int", int(4, false)),
            ids::CHAR => named("char", int(1, true)),
            ids::COMM => named(
                "char[16]",
                KernelKind::Array {
                    elem: ids::CHAR,
                    len: 16,
                },
            ),
            ids::TASK => named("struct task_struct", task_struct()),
            ids::TASK_PTR => named("struct task_struct *", KernelKind::Pointer(ids::TASK)),
            ids::BOOL => named("_Bool", KernelKind::Bool),
            ids::U64 => named("unsigned long long", int(8, false)),
            ids::SCHED_ENTITY => named(
                "struct sched_entity",
                KernelKind::Struct {
                    union: false,
                    size: 16,
                    members: vec![single("vruntime", ids::U64, 8)].into(),
                },
            ),
            ids::ANON_UNION => named(
                "",
                KernelKind::Struct {
                    union: true,
                    size: 8,
                    members: vec![single("wake_cpu", ids::INT, 0)].into(),
                },
            ),
            ids::VOID_PTR => named("void *", KernelKind::Pointer(KTypeId(0))),
            ids::ITER_TASK => named(
                "struct bpf_iter__task",
                KernelKind::Struct {
                    union: false,
                    size: 16,
                    members: vec![
                        single("meta", ids::VOID_PTR, 0),
                        single("task", ids::TASK_PTR, 8),
                    ]
                    .into(),
                },
            ),
            ids::MM => named(
                "struct mm_struct",
                KernelKind::Struct {
                    union: false,
                    size: 1024,
                    members: vec![
                        single("start_code", ids::U64, 264),
                        single("end_code", ids::U64, 272),
                        single("start_stack", ids::U64, 312),
                    ]
                    .into(),
                },
            ),
            ids::MM_PTR => named("struct mm_struct *", KernelKind::Pointer(ids::MM)),
            KTypeId(0) => named("void", KernelKind::Void),
            KTypeId(other) => return Err(format!("no kernel type {other}")),
        })
    }

    fn kernel_type_named(&self, name: &str) -> Result<KTypeId, String> {
        match name {
            "struct task_struct" => Ok(ids::TASK),
            "struct bpf_iter__task" => Ok(ids::ITER_TASK),
            "struct mm_struct" => Ok(ids::MM),
            "int" => Ok(ids::INT),
            _ => Err(format!("no kernel type `{name}`")),
        }
    }

    fn has_btf(&self) -> bool {
        true
    }

    fn kfunc_id(&self, name: &str) -> Option<u32> {
        (name == "bpf_rdonly_cast").then_some(ids::RDONLY_CAST)
    }

    fn kernel_symbol(&self, name: &str) -> Result<u64, String> {
        match name {
            "do_nanosleep" => Ok(0xffff_ffff_8226_ce00),
            _ => Err("it is not in /proc/kallsyms".into()),
        }
    }

    fn object_symbol(&self, binary: &Path, name: &str) -> Result<ObjectSymbol, String> {
        match name {
            "counter" => Ok(ObjectSymbol {
                address: 0x4010,
                size: 4,
                relocatable: binary.ends_with("pie"),
            }),
            _ => Err(format!("no data symbol `{name}` in {}", binary.display())),
        }
    }

    fn code_address(&self, _binary: &Path, file_offset: u64) -> Result<u64, String> {
        Ok(file_offset)
    }

    fn cgroup_id(&self, path: &str) -> Result<u64, String> {
        match path {
            "/sys/fs/cgroup" => Ok(1),
            _ => Err(format!("no cgroup at {path}")),
        }
    }
}
