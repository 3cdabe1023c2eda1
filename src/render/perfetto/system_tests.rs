//! Tests of the native rendering of tracker records, on the fixture of
//! `render::system_fixture`, decoded back into slices, instants, flows,
//! counters and compact_sched arrays.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use super::fake::{decode, render};
use super::proto::{self, AnnotationValue, CompactSched, TracePacket, TrackDescriptor};
use super::tracks::{IDLE_PID, KTHREADS_PID};
use crate::capture::model::{Event, FieldValue as V, RecordId, ThreadId};
use crate::render::filter::Filter;
use crate::render::source::FakeCapture;
use crate::render::system_fixture::{MS, US, cycles, system};

/// One decoded slice or instant, times relative to the capture start.
#[derive(Clone, Debug, Default)]
struct Item {
    track: u64,
    name: String,
    begin: u64,
    end: Option<u64>,
    depth: usize,
    args: BTreeMap<String, String>,
    flows_out: Vec<u64>,
    flows_in: Vec<u64>,
}

/// A decoded trace: items by track, descriptors, counters, compact_sched.
#[derive(Default)]
struct Decoded {
    items: Vec<Item>,
    tracks: BTreeMap<u64, TrackDescriptor>,
    counters: BTreeMap<u64, Vec<(u64, i64)>>,
    compact: BTreeMap<u32, Vec<CompactSched>>,
    packets: Vec<TracePacket>,
}

impl Decoded {
    fn new(bytes: &[u8], start_ns: u64) -> Decoded {
        let packets = decode(bytes);
        let mut d = Decoded::default();
        let (mut names, mut args, mut strings) = (HashMap::new(), HashMap::new(), HashMap::new());
        let mut open: HashMap<u64, Vec<usize>> = HashMap::new();
        for p in &packets {
            if let Some(data) = &p.interned_data {
                for n in &data.event_names {
                    names.insert(n.iid.unwrap(), n.name.clone().unwrap());
                }
                for n in &data.debug_annotation_names {
                    args.insert(n.iid.unwrap(), n.name.clone().unwrap());
                }
                for s in &data.debug_annotation_string_values {
                    let text = String::from_utf8(s.str.clone().unwrap()).unwrap();
                    strings.insert(s.iid.unwrap(), text);
                }
            }
            if let Some(t) = &p.track_descriptor {
                d.tracks.insert(t.uuid.unwrap(), t.clone());
            }
            if let Some(bundle) = &p.ftrace_events {
                let sched = bundle.compact_sched.clone().unwrap();
                d.compact
                    .entry(bundle.cpu.unwrap())
                    .or_default()
                    .push(sched);
            }
            let Some(e) = &p.track_event else { continue };
            let ts = p.timestamp.unwrap() - start_ns;
            let track = e.track_uuid.unwrap();
            let mut annotations = BTreeMap::new();
            for a in &e.debug_annotations {
                let value = match a.value.clone().unwrap() {
                    AnnotationValue::Uint(v) => v.to_string(),
                    AnnotationValue::Int(v) => v.to_string(),
                    AnnotationValue::StringIid(iid) => strings[&iid].clone(),
                };
                annotations.insert(args[&a.name_iid.unwrap()].clone(), value);
            }
            let stack = open.entry(track).or_default();
            match e.r#type.unwrap() {
                proto::TYPE_COUNTER => {
                    let value = e.counter_value.unwrap();
                    d.counters.entry(track).or_default().push((ts, value));
                }
                proto::TYPE_SLICE_END => {
                    let index = stack.pop().expect("END closes an open slice");
                    d.items[index].end = Some(ts);
                    d.items[index].args.extend(annotations);
                    d.items[index].flows_out.extend(&e.flow_ids);
                }
                kind => {
                    let item = Item {
                        track,
                        name: names[&e.name_iid.unwrap()].clone(),
                        begin: ts,
                        end: None,
                        depth: stack.len(),
                        args: annotations,
                        flows_out: e.flow_ids.clone(),
                        flows_in: e.terminating_flow_ids.clone(),
                    };
                    if kind == proto::TYPE_SLICE_BEGIN {
                        stack.push(d.items.len());
                    }
                    d.items.push(item);
                }
            }
        }
        assert!(open.values().all(Vec::is_empty), "every slice ends");
        d.packets = packets;
        d
    }

    /// The thread track of `tid`.
    fn thread_track(&self, tid: i64) -> u64 {
        let found = self
            .tracks
            .values()
            .find(|t| t.thread.as_ref().is_some_and(|x| x.tid == Some(tid)));
        found.expect("thread track").uuid.unwrap()
    }

    fn track_named(&self, name: &str) -> u64 {
        let found = self
            .tracks
            .values()
            .find(|t| t.name.as_deref() == Some(name));
        found
            .unwrap_or_else(|| panic!("track {name}"))
            .uuid
            .unwrap()
    }

    /// Slices (not instants) on `track` at `depth`.
    fn slices(&self, track: u64, depth: usize) -> Vec<&Item> {
        (self.items.iter())
            .filter(|i| i.track == track && i.end.is_some() && i.depth == depth)
            .collect()
    }

    fn named(&self, name: &str) -> Vec<&Item> {
        self.items.iter().filter(|i| i.name == name).collect()
    }
}

fn render_system(capture: &FakeCapture) -> Decoded {
    let mut out = Vec::new();
    render(capture, &Filter::default(), &mut out).expect("renders");
    Decoded::new(&out, capture.info.start_monotonic_ns)
}

/// The sleeper's ten 1 ms runs are slices on its thread track, annotated
/// with their PMU deltas only (CPU, off-CPU state and waker are the
/// compact_sched switch's and waking's); the spinner fills the gaps.
#[test]
fn on_cpu_slices() {
    let (capture, _) = system();
    let d = render_system(&capture);
    let sleeper = d.slices(d.thread_track(300), 0);
    assert_eq!(sleeper.len(), 10);
    for (i, slice) in sleeper.iter().enumerate() {
        let start = i as u64 * 51 * MS;
        assert_eq!((slice.begin, slice.end), (start, Some(start + MS)));
        assert_eq!(slice.name, "sleeper");
        let pmu_only = BTreeMap::from([("pmu:cpu-cycles".to_string(), (2 * MS).to_string())]);
        assert_eq!(slice.args, pmu_only);
    }
    let spinner = d.slices(d.thread_track(400), 0);
    assert_eq!(spinner.len(), 10);
    for (i, slice) in spinner.iter().enumerate() {
        let start = i as u64 * 51 * MS + MS;
        assert_eq!((slice.begin, slice.end), (start, Some(start + 50 * MS)));
        assert!(!slice.args.contains_key("state"), "in compact_sched only");
    }
    let child = d.slices(d.thread_track(301), 0);
    assert_eq!(child.len(), 1);
    let keys: Vec<_> = child[0].args.keys().collect();
    assert_eq!(keys, ["pmu:cpu-cycles"]);
}

/// Wakings, forks and preemptions start flows that end at the other task's
/// next on-CPU slice. A waking on the CPU its wakee is to run on starts its
/// flow at the END of the waker's on-CPU slice, and writes no instant.
#[test]
fn flows() {
    let (capture, _) = system();
    let d = render_system(&capture);
    assert!(
        d.named("waking").is_empty(),
        "every waking has its waker's slice"
    );
    let sleeper = d.slices(d.thread_track(300), 0);
    let spinner = d.slices(d.thread_track(400), 0);
    for slice in &sleeper[1..] {
        // Ids are reused: the flow is the latest one with the id.
        let from = (spinner.iter().rev())
            .filter(|s| s.end <= Some(slice.begin))
            .find(|s| s.flows_out.iter().any(|f| slice.flows_in.contains(f)))
            .expect("a waking's flow ends at each later sleeper slice");
        assert_eq!(from.end, Some(slice.begin), "from the waker's slice");
    }
    let child = d.slices(d.thread_track(301), 0)[0];
    let fork = d.named("fork")[0];
    let new = d.named("wakeup_new")[0];
    assert_eq!(child.flows_in, [fork.flows_out[0], new.flows_out[0]]);
    // The spinner, preempted by the sleeper, starts a flow from the
    // sleeper's slice to its own next slice.
    let preempted = sleeper[1].flows_out[0];
    assert!(spinner[1].flows_in.contains(&preempted));
    let ids: Vec<u64> = d.items.iter().flat_map(|i| i.flows_out.clone()).collect();
    let unique: std::collections::BTreeSet<_> = ids.iter().collect();
    assert!(ids.len() > unique.len(), "ids of ended flows are reused");
}

/// IRQs nest in the interrupted task's slice with their names and PMU
/// deltas; a multiplexed reading is scaled and flagged.
#[test]
fn irqs_nest_in_on_cpu_slices() {
    let (capture, _) = system();
    let d = render_system(&capture);
    let ping = d.thread_track(500);
    let outer = d.slices(ping, 0);
    assert_eq!((outer[0].begin, outer[0].end), (0, Some(110 * US)));
    let irqs = d.slices(ping, 1);
    let names: Vec<_> = irqs
        .iter()
        .map(|i| (i.name.as_str(), i.begin, i.end))
        .collect();
    assert_eq!(
        names,
        [
            ("virtio0-input", 30 * US, Some(35 * US)),
            ("softirq TIMER", 40 * US, Some(50 * US))
        ]
    );
    assert_eq!(irqs[0].args["irq"], "42");
    let scaled_end = cycles(1, 35 * US) * 2;
    let delta = scaled_end - cycles(1, 30 * US);
    assert_eq!(irqs[0].args["pmu:cpu-cycles"], delta.to_string());
    assert_eq!(irqs[0].args["pmu_multiplexed"], "1");
    assert_eq!(irqs[1].args["pmu:cpu-cycles"], (20 * US).to_string());
    assert!(!irqs[1].args.contains_key("pmu_multiplexed"));
}

/// Idle tasks get one track per CPU under "idle"; kernel threads are
/// grouped under "kernel threads"; work items go to a `wq` child track.
#[test]
fn idle_and_kernel_threads_grouped() {
    let (capture, _) = system();
    let d = render_system(&capture);
    let process = |pid: u32| {
        let found = d.tracks.values().find(|t| {
            t.process
                .as_ref()
                .is_some_and(|x| x.pid == Some(pid as i32))
        });
        found.expect("process").clone()
    };
    let idle = process(IDLE_PID);
    assert_eq!(idle.process.unwrap().process_name.as_deref(), Some("idle"));
    for cpu in 0..2 {
        let track = &d.tracks[&d.track_named(&format!("swapper/{cpu}"))];
        assert_eq!(track.parent_uuid, idle.uuid);
    }
    let idle1 = d.slices(d.track_named("swapper/1"), 0);
    assert_eq!(idle1[0].begin, 1100 * US);
    let kthreads = process(KTHREADS_PID);
    let kworker = &d.tracks[&d.thread_track(20)];
    assert_eq!(kworker.parent_uuid, kthreads.uuid);
    assert_eq!(
        kworker.thread.as_ref().unwrap().pid,
        Some(KTHREADS_PID as i32)
    );
    let wq = d.named("vmstat_update");
    assert_eq!(
        (wq[0].begin, wq[0].end),
        (2 * MS + 10 * US, Some(2 * MS + 30 * US))
    );
    assert_eq!(d.tracks[&wq[0].track].name.as_deref(), Some("wq"));
    let timers = d.named("timer");
    assert_eq!(timers.len(), 10);
    assert!(timers.iter().all(|t| t.track == d.thread_track(300)));
    let callstack = d
        .packets
        .iter()
        .filter_map(|p| p.track_event.as_ref()?.callstack_iid);
    assert_eq!(
        callstack.count(),
        11,
        "timer and pmu_sample instants carry stacks"
    );
    for name in ["exec", "rename", "exit", "free", "pmu_sample"] {
        assert_eq!(d.named(name).len(), 1, "{name}");
    }
    assert_eq!(d.named("exec")[0].args["filename"], "/bin/true");
}

/// Each CPU's counter track holds the cumulative count at every switch and
/// IRQ boundary.
#[test]
fn counter_tracks() {
    let (capture, _) = system();
    let d = render_system(&capture);
    let cpu0 = &d.counters[&d.track_named("CPU 0 cpu-cycles")];
    assert_eq!(cpu0.len(), 21);
    assert!(cpu0.iter().all(|&(ts, v)| v as u64 == cycles(0, ts)));
    let cpu1 = &d.counters[&d.track_named("CPU 1 cpu-cycles")];
    let irq_end = cpu1
        .iter()
        .find(|&&(ts, _)| ts == 35 * US)
        .expect("hardirq exit");
    assert_eq!(irq_end.1 as u64, cycles(1, 35 * US) * 2, "scaled");
    let descriptor = &d.tracks[&d.track_named("CPU 0 cpu-cycles")];
    assert_eq!(
        descriptor.counter.as_ref().unwrap().unit,
        Some(proto::UNIT_COUNT)
    );
}

/// The kernel's view: compact_sched per CPU with delta timestamps, reported
/// prev_state, next pids and comms, and wakings; a process tree and the
/// kernel release come first.
#[test]
fn compact_sched_and_process_tree() {
    let (capture, _) = system();
    let d = render_system(&capture);
    let cpu0 = &d.compact[&0][0];
    assert_eq!(cpu0.switch_timestamp.len(), 21);
    let start = capture.info.start_monotonic_ns;
    assert_eq!(cpu0.switch_timestamp[..3], [start, MS, 50 * MS]);
    assert_eq!(cpu0.switch_prev_state[..3], [0, 1, 0x100]);
    assert_eq!(cpu0.switch_next_pid[..3], [300, 400, 300]);
    let comms: Vec<_> = (cpu0.switch_next_comm_index[..2].iter())
        .map(|&i| cpu0.intern_table[i as usize].as_str())
        .collect();
    assert_eq!(comms, ["sleeper", "spinner"]);
    let mut wakees = vec![301];
    wakees.extend([300; 9]);
    assert_eq!(
        cpu0.waking_pid, wakees,
        "wakeup_new of the child, then wakings"
    );
    assert_eq!(cpu0.waking_timestamp[2], 51 * MS);
    let cpu1 = &d.compact[&1][0];
    assert!(
        cpu1.switch_prev_state.contains(&0x80),
        "the kworker waits idle"
    );
    let tree = d
        .packets
        .iter()
        .find_map(|p| p.process_tree.clone())
        .expect("tree");
    let tgids: Vec<_> = tree
        .threads
        .iter()
        .map(|t| (t.tid.unwrap(), t.tgid.unwrap()))
        .collect();
    assert_eq!(
        tgids,
        [
            (20, KTHREADS_PID as i32),
            (300, 300),
            (301, 301),
            (400, 400),
            (500, 500),
            (501, 500)
        ]
    );
    let info = d
        .packets
        .iter()
        .find_map(|p| p.system_info.clone())
        .expect("info");
    assert_eq!(
        info.utsname.unwrap().release.as_deref(),
        Some("6.18.0-test")
    );
    let snapshot = d.packets[0].clock_snapshot.as_ref().unwrap();
    assert!(
        snapshot
            .clocks
            .iter()
            .any(|c| c.clock_id == Some(proto::CLOCK_BOOTTIME))
    );
}

/// A switch-out lost on one CPU: the task's slice ends where it shows up
/// next, so its track stays well nested.
#[test]
fn lost_switch_out_ends_the_slice() {
    let (mut capture, t) = system();
    capture.events.retain(|e| e.cpu == 1 && e.ts_ns < 100 * US);
    let switch = capture
        .schemas
        .iter()
        .position(|s| s.name == "switch")
        .unwrap();
    let mut values = vec![
        V::Thread(t.ping),
        V::UInt(0),
        V::UInt(0),
        V::Int(120),
        V::Int(120),
    ];
    values.extend([V::UInt(0), V::UInt(0), V::UInt(0)]);
    capture.events.push(Event {
        ts_ns: 300 * US,
        cpu: 0,
        thread: t.idle0,
        record: RecordId(switch as u32),
        values,
        ..Event::default()
    });
    let d = render_system(&capture);
    let ping = d.slices(d.thread_track(500), 0);
    let ping: Vec<_> = ping.iter().map(|s| (s.begin, s.end)).collect();
    assert_eq!(ping, [(0, Some(300 * US)), (300 * US, Some(300 * US))]);
}

/// Same capture, same bytes.
#[test]
fn deterministic() {
    let (capture, _) = system();
    let mut a = Vec::new();
    let mut b = Vec::new();
    render(&capture, &Filter::default(), &mut a).unwrap();
    render(&capture, &Filter::default(), &mut b).unwrap();
    assert_eq!(a, b);
}

/// The official schema accepts the trace, and the checker finds the
/// expected slices, counter tracks and compact_sched.
#[test]
fn python_oracle_accepts_system_trace() {
    let probe = Command::new("python3")
        .args([
            "-c",
            "import perfetto.protos.perfetto.trace.perfetto_trace_pb2",
        ])
        .output();
    if !probe.is_ok_and(|out| out.status.success()) {
        return println!("skipped: python3 with the `perfetto` package is missing");
    }
    let (capture, _) = system();
    let mut bytes = Vec::new();
    render(&capture, &Filter::default(), &mut bytes).unwrap();
    let dir = tempfile::tempdir().expect("temp dir");
    let trace = dir.path().join("trace.pb");
    std::fs::write(&trace, bytes).expect("trace written");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/perfetto_check.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(&trace)
        .args([
            "--expect-thread-slices",
            "sleeper:10",
            "--expect-thread-slices",
            "ping:5",
        ])
        .args(["--expect-counter-track", "CPU 0 cpu-cycles"])
        .args(["--expect-compact-sched", "2", "--expect-flows", "29"])
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "perfetto_check.py failed:\n{stdout}\n{stderr}"
    );
    println!("{stdout}");
}

/// For the speed test: context switches round robin over four threads on
/// two CPUs, with a PMU reading each.
fn generate(i: u64, event: &mut Event) {
    if event.values.is_empty() {
        event.record = RecordId(0);
        event.values = vec![
            V::Thread(ThreadId(0)),
            V::UInt(1),
            V::UInt(0),
            V::Int(120),
            V::Int(120),
        ];
        event.values.extend([V::UInt(0), V::UInt(0), V::UInt(0)]);
    }
    let cpu = (i % 2) as u32;
    event.ts_ns = i * 500;
    event.cpu = cpu;
    event.thread = ThreadId(cpu + 2 * ((i / 2 + 1) % 2) as u32);
    event.values[0] = V::Thread(ThreadId(cpu + 2 * ((i / 2) % 2) as u32));
    event.values[5] = V::UInt(i * 1000);
    event.values[6] = V::UInt(i * 500);
    event.values[7] = V::UInt(i * 500);
}

/// Throughput of 1 M switches (fewer in debug builds).
#[test]
fn switch_throughput() {
    let count = if cfg!(debug_assertions) {
        200_000
    } else {
        1_000_000
    };
    let mut capture = FakeCapture::new();
    capture.add_tracker_schema("switch");
    for tid in 0..4 {
        capture.add_thread(1000 + tid, 1000, &format!("worker-{tid}"), "server");
    }
    capture.generated = Some((count, generate));
    let started = Instant::now();
    let stats = render(&capture, &Filter::default(), &mut std::io::sink()).expect("renders");
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(stats.slices, count);
    println!(
        "{count} switches in {elapsed:.3} s: {:.2} M switches/s, {:.1} bytes/switch",
        count as f64 / elapsed / 1e6,
        stats.bytes as f64 / count as f64
    );
}
