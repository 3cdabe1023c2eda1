//! BPF maps as codegen declares them and the runtime creates and reads them.

use super::layout::ValueType;

/// Index into `Compiled::maps`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct MapId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MapKind {
    Hash,
    PerCpuHash,
    /// A hash that evicts its least recently used entry when full.
    LruHash,
    Array,
    PerCpuArray,
    RingBuf,
    /// Stacks by id (`bpf_get_stackid`), for `kstack`/`ustack` values.
    StackTrace,
    /// `BPF_MAP_TYPE_TASK_STORAGE`: a value per task, keyed by a BTF task
    /// pointer in BPF. The kernel requires BTF for the key (`int`) and value
    /// types; the loader makes it.
    TaskStorage,
    /// Perf event fds by CPU, for `bpf_perf_event_read_value`.
    PerfEventArray,
    /// A hash by thread id (`u32`) whose value is one `struct bpf_task_work`
    /// (8 bytes): the handle `bpf_task_work_schedule_resume` needs to run a
    /// callback in a task on its way back to user space. The kernel finds
    /// the field through the map's BTF; the loader makes it.
    TaskWork,
}

/// The size of `struct bpf_task_work` (one opaque `u64`), the value of a
/// [`MapKind::TaskWork`].
pub const TASK_WORK_BYTES: u32 = 8;

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
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

impl MapSpec {
    /// Appends one of wprof's own maps (not a script's) to `specs`; returns its id.
    pub fn add_internal(
        specs: &mut Vec<MapSpec>,
        name: &str,
        kind: MapKind,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
    ) -> MapId {
        let id = MapId(u32::try_from(specs.len()).expect("fewer than 2^32 maps"));
        specs.push(MapSpec {
            name: name.into(),
            kind,
            key_size,
            value_size,
            max_entries,
            script_map: None,
        });
        id
    }
}

/// Layout of a user-visible map, for printing.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScriptMap {
    /// `None` for a map without keys (`@x = 1`).
    pub key: Option<ValueType>,
    pub value: MapValue,
}

/// What a map's values mean.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum MapValue {
    /// Values as assigned.
    Plain(ValueType),
    /// Aggregated values, stored per CPU (unless a probe reads them) and
    /// combined in user space.
    Aggregate(AggFunc),
}

/// An aggregation (`@m[k] = count()`), which fixes the layout of the map's
/// values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AggFunc {
    /// u64, summed over CPUs.
    Count,
    /// i64, summed over CPUs.
    Sum,
    /// {value i64, set u64}.
    Min,
    Max,
    /// {count u64, total i64}.
    Avg,
    Stats,
    /// The key gains a trailing u64 bucket index; the value is a u64 count.
    Hist,
    Lhist {
        min: i64,
        max: i64,
        step: i64,
    },
}

impl AggFunc {
    /// The function's name in scripts.
    pub fn name(self) -> &'static str {
        match self {
            AggFunc::Count => "count",
            AggFunc::Sum => "sum",
            AggFunc::Min => "min",
            AggFunc::Max => "max",
            AggFunc::Avg => "avg",
            AggFunc::Stats => "stats",
            AggFunc::Hist => "hist",
            AggFunc::Lhist { .. } => "lhist",
        }
    }

    /// Bytes of one value (of one CPU's, in a per-CPU map).
    pub fn value_size(self) -> u32 {
        match self {
            AggFunc::Count | AggFunc::Sum | AggFunc::Hist | AggFunc::Lhist { .. } => 8,
            AggFunc::Min | AggFunc::Max | AggFunc::Avg | AggFunc::Stats => 16,
        }
    }

    /// Whether keys gain a bucket index (histograms).
    pub fn bucketed(self) -> bool {
        matches!(self, AggFunc::Hist | AggFunc::Lhist { .. })
    }
}
