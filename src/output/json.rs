//! Output stage, `-f json`: messages and maps → bpftrace 0.17's JSON lines,
//! one object per line, `{"type": ..., "data": ...}`, with its spacing (tools
//! and bpftrace's own tests match the text of some lines).
//!
//! Shapes: text actions (`printf`, `time`, `cat`, `join`, `system`) carry
//! their text as a JSON string; `print(value)` is `value`; maps are `map`,
//! `hist` (hist and lhist) or `stats` (avg and stats), keyed maps as an
//! object from the key's text (fields joined by `,`) to the value.
//!
//! Deviations from bpftrace 0.17, whose JSON is then invalid: timestamps,
//! MAC addresses, cgroup paths and errno messages are quoted strings (it
//! prints them bare), and bytes of 0x80 and above are copied as they are.

use super::maps::{AggValue, Entry, PrintOptions, average, effective_options, sort_entries};
use super::text::{Place, Resolve, write_value};
use super::value::{Value, div_signed};
use crate::vocab::hist::lhist_inner;
use crate::vocab::{AggFunc, MapValue, ScriptMap};

/// The kinds of text message, by their `"type"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextKind {
    Printf,
    Time,
    Cat,
    Join,
    /// `system()` output.
    Syscall,
}

impl TextKind {
    fn name(self) -> &'static str {
        match self {
            TextKind::Printf => "printf",
            TextKind::Time => "time",
            TextKind::Cat => "cat",
            TextKind::Join => "join",
            TextKind::Syscall => "syscall",
        }
    }

    /// Whether text mode ends the text with a newline that the JSON line's
    /// data leaves out (bpftrace's `join()`).
    pub fn ends_line(self) -> bool {
        self == TextKind::Join
    }
}

/// `{"type": "printf", "data": "..."}` and the like, with its newline.
pub fn text_line(kind: TextKind, text: &[u8]) -> Vec<u8> {
    let line = format!(
        "{{\"type\": \"{}\", \"data\": \"{}\"}}\n",
        kind.name(),
        escape(text)
    );
    line.into_bytes()
}

/// `{"type": "attached_probes", "data": {"probes": N}}`.
pub fn attached_probes(probes: usize) -> String {
    format!("{{\"type\": \"attached_probes\", \"data\": {{\"probes\": {probes}}}}}\n")
}

/// `{"type": "lost_events", "data": {"events": N}}`.
pub fn lost_events(events: u64) -> String {
    format!("{{\"type\": \"lost_events\", \"data\": {{\"events\": {events}}}}}\n")
}

/// `{"type": "value", "data": ...}` of `print(value)`.
pub fn value_line(value: &Value, resolver: &dyn Resolve) -> Vec<u8> {
    let mut line = b"{\"type\": \"value\", \"data\": ".to_vec();
    write_json_value(&mut line, value, 1, resolver);
    line.extend_from_slice(b"}\n");
    line
}

/// bpftrace's JSON string escaping: quote, backslash, `\n`, `\r`, `\t`, other
/// control bytes as `\u00XX`; everything else as is.
pub fn escape(text: &[u8]) -> String {
    let mut out = Vec::with_capacity(text.len());
    for &byte in text {
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..=0x1f => out.extend_from_slice(format!("\\u{byte:04x}").as_bytes()),
            _ => out.push(byte),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A map as one JSON line; nothing for a map without entries (bpftrace
/// prints none).
pub fn map_line(
    name: &str,
    spec: &ScriptMap,
    mut entries: Vec<Entry>,
    opts: PrintOptions,
    resolver: &dyn Resolve,
) -> Vec<u8> {
    if entries.is_empty() {
        return Vec::new();
    }
    sort_entries(&mut entries);
    let opts = effective_options(&spec.value, opts);
    let skip = match usize::try_from(opts.top) {
        Ok(top) if top > 0 => entries.len().saturating_sub(top),
        _ => 0,
    };
    let kind = match spec.value {
        MapValue::Aggregate(AggFunc::Hist | AggFunc::Lhist { .. }) => "hist",
        MapValue::Aggregate(AggFunc::Avg | AggFunc::Stats) => "stats",
        _ => "map",
    };
    let mut line = format!(
        "{{\"type\": \"{kind}\", \"data\": {{\"{}\": ",
        escape(name.as_bytes())
    )
    .into_bytes();
    let keyed = spec.key.is_some();
    if keyed {
        line.push(b'{');
    }
    for (i, (key, value)) in entries.iter().skip(skip).enumerate() {
        if i > 0 {
            line.extend_from_slice(b", ");
        }
        if let Some(key) = key.as_ref().filter(|_| keyed) {
            line.push(b'"');
            line.extend(escape(&key_text(key, resolver)).into_bytes());
            line.extend_from_slice(b"\": ");
        }
        write_agg(&mut line, value, &spec.value, opts.div, resolver);
    }
    if keyed {
        line.push(b'}');
    }
    line.extend_from_slice(b"}}\n");
    line
}

/// A key's text: its fields as map keys print them, joined by `,`.
fn key_text(key: &Value, resolver: &dyn Resolve) -> Vec<u8> {
    let fields = match key {
        Value::Tuple(fields) => fields.as_slice(),
        single => std::slice::from_ref(single),
    };
    let mut text = Vec::new();
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            text.push(b',');
        }
        write_value(&mut text, field, Place::Key, resolver);
    }
    text
}

fn write_agg(
    out: &mut Vec<u8>,
    value: &AggValue,
    kind: &MapValue,
    div: u64,
    resolver: &dyn Resolve,
) {
    match value {
        AggValue::Plain(v) | AggValue::Sum(v) | AggValue::Min(v) | AggValue::Max(v) => {
            write_json_value(out, v, div, resolver)
        }
        AggValue::Count(c) => out.extend((c / div.max(1)).to_string().into_bytes()),
        AggValue::Avg { count, total } => {
            let avg = div_signed(average(*total, *count), div);
            out.extend(avg.to_string().into_bytes());
        }
        AggValue::Stats { count, total } => {
            let avg = average(*total, *count);
            let text = format!("{{\"count\": {count}, \"average\": {avg}, \"total\": {total}}}");
            out.extend(text.into_bytes());
        }
        AggValue::Hist(buckets) | AggValue::Lhist(buckets) => {
            write_buckets(out, buckets, kind, div)
        }
    }
}

/// A value as JSON: numbers bare (divided by `div`), tuples as arrays, the
/// rest as strings of their text.
fn write_json_value(out: &mut Vec<u8>, value: &Value, div: u64, resolver: &dyn Resolve) {
    match value {
        Value::Int(_) | Value::UInt(_) => {
            let mut text = Vec::new();
            write_value(&mut text, &value.divided(div), Place::Value, resolver);
            out.extend(text);
        }
        // bpftrace's spacing: `[1,"a"]`, `{ "a": 1, "b": [2,3] }`.
        Value::Tuple(elements) | Value::Array(elements) => {
            out.push(b'[');
            for (i, element) in elements.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json_value(out, element, div, resolver);
            }
            out.push(b']');
        }
        Value::Struct(fields) => {
            out.extend_from_slice(b"{ ");
            for (i, (name, field)) in fields.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                out.extend(format!("\"{}\": ", escape(name.as_bytes())).into_bytes());
                write_json_value(out, field, div, resolver);
            }
            out.extend_from_slice(b" }");
        }
        other => {
            let mut text = Vec::new();
            write_value(&mut text, other, Place::Value, resolver);
            out.push(b'"');
            out.extend(escape(&text).into_bytes());
            out.push(b'"');
        }
    }
}

/// Histogram buckets from the first to the last non-empty one, each
/// `{"min": lo, "max": hi, "count": n}` (the open ends lack one bound).
fn write_buckets(out: &mut Vec<u8>, buckets: &[(u64, u64)], kind: &MapValue, div: u64) {
    let lhist = match *kind {
        MapValue::Aggregate(AggFunc::Lhist { min, max, step }) => Some((min, max, step)),
        _ => None,
    };
    let mut counts = std::collections::BTreeMap::new();
    for &(index, count) in buckets.iter().filter(|&&(_, c)| c > 0) {
        *counts.entry(index).or_insert(0u64) += count;
    }
    out.push(b'[');
    if let (Some((&first, _)), Some((&last, _))) =
        (counts.first_key_value(), counts.last_key_value())
    {
        for index in first..=last {
            if index > first {
                out.extend_from_slice(b", ");
            }
            let count = counts.get(&index).copied().unwrap_or(0);
            let bounds = match lhist {
                Some((min, max, step)) => lhist_bounds(index, min, max, step),
                None => hist_bounds(index),
            };
            let count = if lhist.is_some() {
                count
            } else {
                count / div.max(1)
            };
            out.extend(format!("{{{bounds}\"count\": {count}}}").into_bytes());
        }
    }
    out.push(b']');
}

/// `"min": lo, "max": hi, ` of a `hist()` bucket.
fn hist_bounds(index: u64) -> String {
    match index {
        0 => "\"max\": -1, ".into(),
        1 => "\"min\": 0, \"max\": 0, ".into(),
        i => {
            let low = 1u128 << (i - 2).min(126);
            format!("\"min\": {low}, \"max\": {}, ", 2 * low - 1)
        }
    }
}

/// `"min": lo, "max": hi, ` of an `lhist()` bucket.
fn lhist_bounds(index: u64, min: i64, max: i64, step: i64) -> String {
    if index == 0 {
        return format!("\"max\": {}, ", i128::from(min) - 1);
    }
    if index > lhist_inner(min, max, step) {
        return format!("\"min\": {max}, ");
    }
    let low = i128::from(min) + i128::from(index - 1) * i128::from(step);
    format!("\"min\": {low}, \"max\": {}, ", low + i128::from(step) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::text::RawIds;
    use crate::vocab::ValueType;

    const I64: ValueType = ValueType::Int {
        size: 8,
        signed: true,
    };

    fn line(key: Option<ValueType>, value: MapValue, entries: Vec<Entry>) -> String {
        let spec = ScriptMap { key, value };
        let out = map_line("@m", &spec, entries, PrintOptions::default(), &RawIds);
        String::from_utf8(out).unwrap()
    }

    fn s(text: &str) -> Value {
        Value::Str(text.as_bytes().to_vec())
    }

    /// Escapes as bpftrace: quotes, backslashes, `\n \r \t`, other control bytes.
    #[test]
    fn escapes_strings() {
        assert_eq!(
            escape(b"hello 5 \"q\" \\ tab\t\n\x01"),
            "hello 5 \\\"q\\\" \\\\ tab\\t\\n\\u0001"
        );
        let printf = text_line(TextKind::Printf, b"a\n");
        assert_eq!(printf, b"{\"type\": \"printf\", \"data\": \"a\\n\"}\n");
    }

    /// Keyless and keyed plain maps, tuple keys joined by `,`, tuple values as arrays.
    #[test]
    fn plain_maps() {
        let keyless = line(
            None,
            MapValue::Plain(I64),
            vec![(None, AggValue::Plain(Value::Int(2)))],
        );
        assert_eq!(keyless, "{\"type\": \"map\", \"data\": {\"@m\": 2}}\n");
        let key = Value::Tuple(vec![Value::Int(1), s("x")]);
        let tuple = Value::Tuple(vec![Value::Int(1), s("a")]);
        let keyed = line(
            Some(I64),
            MapValue::Plain(I64),
            vec![(Some(key), AggValue::Plain(tuple))],
        );
        assert_eq!(
            keyed,
            "{\"type\": \"map\", \"data\": {\"@m\": {\"1,x\": [1,\"a\"]}}}\n"
        );
        assert_eq!(line(None, MapValue::Plain(I64), vec![]), "");
    }

    /// Structs are objects and C arrays are arrays, spaced as bpftrace spaces them.
    #[test]
    fn structs_and_arrays() {
        let inner = Value::Struct(vec![(
            "m".into(),
            Value::Array(vec![Value::Int(2), Value::Int(4)]),
        )]);
        let value = Value::Struct(vec![("y".into(), inner), ("n".into(), Value::Int(3))]);
        assert_eq!(
            String::from_utf8(value_line(&value, &RawIds)).unwrap(),
            "{\"type\": \"value\", \"data\": { \"y\": { \"m\": [2,4] }, \"n\": 3 }}\n"
        );
    }

    /// avg and stats maps are of type `stats`.
    #[test]
    fn stats_maps() {
        let avg = line(
            None,
            MapValue::Aggregate(AggFunc::Avg),
            vec![(
                None,
                AggValue::Avg {
                    count: 2,
                    total: 20,
                },
            )],
        );
        assert_eq!(avg, "{\"type\": \"stats\", \"data\": {\"@m\": 10}}\n");
        let stats = line(
            Some(I64),
            MapValue::Aggregate(AggFunc::Stats),
            vec![(
                Some(Value::Int(1)),
                AggValue::Stats {
                    count: 2,
                    total: 30,
                },
            )],
        );
        assert_eq!(
            stats,
            "{\"type\": \"stats\", \"data\": {\"@m\": {\"1\": {\"count\": 2, \"average\": 15, \"total\": 30}}}}\n"
        );
    }

    /// hist buckets from the negative one to 512..1023, empty ones inside kept.
    #[test]
    fn hist_buckets() {
        let hist = line(
            None,
            MapValue::Aggregate(AggFunc::Hist),
            vec![(None, AggValue::Hist(vec![(0, 1), (1, 1), (2, 1), (4, 1)]))],
        );
        assert_eq!(
            hist,
            "{\"type\": \"hist\", \"data\": {\"@m\": [{\"max\": -1, \"count\": 1}, {\"min\": 0, \"max\": 0, \"count\": 1}, {\"min\": 1, \"max\": 1, \"count\": 1}, {\"min\": 2, \"max\": 3, \"count\": 0}, {\"min\": 4, \"max\": 7, \"count\": 1}]}}\n"
        );
        let lhist = line(
            None,
            MapValue::Aggregate(AggFunc::Lhist {
                min: 0,
                max: 100,
                step: 10,
            }),
            vec![(None, AggValue::Lhist(vec![(0, 1), (2, 1), (11, 1)]))],
        );
        assert!(lhist.contains("[{\"max\": -1, \"count\": 1}, {\"min\": 0, \"max\": 9, \"count\": 0}, {\"min\": 10, \"max\": 19, \"count\": 1}"));
        assert!(lhist.ends_with("{\"min\": 100, \"count\": 1}]}}\n"));
    }

    /// `print((1, "two"))` → `{"type": "value", "data": [1,"two"]}`.
    #[test]
    fn values() {
        let tuple = Value::Tuple(vec![Value::Int(1), s("two")]);
        assert_eq!(
            value_line(&tuple, &RawIds),
            b"{\"type\": \"value\", \"data\": [1,\"two\"]}\n"
        );
        assert_eq!(
            attached_probes(1),
            "{\"type\": \"attached_probes\", \"data\": {\"probes\": 1}}\n"
        );
    }
}
