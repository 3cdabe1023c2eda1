//! Captures against the real kernel: record blocks and spans write
//! `wprof.data`, rendered live as Perfetto (checked with the official protos),
//! NDJSON (checked against `--json-schema`) and the `-I` summary. Counts are
//! exact: workloads make a known number of calls and probes filter on `cpid`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

use super::{path_str, workload, wprof_ok};
use crate::common::{data_dir, scratch_dir};
use crate::require_bpf;

/// Calls `make_blocks` makes to `malloc` in `capture_malloc`.
const MALLOCS: usize = 7;

/// Serialises builds of the `-O0` workloads between test threads.
static BUILD_LOCK: Mutex<()> = Mutex::new(());

/// Builds `tests/data/<name>.c` unoptimised (`-O0 -g -fno-omit-frame-pointer`)
/// so its functions keep their frames, and returns the executable's path.
#[track_caller]
pub(super) fn o0_workload(name: &str) -> String {
    let src = data_dir().join(format!("{name}.c"));
    let out = scratch_dir("workloads-o0").join(name);
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let modified = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    if matches!((modified(&out), modified(&src)), (Some(o), Some(s)) if o >= s) {
        return path_str(&out);
    }
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    let built = Command::new("cc")
        .args(["-O0", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&tmp)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run cc for {name}: {e}"));
    assert!(
        built.status.success(),
        "cc failed for {name}:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    fs::rename(&tmp, &out).unwrap_or_else(|e| panic!("rename {}: {e}", tmp.display()));
    path_str(&out)
}

/// A fresh, empty scratch directory for one test.
pub(super) fn fresh_dir(test: &str) -> PathBuf {
    let dir = scratch_dir(&format!("capture-tests/{test}"));
    fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("clear {}: {e}", dir.display()));
    scratch_dir(&format!("capture-tests/{test}"))
}

/// NDJSON output split by line type.
pub(super) struct Ndjson {
    pub header: Value,
    pub stacks: BTreeMap<u64, Vec<String>>,
    pub events: Vec<Value>,
    pub lines: Vec<Value>,
}

impl Ndjson {
    /// Parses every line of `text`; the first must be the header.
    #[track_caller]
    pub(super) fn parse(text: &str) -> Ndjson {
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad NDJSON {l:?}: {e}")))
            .collect();
        assert_eq!(lines.first().map(|h| &h["type"]), Some(&"header".into()));
        let mut stacks = BTreeMap::new();
        let mut events = Vec::new();
        for line in &lines[1..] {
            match line["type"].as_str() {
                Some("stack") => {
                    let frames = line["frames"].as_array().expect("stack frames");
                    let frames = frames.iter().map(|f| f.as_str().unwrap().to_string());
                    stacks.insert(line["id"].as_u64().unwrap(), frames.collect());
                }
                Some("event") => events.push(line.clone()),
                other => panic!("unexpected line type {other:?}: {line}"),
            }
        }
        Ndjson {
            header: lines[0].clone(),
            stacks,
            events,
            lines,
        }
    }

    /// Events of the probe named `probe`.
    pub(super) fn of(&self, probe: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["probe"] == probe).collect()
    }

    /// The frames of an event's stack (empty when it has none).
    pub(super) fn stack_of(&self, event: &Value) -> &[String] {
        event["stack"].as_u64().map_or(&[], |id| {
            self.stacks.get(&id).expect("stack line before event")
        })
    }
}

/// The `events` column of probe `name` in a `-I` summary.
#[track_caller]
pub(super) fn summary_events(summary: &str, name: &str) -> u64 {
    let row = summary
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.len() >= 4 && w[1] == name && (w[2] == "instant" || w[2] == "span"))
        .unwrap_or_else(|| panic!("no probe row for {name} in:\n{summary}"));
    row[3].parse().expect("events column")
}

/// Decodes a Perfetto trace with the official protos into one JSON object per
/// instant or slice: name, the pid/tid of its thread track, duration and
/// callstack function names (outermost first). Timestamps on an incremental
/// clock (deltas from the previous packet's) are resolved to absolute ones.
const DECODE_PERFETTO: &str = r#"
import json, sys
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
TE = pb.TrackEvent
trace = pb.Trace()
trace.ParseFromString(open(sys.argv[1], "rb").read())
names, funcs, frames, stacks, tracks, events, open_slices = {}, {}, {}, {}, {}, [], {}
incremental, default_clock = {}, {}
def thread_of(uuid):
    while uuid in tracks:
        d = tracks[uuid]
        if d.HasField("thread"):
            return d.thread.pid, d.thread.tid
        if not d.HasField("parent_uuid"):
            break
        uuid = d.parent_uuid
    return None, None
default_track = {}
for p in trace.packet:
    seq = p.trusted_packet_sequence_id
    for c in p.clock_snapshot.clocks:
        if c.is_incremental: incremental[(seq, c.clock_id)] = c.timestamp
    if p.HasField("trace_packet_defaults"):
        d = p.trace_packet_defaults
        default_clock[seq] = d.timestamp_clock_id
        if d.track_event_defaults.HasField("track_uuid"):
            default_track[seq] = d.track_event_defaults.track_uuid
    ts = p.timestamp
    clock = (seq, p.timestamp_clock_id if p.HasField("timestamp_clock_id") else default_clock.get(seq, 6))
    if p.HasField("timestamp") and clock in incremental:
        incremental[clock] += p.timestamp
        ts = incremental[clock]
    if p.HasField("track_event") and not p.track_event.HasField("track_uuid"):
        p.track_event.track_uuid = default_track[seq]
    if p.HasField("interned_data"):
        i = p.interned_data
        for e in i.event_names: names[e.iid] = e.name
        for e in i.function_names: funcs[e.iid] = e.str.decode("utf-8", "replace")
        for e in i.frames: frames[e.iid] = e.function_name_id
        for e in i.callstacks: stacks[e.iid] = list(e.frame_ids)
    if p.HasField("track_descriptor"):
        tracks[p.track_descriptor.uuid] = p.track_descriptor
    if not p.HasField("track_event"):
        continue
    e = p.track_event
    if e.type == TE.TYPE_SLICE_END:
        ev = open_slices[e.track_uuid].pop()
        ev["dur_ns"] = ts - ev["ts_ns"]
        continue
    pid, tid = thread_of(e.track_uuid)
    ev = {"kind": "instant" if e.type == TE.TYPE_INSTANT else "slice",
          "name": names.get(e.name_iid, e.name), "pid": pid, "tid": tid, "ts_ns": ts,
          "functions": [funcs.get(frames.get(f), "") for f in stacks.get(e.callstack_iid, [])]}
    if e.type == TE.TYPE_SLICE_BEGIN:
        open_slices.setdefault(e.track_uuid, []).append(ev)
    events.append(ev)
print(json.dumps(events))
"#;

/// Why the official Perfetto protos cannot be used here, or `None`.
fn perfetto_unavailable() -> Option<String> {
    let probe = Command::new("python3")
        .args([
            "-c",
            "import perfetto.protos.perfetto.trace.perfetto_trace_pb2",
        ])
        .output();
    match probe {
        Ok(out) if out.status.success() => None,
        Ok(_) => Some("python3 cannot import perfetto (pip install perfetto)".into()),
        Err(e) => Some(format!("cannot run python3: {e}")),
    }
}

/// Runs `tests/perfetto_check.py` on `trace` with `expect` options and
/// returns the decoded instants and slices; `None` (with a printed reason)
/// when the official protos are not installed.
#[track_caller]
pub(super) fn perfetto_events(trace: &Path, expect: &[&str]) -> Option<Vec<Value>> {
    if let Some(reason) = perfetto_unavailable() {
        eprintln!("SKIPPED Perfetto checks of {}: {reason}", trace.display());
        return None;
    }
    let checker = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/perfetto_check.py");
    let checked = Command::new("python3")
        .arg(&checker)
        .arg(trace)
        .args(expect)
        .output()
        .expect("run perfetto_check.py");
    assert!(
        checked.status.success(),
        "perfetto_check.py {expect:?} failed:\n{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    let decoded = Command::new("python3")
        .args(["-c", DECODE_PERFETTO])
        .arg(trace)
        .output()
        .expect("run the Perfetto decoder");
    assert!(
        decoded.status.success(),
        "{}",
        String::from_utf8_lossy(&decoded.stderr)
    );
    let events: Value = serde_json::from_slice(&decoded.stdout).expect("decoder JSON");
    Some(events.as_array().expect("an array").clone())
}

/// How the traced command is given to wprof.
#[derive(Clone, Copy)]
enum Launch {
    DashC,
    DoubleDash,
}

/// The issue's end-to-end check: N mallocs from `make_blocks` become N
/// instants with that function on their stacks, in every output.
fn malloc_end_to_end(test: &str, launch: Launch) {
    let dir = fresh_dir(test);
    let program = o0_workload("capture_malloc");
    let (data, pb, json) = (dir.join("wprof.data"), dir.join("t.pb"), dir.join("t.json"));
    let (data, pb_s, json_s) = (path_str(&data), path_str(&pb), path_str(&json));
    let script = "uprobe:libc:malloc /pid == cpid/ < size = arg0; stack >";
    let mut args = vec![
        "-f", "none", "-e", script, "-D", &data, "-T", &pb_s, "-J", &json_s,
    ];
    match launch {
        Launch::DashC => args.extend(["-c", &program]),
        Launch::DoubleDash => args.extend(["--", &program]),
    }
    wprof_ok(&args);

    let ndjson = Ndjson::parse(&fs::read_to_string(&json).expect("NDJSON written"));
    let mallocs = ndjson.of("malloc");
    assert_eq!(mallocs.len(), MALLOCS, "{:#?}", ndjson.events);
    let pid = mallocs[0]["task"]["pid"].as_u64().expect("pid");
    for (i, event) in mallocs.iter().enumerate() {
        assert_eq!(event["task"]["pid"], pid);
        assert_eq!(event["task"]["tid"], pid, "single-threaded workload");
        assert_eq!(event["task"]["comm"], "capture_malloc");
        assert_eq!(event["fields"]["size"], 3000 + i as u64);
        let frames = ndjson.stack_of(event);
        assert!(
            frames.iter().any(|f| f.contains(" make_blocks+")),
            "event {i} lacks make_blocks: {frames:#?}"
        );
    }

    let expect = format!("malloc={MALLOCS}");
    if let Some(events) = perfetto_events(&pb, &["--expect-name", &expect]) {
        let ours: Vec<&Value> = events
            .iter()
            .filter(|e| e["kind"] == "instant" && e["name"] == "malloc" && e["pid"] == pid)
            .collect();
        assert_eq!(ours.len(), MALLOCS, "{events:#?}");
        for event in ours {
            assert_eq!(event["tid"], pid, "on the program's thread track");
            let functions = event["functions"].as_array().expect("functions");
            assert!(functions.iter().any(|f| f == "make_blocks"), "{event}");
        }
    }

    let summary = wprof_ok(&["-R", "-I", "-D", &data]);
    assert_eq!(summary_events(&summary.stdout, "malloc"), MALLOCS as u64);
    assert!(
        summary.stdout.contains("\ndamage      none\n"),
        "{}",
        summary.stdout
    );
}

/// `-c PROG`: every malloc of the program is one instant whose stack names its caller.
#[test]
fn malloc_capture_with_dash_c() {
    require_bpf!();
    malloc_end_to_end("malloc_dash_c", Launch::DashC);
}

/// `-- PROG`: the same capture when the command follows `--`.
#[test]
fn malloc_capture_with_double_dash() {
    require_bpf!();
    malloc_end_to_end("malloc_double_dash", Launch::DoubleDash);
}

/// Asserts `dur_ns` lies within `nominal_ms` and `nominal_ms + slack_ms`.
#[track_caller]
fn assert_duration(dur_ns: f64, nominal_ms: f64, slack_ms: f64) {
    let ms = dur_ns / 1e6;
    assert!(
        ms >= nominal_ms * 0.99 && ms <= nominal_ms + slack_ms,
        "duration {ms} ms, expected {nominal_ms} ms (+{slack_ms})"
    );
}

/// A function sleeping 20 ms, called 5 times, becomes 5 spans (NDJSON) and 5
/// slices (Perfetto), each as long as the call by the workload's own clock.
#[test]
fn span_measures_a_function() {
    require_bpf!();
    let dir = fresh_dir("span_function");
    let program = o0_workload("capture_spans");
    let (data, pb) = (path_str(&dir.join("w.data")), dir.join("s.pb"));
    // The start end needs a record (`< >`) to end before the end probe: see
    // `span_ends_without_records` in the parser tests.
    let script = format!(
        "span nap {{ uprobe:{program}:nap /pid == cpid/ < > uretprobe:{program}:nap /pid == cpid/ }}"
    );
    let out = wprof_ok(&[
        "-f",
        "none",
        "-e",
        &script,
        "-D",
        &data,
        "-T",
        &path_str(&pb),
        "-J",
        "-",
        "-c",
        &program,
    ]);
    let json_start = out.stdout.find("{\"type\"").expect("NDJSON on stdout");
    let ndjson = Ndjson::parse(&out.stdout[json_start..]);
    let naps: Vec<f64> = ndjson
        .of("nap")
        .iter()
        .map(|n| n["dur"].as_f64().unwrap() * 1e9)
        .collect();
    assert_eq!(naps.len(), 5, "{:#?}", ndjson.events);
    let measured: Vec<f64> = (out.stderr.lines())
        .filter_map(|l| {
            l.strip_prefix("nap ")?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(measured.len(), 5, "the workload's naps:\n{}", out.stderr);
    assert_naps(&naps, &measured);
    if let Some(events) = perfetto_events(&pb, &["--expect-slices", "5", "--expect-name", "nap=5"])
    {
        assert!(events.iter().all(|e| e["kind"] == "slice"), "{events:#?}");
        let slices: Vec<f64> = events
            .iter()
            .map(|e| e["dur_ns"].as_f64().expect("slice ends"))
            .collect();
        assert_naps(&slices, &measured);
    }
}

/// Five naps of at least 20 ms (a sleep never ends early), each within the
/// workload's own timing of the call, which also holds the call and return
/// and the probes (a busy machine makes sleeps overshoot, alike in both).
#[track_caller]
fn assert_naps(durations_ns: &[f64], measured_ns: &[f64]) {
    for (&span, &call) in durations_ns.iter().zip(measured_ns) {
        let within = span >= 19.8e6 && span <= call + 0.5e6;
        assert!(within, "span {span} ns against the call's {call} ns");
    }
}

/// `span job by arg0` pairs each end with the start of the same job id, not
/// the latest start; an end with no start is counted as a drop in every output.
#[test]
fn span_pairs_by_explicit_key_and_counts_unmatched_ends() {
    require_bpf!();
    let dir = fresh_dir("span_by_key");
    let program = o0_workload("capture_spans");
    let data = path_str(&dir.join("w.data"));
    let script = format!(
        "span job by arg0 {{ uprobe:{program}:begin_job /pid == cpid/ < id = arg0 >
                              uprobe:{program}:end_job /pid == cpid/ < eid = arg0 > }}"
    );
    let out = wprof_ok(&[
        "-f", "none", "-e", &script, "-D", &data, "-J", "-", "-c", &program,
    ]);
    assert!(
        out.stderr
            .contains("dropped 1 of `job` (span end without a start)"),
        "{}",
        out.stderr
    );
    let json_start = out.stdout.find("{\"type\"").expect("NDJSON on stdout");
    let ndjson = Ndjson::parse(&out.stdout[json_start..]);
    assert_eq!(
        ndjson.header["drops"],
        serde_json::json!({"unmatched_span_end": 1})
    );
    let jobs = ndjson.of("job");
    let by_id: BTreeMap<u64, f64> = jobs
        .iter()
        .map(|j| {
            assert_eq!(j["fields"]["id"], j["fields"]["eid"], "paired by key: {j}");
            (
                j["fields"]["id"].as_u64().unwrap(),
                j["dur"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(by_id.keys().copied().collect::<Vec<_>>(), [1, 2, 3]);
    // Sleeps overshoot under load, never undershoot: 10 ms of slack per sleep
    // inside the span (5 for job 1, 3 for job 2, 1 for job 3).
    for (id, nominal_ms, sleeps) in [(1, 60.0, 5.0), (2, 30.0, 3.0), (3, 10.0, 1.0)] {
        assert_duration(by_id[&id] * 1e9, nominal_ms, 10.0 * sleeps);
    }
    assert!(
        by_id[&1] > by_id[&2] && by_id[&2] > by_id[&3],
        "nested jobs: {by_id:?}"
    );

    let summary = wprof_ok(&["-R", "-I", "-D", &data]);
    assert_eq!(summary_events(&summary.stdout, "job"), 3);
    let drop_row = summary
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("span end without a start"))
        .unwrap_or_else(|| panic!("{}", summary.stdout));
    assert_eq!(drop_row.split_whitespace().last(), Some("1"), "{drop_row}");
    assert!(
        summary.stdout.contains("\ndrops       1\n"),
        "{}",
        summary.stdout
    );
}

/// `--json-schema` prints one JSON document: a schema for header, stack and event lines.
#[test]
fn json_schema_is_valid_json() {
    let out = wprof_ok(&["--json-schema"]);
    let schema: Value = serde_json::from_str(&out.stdout).expect("valid JSON");
    for def in ["header", "stack", "event"] {
        assert!(schema["$defs"][def]["required"].is_array(), "{def}");
    }
}

/// Checks every line against the `required` keys and declared properties of
/// its type in `schema`, and field values against the header's probe fields.
#[track_caller]
fn check_structurally(schema: &Value, ndjson: &Ndjson) {
    let probes = ndjson.header["probes"].as_array().expect("probes");
    let fields_of = |name: &str| -> BTreeMap<String, String> {
        let probe = probes
            .iter()
            .find(|p| p["name"] == name)
            .expect("known probe");
        let fields = probe["fields"].as_array().expect("fields").iter();
        fields
            .map(|f| {
                (
                    f["name"].as_str().unwrap().into(),
                    f["type"].as_str().unwrap().into(),
                )
            })
            .collect()
    };
    for line in &ndjson.lines {
        let kind = line["type"].as_str().expect("type");
        let def = &schema["$defs"][kind];
        let object = line.as_object().expect("an object");
        for key in def["required"].as_array().expect("required keys") {
            assert!(
                object.contains_key(key.as_str().unwrap()),
                "{key} missing: {line}"
            );
        }
        for key in object.keys() {
            assert!(
                def["properties"].get(key).is_some(),
                "{key} not in the schema: {line}"
            );
        }
        if kind != "event" {
            continue;
        }
        let declared = fields_of(line["probe"].as_str().expect("probe name"));
        let fields = line["fields"].as_object().expect("fields object");
        assert_eq!(
            fields.keys().collect::<Vec<_>>(),
            declared.keys().collect::<Vec<_>>()
        );
        for (name, value) in fields {
            match declared[name].as_str() {
                "int" => assert!(value.is_i64(), "{name}: {line}"),
                "uint" => assert!(value.is_u64(), "{name}: {line}"),
                _ => assert!(value.is_string(), "{name}: {line}"),
            }
        }
    }
}

/// Validates `ndjson` fully with Python's `jsonschema` when it is installed.
fn validate_with_jsonschema(schema: &Path, ndjson: &Path) {
    let script = "import json, sys, jsonschema\n\
                  s = json.load(open(sys.argv[1]))\n\
                  for line in open(sys.argv[2]):\n    jsonschema.validate(json.loads(line), s)\n";
    match Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(schema)
        .arg(ndjson)
        .output()
    {
        Ok(out) if out.status.success() => {}
        Ok(out) if String::from_utf8_lossy(&out.stderr).contains("No module named") => {
            eprintln!("SKIPPED full JSON Schema validation: python3 lacks jsonschema");
        }
        Ok(out) => panic!("jsonschema: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => eprintln!("SKIPPED full JSON Schema validation: {e}"),
    }
}

/// A capture mixing a tracepoint record (`pid; comm; args.ret`) and a uprobe
/// record with `str(arg0)` and a stack matches `--json-schema` line by line.
#[test]
fn mixed_records_match_the_json_schema() {
    require_bpf!();
    let dir = fresh_dir("json_schema");
    let t = workload("uprobe_target");
    let (data, json, schema_path) = (
        path_str(&dir.join("w.data")),
        dir.join("t.json"),
        dir.join("schema.json"),
    );
    let script = format!(
        "tracepoint:syscalls:sys_exit_openat /pid == cpid/ < pid; comm; args.ret >
         uprobe:{t}:greet /pid == cpid/ < word = str(arg0); ustack >"
    );
    let command = format!("{t} 6");
    wprof_ok(&[
        "-f",
        "none",
        "-e",
        &script,
        "-D",
        &data,
        "-J",
        &path_str(&json),
        "-c",
        &command,
    ]);
    let schema_text = wprof_ok(&["--json-schema"]).stdout;
    fs::write(&schema_path, &schema_text).expect("write schema");
    let schema: Value = serde_json::from_str(&schema_text).expect("schema JSON");
    let ndjson = Ndjson::parse(&fs::read_to_string(&json).expect("NDJSON written"));

    check_structurally(&schema, &ndjson);
    validate_with_jsonschema(&schema_path, &json);
    let opens = ndjson.of("sys_exit_openat");
    assert!(
        !opens.is_empty(),
        "the loader opens libc: {:#?}",
        ndjson.events
    );
    for open in &opens {
        assert_eq!(open["fields"]["pid"], open["task"]["pid"]);
        assert_eq!(open["fields"]["comm"], "uprobe_target");
    }
    let mut words: BTreeMap<String, usize> = BTreeMap::new();
    for greet in ndjson.of("greet") {
        *words
            .entry(greet["fields"]["word"].as_str().unwrap().into())
            .or_default() += 1;
        assert!(ndjson.stack_of(greet).iter().any(|f| f.contains(" greet+")));
    }
    let expected = [("alpha", 6), ("bravo", 8), ("charlie", 3), ("delta", 4)];
    assert_eq!(words, expected.map(|(w, n)| (w.to_string(), n)).into());
}

/// A script mixing a record block, a printf-and-map action and a span prints
/// exactly what the action alone prints, and its capture holds both kinds.
#[test]
fn records_and_spans_leave_actions_unchanged() {
    require_bpf!();
    let dir = fresh_dir("mixing");
    let t = workload("uprobe_target");
    let data = path_str(&dir.join("w.data"));
    let action = format!(
        r#"uprobe:{t}:mul3 /pid == cpid/ {{ printf("mul3 %d\n", (int64)arg1); @m[arg0] = count(); }}"#
    );
    let mixed = format!(
        "uprobe:{t}:add /pid == cpid/ < a = arg0; b = arg1 >
         {action}
         span ans {{ uprobe:{t}:answer /pid == cpid/ < > uretprobe:{t}:answer /pid == cpid/ }}"
    );
    let command = format!("{t} 3");
    let alone = wprof_ok(&["-f", "none", "-e", &action, "-c", &command]);
    let both = wprof_ok(&["-f", "none", "-e", &mixed, "-D", &data, "-c", &command]);
    let body = |s: &str| s.split_once('\n').expect("Attaching line").1.to_string();
    assert_eq!(body(&both.stdout), body(&alone.stdout));
    assert!(body(&alone.stdout).starts_with("mul3 0\nmul3 -1\nmul3 -2\n"));
    assert!(
        both.stdout.starts_with("Attaching 4 probes...\n"),
        "{}",
        both.stdout
    );

    let replay = wprof_ok(&["-R", "-J", "-", "-D", &data]);
    let ndjson = Ndjson::parse(&replay.stdout);
    let adds: Vec<(u64, u64)> = ndjson
        .of("add")
        .iter()
        .map(|e| {
            (
                e["fields"]["a"].as_u64().unwrap(),
                e["fields"]["b"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(adds, [(0, 0), (1, 2), (2, 4)]);
    let spans = ndjson.of("ans");
    assert_eq!(spans.len(), 1, "{:#?}", ndjson.events);
    assert!(spans[0]["dur"].as_f64().is_some_and(|d| d > 0.0));
    assert!(ndjson.of("mul3").is_empty(), "actions record nothing");
    let summary = wprof_ok(&["-R", "-I", "-D", &data]).stdout;
    assert_eq!(summary_events(&summary, "add"), 3);
    assert_eq!(summary_events(&summary, "ans"), 1);
}
