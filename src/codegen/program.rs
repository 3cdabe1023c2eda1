//! The compiler's output: BPF programs, the maps they use and the layout of
//! every message they send to user space. This is the whole contract between
//! `codegen` and `runtime`; nothing else crosses that boundary.

use std::path::PathBuf;

use crate::capture::model::RecordSchema;
use crate::frontend::ast::Span;

/// Index into `Compiled::maps`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MapId(pub u32);

/// Index into `Compiled::messages`; the first 8 bytes of every ring buffer record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(pub u32);

#[derive(Clone, Debug, Default)]
pub struct Compiled {
    pub programs: Vec<BpfProgram>,
    pub maps: Vec<MapSpec>,
    pub messages: Vec<Message>,
    /// The ring buffer every program writes its messages to.
    pub ringbuf: Option<MapId>,
    /// A one-element array of `GlobalSlot`s written by user space before any probe fires.
    pub globals: Option<MapId>,
    /// The kinds of capture event, indexed by `Message::Record::record`.
    pub records: Vec<RecordSchema>,
    /// The stack trace map kernel stacks of records are ids into.
    pub kernel_stacks: Option<MapId>,
    /// The build-id stack trace map user stacks of records are ids into.
    pub user_stacks: Option<MapId>,
    /// Per-CPU u64 counters of lost events, indexed by `DropReason as u32`.
    pub drops: Option<MapId>,
    /// Values of one-element arrays written at load, before any program
    /// runs (the task-name filter tables).
    pub initial_values: Vec<(MapId, Vec<u8>)>,
    /// The `--pmu` counters records read, each from its perf event array,
    /// which user space fills with one event per CPU after loading.
    pub counters: Vec<CounterMap>,
}

/// A counter read by `pmu` record items and the map holding its events.
#[derive(Clone, Debug, PartialEq)]
pub struct CounterMap {
    /// The `--pmu` name.
    pub name: String,
    pub event: PerfEvent,
    /// A `MapKind::PerfEventArray` indexed by CPU.
    pub map: MapId,
}

/// Slots of the globals map (each a u64), in index order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlobalSlot {
    /// `bpf_ktime_get_ns()` at start, the origin of `elapsed`.
    StartNs = 0,
    /// pid of the `-c` child (`cpid`), 0 without `-c`.
    ChildPid = 1,
    /// A [`ProbeState`]: probes other than BEGIN/END return at once unless
    /// it is `Active`, so nothing is recorded before activation, and maps
    /// hold still while they print after stopping (detaching takes longer).
    State = 2,
    /// wprof's own pid: probes ignore wprof, which would otherwise trace
    /// itself (a system-wide `malloc` probe fires on every event it handles).
    SelfPid = 3,
}

pub const GLOBAL_SLOTS: u32 = 4;

/// The values of [`GlobalSlot::State`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeState {
    /// Loaded (maybe attached), not yet activated.
    Inactive = 0,
    Active = 1,
    Stopped = 2,
}

#[derive(Clone, Debug)]
pub struct BpfProgram {
    /// Unique symbol name, a valid C identifier.
    pub name: String,
    /// The probe as the user wrote it (after wildcard expansion), for messages.
    pub probe: String,
    pub attach: AttachPoint,
    pub insns: Vec<Insn>,
    /// `ld_imm64` instructions (map fd or map value) whose `imm` must become
    /// a map fd before loading.
    pub map_relocs: Vec<MapReloc>,
    /// For each instruction, the script text it was generated from.
    pub spans: Vec<Option<Span>>,
    /// For each instruction, an optional note for the annotated listing.
    pub comments: Vec<Option<String>>,
}

/// One raw 8-byte BPF instruction slot (a 16-byte `ld_imm64` takes two).
pub type Insn = u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapReloc {
    /// Index of the first slot of an `ld_imm64` with `src_reg = BPF_PSEUDO_MAP_FD`.
    pub insn: usize,
    pub map: MapId,
}

/// Where and how a program attaches.
#[derive(Clone, Debug, PartialEq)]
pub enum AttachPoint {
    /// Run once through `BPF_PROG_TEST_RUN` before any other probe is attached.
    Begin,
    /// Run once through `BPF_PROG_TEST_RUN` after all probes are detached.
    End,
    Tracepoint {
        category: String,
        name: String,
    },
    RawTracepoint {
        name: String,
    },
    /// A BTF-typed raw tracepoint (`BPF_PROG_TYPE_TRACING`, `BPF_TRACE_RAW_TP`).
    TpBtf {
        name: String,
    },
    Uprobe {
        /// The resolved ELF file.
        binary: PathBuf,
        /// Symbol name (for messages) and the file offset to attach to.
        symbol: String,
        offset: u64,
        retprobe: bool,
    },
    Usdt {
        binary: PathBuf,
        provider: String,
        name: String,
        offset: u64,
        semaphore_offset: u64,
    },
    Kprobe {
        function: String,
        offset: u64,
        retprobe: bool,
    },
    Fentry {
        function: String,
        exit: bool,
    },
    PerfEvent {
        event: PerfEvent,
        sample: PerfSample,
        /// All online CPUs, or only the first (for `interval`).
        all_cpus: bool,
    },
}

impl AttachPoint {
    /// libbpf section name, which selects the program type.
    pub fn section(&self) -> String {
        match self {
            AttachPoint::Begin | AttachPoint::End => "raw_tp".into(),
            AttachPoint::Tracepoint { category, name } => format!("tracepoint/{category}/{name}"),
            AttachPoint::RawTracepoint { name } => format!("raw_tp/{name}"),
            AttachPoint::TpBtf { name } => format!("tp_btf/{name}"),
            AttachPoint::Uprobe { retprobe, .. } => {
                if *retprobe { "uretprobe" } else { "uprobe" }.into()
            }
            AttachPoint::Usdt { .. } => "uprobe".into(),
            AttachPoint::Kprobe { retprobe, .. } => {
                if *retprobe { "kretprobe" } else { "kprobe" }.into()
            }
            AttachPoint::Fentry { function, exit } => {
                format!("{}/{function}", if *exit { "fexit" } else { "fentry" })
            }
            AttachPoint::PerfEvent { .. } => "perf_event".into(),
        }
    }
}

/// A perf event as `perf_event_open` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerfEvent {
    /// `PERF_TYPE_HARDWARE` (0), `PERF_TYPE_SOFTWARE` (1) or `PERF_TYPE_RAW` (4).
    pub type_: u32,
    pub config: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerfSample {
    FrequencyHz(u64),
    Period(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapKind {
    Hash,
    PerCpuHash,
    Array,
    PerCpuArray,
    RingBuf,
    StackTrace,
    /// A stack trace map whose entries the kernel turns into (build id,
    /// file offset) pairs (`BPF_F_STACK_BUILD_ID`), so user frames can be
    /// symbolized after their process exits.
    BuildIdStackTrace,
    /// `BPF_MAP_TYPE_TASK_STORAGE`: a value per task, keyed by a BTF task
    /// pointer in BPF. The kernel requires BTF for the key (`int`) and value
    /// types; the loader makes it.
    TaskStorage,
    /// Perf event fds by CPU, for `bpf_perf_event_read_value`.
    PerfEventArray,
}

#[derive(Clone, Debug, PartialEq)]
pub struct MapSpec {
    /// The script name (`@x`, `@` for the anonymous map) or an internal name.
    pub name: String,
    pub kind: MapKind,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    /// How user space reads this map; `None` for internal maps.
    pub script_map: Option<ScriptMap>,
}

/// Layout of a user-visible map, for printing.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptMap {
    /// `None` for a map without keys (`@x = 1`).
    pub key: Option<ValueType>,
    pub value: MapValue,
}

/// What a map's values mean. Aggregations are stored per CPU and combined in
/// user space.
#[derive(Clone, Debug, PartialEq)]
pub enum MapValue {
    Plain(ValueType),
    /// u64 per CPU, summed.
    Count,
    /// i64 per CPU, summed.
    Sum,
    /// {value i64, set u64} per CPU.
    Min,
    Max,
    /// {count u64, total i64} per CPU.
    Avg,
    Stats,
    /// The key gains a trailing u64 bucket index; the value is a per-CPU u64 count.
    Hist,
    Lhist {
        min: i64,
        max: i64,
        step: i64,
    },
}

/// The byte layout of a value in a map key, map value or message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueType {
    Int {
        size: u8,
        signed: bool,
    },
    /// NUL-terminated within a fixed buffer.
    Str {
        len: u32,
    },
    /// Fields at their offsets; the size includes padding.
    Tuple {
        fields: Vec<(u32, ValueType)>,
        size: u32,
    },
    /// A stack id from a stack trace map.
    Stack {
        kernel: bool,
        map: MapId,
    },
    /// u64 address printed as a symbol.
    Symbol {
        kernel: bool,
    },
    /// A probe name, stored as a u64 index into `Compiled::programs`.
    Probe,
}

impl ValueType {
    pub fn size(&self) -> u32 {
        match self {
            ValueType::Int { size, .. } => u32::from(*size),
            ValueType::Str { len } => *len,
            ValueType::Tuple { size, .. } => *size,
            ValueType::Stack { .. } | ValueType::Symbol { .. } | ValueType::Probe => 8,
        }
    }
}

/// A ring buffer message: after the 8-byte `MessageId`, the fields at their offsets.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    Printf {
        format: String,
        args: Vec<(u32, ValueType)>,
    },
    /// `print(value)`
    PrintValue {
        value: (u32, ValueType),
    },
    /// `print(@map[, top[, div]])`
    PrintMap {
        map: MapId,
        top: u64,
        div: u64,
    },
    ClearMap {
        map: MapId,
    },
    ZeroMap {
        map: MapId,
    },
    /// `time(fmt)`
    Time {
        format: String,
    },
    Exit,
    /// A capture event: the header at the offsets in [`record_header`], then the fields.
    /// A thread field (`FieldType::Thread` in the record's schema, from a
    /// `struct task_struct *` item) holds the task's tid (`task->pid`) as a
    /// u64 (`ValueType::Int { size: 8, signed: false }`); a `ksym()` item is a
    /// u64 kernel address (`ValueType::Symbol { kernel: true }`, a `Str`
    /// field in the schema: the recorder stores the symbol's name).
    Record {
        record: u32,
        fields: Vec<(u32, ValueType)>,
    },
}

/// Offsets in a `Message::Record` (after the 8-byte message id).
pub mod record_header {
    /// `bpf_ktime_get_ns()` when the event (or the span) began.
    pub const TS: u32 = 8;
    pub const PID_TGID: u32 = 16;
    /// u32
    pub const CPU: u32 = 24;
    /// `char[16]`
    pub const COMM: u32 = 32;
    /// Spans only; 0 otherwise.
    pub const DURATION: u32 = 48;
    /// Stack ids in `Compiled::kernel_stacks` and `user_stacks`; negative when absent.
    pub const KERNEL_STACK: u32 = 56;
    pub const USER_STACK: u32 = 64;
    /// At a function-entry uprobe, the caller's return address (the
    /// frame-pointer unwinder cannot see it yet); 0 otherwise.
    pub const ENTRY_RETURN: u32 = 72;
    pub const FIELDS: u32 = 80;
}

/// Frames kept per stack (the kernel's limit for stack trace maps).
pub const MAX_STACK_DEPTH: u32 = 127;
/// Bytes of one frame in a build-id stack map (`struct bpf_stack_build_id`).
pub const BUILD_ID_FRAME_BYTES: u32 = 32;
