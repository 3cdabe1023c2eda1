//! NDJSON lines of the built-in trackers' records: `"t"` names the kind
//! (`switch`, `waking`, ...), fields are top-level keys by their record
//! names (but `task`, which is `target`), thread fields are task objects,
//! `prev_state` is decoded to its letter (the number stays in
//! `prev_state_raw`), softirq vectors get a `vec_name`, and PMU readings are
//! grouped by counter in `pmu` / `pmu_end`.

use super::{LineWriter, write_i64, write_key_str, write_seconds, write_str, write_u64};
use crate::capture::model::{Event, FieldValue};
use crate::render::RenderError;
use crate::render::tracker::{softirq_name, state_letter};
use crate::tracking::records::{Field, Kind, PmuField, TrackerSchema};

impl LineWriter<'_, '_> {
    pub(super) fn tracker_event(
        &mut self,
        event: &Event,
        t: &TrackerSchema,
    ) -> Result<(), RenderError> {
        if let Some(stack) = event.stack {
            self.stack_once(stack);
        }
        self.task(event.thread);
        let buf = &mut self.buf;
        buf.extend_from_slice(br#"{"type":"event","t":""#);
        buf.extend_from_slice(t.kind.name().as_bytes());
        buf.extend_from_slice(br#"","ts":"#);
        write_seconds(buf, event.ts_ns);
        buf.extend_from_slice(br#","cpu":"#);
        write_u64(buf, event.cpu.into());
        buf.extend_from_slice(br#","task":"#);
        self.push_task(event.thread);
        self.tracker_fields(event, t);
        if t.kind == Kind::PmuSample {
            let probe = &self.source.schemas()[event.record.0 as usize].probe;
            write_key_str(&mut self.buf, "event", probe);
        }
        if let Some(duration_ns) = event.duration_ns {
            self.buf.extend_from_slice(br#","dur":"#);
            write_seconds(&mut self.buf, duration_ns);
        }
        self.pmu(event, &t.pmu, br#","pmu":{"#);
        self.pmu(event, &t.pmu_end, br#","pmu_end":{"#);
        self.push_stack(event);
        self.buf.extend_from_slice(b"}\n");
        self.flush_if_full()
    }

    /// `,"name":value` for every field but the PMU readings.
    fn tracker_fields(&mut self, event: &Event, t: &TrackerSchema) {
        let record = event.record.0 as usize;
        for (index, value) in event.values.iter().enumerate() {
            let Some(key) = self.probes[record].field_keys.get(index) else {
                break;
            };
            if t.is_pmu_field(index) {
                continue;
            }
            self.buf.push(b',');
            if t.is_field(index, Field::Task) {
                // `task` is the current task's key.
                self.buf.extend_from_slice(br#""target":"#);
            } else {
                self.buf.extend_from_slice(key);
            }
            match *value {
                FieldValue::UInt(raw) if t.is_field(index, Field::PrevState) => {
                    let preempt = t.uint(event, Field::Preempt) == Some(1);
                    write_str(&mut self.buf, state_letter(raw, preempt).as_bytes());
                    self.buf.extend_from_slice(br#","prev_state_raw":"#);
                    write_u64(&mut self.buf, raw);
                }
                FieldValue::UInt(vec) if t.is_field(index, Field::Vec) => {
                    write_u64(&mut self.buf, vec);
                    write_key_str(&mut self.buf, "vec_name", softirq_name(vec));
                }
                FieldValue::Int(v) => write_i64(&mut self.buf, v),
                FieldValue::UInt(v) => write_u64(&mut self.buf, v),
                FieldValue::Str(id) => write_str(&mut self.buf, self.source.string(id).as_bytes()),
                FieldValue::Thread(id) => {
                    self.task(id);
                    self.push_task(id);
                }
            }
        }
    }

    /// `,"pmu":{"C":{"value":..,"enabled_ns":..,"running_ns":..},...}`.
    fn pmu(&mut self, event: &Event, fields: &[PmuField], key: &[u8]) {
        if fields.is_empty() {
            return;
        }
        self.buf.extend_from_slice(key);
        for (index, field) in fields.iter().enumerate() {
            if index > 0 {
                self.buf.push(b',');
            }
            write_str(
                &mut self.buf,
                self.trackers.counters[field.counter].as_bytes(),
            );
            let parts: [(&[u8], usize); 3] = [
                (br#":{"value":"#, field.value),
                (br#","enabled_ns":"#, field.enabled),
                (br#","running_ns":"#, field.running),
            ];
            for (key, position) in parts {
                self.buf.extend_from_slice(key);
                match event.values.get(position) {
                    Some(FieldValue::UInt(v)) => write_u64(&mut self.buf, *v),
                    _ => self.buf.extend_from_slice(b"null"),
                }
            }
            self.buf.push(b'}');
        }
        self.buf.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use serde_json::Value;

    use crate::capture::model::{FieldType, FieldValue as V, RecordKind};
    use crate::capture::walk::{StackEnding, StackWalk, Unwinder};
    use crate::frontend::options::TaskFilter;
    use crate::render::filter::{Filter, TaskSelector};
    use crate::render::ndjson::json_schema;
    use crate::render::ndjson::tests::{conforms, render};
    use crate::render::source::FakeCapture;
    use crate::render::system_fixture::system;
    use crate::tracking::compiled;
    use crate::tracking::records::is_internal;

    fn lines(filter: &Filter) -> Vec<String> {
        let (capture, _) = system();
        let mut out = Vec::new();
        render(&capture, filter, &mut out).expect("renders");
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn line_at(lines: &[String], t: &str, ts: &str) -> String {
        let found = lines
            .iter()
            .find(|l| l.contains(&format!(r#""t":"{t}","ts":{ts},"#)));
        found.unwrap_or_else(|| panic!("{t} at {ts}")).clone()
    }

    /// Switches, IRQs, renames and frees, exactly.
    #[test]
    fn renders_tracker_lines() {
        let lines = lines(&Filter::default());
        let sleeper = r#"{"tid":300,"pid":300,"comm":"sleeper","pcomm":"sleeper"}"#;
        let spinner = r#"{"tid":400,"pid":400,"comm":"spinner","pcomm":"spinner"}"#;
        let child = r#"{"tid":301,"pid":301,"comm":"child","pcomm":"child"}"#;
        let pmu = |ns: u64, cpu: u64, running: u64| {
            format!(
                r#"{{"cpu-cycles":{{"value":{},"enabled_ns":{ns},"running_ns":{running}}}}}"#,
                2 * ns + cpu
            )
        };
        assert_eq!(
            line_at(&lines, "switch", "0.001000000"),
            format!(
                concat!(
                    r#"{{"type":"event","t":"switch","ts":0.001000000,"cpu":0,"task":{}"#,
                    r#","next":{},"prev_state":"S","prev_state_raw":1,"preempt":0,"#,
                    r#""prev_prio":120,"next_prio":120,"pmu":{},"stack":0}}"#
                ),
                sleeper,
                spinner,
                pmu(1_000_000, 0, 1_000_000)
            )
        );
        let ping = r#"{"tid":500,"pid":500,"comm":"ping","pcomm":"pingpong"}"#;
        assert_eq!(
            line_at(&lines, "hardirq", "0.000030000"),
            format!(
                concat!(
                    r#"{{"type":"event","t":"hardirq","ts":0.000030000,"cpu":1,"task":{}"#,
                    r#","irq":42,"action":"virtio0-input","ret":1,"dur":0.000005000,"#,
                    r#""pmu":{},"pmu_end":{}}}"#
                ),
                ping,
                pmu(30_000, 1, 30_000),
                pmu(35_000, 1, 17_500)
            )
        );
        assert!(
            line_at(&lines, "softirq", "0.000040000").contains(r#""vec":1,"vec_name":"TIMER""#)
        );
        assert_eq!(
            line_at(&lines, "rename", "0.002160000"),
            format!(
                concat!(
                    r#"{{"type":"event","t":"rename","ts":0.002160000,"cpu":1,"task":{}"#,
                    r#","target":{},"old_comm":"child","new_comm":"true"}}"#
                ),
                child, child
            )
        );
        let free = line_at(&lines, "free", "0.003000000");
        assert!(free.ends_with(&format!(r#""target":{child}}}"#)), "{free}");
        let sample = line_at(&lines, "pmu_sample", "0.100000000");
        assert!(
            sample.contains(r#""event":"software:cpu-clock:1000hz","stack":0"#),
            "{sample}"
        );
    }

    /// One line per event, each kind counted; every line (header included)
    /// conforms to the published schema.
    #[test]
    fn every_kind_conforms() {
        let schema: Value = serde_json::from_str(json_schema()).unwrap();
        let lines = lines(&Filter::default());
        let mut kinds = BTreeMap::new();
        for line in &lines {
            let value: Value = serde_json::from_str(line).expect("JSON");
            if let Err(error) = conforms(&schema, &schema, &value) {
                panic!("{line}\ndoes not conform: {error}");
            }
            if let Some(t) = value["t"].as_str() {
                *kinds.entry(t.to_owned()).or_insert(0) += 1;
            }
        }
        let expected = [
            ("exec", 1),
            ("exit", 1),
            ("fork", 1),
            ("free", 1),
            ("hardirq", 1),
            ("pmu_sample", 1),
            ("rename", 1),
            ("softirq", 1),
            ("switch", 35),
            ("timer", 10),
            ("wakeup_new", 1),
            ("waking", 19),
            ("wq", 1),
        ];
        let expected: BTreeMap<_, _> = expected.iter().map(|&(k, n)| (k.to_owned(), n)).collect();
        assert_eq!(kinds, expected);
        let header: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(header["pmu"], serde_json::json!(["cpu-cycles"]));
        assert_eq!(header["activate"], "+1s");
        assert_eq!(header["probes"][0]["origin"], "tracker");
    }

    /// An event involving two tasks is kept when either is selected.
    #[test]
    fn keeps_events_of_either_task() {
        let pids = TaskFilter {
            pids: vec![301],
            ..TaskFilter::default()
        };
        let filter = Filter {
            tasks: vec![TaskSelector::new(&pids).unwrap()],
            ..Filter::default()
        };
        let lines = lines(&filter);
        let kinds: Vec<String> = (lines[1..].iter())
            .filter_map(|l| {
                let value: Value = serde_json::from_str(l).unwrap();
                Some(value["t"].as_str()?.to_owned())
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "fork",
                "wakeup_new",
                "switch",
                "exec",
                "rename",
                "exit",
                "switch",
                "free"
            ]
        );
    }

    /// A capture with one full event (every field at the edge of its type,
    /// a stack, a duration for spans) of each compiled tracker record that
    /// is written as a line (all but the internal ones), and their names.
    fn one_of_each() -> (FakeCapture, Vec<String>) {
        let mut c = FakeCapture::new();
        let thread = c.add_thread(7, 7, "t", "t");
        let text = c.intern("text");
        let frame = c.add_user_frame("/bin/x", 0x10, "f", 0, None);
        let stack = c.add_stack(&[frame]);
        let mut names = Vec::new();
        for tracker in compiled::schemas() {
            if is_internal(tracker) {
                continue;
            }
            let record = c.add_tracker_schema(&tracker.name);
            let values = (tracker.fields.iter())
                .map(|field| match field.ty {
                    FieldType::Int => V::Int(i64::MIN),
                    FieldType::UInt => V::UInt(u64::MAX),
                    FieldType::Str => V::Str(text),
                    FieldType::Thread => V::Thread(thread),
                })
                .collect();
            let event = c.add_event(1, thread, record, values);
            event.stack = tracker.has_stack.then_some(stack);
            event.walk = Some(StackWalk {
                unwinder: Some(Unwinder::Table),
                ending: Some(StackEnding::Outermost),
                kernel_truncated: false,
            });
            event.duration_ns = (tracker.kind == RecordKind::Span).then_some(5);
            names.push(tracker.name.clone());
        }
        (c, names)
    }

    /// docs/ndjson.schema.json is true to the compiled trackers: one
    /// definition per record written as a line, whose properties are exactly
    /// the keys of a full line, all required but the stack and counters, and
    /// whose types admit every value of the compiled field types.
    #[test]
    fn schema_document_describes_the_compiled_trackers() {
        let schema: Value = serde_json::from_str(json_schema()).unwrap();
        let (capture, names) = one_of_each();
        let mut out = Vec::new();
        render(&capture, &Filter::default(), &mut out).expect("renders");
        let text = String::from_utf8(out).unwrap();
        let events = text.lines().filter(|l| l.contains(r#""t":"#));
        let mut described = BTreeSet::new();
        for line in events {
            let value: Value = serde_json::from_str(line).expect("JSON");
            if let Err(error) = conforms(&schema, &schema, &value) {
                panic!("{line}\ndoes not conform: {error}");
            }
            let t = value["t"].as_str().expect("a tracker line");
            let definition = &schema["$defs"][t];
            let keys: BTreeSet<&str> = value
                .as_object()
                .unwrap()
                .keys()
                .map(|k| k.as_str())
                .collect();
            let properties = definition["properties"].as_object();
            let properties: BTreeSet<&str> = properties
                .unwrap_or_else(|| panic!("no definition of {t}"))
                .keys()
                .map(|k| k.as_str())
                .collect();
            assert_eq!(properties, keys, "the properties of {t}");
            let optional = ["stack", "unwind", "pmu", "pmu_end"];
            let required: BTreeSet<&str> = definition["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_str().unwrap())
                .collect();
            let expected: BTreeSet<&str> = keys
                .iter()
                .copied()
                .filter(|k| !optional.contains(k))
                .collect();
            assert_eq!(required, expected, "the required keys of {t}");
            described.insert(t.to_owned());
        }
        assert_eq!(described, names.iter().cloned().collect::<BTreeSet<_>>());
        let lines: BTreeSet<String> = (schema["oneOf"].as_array().unwrap().iter())
            .map(|option| {
                option["$ref"]
                    .as_str()
                    .unwrap()
                    .trim_start_matches("#/$defs/")
                    .to_owned()
            })
            .collect();
        let mut expected: BTreeSet<String> = ["header", "stack", "event"].map(String::from).into();
        expected.extend(names);
        assert_eq!(lines, expected, "the line types of the document");
    }
}
