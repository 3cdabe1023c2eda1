//! The wall-clock report as aligned text: a header (capture, window,
//! filters, sampling, off-CPU stacks, order), then the processes, threads
//! and top functions tables.

use std::fmt::Write as _;

use super::{FunctionRow, ReportData, Row, WalkRow};
use crate::render::format::{Table, seconds, short_duration};

/// The whole report.
pub fn render(data: &ReportData) -> String {
    let mut out = String::new();
    header(data, &mut out);
    let cut = |shown: usize, all: usize| match shown < all {
        true => format!(" (top {shown} of {all})"),
        false => String::new(),
    };
    writeln!(
        out,
        "\nProcesses{}",
        cut(data.processes.len(), data.process_count)
    )
    .expect("String");
    rows(data, &data.processes, false).write(&mut out);
    writeln!(
        out,
        "\nThreads{}",
        cut(data.threads.len(), data.thread_count)
    )
    .expect("String");
    rows(data, &data.threads, true).write(&mut out);
    functions(data, &mut out);
    out
}

fn header(data: &ReportData, out: &mut String) {
    let window = data.window_ns;
    let field = |out: &mut String, label: &str, value: &str| {
        writeln!(out, "{label:<12}{value}").expect("writing to a String");
    };
    writeln!(out, "Wall-clock report of {}", data.capture).expect("String");
    let length = short_duration(window.end - window.start);
    let span = format!(
        "{} to {} ({length})",
        seconds(window.start),
        seconds(window.end)
    );
    field(out, "window", &span);
    if let Some(filters) = &data.filters {
        field(out, "filters", filters);
    }
    let timer = match (data.timer_hz, data.timer_period_ns) {
        (Some(hz), Some(period)) if hz > 0 && period == 1_000_000_000 / hz => format!(
            "{hz} Hz, {} samples of the selected threads",
            data.timer_samples
        ),
        (Some(hz), Some(period)) => format!(
            "every {} ({hz} Hz), {} samples of the selected threads",
            short_duration(period),
            data.timer_samples
        ),
        _ => "none (record with -S timer)".to_owned(),
    };
    field(out, "timer", &timer);
    field(out, "off-CPU", &format!("stacks of {}", data.offcpu_stacks));
    if let Some(walks) = describe_walks(&data.user_stacks) {
        field(out, "user stacks", &walks);
    }
    if data.kernel_stacks_truncated > 0 {
        let cut = format!("{} stacks cut at 127 frames", data.kernel_stacks_truncated);
        field(out, "kernel", &cut);
    }
    let missing = data.missing_events;
    if missing.anomalies > 0 {
        let text = format!(
            "{} scheduler events ({} threads: {} of their time unknown)",
            missing.anomalies,
            missing.threads,
            short_duration(missing.unknown_ns)
        );
        field(out, "missing", &text);
    }
    let top = match data.top {
        0 => "all rows".to_owned(),
        n => format!("top {n}"),
    };
    field(out, "sorted by", &format!("{}, {top}", data.sort));
}

/// `N: table A (outermost B, truncated C), cached D`: per unwinder its
/// events, then those that ended a known way; `None` without user stacks.
fn describe_walks(rows: &[WalkRow]) -> Option<String> {
    let total: u64 = rows.iter().map(|r| r.events).sum();
    let mut parts: Vec<String> = Vec::new();
    for unwinder in rows.chunk_by(|a, b| a.unwinder == b.unwinder) {
        let events: u64 = unwinder.iter().map(|r| r.events).sum();
        let endings: Vec<String> = (unwinder.iter())
            .filter_map(|r| Some(format!("{} {}", r.ending?, r.events)))
            .collect();
        let mut part = format!("{} {events}", unwinder[0].unwinder);
        if !endings.is_empty() {
            write!(part, " ({})", endings.join(", ")).expect("String");
        }
        parts.push(part);
    }
    (total > 0).then(|| format!("{total}: {}", parts.join(", ")))
}

/// The time columns every row has, after its names.
const TIMES: [&str; 11] = [
    "ON-CPU", "OFF-CPU", "SLEEP S", "BLOCK D", "RUNNABLE", "WAKE P50", "WAKE P99", "VOL", "INVOL",
    "SAMPLES", "COVERAGE",
];

fn rows(data: &ReportData, rows: &[Row], threads: bool) -> Table {
    let mut headers: Vec<(&str, bool)> = match threads {
        true => vec![
            ("TID", false),
            ("PID", false),
            ("THREAD", true),
            ("PROCESS", true),
        ],
        false => vec![("PID", false), ("PROCESS", true), ("THREADS", false)],
    };
    headers.extend(TIMES.iter().map(|&header| (header, false)));
    headers.extend(data.counters.iter().map(|c| (c.as_str(), false)));
    let mut table = Table::new(&headers);
    for row in rows {
        let mut cells = match threads {
            true => vec![
                row.tid.unwrap_or(0).to_string(),
                row.pid.to_string(),
                row.thread.clone().unwrap_or_default(),
                row.process.clone(),
            ],
            false => vec![
                row.pid.to_string(),
                row.process.clone(),
                row.threads.to_string(),
            ],
        };
        cells.extend(times(row));
        let counter = |c: &String| row.pmu.get(c).copied().unwrap_or(0).to_string();
        cells.extend(data.counters.iter().map(counter));
        table.rows.push(cells);
    }
    table
}

/// The cells of [`TIMES`].
fn times(row: &Row) -> [String; 11] {
    let latency = |ns: Option<u64>| ns.map_or("-".to_owned(), short_duration);
    [
        short_duration(row.oncpu_ns),
        short_duration(row.offcpu_ns),
        short_duration(row.sleeping_ns),
        short_duration(row.uninterruptible_ns),
        short_duration(row.runnable_ns),
        latency(row.wakeup_p50_ns),
        latency(row.wakeup_p99_ns),
        row.voluntary_switches.to_string(),
        row.involuntary_switches.to_string(),
        row.samples.to_string(),
        format!("{:.1}%", row.coverage * 100.0),
    ]
}

fn functions(data: &ReportData, out: &mut String) {
    writeln!(out, "\nTop functions (on-CPU, from timer samples)").expect("String");
    if data.functions.is_empty() {
        out.push_str("  none: no timer samples with stacks\n");
        return;
    }
    let share = |samples: u64| match data.timer_samples {
        0 => "-".to_owned(),
        all => format!("{:.1}%", samples as f64 * 100.0 / all as f64),
    };
    let time = |ns: Option<u64>, samples: u64| ns.map_or(samples.to_string(), short_duration);
    let mut table = Table::new(&[
        ("SELF", false),
        ("SELF%", false),
        ("TOTAL", false),
        ("TOTAL%", false),
        ("FUNCTION", true),
    ]);
    for f in &data.functions {
        let FunctionRow {
            function,
            self_samples,
            total_samples,
            self_ns,
            total_ns,
        } = f;
        table.rows.push(vec![
            time(*self_ns, *self_samples),
            share(*self_samples),
            time(*total_ns, *total_samples),
            share(*total_samples),
            function.clone(),
        ]);
    }
    table.write(out);
}
