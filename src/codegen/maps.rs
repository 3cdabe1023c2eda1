//! Map layouts: how each script map and the internal maps are stored.

use crate::codegen::glob_nfa::{GlobSet, LANE_TABLE_BYTES};
use crate::codegen::lower_selected::FILTER_SCRATCH_BYTES;
use crate::codegen::program::{Compiled, drop_counters};
use crate::codegen::stack_layout::{self, StackMaps};
use crate::frontend::checked::{CheckedProgram, MapDecl, MapValueKind};
use crate::frontend::options::COMMAND_TREE_MAP;
use crate::frontend::types::{Pointer, Type};
use crate::providers;
use crate::vocab::{AggFunc, MapId, MapKind, MapSpec, MapValue, ScriptMap};

/// Threads remembered as having taken user addresses; the least recently
/// seen are forgotten (and reported again if seen again).
const SEEN_THREADS: u32 = 16384;
/// Slots of the cache of recently seen threads in front of that map.
pub const RECENT_THREAD_SLOTS: u32 = 1024;

/// Entries per script map, as bpftrace's default `max_map_keys`.
pub const MAX_MAP_KEYS: u32 = 4096;
/// Stack ids of `kstack`/`ustack` values. A stack whose hash bucket holds
/// another stack gets no id (the kernel's `-EEXIST`) and prints as `@[]`.
/// `@[ustack] = count()` on sched_switch for 3 s (~2400 distinct stacks):
/// 4096 ids lost 8% of the events that way, 16384 lose 1.6%, bpftrace 0.17's
/// 131072 0.8% — but the kernel preallocates every id (1 KiB each): 131072
/// take 136 MB and ~40 ms to create, 16384 17 MB and a few ms.
const STACK_MAP_IDS: u32 = 16_384;
/// Ring buffer size for printed output: small, as creating it is part of
/// the start-up time.
const OUTPUT_RINGBUF_BYTES: u32 = 1 << 20;
/// The output ring when only programs that run once (BEGIN, END) write to
/// it: what one run can print into bpftrace's default per-CPU buffer (64
/// pages). Its pages are mapped twice and count in RSS, so a quiet
/// script's 1 MiB ring was 2 MB of it.
const RUN_ONCE_RINGBUF_BYTES: u32 = 64 * PAGE_BYTES;
/// Bounds of the output ring `BPFTRACE_PERF_RB_PAGES` sizes: one page, and
/// 1 GiB (a ring's size is a `u32` power of two).
const OUTPUT_RINGBUF_BOUNDS: (u32, u32) = (PAGE_BYTES, 1 << 30);
/// The page size ring buffers are counted in (x86-64).
const PAGE_BYTES: u32 = 4096;
/// Ring buffer per possible CPU when recording: events come from every CPU,
/// so the ring grows with them. The kernel maps a ring's pages twice, and
/// both count in the recorder's RSS: a 16 MiB ring cost 32 MB even idle.
const CAPTURE_RINGBUF_BYTES_PER_CPU: u32 = 2 << 20;
/// Per CPU when records carry stacks: the recorder reads and normalizes
/// each stack, so it drains more slowly and needs the ring to wait in.
const STACK_CAPTURE_RINGBUF_BYTES_PER_CPU: u32 = 8 << 20;
/// Bounds of the capture ring: at least 4 MiB (1 MiB absorbed only 18 ms of
/// recorder delay at 0.6 M events/s), at most 64 MiB.
const CAPTURE_RINGBUF_BYTES: (u32, u32) = (4 << 20, 64 << 20);

/// The capture ring for `cpus` possible CPUs, with or without `stacks`: a
/// power of two, as the kernel requires, within [`CAPTURE_RINGBUF_BYTES`].
fn capture_ringbuf_bytes(cpus: u32, stacks: bool) -> u32 {
    let (min, max) = CAPTURE_RINGBUF_BYTES;
    let per_cpu = if stacks {
        STACK_CAPTURE_RINGBUF_BYTES_PER_CPU
    } else {
        CAPTURE_RINGBUF_BYTES_PER_CPU
    };
    cpus.saturating_mul(per_cpu)
        .checked_next_power_of_two()
        .unwrap_or(max)
        .clamp(min, max)
}

/// The output ring: [`OUTPUT_RINGBUF_BYTES`], or as much as bpftrace's
/// per-CPU buffers of `pages_per_cpu` pages hold together
/// (`BPFTRACE_PERF_RB_PAGES`), a power of two as the kernel requires.
fn output_ringbuf_bytes(pages_per_cpu: Option<u32>, cpus: u32) -> u32 {
    let Some(pages) = pages_per_cpu else {
        return OUTPUT_RINGBUF_BYTES;
    };
    let (min, max) = OUTPUT_RINGBUF_BOUNDS;
    (u64::from(pages) * u64::from(PAGE_BYTES) * u64::from(cpus))
        .clamp(u64::from(min), u64::from(max))
        .next_power_of_two() as u32
}

/// Shrinks the output ring of `compiled` when no attached program writes
/// to it: only BEGIN and END print, so events need no room (a size the
/// user set, and capture rings, stay).
pub fn fit_quiet_output_ring(program: &CheckedProgram, compiled: &mut Compiled) {
    let Some(ring) = compiled.ringbuf else {
        return;
    };
    if !program.records.is_empty() || program.output_pages_per_cpu.is_some() {
        return;
    }
    let per_event_output = compiled.programs.iter().any(|bpf| {
        !providers::of(&bpf.attach).runs_once() && bpf.map_relocs.iter().any(|r| r.map == ring)
    });
    if !per_event_output {
        compiled.maps[ring.0 as usize].max_entries = RUN_ONCE_RINGBUF_BYTES;
    }
}

/// Map ids and layouts the lowering needs.
#[derive(Clone, Debug)]
pub struct MapLayouts {
    pub script: Vec<ScriptMapLayout>,
    pub ringbuf: MapId,
    pub ringbuf_bytes: u32,
    pub globals: MapId,
    /// The maps records with stacks use.
    pub stacks: Option<StackMaps>,
    pub drops: Option<MapId>,
    /// Per-CPU, one u64: the records this CPU sent, which spaces out its
    /// looks at the ring's fill (`Lowerer::wakeup_flags`).
    pub sent: Option<MapId>,
    /// One map of open spans per span, in `SpanRef` order.
    pub spans: Vec<MapId>,
    /// The NFAs of the task-name filters, and the one-element array holding
    /// their character tables (when there are name filters).
    pub glob_set: GlobSet,
    pub globs: Option<MapId>,
    /// Per-CPU, one [`FILTER_SCRATCH_BYTES`] slot per probe: the names
    /// `selected()` matches, read there rather than onto the BPF stack
    /// (when there are name filters).
    pub filter_scratch: Option<MapId>,
    /// One perf event array per counter, in `CheckedProgram::counters` order.
    pub counters: Vec<MapId>,
    /// The stack trace maps of `kstack`/`ustack` values, by depth.
    pub value_stacks: Vec<(u32, MapId)>,
    /// Threads that took a user address, reported once each (see
    /// `Message::ThreadSeen`).
    pub seen_threads: Option<SeenThreads>,
    /// A one-element per-CPU array large messages are built in.
    pub scratch: Option<MapId>,
}

impl MapLayouts {
    /// The stack trace map of stack values of `depth` frames.
    pub fn value_stack(&self, depth: u32) -> MapId {
        let found = self.value_stacks.iter().find(|(d, _)| *d == depth);
        found.expect("the checker declares every stack depth").1
    }
}

/// The maps that report each thread taking a user address once.
#[derive(Clone, Copy, Debug)]
pub struct SeenThreads {
    /// LRU hash of the `pid_tgid`s reported.
    pub reported: MapId,
    /// One array value of [`RECENT_THREAD_SLOTS`] `pid_tgid`s, a slot per
    /// thread id modulo its size: a thread found in its slot was reported,
    /// which spares the hash lookup on nearly every event.
    pub recent: MapId,
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
        output_ringbuf_bytes(program.output_pages_per_cpu, possible_cpus())
    } else {
        let stacks = program.records.iter().any(|r| r.stack.is_some());
        capture_ringbuf_bytes(possible_cpus(), stacks)
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
    let stacks = stack_layout::add_maps(program, &mut specs);
    let mut internal = |name: String, kind, key_size, value_size, max_entries| {
        MapSpec::add_internal(&mut specs, &name, kind, key_size, value_size, max_entries)
    };
    let drops = (!program.records.is_empty()).then(|| {
        internal(
            "wprof_drops".into(),
            MapKind::PerCpuArray,
            4,
            8,
            drop_counters(program.records.len()),
        )
    });
    let sent = (!program.records.is_empty())
        .then(|| internal("wprof_sent".into(), MapKind::PerCpuArray, 4, 8, 1));
    let spans = program
        .spans
        .iter()
        .map(|span| {
            let frames = if span.start_stack.is_some() {
                stack_layout::SPAN_FRAMES_BYTES
            } else {
                0
            };
            let value = SPAN_VALUE_HEADER
                + span.start_fields.iter().map(|(_, t)| t.size()).sum::<u32>()
                + frames;
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
    // One slot per probe: a program never runs nested in itself on one
    // CPU (the kernel skips the recursion), while others may interrupt it.
    let filter_scratch = (!glob_set.lanes.is_empty()).then(|| {
        let probes = program.probes.len().max(1) as u32;
        let bytes = FILTER_SCRATCH_BYTES;
        internal(
            "wprof_filter".into(),
            MapKind::PerCpuArray,
            4,
            bytes,
            probes,
        )
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
    let value_stacks = program
        .values
        .stack_depths
        .iter()
        .map(|&depth| {
            let map = internal(
                format!("wprof_vstacks_{depth}"),
                MapKind::StackTrace,
                4,
                8 * depth,
                STACK_MAP_IDS,
            );
            (depth, map)
        })
        .collect();
    let seen_threads = program.values.user_addresses.then(|| SeenThreads {
        reported: internal("wprof_threads".into(), MapKind::LruHash, 8, 8, SEEN_THREADS),
        recent: internal(
            "wprof_recent_threads".into(),
            MapKind::Array,
            4,
            8 * RECENT_THREAD_SLOTS,
            1,
        ),
    });
    let scratch_bytes = program.values.scratch_bytes;
    let scratch = (scratch_bytes > 0).then(|| {
        internal(
            "wprof_scratch".into(),
            MapKind::PerCpuArray,
            4,
            scratch_bytes.next_multiple_of(8),
            1,
        )
    });
    let layouts = MapLayouts {
        script,
        ringbuf,
        ringbuf_bytes,
        globals,
        stacks,
        drops,
        sent,
        spans,
        glob_set,
        globs,
        filter_scratch,
        counters,
        value_stacks,
        seen_threads,
        scratch,
    };
    (specs, layouts)
}

/// Entries of a per-CPU perf event array: every CPU that may come online.
fn possible_cpus() -> u32 {
    // Without /sys (never on a machine that runs BPF), one entry still loads.
    libbpf_rs::num_possible_cpus().map_or(1, |n| n as u32)
}

/// Spans open at the same time, per span.
const OPEN_SPANS: u32 = 16384;
/// An open span's value: start time, the stack description of the record
/// header (frame counts, flags, kernel error, entry return address), the
/// bytes of frames, then the start fields, then (a start with a stack)
/// its frames.
pub const SPAN_VALUE_HEADER: u32 = 40;
/// Where an open span's value holds its bytes of frames.
pub const SPAN_FRAME_BYTES: i16 = 32;

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
    } else if decl.name == COMMAND_TREE_MAP {
        // wprof's own bookkeeping, not the user's to see printed.
        MapSpec {
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
    use super::*;
    use crate::capture::model::RecordOrigin;
    use crate::driver::{Source, compile};
    use crate::frontend::fake_machine::FakeMachine;
    use crate::vocab::MapKind;

    /// `BPFTRACE_PERF_RB_PAGES` pages per CPU make one ring as large as
    /// bpftrace's buffers together, rounded up to a power of two.
    #[test]
    fn output_ring_from_pages_per_cpu() {
        assert_eq!(output_ringbuf_bytes(None, 2), 1 << 20);
        assert_eq!(output_ringbuf_bytes(Some(64), 2), 512 << 10);
        assert_eq!(output_ringbuf_bytes(Some(3), 2), 32 << 10);
        assert_eq!(output_ringbuf_bytes(Some(u32::MAX), 64), 1 << 30);
    }

    /// `text` compiled for the fake machine.
    fn compiled(text: &str) -> Compiled {
        let source = Source {
            name: "t.bt".into(),
            text: text.into(),
            origin: RecordOrigin::Script,
        };
        let (_, compiled) = compile(&[source], &[], &FakeMachine, &Default::default())
            .unwrap_or_else(|e| panic!("{}", e.render()));
        compiled
    }

    /// The kind, key size and entries of each script map of `text`, by name.
    fn script_maps(text: &str) -> Vec<(String, MapKind, u32, u32)> {
        compiled(text)
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

    /// The output ring's size for `text`.
    fn output_ring_bytes(text: &str) -> u32 {
        let compiled = compiled(text);
        let ring = compiled.ringbuf.expect("scripts have an output ring");
        compiled.maps[ring.0 as usize].max_entries
    }

    /// Scripts that print only from BEGIN and END get a 256 KiB ring; one
    /// printing (or reporting threads) from an attached probe keeps 1 MiB.
    #[test]
    fn output_ring_follows_what_events_print() {
        let probe = "tracepoint:syscalls:sys_enter_write";
        let quiet = format!(
            "BEGIN {{ printf(\"hi\\n\"); }} {probe} {{ @[comm] = count(); }} END {{ print(@); }}"
        );
        assert_eq!(output_ring_bytes(&quiet), 256 << 10);
        let printing = format!("{probe} {{ printf(\"%s\\n\", comm); }}");
        assert_eq!(output_ring_bytes(&printing), 1 << 20);
        let thread_reports = format!("{probe} {{ @[ustack] = count(); }}");
        assert_eq!(output_ring_bytes(&thread_reports), 1 << 20);
    }

    /// The capture ring grows 2 MiB per CPU (8 MiB with stacks) in powers
    /// of two, within 4–64 MiB.
    #[test]
    fn capture_ring_follows_cpus() {
        let mib = |n: u32| n << 20;
        assert_eq!(capture_ringbuf_bytes(1, false), mib(4));
        assert_eq!(capture_ringbuf_bytes(2, false), mib(4));
        assert_eq!(capture_ringbuf_bytes(3, false), mib(8));
        assert_eq!(capture_ringbuf_bytes(8, false), mib(16));
        assert_eq!(capture_ringbuf_bytes(512, false), mib(64));
        assert_eq!(capture_ringbuf_bytes(u32::MAX, false), mib(64));
        assert_eq!(capture_ringbuf_bytes(2, true), mib(16));
        assert_eq!(capture_ringbuf_bytes(3, true), mib(32));
    }
}
