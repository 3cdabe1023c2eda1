//! Output stage: map contents (already combined across CPUs into [`AggValue`]s)
//! → bpftrace 0.17's text for `print(@m[, top[, div]])`, for the maps printed at
//! exit ([`print_exit_maps`]) and for `print(value)` ([`print_value`]).
//!
//! Layout, as bpftrace 0.17 prints it:
//! - one line per entry, `@name[key]: value` (`@name: value` without a key,
//!   `@[key]` for the anonymous map, `@x[1, abc]` for a multi-key map);
//! - `hist`/`lhist`: per key a `@name[key]: ` header line, the rows, a blank line;
//! - `avg`/`stats` maps end with one blank line; other maps with none;
//! - a map without entries prints a single blank line;
//! - at exit: a blank line twice, then every map in name order.
//!
//! Order: entries are sorted by key (integers as unsigned, strings bytewise,
//! tuples field by field), then stably by value: numbers for plain integer maps
//! and count/sum/min/max, the average for avg/stats, the total count for
//! histograms. Maps of strings and tuples keep key order. bpftrace itself leaves
//! entries with equal values in kernel hash order; key order is our tie-break.

use std::cmp::Ordering;
use std::io::{self, Write};

use crate::vocab::{AggFunc, MapValue, ScriptMap};

use super::hist::{HistLayout, hist_label, hist_total, lhist_label, write_hist};
use super::value::{
    Resolve, Value, div_signed, key_order, numeric_order, write_fields, write_key_value,
    write_value,
};
use crate::vocab::hist::lhist_len;

/// One map entry's value, combined across CPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AggValue {
    Plain(Value),
    Count(u64),
    /// `Value::Int`, or `Value::UInt` when an unsigned type was summed
    /// (bpftrace prints `sum((uint64)-1)` as 18446744073709551615).
    Sum(Value),
    Min(Value),
    Max(Value),
    Avg {
        count: u64,
        total: i64,
    },
    Stats {
        count: u64,
        total: i64,
    },
    /// `(bucket index, count)` pairs; see [`super::hist`] for the index scheme.
    Hist(Vec<(u64, u64)>),
    Lhist(Vec<(u64, u64)>),
}

/// A map entry: its key (`None` for a map without keys) and value.
pub type Entry = (Option<Value>, AggValue);

/// `print(@m, top, div)`: keep only the `top` last (largest) entries (0: all);
/// divide printed values by `div` (0 or 1: as is). Ignored for stats maps, and
/// `div` also for lhist maps, as bpftrace 0.17 does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrintOptions {
    pub top: u64,
    pub div: u64,
}

impl Default for PrintOptions {
    fn default() -> Self {
        PrintOptions { top: 0, div: 1 }
    }
}

/// A whole map to print at exit.
#[derive(Clone, Debug)]
pub struct MapDump<'a> {
    /// The script name, `@x` or `@`.
    pub name: &'a str,
    pub spec: &'a ScriptMap,
    pub entries: Vec<Entry>,
}

/// Prints one map as `print(@m, top, div)` does.
pub fn print_map(
    out: &mut impl Write,
    name: &str,
    spec: &ScriptMap,
    entries: Vec<Entry>,
    opts: PrintOptions,
    resolver: &dyn Resolve,
) -> io::Result<()> {
    out.write_all(&render_map(name, spec, entries, opts, resolver))
}

/// Prints the maps bpftrace prints at exit: two blank lines, then each map in
/// name order (empty ones as a blank line).
pub fn print_exit_maps(
    out: &mut impl Write,
    mut maps: Vec<MapDump>,
    resolver: &dyn Resolve,
) -> io::Result<()> {
    maps.sort_by(|a, b| a.name.cmp(b.name));
    let mut text = b"\n\n".to_vec();
    for map in maps {
        text.extend(render_map(
            map.name,
            map.spec,
            map.entries,
            PrintOptions::default(),
            resolver,
        ));
    }
    out.write_all(&text)
}

/// `print(value)` of a non-map value: its text and a newline (`(1, abc)`).
pub fn print_value(out: &mut impl Write, value: &Value, resolver: &dyn Resolve) -> io::Result<()> {
    let mut text = Vec::new();
    write_value(&mut text, value, resolver);
    text.push(b'\n');
    out.write_all(&text)
}

/// The text of one map.
pub fn render_map(
    name: &str,
    spec: &ScriptMap,
    mut entries: Vec<Entry>,
    opts: PrintOptions,
    resolver: &dyn Resolve,
) -> Vec<u8> {
    if entries.is_empty() {
        return b"\n".to_vec();
    }
    sort_entries(&mut entries);
    let opts = effective_options(&spec.value, opts);
    let skip = match usize::try_from(opts.top) {
        Ok(top) if top > 0 => entries.len().saturating_sub(top),
        _ => 0,
    };
    let mut out = Vec::new();
    for (key, value) in entries.iter().skip(skip) {
        out.extend_from_slice(name.as_bytes());
        write_key(&mut out, key.as_ref(), resolver);
        out.extend_from_slice(b": ");
        write_agg(&mut out, value, &spec.value, opts.div, resolver);
    }
    if matches!(
        spec.value,
        MapValue::Aggregate(AggFunc::Avg | AggFunc::Stats)
    ) {
        out.push(b'\n');
    }
    out
}

/// bpftrace 0.17 ignores top and div for stats maps, and div for lhist maps.
fn effective_options(kind: &MapValue, opts: PrintOptions) -> PrintOptions {
    match kind {
        MapValue::Aggregate(AggFunc::Stats) => PrintOptions::default(),
        MapValue::Aggregate(AggFunc::Lhist { .. }) => PrintOptions {
            top: opts.top,
            div: 1,
        },
        _ => PrintOptions {
            top: opts.top,
            div: opts.div.max(1),
        },
    }
}

/// Key order first, then a stable sort by value where the map has an order by value.
fn sort_entries(entries: &mut [Entry]) {
    entries.sort_by(|a, b| match (&a.0, &b.0) {
        (Some(x), Some(y)) => key_order(x, y),
        _ => Ordering::Equal,
    });
    entries.sort_by(|a, b| value_order(&a.1, &b.1));
}

fn value_order(a: &AggValue, b: &AggValue) -> Ordering {
    use AggValue as A;
    match (a, b) {
        (A::Plain(x), A::Plain(y))
        | (A::Sum(x), A::Sum(y))
        | (A::Min(x), A::Min(y))
        | (A::Max(x), A::Max(y)) => numeric_order(x, y).unwrap_or(Ordering::Equal),
        (A::Count(x), A::Count(y)) => x.cmp(y),
        (
            A::Avg {
                count: c1,
                total: t1,
            },
            A::Avg {
                count: c2,
                total: t2,
            },
        )
        | (
            A::Stats {
                count: c1,
                total: t1,
            },
            A::Stats {
                count: c2,
                total: t2,
            },
        ) => average(*t1, *c1).cmp(&average(*t2, *c2)),
        (A::Hist(x), A::Hist(y)) | (A::Lhist(x), A::Lhist(y)) => hist_total(x).cmp(&hist_total(y)),
        _ => Ordering::Equal,
    }
}

/// `total / count`, truncated toward zero; 0 without samples.
fn average(total: i64, count: u64) -> i64 {
    if count == 0 {
        0
    } else {
        div_signed(total, count)
    }
}

/// `[key]`: a multi-key (tuple) key prints its fields without parentheses.
fn write_key(out: &mut Vec<u8>, key: Option<&Value>, resolver: &dyn Resolve) {
    let Some(key) = key else { return };
    out.push(b'[');
    match key {
        Value::Tuple(fields) => write_fields(out, fields, resolver),
        other => write_key_value(out, other, resolver),
    }
    out.push(b']');
}

/// The value part after `@name[key]: `, through its final newline.
fn write_agg(
    out: &mut Vec<u8>,
    value: &AggValue,
    kind: &MapValue,
    div: u64,
    resolver: &dyn Resolve,
) {
    let line = match value {
        AggValue::Plain(v) | AggValue::Sum(v) | AggValue::Min(v) | AggValue::Max(v) => {
            v.divided(div)
        }
        AggValue::Count(c) => Value::UInt(c / div),
        AggValue::Avg { count, total } => Value::Int(div_signed(average(*total, *count), div)),
        AggValue::Stats { count, total } => {
            let avg = average(*total, *count);
            let text = format!("count {count}, average {avg}, total {total}\n");
            return out.extend_from_slice(text.as_bytes());
        }
        AggValue::Hist(buckets) | AggValue::Lhist(buckets) => {
            return write_hist_block(out, buckets, kind, div);
        }
    };
    write_value(out, &line, resolver);
    out.push(b'\n');
}

/// A histogram after its header: newline, rows, blank line.
fn write_hist_block(out: &mut Vec<u8>, buckets: &[(u64, u64)], kind: &MapValue, div: u64) {
    out.push(b'\n');
    match *kind {
        MapValue::Aggregate(AggFunc::Lhist { min, max, step }) => {
            let label = move |i| lhist_label(i, min, max, step);
            let layout = HistLayout {
                label: &label,
                len: lhist_len(min, max, step),
                div: 1,
            };
            write_hist(out, buckets, &layout);
        }
        _ => {
            let label = |i| hist_label(i);
            write_hist(
                out,
                buckets,
                &HistLayout {
                    label: &label,
                    len: 66,
                    div,
                },
            );
        }
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::value::RawIds;
    use crate::vocab::ValueType;

    const I64: ValueType = ValueType::Int {
        size: 8,
        signed: true,
    };

    fn spec(value: MapValue) -> ScriptMap {
        ScriptMap {
            key: Some(I64),
            value,
        }
    }

    fn s(text: &str) -> Value {
        Value::Str(text.as_bytes().to_vec())
    }

    fn render(name: &str, value: MapValue, entries: Vec<Entry>, top: u64, div: u64) -> String {
        let out = render_map(
            name,
            &spec(value),
            entries,
            PrintOptions { top, div },
            &RawIds,
        );
        String::from_utf8(out).unwrap()
    }

    fn bar(n: usize) -> String {
        format!("|{}{}|", "@".repeat(n), " ".repeat(52 - n))
    }

    fn exit(maps: Vec<(&str, MapValue, Vec<Entry>)>) -> String {
        let specs: Vec<ScriptMap> = maps.iter().map(|m| spec(m.1.clone())).collect();
        let dumps = maps
            .into_iter()
            .zip(&specs)
            .map(|((name, _, entries), spec)| MapDump {
                name,
                spec,
                entries,
            })
            .collect();
        let mut out = Vec::new();
        print_exit_maps(&mut out, dumps, &RawIds).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// `BEGIN { @b = 2; @a = 1; exit(); }` prints `\n\n@a: 1\n@b: 2\n`; exit order is by name, `@` first.
    #[test]
    fn exit_layout_plain() {
        let out = exit(vec![
            (
                "@b",
                MapValue::Plain(I64),
                vec![(None, AggValue::Plain(Value::Int(2)))],
            ),
            (
                "@a",
                MapValue::Plain(I64),
                vec![(None, AggValue::Plain(Value::Int(1)))],
            ),
            (
                "@",
                MapValue::Plain(I64),
                vec![(None, AggValue::Plain(Value::Int(4)))],
            ),
        ]);
        assert_eq!(out, "\n\n@: 4\n@a: 1\n@b: 2\n");
        assert_eq!(exit(vec![]), "\n\n");
    }

    /// `@a = sum(1); @b = max(2); @c = stats(3); @d = min(3)` → blank line after stats only;
    /// `@a = avg(1); @b = avg(2)` → blank line after each.
    #[test]
    fn exit_layout_avg_stats() {
        let out = exit(vec![
            (
                "@a",
                MapValue::Aggregate(AggFunc::Sum),
                vec![(None, AggValue::Sum(Value::Int(1)))],
            ),
            (
                "@b",
                MapValue::Aggregate(AggFunc::Max),
                vec![(None, AggValue::Max(Value::Int(2)))],
            ),
            (
                "@c",
                MapValue::Aggregate(AggFunc::Stats),
                vec![(None, AggValue::Stats { count: 1, total: 3 })],
            ),
            (
                "@d",
                MapValue::Aggregate(AggFunc::Min),
                vec![(None, AggValue::Min(Value::Int(3)))],
            ),
            (
                "@e",
                MapValue::Aggregate(AggFunc::Avg),
                vec![(None, AggValue::Avg { count: 1, total: 2 })],
            ),
        ]);
        assert_eq!(
            out,
            "\n\n@a: 1\n@b: 2\n@c: count 1, average 3, total 3\n\n@d: 3\n@e: 2\n\n"
        );
    }

    /// A cleared map prints one blank line: `@a = 1; clear(@a); @b = 2` → `\n\n\n@b: 2\n`.
    #[test]
    fn empty_maps_print_a_blank_line() {
        let out = exit(vec![
            ("@a", MapValue::Plain(I64), vec![]),
            (
                "@b",
                MapValue::Plain(I64),
                vec![(None, AggValue::Plain(Value::Int(2)))],
            ),
            ("@h", MapValue::Aggregate(AggFunc::Hist), vec![]),
            ("@s", MapValue::Aggregate(AggFunc::Avg), vec![]),
        ]);
        assert_eq!(out, "\n\n\n@b: 2\n\n\n");
    }

    /// Counts sort ascending, ties by key: `@a[7]` (2) last; keys 1,3,5,9,-2 in unsigned order.
    #[test]
    fn sorts_counts_then_keys() {
        let entries = [5, 3, 9, 1, -2, 7]
            .map(|k| {
                (
                    Some(Value::Int(k)),
                    AggValue::Count(if k == 7 { 2 } else { 1 }),
                )
            })
            .to_vec();
        let out = render("@a", MapValue::Aggregate(AggFunc::Count), entries, 0, 1);
        assert_eq!(
            out,
            "@a[1]: 1\n@a[3]: 1\n@a[5]: 1\n@a[9]: 1\n@a[-2]: 1\n@a[7]: 2\n"
        );
    }

    /// Plain int maps sort by signed value: `@b[9]=-1` first, `@b[3]=7` last (bpftrace 0.17).
    #[test]
    fn sorts_plain_ints_by_value() {
        let entries = [(5, 1), (3, 7), (9, -1), (1, 1), (2, 1)]
            .map(|(k, v)| (Some(Value::Int(k)), AggValue::Plain(Value::Int(v))))
            .to_vec();
        let out = render("@b", MapValue::Plain(I64), entries, 0, 1);
        assert_eq!(out, "@b[9]: -1\n@b[1]: 1\n@b[2]: 1\n@b[5]: 1\n@b[3]: 7\n");
    }

    /// String- and tuple-valued maps keep key order: `@d[a]: z`, `@d[c]: a`, `@d[x]: q`.
    #[test]
    fn string_values_sort_by_key() {
        let entries = [("x", "q"), ("a", "z"), ("c", "a")]
            .map(|(k, v)| (Some(s(k)), AggValue::Plain(s(v))))
            .to_vec();
        let out = render(
            "@d",
            MapValue::Plain(ValueType::Str { len: 8 }),
            entries,
            0,
            1,
        );
        assert_eq!(out, "@d[a]: z\n@d[c]: a\n@d[x]: q\n");
    }

    /// Multi-key maps print `@a[1, x]: 1` and sort field by field (`@f[a, 2]` < `@f[ab, 0]` < `@f[b, 0]`).
    #[test]
    fn tuple_keys() {
        let key = |a: &str, b| Some(Value::Tuple(vec![s(a), Value::Int(b)]));
        let entries = vec![
            (key("b", 1), AggValue::Plain(s("x"))),
            (key("a", 2), AggValue::Plain(s("x"))),
            (key("b", 0), AggValue::Plain(s("x"))),
            (key("ab", 0), AggValue::Plain(s("x"))),
        ];
        let out = render(
            "@f",
            MapValue::Plain(ValueType::Str { len: 8 }),
            entries,
            0,
            1,
        );
        assert_eq!(out, "@f[a, 2]: x\n@f[ab, 0]: x\n@f[b, 0]: x\n@f[b, 1]: x\n");
    }

    /// `print(@e, 2, 10)` of 10,20,30,41 → `@e[3]: 3`, `@e[4]: 4`; `print(@c, 0, 0)` divides by nothing.
    #[test]
    fn top_and_div() {
        let entries: Vec<Entry> = [(1, 10), (2, 20), (3, 30), (4, 41)]
            .map(|(k, v)| (Some(Value::Int(k)), AggValue::Plain(Value::Int(v))))
            .to_vec();
        assert_eq!(
            render("@e", MapValue::Plain(I64), entries.clone(), 2, 10),
            "@e[3]: 3\n@e[4]: 4\n"
        );
        assert_eq!(
            render("@e", MapValue::Plain(I64), entries, 5, 0)
                .lines()
                .count(),
            4
        );
        let c = vec![(None, AggValue::Count(1))];
        assert_eq!(
            render("@c", MapValue::Aggregate(AggFunc::Count), c, 0, 0),
            "@c: 1\n"
        );
    }

    /// Avg divides; stats ignores top and div (`print(@s, 1, 10)` prints both entries, undivided).
    #[test]
    fn avg_and_stats_with_div() {
        let a = vec![
            (
                Some(Value::Int(1)),
                AggValue::Avg {
                    count: 1,
                    total: 10,
                },
            ),
            (
                Some(Value::Int(2)),
                AggValue::Avg {
                    count: 1,
                    total: 25,
                },
            ),
        ];
        assert_eq!(
            render("@a", MapValue::Aggregate(AggFunc::Avg), a, 1, 10),
            "@a[2]: 2\n\n"
        );
        let st = vec![
            (
                Some(Value::Int(1)),
                AggValue::Stats {
                    count: 1,
                    total: 10,
                },
            ),
            (
                Some(Value::Int(2)),
                AggValue::Stats {
                    count: 2,
                    total: 51,
                },
            ),
        ];
        let want = "@s[1]: count 1, average 10, total 10\n@s[2]: count 2, average 25, total 51\n\n";
        assert_eq!(
            render("@s", MapValue::Aggregate(AggFunc::Stats), st, 1, 10),
            want
        );
    }

    /// Averages truncate toward zero (`avg(-10), avg(0), avg(0)` → -3) and stats sort by average.
    #[test]
    fn averages() {
        let st = vec![
            (
                Some(Value::Int(1)),
                AggValue::Stats {
                    count: 1,
                    total: 50,
                },
            ),
            (
                Some(Value::Int(2)),
                AggValue::Stats {
                    count: 6,
                    total: 60,
                },
            ),
            (
                Some(Value::Int(3)),
                AggValue::Stats {
                    count: 3,
                    total: -10,
                },
            ),
        ];
        let want = "@s[3]: count 3, average -3, total -10\n@s[2]: count 6, average 10, total 60\n@s[1]: count 1, average 50, total 50\n\n";
        assert_eq!(
            render("@s", MapValue::Aggregate(AggFunc::Stats), st, 0, 1),
            want
        );
    }

    /// Unsigned sums print unsigned: `@s = sum((uint64)-1)` → 18446744073709551615.
    #[test]
    fn unsigned_sum() {
        let e = vec![(None, AggValue::Sum(Value::UInt(u64::MAX)))];
        assert_eq!(
            render("@s", MapValue::Aggregate(AggFunc::Sum), e, 0, 1),
            "@s: 18446744073709551615\n"
        );
    }

    /// Keyed hists: a header per key, sorted by total count, ties by key (`@h[b]` 1, `@h[c]` 2, `@h[a]` 3).
    #[test]
    fn keyed_hists() {
        let entries = vec![
            (Some(s("a")), AggValue::Hist(vec![(2, 3)])),
            (Some(s("c")), AggValue::Hist(vec![(2, 2)])),
            (Some(s("b")), AggValue::Hist(vec![(2, 1)])),
        ];
        let out = render("@h", MapValue::Aggregate(AggFunc::Hist), entries, 0, 1);
        let block = |k: &str, n| format!("@h[{k}]: \n[1]{:>21} {}\n\n", n, bar(52));
        assert_eq!(
            out,
            format!("{}{}{}", block("b", 1), block("c", 2), block("a", 3))
        );
    }

    /// `@l = lhist(...)`; `print(@l, 0, 2)` leaves lhist counts undivided (bpftrace 0.17).
    #[test]
    fn lhist_ignores_div() {
        let kind = MapValue::Aggregate(AggFunc::Lhist {
            min: 0,
            max: 100,
            step: 10,
        });
        let out = render(
            "@l",
            kind,
            vec![(None, AggValue::Lhist(vec![(2, 3), (3, 1)]))],
            0,
            2,
        );
        let want = format!(
            "@l: \n[10, 20)               3 {}\n[20, 30)               1 {}\n\n",
            bar(52),
            bar(17)
        );
        assert_eq!(out, want);
    }

    /// `print((1, "abc"))` → `(1, abc)`; `print(-5)` → `-5`.
    #[test]
    fn prints_values() {
        let mut out = Vec::new();
        print_value(
            &mut out,
            &Value::Tuple(vec![Value::Int(1), s("abc")]),
            &RawIds,
        )
        .unwrap();
        print_value(&mut out, &Value::Int(-5), &RawIds).unwrap();
        assert_eq!(out, b"(1, abc)\n-5\n");
    }
}
