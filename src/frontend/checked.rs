//! The checked program: what the checker proves about a script and the code
//! generator consumes. Every expression carries its type, names are resolved to
//! builtins, variables and maps, and each probe block is expanded to one
//! `CheckedProbe` per attach point.

use std::collections::BTreeSet;

use crate::capture::model::RecordOrigin;
use crate::frontend::ast::{BinOp, Span, UnOp};
use crate::frontend::diag::ScriptError;
use crate::frontend::options::PmuCounter;
use crate::frontend::options::TaskFilter;
use crate::frontend::types::{Space, Type};
use crate::unwind::layout::MmLayout;
use crate::vocab::kernel_types::KTypeId;
use crate::vocab::{AggFunc, ArgRead, AttachPoint, BuiltinId, TracepointField};

/// Only the checker builds this (fields are public for reading).
#[derive(Clone, Debug)]
pub struct CheckedProgram {
    pub probes: Vec<CheckedProbe>,
    pub maps: Vec<MapDecl>,
    /// The kinds of capture event the probes record, in `RecordRef` order.
    pub records: Vec<RecordDecl>,
    pub spans: Vec<SpanDecl>,
    /// The tasks `selected()` accepts.
    pub filter: TaskFilter,
    /// The counters `pmu` record items read (`RecordValue::Counter` indices);
    /// empty when no record reads any.
    pub counters: Vec<PmuCounter>,
    /// Entries a script map holds, when not the default.
    pub map_keys_max: Option<u32>,
    /// Output buffer pages per CPU, when not the default.
    pub output_pages_per_cpu: Option<u32>,
    /// `-k`/`-kk`: which failed helper calls the programs report.
    pub helper_checks: crate::frontend::options::HelperChecks,
    /// What the user should know about how probes were resolved, for stderr.
    pub warnings: Vec<String>,
    /// Where the user-stack unwinder finds the current address space's
    /// identity; `Some` when a record has a user stack.
    pub mm_layout: Option<MmLayout>,
    /// `-S offcpu=DUR` in ns (see `CompileOptions::offcpu_min_block_ns`).
    pub offcpu_min_block_ns: Option<u64>,
    /// `task_struct.stack`'s offset when a context switch's record takes
    /// the switching task's kernel stack (`stack(offcpu, NEXT)` without
    /// `offcpu_min_block_ns`): the ORC walker (`unwind::orc_bpf`) takes it.
    pub kernel_walk: Option<u32>,
    /// With `offcpu_min_block_ns`, where the kernel can run a task-work
    /// callback: the `stack(offcpu, pending)` block then runs as one, in
    /// the tasks with long blocks only, instead of at every `sys_exit`.
    pub task_work: Option<TaskWork>,
    /// `-S unwind=fp` (see `CompileOptions::frame_pointers_only`).
    pub frame_pointers_only: bool,
    /// What the values scripts print need besides maps.
    pub values: ValueNeeds,
    /// How pointers walked only to be read through are made cheap to verify.
    pub untrusted_views: UntrustedViews,
}

/// `bpf_rdonly_cast`, and the structs it may view. Loading a pointer to a
/// struct from a trusted BTF pointer (`task->real_parent` in `a->b->c`)
/// makes the Linux 6.x verifier look up `struct NAME__safe_trusted` and
/// its kin by name, a linear search of all kernel BTF, for every such load
/// on every path it verifies: most of the verification time of the
/// trackers. Through an untrusted view of the same struct the load is as
/// fault-safe and needs no search; the loaded pointer, used only as the
/// base of the next load, loses nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UntrustedViews {
    /// The kfunc's kernel BTF id; `None` leaves every load as written.
    pub kfunc: Option<u32>,
    /// For each pointer target (as the pointer's type names it) whose
    /// pointer members are walked, the kernel struct a view of it names.
    pub structs: std::collections::BTreeMap<KTypeId, KTypeId>,
}

/// What printed values need besides maps: stack trace maps, texts they
/// refer to, and whether threads that take user addresses are reported.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ValueNeeds {
    /// The depths of `kstack`/`ustack` values: one stack trace map each.
    pub stack_depths: BTreeSet<u32>,
    /// `strftime()` formats and `cgroup_path()` filters, by index.
    pub texts: Vec<String>,
    /// Some value holds user addresses (`ustack`, `usym()`): each thread
    /// taking one is reported once, so its process's mappings are kept.
    pub user_addresses: bool,
    /// Bytes of the per-CPU scratch buffer large messages (`join()`) are
    /// built in; 0 for none.
    pub scratch_bytes: u32,
    /// What the program cannot do on this machine (a kernel symbol that is
    /// not there): reported when it is run, so `--dump-bpf` still shows it.
    pub unrunnable: Vec<ScriptError>,
}

impl ValueNeeds {
    /// The index of `text` in [`ValueNeeds::texts`], added when new.
    pub fn text(&mut self, text: &str) -> u64 {
        let index = match self.texts.iter().position(|t| t == text) {
            Some(index) => index,
            None => {
                self.texts.push(text.to_string());
                self.texts.len() - 1
            }
        };
        index as u64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecordRef(pub usize);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpanRef(pub usize);

/// One kind of capture event: from a record block at one attach point, from
/// every `record NAME` statement of one name, or a span.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordDecl {
    /// The probe (or `span:NAME`) as displayed.
    pub probe: String,
    /// A short name for tracks: the function, tracepoint or span name.
    pub name: String,
    pub is_span: bool,
    pub fields: Vec<(String, Type)>,
    pub stack: Option<StackKind>,
    pub origin: RecordOrigin,
}

/// A span: starts are kept in a map by key until the matching end.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanDecl {
    pub name: String,
    pub key: Type,
    pub record: RecordRef,
    /// Recorded at the start and kept until the end.
    pub start_fields: Vec<(String, Type)>,
    pub start_stack: Option<StackKind>,
    pub end_fields: Vec<(String, Type)>,
    pub end_stack: Option<StackKind>,
    pub origin: RecordOrigin,
    pub span: Span,
}

/// Which stacks a record captures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackKind {
    Kernel,
    User,
    Both,
}

impl StackKind {
    pub fn kernel(self) -> bool {
        matches!(self, StackKind::Kernel | StackKind::Both)
    }

    pub fn user(self) -> bool {
        matches!(self, StackKind::User | StackKind::Both)
    }
}

/// What a probe records when it fires.
#[derive(Clone, Debug)]
pub struct CheckedRecord {
    pub role: RecordRole,
    /// Values in field order (stacks are not fields).
    pub values: Vec<RecordValue>,
    pub stack: Option<StackKind>,
    /// `stack(offcpu, NEXT)` at a context switch, `stack(offcpu, pending)`
    /// at a system call's return.
    pub offcpu_stack: Option<OffcpuStack>,
}

/// The off-CPU stack forms of a record (`docs/unwinding.md`, "Off-CPU stacks").
#[derive(Clone, Debug)]
pub enum OffcpuStack {
    /// `stack(offcpu, NEXT)` at a context switch.
    Switch(Box<SwitchStack>),
    /// `stack(offcpu, pending)` at `sys_exit` under `-S offcpu=DUR`: the
    /// user stack of the current task's long blocks in the system call it
    /// returns from; the record is sent only when such blocks are pending,
    /// stamped with the switch-in time of the first.
    Pending,
}

/// `stack(offcpu, NEXT)`: the off-CPU stack of the task switched out (the
/// current one), or with `-S offcpu=DUR` that of `NEXT` when its block
/// lasted long enough (`docs/unwinding.md`, "Off-CPU stacks"); each only
/// for a task the filters select.
#[derive(Clone, Debug)]
pub struct SwitchStack {
    /// The task switched in.
    pub next: TExpr,
    /// `selected(curtask)`, `selected(NEXT)`.
    pub prev_selected: TExpr,
    pub next_selected: TExpr,
}

/// What fills one or more fields of a record.
#[derive(Clone, Debug)]
pub enum RecordValue {
    /// One field.
    Expr(TExpr),
    /// Three u64 fields (value, time enabled, time running) of counter
    /// `CheckedProgram::counters[N]` on the current CPU.
    Counter(usize),
}

#[derive(Clone, Debug)]
pub enum RecordRole {
    /// An event of this record kind.
    Instant(RecordRef),
    /// Remember the start of a span under `key`.
    SpanStart { span: SpanRef, key: TExpr },
    /// Complete the span started under `key` and emit it.
    SpanEnd { span: SpanRef, key: TExpr },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MapRef(pub usize);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VarId(pub usize);

#[derive(Clone, Debug, PartialEq)]
pub struct MapDecl {
    /// As written: `@name`, or `@` for the anonymous map.
    pub name: String,
    pub key: Option<Type>,
    pub value: MapValueKind,
    /// Read by some probe: aggregations can then not live in per-CPU maps.
    pub read_in_kernel: bool,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum MapValueKind {
    Plain(Type),
    Aggregate(AggFunc),
}

#[derive(Clone, Debug)]
pub struct CheckedProbe {
    /// The probe as displayed by `probe` and in messages, after wildcard expansion.
    pub name: String,
    pub attach: AttachPoint,
    pub predicate: Option<TExpr>,
    pub record: Option<CheckedRecord>,
    pub body: Vec<TStmt>,
    pub variables: Vec<Type>,
    pub span: Span,
    /// At a function's first instruction (see `ResolvedProbe::function_entry`).
    pub function_entry: bool,
    /// Whether pointers in its context point into user memory.
    pub user_memory: bool,
    /// Who wrote the probe: the built-in trackers see wprof itself too.
    pub origin: RecordOrigin,
    /// Under `--only-command`, for a probe the command's tree filters
    /// (`providers::follows_command_tree`): its task's group leader's
    /// start time, which the tree's entry must hold.
    pub command_identity: Option<TExpr>,
}

#[derive(Clone, Debug)]
pub struct TStmt {
    pub kind: TStmtKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum TStmtKind {
    /// An expression evaluated for its effects (and value discarded).
    Expr(TExpr),
    AssignVar {
        var: VarId,
        value: TExpr,
    },
    AssignMap {
        map: MapRef,
        key: Option<TExpr>,
        value: TExpr,
    },
    Aggregate {
        map: MapRef,
        key: Option<TExpr>,
        func: AggFunc,
        arg: Option<TExpr>,
    },
    /// A built-in statement: `printf(...)`, `delete(@m[k])`, `exit()`...
    Call(TCall),
    If {
        cond: TExpr,
        then: Vec<TStmt>,
        otherwise: Vec<TStmt>,
    },
    While {
        cond: TExpr,
        body: Vec<TStmt>,
    },
    Unroll {
        count: u32,
        body: Vec<TStmt>,
    },
    /// A `record NAME < items >` statement.
    Record(CheckedRecord),
    Break,
    Continue,
    Return,
}

/// A use of a built-in that its own lowering turns into code: what the
/// checker kept of it. Each built-in documents which parts it fills.
#[derive(Clone, Debug)]
pub struct TCall {
    pub builtin: BuiltinId,
    /// Checked arguments, in the order its lowering takes them.
    pub args: Vec<TExpr>,
    /// The map it works on (`print(@m)`, `delete(@m[k])`).
    pub map: Option<MapRef>,
    /// A literal string it keeps (a format).
    pub text: Option<String>,
    /// Integer literals it keeps (`print`'s top and div, `strncmp`'s length).
    pub consts: Vec<u64>,
}

impl TCall {
    /// A use of `builtin` with these arguments and nothing else.
    pub fn new(builtin: BuiltinId, args: Vec<TExpr>) -> TCall {
        TCall {
            builtin,
            args,
            map: None,
            text: None,
            consts: Vec::new(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct TExpr {
    pub kind: TExprKind,
    pub ty: Type,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum TExprKind {
    Int(u64),
    Str(String),
    /// Constant raw bytes (`pton("::1")`), laid out as a string of their length.
    Bytes(Vec<u8>),
    /// A built-in value (`pid`, `str(p)`, `selected(task)`).
    Call(Box<TCall>),
    /// A probe argument (`argN`, `retval`, a `tp_btf` argument), read as its
    /// provider says.
    Arg(ArgRead),
    /// `args.field` of a tracepoint.
    Field(TracepointField),
    Var(VarId),
    MapRead {
        map: MapRef,
        key: Option<Box<TExpr>>,
    },
    Unary {
        op: UnOp,
        expr: Box<TExpr>,
    },
    Binary {
        op: BinOp,
        lhs: Box<TExpr>,
        rhs: Box<TExpr>,
    },
    Ternary {
        cond: Box<TExpr>,
        then: Box<TExpr>,
        otherwise: Box<TExpr>,
    },
    Tuple(Vec<TExpr>),
    TupleIndex {
        expr: Box<TExpr>,
        index: usize,
    },
    /// Integer truncation/extension to `ty`.
    Cast(Box<TExpr>),
    /// Statements run for their effect, then `value`: `x++` used as a value.
    Sequence {
        effects: Vec<TStmt>,
        value: Box<TExpr>,
    },
    /// A value in memory, `offset` bytes past the address `ptr` gives.
    MemoryRead {
        ptr: Box<TExpr>,
        offset: u32,
        load: Load,
        access: Access,
    },
    /// A part of a struct or array held by value, `offset` bytes into it.
    ValueRead {
        value: Box<TExpr>,
        offset: u32,
        load: Load,
    },
}

/// How a value is read out of memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    /// Integers, bools and enums; pointers are unsigned 8-byte ones.
    Int { size: u8, signed: bool },
    /// A bitfield: `bits` bits starting `shift` bits into the `bytes`
    /// bytes at the offset, zero-extended whatever the member's type (as
    /// bpftrace reads them: `short b:8` holding 0xd9 is 217).
    Bits { bytes: u8, shift: u8, bits: u8 },
    /// `len` bytes as they are: a `char` array into a string buffer, a
    /// struct or array by value.
    Bytes(u32),
}

/// How memory is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Loads the verifier checks against the pointer's BTF type (and
    /// makes fault-safe).
    Direct,
    /// `bpf_probe_read_kernel`.
    Kernel,
    /// `bpf_probe_read_user`.
    User,
    /// `bpf_probe_read`: user memory at user addresses, kernel memory
    /// elsewhere (pointers of unknown space, [`Space::Unknown`]).
    Any,
}

impl Access {
    /// How memory in `space` is read, short of direct loads.
    pub fn of(space: Space) -> Access {
        match space {
            Space::Kernel => Access::Kernel,
            Space::User => Access::User,
            Space::Unknown => Access::Any,
        }
    }

    /// The space memory read this way is in.
    pub fn space(self) -> Space {
        match self {
            Access::Direct | Access::Kernel => Space::Kernel,
            Access::User => Space::User,
            Access::Any => Space::Unknown,
        }
    }
}

/// What scheduling a task-work callback needs from the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskWork {
    /// The kernel BTF id of the kfunc (`helpers::TASK_WORK_SCHEDULE_RESUME`).
    pub kfunc: u32,
    /// `struct task_struct`'s `pid` (the thread id the work map is keyed by).
    pub task_pid: u32,
}
