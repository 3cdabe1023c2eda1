//! Map layouts: how each script map and the internal maps are stored.

use crate::codegen::glob_nfa::{GlobSet, LANE_TABLE_BYTES};
use crate::frontend::checked::{CheckedProgram, MapDecl, MapValueKind, StackKind};
use crate::frontend::options::UserStacks;
use crate::frontend::types::{Pointer, Type};
use crate::vocab::{
    AggFunc, BUILD_ID_FRAME_BYTES, MAX_STACK_DEPTH, MapId, MapKind, MapSpec, MapValue, ScriptMap,
};

/// Entries per script map, as bpftrace's default `max_map_keys`.
pub const MAX_MAP_KEYS: u32 = 4096;
/// Ring buffer size for printed output: small, as creating it is part of
/// the start-up time.
const OUTPUT_RINGBUF_BYTES: u32 = 1 << 20;
/// Ring buffer size when recording: a capture sends far more (at 0.6 M
/// events/s the 1 MiB ring absorbs only 18 ms of user-space delay).
const CAPTURE_RINGBUF_BYTES: u32 = 1 << 24;

/// Map ids and layouts the lowering needs.
#[derive(Clone, Debug)]
pub struct MapLayouts {
    pub script: Vec<ScriptMapLayout>,
    pub ringbuf: MapId,
    pub ringbuf_bytes: u32,
    pub globals: MapId,
    pub kernel_stacks: Option<MapId>,
    pub user_stacks: Option<MapId>,
    pub drops: Option<MapId>,
    /// One map of open spans per span, in `SpanRef` order.
    pub spans: Vec<MapId>,
    /// The NFAs of the task-name filters, and the one-element array holding
    /// their character tables (when there are name filters).
    pub glob_set: GlobSet,
    pub globs: Option<MapId>,
    /// One perf event array per counter, in `CheckedProgram::counters` order.
    pub counters: Vec<MapId>,
}

#[derive(Clone, Debug)]
pub struct ScriptMapLayout {
    pub id: MapId,
    /// Bytes of the script key (0 when the map has none); hist buckets follow it.
    pub key_bytes: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub per_cpu: bool,
    /// Keyed by a task: values live in the task (`bpf_task_storage_get`).
    pub task_storage: bool,
    /// A one-element array whose only entry always exists: `delete` zeroes it.
    pub single_slot: bool,
}

/// Lay out every map of `program`, returning the specs in `MapId` order.
pub fn layout(program: &CheckedProgram) -> (Vec<MapSpec>, MapLayouts) {
    let mut specs = Vec::new();
    let mut script = Vec::new();
    for decl in &program.maps {
        let keys = program.map_keys_max.unwrap_or(MAX_MAP_KEYS);
        let (spec, layout) = script_map(decl, MapId(specs.len() as u32), keys);
        specs.push(spec);
        script.push(layout);
    }
    let ringbuf = MapId(specs.len() as u32);
    let ringbuf_bytes = if program.records.is_empty() {
        OUTPUT_RINGBUF_BYTES
    } else {
        CAPTURE_RINGBUF_BYTES
    };
    specs.push(MapSpec {
        name: "wprof_events".into(),
        kind: MapKind::RingBuf,
        key_size: 0,
        value_size: 0,
        max_entries: ringbuf_bytes,
        script_map: None,
    });
    let globals = MapId(specs.len() as u32);
    specs.push(MapSpec {
        name: "wprof_globals".into(),
        kind: MapKind::Array,
        key_size: 4,
        value_size: 8 * crate::vocab::GLOBAL_SLOTS,
        max_entries: 1,
        script_map: None,
    });
    let mut internal = |name: String, kind, key_size, value_size, max_entries| {
        specs.push(MapSpec {
            name,
            kind,
            key_size,
            value_size,
            max_entries,
            script_map: None,
        });
        MapId(specs.len() as u32 - 1)
    };
    let wants = |f: fn(StackKind) -> bool| program.records.iter().any(|r| r.stack.is_some_and(f));
    let depth = MAX_STACK_DEPTH;
    let kernel_stacks = wants(StackKind::kernel).then(|| {
        internal(
            "wprof_kstacks".into(),
            MapKind::StackTrace,
            4,
            8 * depth,
            STACK_ENTRIES,
        )
    });
    let (user_kind, user_bytes) = match program.user_stacks {
        UserStacks::BuildId => (MapKind::BuildIdStackTrace, BUILD_ID_FRAME_BYTES * depth),
        UserStacks::Addresses => (MapKind::StackTrace, 8 * depth),
    };
    let user_stacks = wants(StackKind::user).then(|| {
        internal(
            "wprof_ustacks".into(),
            user_kind,
            4,
            user_bytes,
            STACK_ENTRIES,
        )
    });
    let drops = (!program.records.is_empty()).then(|| {
        internal(
            "wprof_drops".into(),
            MapKind::PerCpuArray,
            4,
            8,
            DROP_REASONS,
        )
    });
    let spans = program
        .spans
        .iter()
        .map(|span| {
            let value =
                SPAN_VALUE_HEADER + span.start_fields.iter().map(|(_, t)| t.size()).sum::<u32>();
            internal(
                format!("span_{}", span.name),
                MapKind::Hash,
                span.key.size(),
                value,
                OPEN_SPANS,
            )
        })
        .collect();
    let glob_set = GlobSet::build(&program.filter.names, &program.filter.no_names);
    let globs = (!glob_set.lanes.is_empty()).then(|| {
        let bytes = LANE_TABLE_BYTES * glob_set.lanes.len() as u32;
        internal("wprof_globs".into(), MapKind::Array, 4, bytes, 1)
    });
    let counters = program
        .counters
        .iter()
        .map(|counter| {
            internal(
                format!("pmu_{}", counter.name),
                MapKind::PerfEventArray,
                4,
                4,
                possible_cpus(),
            )
        })
        .collect();
    let layouts = MapLayouts {
        script,
        ringbuf,
        ringbuf_bytes,
        globals,
        kernel_stacks,
        user_stacks,
        drops,
        spans,
        glob_set,
        globs,
        counters,
    };
    (specs, layouts)
}

/// Entries of a per-CPU perf event array: every CPU that may come online.
fn possible_cpus() -> u32 {
    // Without /sys (never on a machine that runs BPF), one entry still loads.
    libbpf_rs::num_possible_cpus().map_or(1, |n| n as u32)
}

/// Distinct stacks of each kind a capture can hold (the kernel preallocates them).
const STACK_ENTRIES: u32 = 4096;
/// Spans open at the same time, per span.
const OPEN_SPANS: u32 = 16384;
/// Counters in the drops map, one per `DropReason`.
const DROP_REASONS: u32 = 3;
/// An open span's value: start time, kernel and user stack ids, entry
/// return address, then the start fields.
pub const SPAN_VALUE_HEADER: u32 = 32;

fn script_map(decl: &MapDecl, id: MapId, max_entries: u32) -> (MapSpec, ScriptMapLayout) {
    let key_bytes = decl.key.as_ref().map_or(0, |k| k.size());
    let (value, value_size, bucketed) = match &decl.value {
        MapValueKind::Plain(ty) => (MapValue::Plain(ty.layout()), ty.size(), false),
        MapValueKind::Aggregate(agg) => {
            (MapValue::Aggregate(*agg), agg.value_size(), agg.bucketed())
        }
    };
    let per_cpu = matches!(decl.value, MapValueKind::Aggregate(_)) && !decl.read_in_kernel;
    // bpftrace keeps a keyless count() in a one-element array, so it exists
    // (and prints `@: 0`) before the first event and delete or clear zero it;
    // scripts such as pidpersec print it before anything counted.
    let single_slot = decl.key.is_none() && decl.value == MapValueKind::Aggregate(AggFunc::Count);
    // A map without keys still needs a key: a single zero u64 (u32 for an array).
    let key_size = match single_slot {
        true => 4,
        false => (key_bytes + if bucketed { 8 } else { 0 }).max(8),
    };
    let kind = match (single_slot, per_cpu) {
        (true, true) => MapKind::PerCpuArray,
        (true, false) => MapKind::Array,
        (false, true) => MapKind::PerCpuHash,
        (false, false) => MapKind::Hash,
    };
    let spec = MapSpec {
        name: decl.name.clone(),
        kind,
        key_size,
        value_size,
        max_entries: if single_slot { 1 } else { max_entries },
        script_map: Some(ScriptMap {
            key: decl.key.as_ref().map(|k| k.layout()),
            value,
        }),
    };
    let task_storage = decl
        .key
        .as_ref()
        .and_then(Type::pointer)
        .is_some_and(Pointer::is_task);
    let spec = if task_storage {
        // The kernel sizes task storage itself (max_entries 0); user space
        // cannot list it, so it is not printed at exit.
        MapSpec {
            kind: MapKind::TaskStorage,
            key_size: 4,
            max_entries: 0,
            script_map: None,
            ..spec
        }
    } else {
        spec
    };
    let layout = ScriptMapLayout {
        id,
        key_bytes,
        key_size,
        value_size,
        per_cpu,
        task_storage,
        single_slot,
    };
    (spec, layout)
}

#[cfg(test)]
mod tests {
    use crate::capture::model::RecordOrigin;
    use crate::driver::{Source, compile};
    use crate::frontend::fake_machine::FakeMachine;
    use crate::vocab::MapKind;

    /// The kind, key size and entries of each script map of `text`, by name.
    fn script_maps(text: &str) -> Vec<(String, MapKind, u32, u32)> {
        let source = Source {
            name: "t.bt".into(),
            text: text.into(),
            origin: RecordOrigin::Script,
        };
        let (_, compiled) = compile(&[source], &[], &FakeMachine, &Default::default())
            .unwrap_or_else(|e| panic!("{}", e.render()));
        compiled
            .maps
            .iter()
            .filter(|m| m.script_map.is_some())
            .map(|m| (m.name.clone(), m.kind, m.key_size, m.max_entries))
            .collect()
    }

    /// Only a keyless count() is a one-element array (per CPU unless read
    /// in the kernel); keyed counts and keyless sums stay hash maps.
    #[test]
    fn keyless_count_is_a_single_slot_array() {
        let maps = script_maps(
            "BEGIN { @c = count(); @r = count(); @k[1] = count(); @s = sum(1); $x = @r; }",
        );
        assert_eq!(
            maps,
            [
                ("@c".to_string(), MapKind::PerCpuArray, 4, 1),
                ("@r".to_string(), MapKind::Array, 4, 1),
                ("@k".to_string(), MapKind::PerCpuHash, 8, 4096),
                ("@s".to_string(), MapKind::PerCpuHash, 8, 4096),
            ]
        );
    }
}
