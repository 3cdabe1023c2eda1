//! How text outputs write times, tables, and what they say about a
//! selection: one spelling for `-I`, reports, comparisons, flame graph
//! subtitles.

use std::fmt::Write as _;

use crate::render::filter::{Filter, TaskSelector};

/// `1.234567 s`: microseconds are enough for people.
pub fn seconds(ns: u64) -> String {
    format!("{}.{:06} s", ns / 1_000_000_000, ns % 1_000_000_000 / 1_000)
}

/// A duration in the largest unit that keeps it whole: `1ms`, `250us`, `7ns`
/// (how `-S` and `--min-block` spell durations).
pub fn whole_duration(ns: u64) -> String {
    for (unit, scale) in [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
        if ns >= scale && ns.is_multiple_of(scale) {
            return format!("{}{unit}", ns / scale);
        }
    }
    format!("{ns}ns")
}

/// A duration to four significant digits in a readable unit: `300.1 ms`,
/// `12.50 us`, `7 ns`, `2.000 s`.
pub fn short_duration(ns: u64) -> String {
    let (value, unit) = match ns {
        0..1_000 => return format!("{ns} ns"),
        1_000..1_000_000 => (ns as f64 / 1e3, "us"),
        1_000_000..1_000_000_000 => (ns as f64 / 1e6, "ms"),
        _ => (ns as f64 / 1e9, "s"),
    };
    let decimals = match value {
        v if v < 10.0 => 3,
        v if v < 100.0 => 2,
        _ => 1,
    };
    format!("{value:.decimals$} {unit}")
}

/// The window and task filters of `filter`, e.g. `from 0.500000 s to the
/// end; -p 42`, or `None` when it keeps everything.
pub fn describe_filter(filter: &Filter) -> Option<String> {
    let mut parts = Vec::new();
    match (filter.start_ns, filter.end_ns) {
        (None, None) => {}
        (start, end) => parts.push(format!(
            "from {} to {}",
            seconds(start.unwrap_or(0)),
            end.map_or("the end".to_owned(), seconds)
        )),
    }
    parts.extend(describe_tasks(filter));
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The task filters of `filter` (`-p 42; -n worker*`), if any.
pub fn describe_tasks(filter: &Filter) -> Option<String> {
    let parts: Vec<String> = filter
        .tasks
        .iter()
        .filter_map(TaskSelector::describe)
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// A table column: its header, and whether it is left-aligned (text).
struct Column {
    header: String,
    left: bool,
}

/// Rows of cells under aligned columns, two spaces apart.
pub struct Table {
    columns: Vec<Column>,
    /// One cell per column.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with `headers`, each `(text, left-aligned)`.
    pub fn new(headers: &[(&str, bool)]) -> Self {
        let columns = (headers.iter())
            .map(|&(header, left)| Column {
                header: header.to_owned(),
                left,
            })
            .collect();
        Table {
            columns,
            rows: Vec::new(),
        }
    }

    /// Appends the header line and the rows to `out`.
    pub fn write(&self, out: &mut String) {
        let widths: Vec<usize> = (self.columns.iter().enumerate())
            .map(|(i, column)| {
                let cells = self.rows.iter().map(|row| row[i].chars().count());
                cells
                    .chain([column.header.chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let header: Vec<String> = self.columns.iter().map(|c| c.header.clone()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::from(" ");
            for ((cell, column), &width) in row.iter().zip(&self.columns).zip(&widths) {
                if column.left {
                    write!(line, " {cell:<width$} ").expect("writing to a String");
                } else {
                    write!(line, " {cell:>width$} ").expect("writing to a String");
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whole units for settings, four digits for reports.
    #[test]
    fn formats_durations() {
        assert_eq!(seconds(1_234_567_890), "1.234567 s");
        assert_eq!(whole_duration(2_000_000_000), "2s");
        assert_eq!(whole_duration(1_500_000), "1500us");
        assert_eq!(whole_duration(7), "7ns");
        assert_eq!(short_duration(7), "7 ns");
        assert_eq!(short_duration(12_500), "12.50 us");
        assert_eq!(short_duration(300_123_456), "300.1 ms");
        assert_eq!(short_duration(45_678_000), "45.68 ms");
        assert_eq!(short_duration(2_000_000_000), "2.000 s");
    }

    /// A filter that keeps everything says nothing.
    #[test]
    fn describes_windows() {
        assert_eq!(describe_filter(&Filter::default()), None);
        let window = Filter {
            start_ns: Some(500_000_000),
            ..Filter::default()
        };
        assert_eq!(
            describe_filter(&window).as_deref(),
            Some("from 0.500000 s to the end")
        );
    }
}
