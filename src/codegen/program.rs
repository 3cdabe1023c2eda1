//! The compiler's output: BPF programs, the maps they use and the layout of
//! every message they send to user space. With the shared types of
//! [`crate::vocab`] this is the whole contract between `codegen` and
//! `runtime`.

use crate::capture::model::{DropReason, RecordId, RecordSchema};
use crate::frontend::ast::Span;
use crate::unwind::maps::UnwindMaps;
use crate::unwind::orc_maps::OrcMaps;
use crate::vocab::{AttachPoint, GlobalSlot, MapId, MapSpec, Message, PerfEvent};

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Compiled {
    pub programs: Vec<BpfProgram>,
    pub maps: Vec<MapSpec>,
    pub messages: Vec<Message>,
    /// The name of each block at each of its attach points (after wildcard
    /// expansion), indexed by the number the `probe` built-in sends.
    pub probe_names: Vec<String>,
    /// The ring buffer every program writes its messages to.
    pub ringbuf: Option<MapId>,
    /// A one-element array of `GlobalSlot`s written by user space before any probe fires.
    pub globals: Option<MapId>,
    /// The kinds of capture event, indexed by `Message::Record::record`.
    pub records: Vec<RecordSchema>,
    /// The unwinder's maps, which the table manager fills, when records
    /// have user stacks.
    pub unwind: Option<UnwindMaps>,
    /// The kernel-stack walker's maps, which the session fills with the
    /// kernel's ORC table, when a switch record takes kernel stacks with it.
    pub kernel_walk: Option<OrcMaps>,
    /// The skip counts kernel stacks of records read (program types whose
    /// tracer frames are measured at start-up).
    pub kernel_stack_skips: Vec<GlobalSlot>,
    /// The map of raw tracepoint iterators' address ranges (one value, 16
    /// bytes per probe), and the probes and tracepoints to fill it for
    /// (`stack_layout::tracepoint_glue`).
    pub tracepoint_glue: Option<(MapId, Vec<(u32, String)>)>,
    /// Per-CPU u64 counters of lost events, indexed by
    /// `maps::drop_counter(record, reason)`.
    pub drops: Option<MapId>,
    /// Values of one-element arrays written at load, before any program
    /// runs (the task-name filter tables).
    pub initial_values: Vec<(MapId, Vec<u8>)>,
    /// Texts values refer to by index: `strftime()` formats and
    /// `cgroup_path()` filters.
    pub texts: Vec<String>,
    /// The stack trace maps `kstack`/`ustack` values are ids into, by depth.
    pub value_stacks: Vec<(u32, MapId)>,
    /// The `--pmu` counters records read, each from its perf event array,
    /// which user space fills with one event per CPU after loading.
    pub counters: Vec<CounterMap>,
    /// `--only-command`'s map of the command's processes, with its key and
    /// value sizes: the session puts the command's pid in before it runs.
    pub command_tree: Option<CommandTreeMap>,
}

/// The map `probes/command-tree.wp` keeps the command's processes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommandTreeMap {
    pub map: MapId,
    pub key_size: u32,
    pub value_size: u32,
}

impl CommandTreeMap {
    /// The key and value that put process `pid` in the tree.
    pub fn entry(&self, pid: u32) -> (Vec<u8>, Vec<u8>) {
        let mut key = u64::from(pid).to_ne_bytes().to_vec();
        key.resize(self.key_size as usize, 0);
        let mut value = 1u64.to_ne_bytes().to_vec();
        value.resize(self.value_size as usize, 0);
        (key, value)
    }
}

/// The index of the counter of `record`'s events lost for `reason` in the
/// drops map: each record kind has a counter per `DropReason`.
pub fn drop_counter(record: RecordId, reason: DropReason) -> u32 {
    record.0 * DropReason::ALL.len() as u32 + u32::from(reason.code())
}

/// The counters in the drops map of a program with `records` record kinds.
pub fn drop_counters(records: usize) -> u32 {
    records as u32 * DropReason::ALL.len() as u32
}

/// A counter read by `pmu` record items and the map holding its events.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CounterMap {
    /// The `--pmu` name.
    pub name: String,
    pub event: PerfEvent,
    /// A `MapKind::PerfEventArray` indexed by CPU.
    pub map: MapId,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct BpfProgram {
    /// Unique symbol name, a valid C identifier.
    pub name: String,
    /// The probe as the user wrote it (after wildcard expansion), for messages.
    pub probe: String,
    pub attach: AttachPoint,
    /// How many script blocks it runs, in order: one program serves every
    /// block on its attach point. `Attaching N probes...` counts blocks, as
    /// bpftrace (one program per block) does.
    pub blocks: usize,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MapReloc {
    /// Index of the first slot of an `ld_imm64` with `src_reg = BPF_PSEUDO_MAP_FD`.
    pub insn: usize,
    pub map: MapId,
}
