//! Tests of the NDJSON renderer on the small sample capture.

use std::io::{self, Write};
use std::time::Instant;

use serde_json::Value;

use super::*;
use crate::capture::model::{CaptureStats, FieldValue as V, StringId};
use crate::frontend::options::TaskFilter;
use crate::render::filter::{Filter, TaskSelector};
use crate::render::source::FakeCapture;

/// Renders `source` with `filter` into `out`; the number of event lines.
pub(super) fn render(
    source: &dyn CaptureSource,
    filter: &Filter,
    out: &mut impl Write,
) -> Result<u64, RenderError> {
    let capture = Capture::test(source, filter.clone());
    write_lines(&capture, &mut Output::new("memory", out))
}

fn run(source: &dyn CaptureSource, filter: &Filter) -> (String, u64) {
    let mut out = Vec::new();
    let written = render(source, filter, &mut out).expect("render to memory");
    (String::from_utf8(out).expect("output is UTF-8"), written)
}

/// Lines after the header.
fn body(source: &dyn CaptureSource, filter: &Filter) -> Vec<String> {
    let (text, _) = run(source, filter);
    text.lines().skip(1).map(str::to_owned).collect()
}

const S0: &str = r#"{"type":"stack","id":0,"frames":["[U] inner (inlined) libfoo.so","[U] outer (inlined) libfoo.so","[U] func+0x1a (file.c:12) libfoo.so","[K] do_sys_open+0x10"]}"#;
const S1: &str = r#"{"type":"stack","id":1,"frames":["[U] 0x7f00deadbeef","[U] libbar.so+0x1234","[K] 0xffffffff81000020"]}"#;
const E0: &str = r#"{"type":"event","ts":1.234567890,"cpu":1,"task":{"tid":100,"pid":100,"comm":"app","pcomm":"app"},"probe":"malloc","fields":{"size":64},"stack":0}"#;
const E1: &str = r#"{"type":"event","ts":1.500000000,"cpu":0,"task":{"tid":101,"pid":100,"comm":"work\"er\u0001","pcomm":"app"},"probe":"lock","dur":0.000123000,"fields":{"what":"a\"b\\c\nd\te","ret":-5}}"#;
const E2: &str = r#"{"type":"event","ts":2.000000000,"cpu":0,"task":{"tid":100,"pid":100,"comm":"app","pcomm":"app"},"probe":"malloc","fields":{"size":128},"stack":0,"unwind":{"unwinder":"table","ending":"outermost"}}"#;
const E3: &str = "{\"type\":\"event\",\"ts\":2.500000000,\"cpu\":0,\"task\":{\"tid\":200,\"pid\":200,\"comm\":\"ba\u{fffd}sh\",\"pcomm\":\"bash\"},\"probe\":\"malloc\",\"fields\":{\"size\":1},\"stack\":1,\"unwind\":{\"unwinder\":\"kernel-walk\",\"kernel\":\"truncated\"}}";

/// The whole output of a small capture: header, stacks once before first use, events.
#[test]
fn renders_exact_lines() {
    let (text, written) = run(&FakeCapture::sample(), &Filter::default());
    let header = concat!(
        r#"{"type":"header","version":1,"wprof":"0.1.0","host":"testhost","kernel":"6.18.0-test","#,
        r#""cpus":2,"start_realtime_ns":1781094600123456789,"duration_s":3.000000000,"#,
        r#""command_line":["wprof","-e","uprobe:libc:malloc < >"],"script":"uprobe:libc:malloc < >","#,
        r#""script_name":"<script>","features":[],"stacks":[],"pmu":[],"filters":[],"#,
        r#""prepare":null,"activate":null,"#,
        r#""probes":[{"id":0,"probe":"uprobe:/usr/lib/libc.so.6:malloc","#,
        r#""name":"malloc","origin":"script","kind":"instant","fields":[{"name":"size","type":"uint"}],"stack":true,"#,
        r#""dropped":{"stack_lost":3}},"#,
        r#"{"id":1,"probe":"uprobe:/usr/lib/libc.so.6:lock","name":"lock","origin":"script","kind":"span","#,
        r#""fields":[{"name":"what","type":"str"},{"name":"ret","type":"int"}],"stack":false,"dropped":{}}],"#,
        r#""drops":{"stack_lost":3},"internal_dropped":{},"damage":null}"#
    );
    let expected = [header, S0, E0, E1, E2, S1, E3]
        .map(|line| format!("{line}\n"))
        .concat();
    assert_eq!(text, expected);
    assert_eq!(written, 4);
}

/// The window is half-open; a stack first used after the window start is written then.
#[test]
fn filters_by_window() {
    let filter = Filter {
        start_ns: Some(1_300_000_000),
        end_ns: Some(2_500_000_000),
        ..Filter::default()
    };
    assert_eq!(body(&FakeCapture::sample(), &filter), [E1, S0, E2]);
}

/// Process id and process name filters keep only that process's events and stacks.
#[test]
fn filters_by_pid_and_name() {
    let only = |filter: TaskFilter| Filter {
        tasks: vec![TaskSelector::new(&filter).unwrap()],
        ..Filter::default()
    };
    let by_pid = only(TaskFilter {
        pids: vec![200],
        ..TaskFilter::default()
    });
    assert_eq!(body(&FakeCapture::sample(), &by_pid), [S1, E3]);
    let by_name = only(TaskFilter {
        names: vec!["ap*".into()],
        ..TaskFilter::default()
    });
    assert_eq!(body(&FakeCapture::sample(), &by_name), [S0, E0, E1, E2]);
}

/// An unfinished, damaged capture says so in the header.
#[test]
fn header_of_unfinished_capture() {
    let mut capture = FakeCapture::sample();
    capture.stats = None;
    capture.damage = Some("truncated after 4 events".into());
    let (text, _) = run(&capture, &Filter::default());
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(header["duration_s"], Value::Null);
    assert_eq!(header["drops"], Value::Null);
    assert_eq!(header["probes"][0]["dropped"], Value::Null);
    assert_eq!(header["damage"], "truncated after 4 events");
}

/// A hostile capture's internal records' drops add up saturating.
#[test]
fn header_of_a_hostile_capture() {
    let capture = crate::render::system_fixture::hostile();
    let (text, _) = run(&capture, &Filter::default());
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let internal = &header["internal_dropped"];
    assert_eq!(internal["ring_buffer_full"], u64::MAX, "{internal}");
}

/// A read failure is an error, after the lines read before it were written.
#[test]
fn read_failure_after_partial_output() {
    let mut capture = FakeCapture::sample();
    capture.read_error = Some((4096, "bad block".into()));
    let mut out = Vec::new();
    let error = render(&capture, &Filter::default(), &mut out).unwrap_err();
    assert!(matches!(error, RenderError::Read(_)), "{error:?}");
    assert_eq!(
        error.to_string(),
        "test.data is corrupt at byte 4096: bad block"
    );
    assert_eq!(String::from_utf8(out).unwrap().lines().count(), 7);
}

/// The same capture gives the same bytes.
#[test]
fn output_is_deterministic() {
    let capture = FakeCapture::sample();
    assert_eq!(
        run(&capture, &Filter::default()),
        run(&capture, &Filter::default())
    );
    assert_eq!(
        run(&capture, &Filter::default()),
        run(&FakeCapture::sample(), &Filter::default())
    );
}

/// Every line is JSON and conforms to the published schema.
#[test]
fn lines_conform_to_schema() {
    let schema: Value = serde_json::from_str(json_schema()).expect("schema is JSON");
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    let mut unfinished = FakeCapture::sample();
    (unfinished.stats, unfinished.damage) = (None, Some("truncated".into()));
    for capture in [FakeCapture::sample(), unfinished] {
        let (text, _) = run(&capture, &Filter::default());
        for line in text.lines() {
            let value: Value = serde_json::from_str(line).expect("line is JSON");
            if let Err(error) = conforms(&schema, &schema, &value) {
                panic!("{line}\ndoes not conform: {error}");
            }
        }
    }
    let wrong: Value = serde_json::from_str(r#"{"type":"stack","id":-1,"frames":[]}"#).unwrap();
    assert!(conforms(&schema, &schema, &wrong).is_err());
}

/// A validator for the keywords the schema uses: `$ref` to `$defs`,
/// `oneOf`, `type`, `const`, `enum`, `minimum`, `properties`, `required`,
/// `additionalProperties`, `items`.
pub(super) fn conforms(root: &Value, schema: &Value, value: &Value) -> Result<(), String> {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.strip_prefix("#/$defs/").expect("local reference");
        conforms(root, &root["$defs"][name], value)?;
    }
    if let Some(options) = schema["oneOf"].as_array() {
        let matching = options
            .iter()
            .filter(|o| conforms(root, o, value).is_ok())
            .count();
        if matching != 1 {
            return Err(format!("{matching} oneOf options match {value}"));
        }
    }
    let types = match &schema["type"] {
        Value::String(one) => vec![one.as_str()],
        Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if !types.is_empty() && !types.iter().any(|ty| has_type(value, ty)) {
        return Err(format!("{value} is not {types:?}"));
    }
    if schema.get("const").is_some_and(|c| c != value) {
        return Err(format!("{value} is not {}", schema["const"]));
    }
    if let Some(options) = schema["enum"].as_array()
        && !options.contains(value)
    {
        return Err(format!("{value} is not one of {options:?}"));
    }
    if let (Some(min), Some(number)) = (schema["minimum"].as_f64(), value.as_f64())
        && number < min
    {
        return Err(format!("{value} is below {min}"));
    }
    if let Some(items) = schema.get("items") {
        for item in value.as_array().into_iter().flatten() {
            conforms(root, items, item)?;
        }
    }
    let Some(object) = value.as_object() else {
        return Ok(());
    };
    for key in schema["required"].as_array().into_iter().flatten() {
        if !object.contains_key(key.as_str().unwrap()) {
            return Err(format!("{key} missing"));
        }
    }
    for (key, field) in object {
        match (
            schema["properties"].get(key),
            &schema["additionalProperties"],
        ) {
            (Some(property), _) => conforms(root, property, field),
            (None, Value::Bool(false)) => Err(format!("unexpected {key}")),
            (None, Value::Object(_)) => conforms(root, &schema["additionalProperties"], field),
            (None, _) => Ok(()),
        }
        .map_err(|error| format!("{key}: {error}"))?;
    }
    Ok(())
}

fn has_type(value: &Value, ty: &str) -> bool {
    match ty {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        other => panic!("type {other} not handled"),
    }
}

/// Synthetic events for the speed test: four threads, eight stacks, a
/// number and a string (string 0 is `"worker-0"`).
fn generate(index: u64, event: &mut Event) {
    event.ts_ns = index * 500;
    event.cpu = (index % 2) as u32;
    event.thread = ThreadId((index % 4) as u32);
    event.stack = Some(StackId((index % 8) as u32));
    if event.values.is_empty() {
        event.values = vec![V::UInt(0), V::Str(StringId(0))];
    }
    event.values[0] = V::UInt(index * 16);
}

/// Prints events/s: 2 M events in release builds (fewer in debug).
#[test]
fn speed() {
    let count = if cfg!(debug_assertions) {
        200_000
    } else {
        2_000_000
    };
    let mut capture = FakeCapture::new();
    for tid in 0..4 {
        capture.add_thread(1000 + tid, 1000, &format!("worker-{tid}"), "server");
    }
    capture.add_schema(
        "malloc",
        RecordKind::Instant,
        &[("size", FieldType::UInt), ("who", FieldType::Str)],
        true,
    );
    let frame = capture.add_user_frame("/usr/lib/libc.so.6", 0x9a0d0, "malloc", 0x20, None);
    for _ in 0..8 {
        capture.add_stack(&[frame, frame, frame]);
    }
    capture.generated = Some((count, generate));
    capture.stats = Some(CaptureStats::default());
    let mut out = CountingSink(0);
    let started = Instant::now();
    let written = render(&capture, &Filter::default(), &mut out).unwrap();
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(written, count);
    println!(
        "ndjson: {count} events in {seconds:.3} s = {:.2} M events/s, {:.0} MB/s, {} bytes/event",
        count as f64 / seconds / 1e6,
        out.0 as f64 / seconds / 1e6,
        out.0 / count
    );
}

struct CountingSink(u64);

impl Write for CountingSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
