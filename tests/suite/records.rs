//! Record statements, `stack(KIND)` and `pmu` items against the real kernel:
//! exact event counts from workloads making a known number of calls, schemas
//! that follow the compile options, and counters read by the kernel.

use std::fs;
use std::path::Path;

use wprof::capture::model::{FieldValue, RecordOrigin, RecordSchema};
use wprof::capture::reader::CaptureReader;
use wprof::driver::{self, Source};
use wprof::frontend::options::CompileOptions;
use wprof::frontend::pmu::parse_counters;
use wprof::runtime::session::{self, CaptureTarget, RunError, RunOptions};
use wprof::runtime::targets::environment::SystemEnvironment;

use super::capture::{Ndjson, fresh_dir};
use super::{path_str, workload, wprof_ok};
use crate::require_bpf;

/// Captures `script` compiled with `options` while `command` runs, and
/// returns the capture's schemas and events (as (schema, values, has stack)).
fn capture(
    test: &str,
    script: &str,
    options: &CompileOptions,
    command: Vec<String>,
) -> Result<(Vec<RecordSchema>, Vec<Captured>), RunError> {
    let dir = fresh_dir(test);
    let data = dir.join("wprof.data");
    let source = Source {
        name: "t.bt".into(),
        text: script.into(),
        origin: RecordOrigin::Script,
    };
    let env = SystemEnvironment::default();
    let (_, compiled) =
        driver::compile(&[source], &[], &env, options).unwrap_or_else(|e| panic!("{}", e.render()));
    let run = RunOptions {
        command: Some(command),
        capture: Some(CaptureTarget {
            path: data.clone(),
            info: Default::default(),
        }),
        ..RunOptions::default()
    };
    session::run(&compiled, &run, &mut Vec::new())?;
    Ok(read_capture(&data))
}

/// One event: its record's name, field values and whether it has a stack.
struct Captured {
    name: String,
    values: Vec<FieldValue>,
    has_stack: bool,
}

fn read_capture(path: &Path) -> (Vec<RecordSchema>, Vec<Captured>) {
    let reader = CaptureReader::open(path).expect("the capture opens");
    let schemas = reader.schemas().to_vec();
    let mut events = Vec::new();
    reader
        .for_each_event(|event| {
            events.push(Captured {
                name: schemas[event.record.0 as usize].name.clone(),
                values: event.values.clone(),
                has_stack: event.stack.is_some(),
            });
            std::ops::ControlFlow::Continue(())
        })
        .expect("events read");
    (schemas, events)
}

/// A `record` statement under an `if` emits one event per time the branch
/// runs: `syscalls 5` writes 1, 11, 21, 31 and 41 bytes, then its
/// 26-byte message to stderr.
#[test]
fn record_statement_under_if_emits_exact_events() {
    require_bpf!();
    let dir = fresh_dir("record_statement_under_if");
    let (data, json) = (
        path_str(&dir.join("wprof.data")),
        path_str(&dir.join("t.json")),
    );
    let script = "tracepoint:syscalls:sys_enter_write /pid == cpid/ {
        if (args.count > 20) { record big < count = args.count > } else { record small < > }
    }";
    let program = workload("syscalls");
    wprof_ok(&["-e", script, "-D", &data, "-J", &json, "-c", &program]);
    let ndjson = Ndjson::parse(&fs::read_to_string(&json).expect("NDJSON written"));
    let counts: Vec<u64> = ndjson
        .of("big")
        .iter()
        .map(|e| e["fields"]["count"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [21, 31, 41, 26]);
    assert_eq!(ndjson.of("small").len(), 2, "{:#?}", ndjson.events);
}

/// The header of a tp_btf record (its task: tid, pid, comm, read from the
/// current task's BTF fields) matches the same fields read from `args.prev`,
/// the task switched out, in every switch of the command, the thread that
/// renamed itself (`napper`) included.
#[test]
fn tp_btf_header_names_the_current_task() {
    require_bpf!();
    let dir = fresh_dir("tp_btf_header");
    let (data, json) = (
        path_str(&dir.join("wprof.data")),
        path_str(&dir.join("t.json")),
    );
    let script = "tp_btf:sched_switch /args.prev->tgid == cpid/ {
        record sw < tid = (int64)args.prev->pid; tgid = (int64)args.prev->tgid; name = args.prev->comm >
    }";
    let command = format!("{} 3 10", workload("sys_sleeper"));
    wprof_ok(&["-e", script, "-D", &data, "-J", &json, "-c", &command]);
    let ndjson = Ndjson::parse(&fs::read_to_string(&json).expect("NDJSON written"));
    let switches = ndjson.of("sw");
    assert!(switches.len() >= 3, "one per nap at least: {switches:#?}");
    for event in &switches {
        let (task, fields) = (&event["task"], &event["fields"]);
        assert_eq!(task["tid"], fields["tid"], "{event:#?}");
        assert_eq!(task["pid"], fields["tgid"], "{event:#?}");
        assert_eq!(task["comm"], fields["name"], "{event:#?}");
    }
    let napper = |e: &&serde_json::Value| e["fields"]["name"] == "napper";
    assert!(switches.iter().any(napper), "{switches:#?}");
}

/// `stack(offcpu)` captures stacks only when `offcpu` is among the stack kinds.
#[test]
fn stack_kind_follows_options() {
    require_bpf!();
    let script = "tracepoint:syscalls:sys_enter_getppid /pid == cpid/ < n = 1; stack(offcpu) >";
    let command = vec![workload("syscalls")];
    let off = CompileOptions::default();
    let (schemas, events) = capture("stack_kind_off", script, &off, command.clone()).expect("runs");
    assert!(!schemas[0].has_stack);
    assert_eq!(events.len(), 5);
    assert!(events.iter().all(|e| !e.has_stack));
    let on = CompileOptions {
        stacks: ["offcpu".to_owned()].into(),
        ..CompileOptions::default()
    };
    let (schemas, events) = capture("stack_kind_on", script, &on, command).expect("runs");
    assert!(schemas[0].has_stack);
    assert_eq!(events.len(), 5);
    assert!(events.iter().all(|e| e.has_stack));
}

/// `pmu` with `sw:page-faults`: the counter on the workload's CPU grows by
/// at least the pages it touches between `before()` and `after()`.
#[test]
fn pmu_counts_page_faults() {
    require_bpf!();
    const PAGES: u64 = 256;
    let program = workload("touch_pages");
    let script = format!("uprobe:{program}:before < pmu > uprobe:{program}:after < pmu >");
    let options = CompileOptions {
        pmu: parse_counters(&["sw:page-faults".to_owned()]).expect("known"),
        ..CompileOptions::default()
    };
    let command = vec![program, PAGES.to_string()];
    let (schemas, events) = capture("pmu_page_faults", &script, &options, command).expect("runs");
    let names: Vec<&str> = schemas[0].fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "pmu:sw:page-faults",
            "pmu:sw:page-faults:enabled",
            "pmu:sw:page-faults:running"
        ]
    );
    let values = |name: &str| -> Vec<u64> {
        let event = events
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("no {name} event"));
        event
            .values
            .iter()
            .map(|v| match v {
                FieldValue::UInt(n) => *n,
                other => panic!("not a UInt: {other:?}"),
            })
            .collect()
    };
    let (before, after) = (values("before"), values("after"));
    assert_eq!(events.len(), 2);
    assert!(
        after[0] >= before[0] + PAGES,
        "before {before:?}, after {after:?}"
    );
    assert!(
        before[1] > 0 && before[2] > 0,
        "enabled and running: {before:?}"
    );
    assert!(
        after[1] > before[1],
        "time enabled grows: {before:?} {after:?}"
    );
}

/// A hardware counter where there is no hardware PMU fails naming the
/// counter and the reason.
#[test]
fn hardware_counter_without_pmu_fails_clearly() {
    require_bpf!();
    let options = CompileOptions {
        pmu: parse_counters(&["cycles".to_owned()]).expect("known"),
        ..CompileOptions::default()
    };
    let script = "tracepoint:syscalls:sys_enter_getppid /pid == cpid/ < pmu >";
    let command = vec![workload("syscalls")];
    match capture("pmu_hardware", script, &options, command) {
        Ok(_) => {
            eprintln!("SKIPPED hardware_counter_without_pmu_fails_clearly: this machine has a PMU")
        }
        Err(error) => {
            let message = error.to_string();
            assert!(
                message.starts_with(
                    "cannot count --pmu cycles on CPU 0: no hardware PMU on this machine ("
                ),
                "{message}"
            );
        }
    }
}
