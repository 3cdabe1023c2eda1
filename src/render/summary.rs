//! Summary renderer (`-I`): a [`Capture`] → aligned text saying how the capture was made (command line and system-tracking
//! settings, the off-CPU stack threshold), where, when and for how long, what
//! it holds after the filter (events per record, script's and trackers',
//! threads, processes, stacks: counted by `render::metrics`, as every other
//! output counts them), what was dropped, and whether the file is damaged.

use std::fmt::Write as _;

use crate::analysis::saturating_sum;
use crate::capture::format::CaptureError;
use crate::capture::model::{DropReason, RecordId, RecordKind, RecordOrigin};
use crate::render::drops::dropped_of;
use crate::render::filter::Filter;
use crate::render::format::{describe_filter, seconds};
use crate::render::metrics::{Measurement, measure};
use crate::render::recorded::RecordedStacks;
use crate::render::source::CaptureSource;
use crate::render::{Capture, Captures, Destination, Output, Render, RenderError};
use crate::tracking::records::is_internal;

/// How the summary is written.
#[derive(Clone, Debug)]
pub struct Options {
    /// The UTC offset in seconds at a Unix time, for the start's local
    /// time: the machine's time zone by default.
    pub utc_offset_s: fn(i64) -> i64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            utc_offset_s: local_utc_offset_s,
        }
    }
}

/// The summary renderer.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub options: Options,
}

impl Render for Summary {
    fn render(&self, captures: &Captures<'_>, to: &Destination) -> Result<(), RenderError> {
        let capture = captures.single("the summary (-I)")?;
        let mut out = to.open()?;
        write_summary(capture, &self.options, &mut out)
    }
}

/// Writes the summary of `capture` (events as its filter keeps them). A
/// read failure part way through is reported in the text and then returned.
fn write_summary(
    capture: &Capture<'_>,
    options: &Options,
    out: &mut Output<'_>,
) -> Result<(), RenderError> {
    let source = capture.source;
    let (measurement, read) = measure(capture);
    let mut text = String::new();
    write_description(&mut text, source, options.utc_offset_s);
    write_damage(&mut text, source, read.as_ref().err());
    write_contents(&mut text, source, &capture.filter, &measurement);
    write_stack_counts(&mut text, source);
    write_drops(&mut text, source);
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(read?)
}

/// Width of the label column.
const LABEL: usize = 12;

fn row(text: &mut String, label: &str, value: impl std::fmt::Display) {
    writeln!(text, "{label:<LABEL$}{value}").expect("writing to a String");
}

fn write_description(text: &mut String, source: &dyn CaptureSource, utc_offset_s: fn(i64) -> i64) {
    let info = source.info();
    let command_line = info.command_line.iter().map(String::as_str);
    let command_line =
        shlex::try_join(command_line).unwrap_or_else(|_| info.command_line.join(" "));
    row(text, "command", command_line);
    if let Some(pid) = info.command_pid {
        row(text, "command pid", pid);
    }
    row(text, "script", &info.script_name);
    row(text, "host", &info.hostname);
    row(text, "kernel", &info.kernel_release);
    row(text, "cpus", info.cpus);
    row(text, "wprof", &info.wprof_version);
    row(
        text,
        "start",
        local_time(info.start_realtime_ns, utc_offset_s),
    );
    match source.stats() {
        Some(stats) => row(text, "duration", seconds(stats.duration_ns)),
        None => row(text, "duration", "unknown (the capture was not finished)"),
    }
    write_settings(text, source);
}

/// Features, stacks, counters, filters and activation as the capture asked.
fn write_settings(text: &mut String, source: &dyn CaptureSource) {
    let settings = &source.info().settings;
    let list = |items: &[String]| match items {
        [] => "none".to_owned(),
        items => items.join(" "),
    };
    row(text, "features", list(&settings.features));
    row(text, "stacks", list(&settings.stacks));
    let recorded = RecordedStacks::of(settings);
    if recorded.offcpu.is_some() {
        row(
            text,
            "off-CPU",
            format!("stacks of {}", recorded.describe_offcpu()),
        );
    }
    row(text, "pmu", list(&settings.pmu));
    row(text, "filters", list(&settings.filters));
    let spec = |spec: &Option<String>| spec.clone().unwrap_or_else(|| "none".to_owned());
    row(text, "prepare", spec(&settings.prepare));
    row(text, "activate", spec(&settings.activate));
}

fn write_damage(text: &mut String, source: &dyn CaptureSource, read: Option<&CaptureError>) {
    let mut problems = Vec::new();
    if let Some(damage) = source.damage() {
        problems.push(damage);
    }
    if source.stats().is_none() {
        problems.push("the capture was not finished: no end statistics".to_owned());
    }
    if let Some(error) = read {
        problems.push(format!("reading events stopped: {error}"));
    }
    if problems.is_empty() {
        row(text, "damage", "none");
        return;
    }
    row(
        text,
        "damage",
        "DAMAGED: counts below cover only what could be read",
    );
    for problem in problems {
        row(text, "", format!("- {problem}"));
    }
}

fn write_contents(text: &mut String, source: &dyn CaptureSource, filter: &Filter, m: &Measurement) {
    text.push('\n');
    if let Some(description) = describe_filter(filter) {
        row(text, "filter", description);
    }
    let c = &m.contents;
    let recorded = source.stats().map(|stats| stats.events);
    let events = match recorded {
        Some(recorded) => format!("{} kept of {recorded} recorded", c.kept),
        None => format!("{} kept of {} read", c.kept, c.read),
    };
    row(text, "events", events);
    if let Some(first_ns) = c.first_ns {
        let span = format!(
            "first at {}, last at {}",
            seconds(first_ns),
            seconds(c.last_ns)
        );
        row(text, "", span);
    }
    write_probes(text, source, m);
    let processes = plural(c.pids.len(), "process", "processes");
    row(text, "threads", format!("{} in {processes}", c.threads));
    row(
        text,
        "stacks",
        format!(
            "{} used of {} in the capture",
            c.stacks_used,
            source.stacks_len()
        ),
    );
}

fn write_probes(text: &mut String, source: &dyn CaptureSource, m: &Measurement) {
    let schemas = source.schemas();
    let header = [
        "id",
        "name",
        "kind",
        "events",
        "dropped",
        "span time",
        "from",
        "probe",
    ];
    let mut rows: Vec<[String; 8]> = vec![header.map(String::from)];
    let listed = (schemas.iter().enumerate().zip(&m.records)).filter(|((_, s), _)| !is_internal(s));
    for ((id, schema), stats) in listed {
        let (kind, time) = match schema.kind {
            RecordKind::Instant => ("instant", String::new()),
            RecordKind::Span => ("span", seconds(stats.span_ns)),
        };
        let from = match schema.origin {
            RecordOrigin::Script => "script",
            RecordOrigin::Tracker => "tracker",
        };
        let (name, events) = (schema.name.clone(), stats.count.to_string());
        let probe = schema.probe.clone();
        let dropped = dropped_of(source.stats(), RecordId(id as u32))
            .map_or_else(|| "?".to_owned(), |n| n.to_string());
        let row = [
            id.to_string(),
            name,
            kind.into(),
            events,
            dropped,
            time,
            from.into(),
            probe,
        ];
        rows.push(row);
    }
    let unknown = m.contents.unknown_records;
    if unknown > 0 {
        let mut unknown_row = ["?", "(unknown)", "", "", "", "", "", ""].map(String::from);
        unknown_row[3] = unknown.to_string();
        rows.push(unknown_row);
    }
    let width = |column: usize| {
        rows.iter()
            .map(|r| r[column].chars().count())
            .max()
            .unwrap_or(0)
    };
    let [w0, w1, w2, w3, w4, w5, w6] = [0, 1, 2, 3, 4, 5, 6].map(width);
    row(text, "records", rows.len() - 1);
    for [id, name, kind, events, dropped, time, from, probe] in &rows {
        let line = format!(
            "{id:>w0$}  {name:<w1$}  {kind:<w2$}  {events:>w3$}  {dropped:>w4$}  {time:>w5$}  {from:<w6$}  {probe}"
        );
        row(text, "", line.trim_end());
    }
}

fn write_drops(text: &mut String, source: &dyn CaptureSource) {
    let Some(stats) = source.stats() else {
        row(text, "drops", "unknown (the capture was not finished)");
        return;
    };
    let total = saturating_sum(stats.drops.iter().map(|&(_, n)| n));
    row(text, "drops", total);
    let mut rows: Vec<(String, u64)> = (DropReason::ALL.into_iter())
        .map(|reason| {
            let of_reason = stats.drops.iter().filter(|&&(r, _)| r == reason);
            (
                reason.label().to_owned(),
                saturating_sum(of_reason.map(|&(_, n)| n)),
            )
        })
        .collect();
    let schemas = source.schemas();
    rows.extend(stats.record_drops.iter().map(|drop| {
        let schema = schemas.get(drop.record.0 as usize);
        let name = schema.map_or("?", |s| s.name.as_str());
        let internal = if schema.is_some_and(is_internal) {
            " (wprof's own)"
        } else {
            ""
        };
        (
            format!("{name}{internal}: {}", drop.reason.label()),
            drop.count,
        )
    }));
    let width = rows.iter().map(|(label, _)| label.chars().count()).max();
    let width = width.unwrap_or(0) + 2;
    for (label, n) in rows {
        row(text, "", format!("{label:<width$}{n:>10}"));
    }
}

/// How user stacks were walked and the unwind tables behind them.
fn write_stack_counts(text: &mut String, source: &dyn CaptureSource) {
    let Some(stats) = source.stats().filter(|s| !s.stacks.is_empty()) else {
        return;
    };
    let mut first = true;
    for (count, n) in &stats.stacks {
        let label = if std::mem::take(&mut first) {
            "user stacks"
        } else {
            ""
        };
        row(text, label, format!("{:<31}{n:>12}", count.label()));
    }
}

/// `1 process`, `2 processes`.
fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `2026-06-10 14:30:00.123 +02:00`.
fn local_time(realtime_ns: u64, utc_offset_s: fn(i64) -> i64) -> String {
    let unix_s = (realtime_ns / 1_000_000_000) as i64;
    let offset_s = utc_offset_s(unix_s);
    let local_s = unix_s + offset_s;
    let (year, month, day) = civil_date(local_s.div_euclid(86_400));
    let time = local_s.rem_euclid(86_400);
    let sign = if offset_s < 0 { '-' } else { '+' };
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03} {sign}{:02}:{:02}",
        time / 3600,
        time / 60 % 60,
        time % 60,
        realtime_ns % 1_000_000_000 / 1_000_000,
        offset_s.abs() / 3600,
        offset_s.abs() / 60 % 60,
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01: shift to years that
/// start in March (so the leap day is last), then split into 400-year eras.
fn civil_date(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468; // days from 0000-03-01
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The machine's UTC offset at `unix_s`, from the C library's time zone rules.
fn local_utc_offset_s(unix_s: i64) -> i64 {
    let time = unix_s as libc::time_t;
    // SAFETY: an all-zero `tm` is a valid value, and `localtime_r` only writes
    // into the `tm` it is given (it is the thread-safe form).
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let result = unsafe { libc::localtime_r(&time, &mut tm) };
    if result.is_null() { 0 } else { tm.tm_gmtoff }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::model::RecordDrops;
    use crate::frontend::options::TaskFilter;
    use crate::render::filter::TaskSelector;
    use crate::render::source::FakeCapture;

    /// The summary in a time zone `utc_offset_s` away from UTC, and how it ended.
    fn summary_in(
        source: &dyn CaptureSource,
        filter: &Filter,
        utc_offset_s: fn(i64) -> i64,
    ) -> (String, Result<(), RenderError>) {
        let mut bytes = Vec::new();
        let capture = Capture::test(source, filter.clone());
        let options = Options { utc_offset_s };
        let result = write_summary(&capture, &options, &mut Output::new("memory", &mut bytes));
        (String::from_utf8(bytes).expect("summary is UTF-8"), result)
    }

    fn summary(source: &dyn CaptureSource, filter: &Filter) -> String {
        let (text, result) = summary_in(source, filter, |_| 2 * 3600);
        result.expect("summary to memory");
        text
    }

    /// The whole summary of a finished capture.
    #[test]
    fn summary_of_finished_capture() {
        insta::assert_snapshot!(summary(&FakeCapture::sample(), &Filter::default()));
    }

    /// Counts follow the filter, which the summary names.
    #[test]
    fn summary_after_filter() {
        let filter = Filter {
            start_ns: Some(1_300_000_000),
            tasks: vec![
                TaskSelector::new(&TaskFilter {
                    pids: vec![100],
                    ..TaskFilter::default()
                })
                .unwrap(),
            ],
            ..Filter::default()
        };
        insta::assert_snapshot!(summary(&FakeCapture::sample(), &filter));
    }

    /// A truncated, unfinished capture that fails to read says so clearly, and
    /// the read failure is still returned.
    #[test]
    fn summary_of_damaged_capture() {
        let mut capture = FakeCapture::sample();
        capture.stats = None;
        capture.damage = Some("the file ends inside an event block at byte 8192".into());
        capture.read_error = Some((8192, "bad block header".into()));
        let (text, result) = summary_in(&capture, &Filter::default(), |_| -5 * 3600 - 1800);
        assert!(matches!(result, Err(RenderError::Read(_))), "{result:?}");
        insta::assert_snapshot!(text);
    }

    /// A capture of the built-in trackers: its settings and every kind counted.
    #[test]
    fn summary_of_system_capture() {
        let (capture, _) = crate::render::system_fixture::system();
        insta::assert_snapshot!(summary(&capture, &Filter::default()));
    }

    /// A hostile capture's drop counts and span time saturate: in all, by
    /// reason, and by record kind.
    #[test]
    fn summary_of_a_hostile_capture_saturates() {
        let capture = crate::render::system_fixture::hostile();
        let text = summary(&capture, &Filter::default());
        let line = |found: &dyn Fn(&str) -> bool| {
            let line = text.lines().find(|line| found(line));
            line.unwrap_or_else(|| panic!("no such line in\n{text}"))
        };
        let max = u64::MAX.to_string();
        assert!(line(&|l| l.starts_with("drops")).ends_with(&max));
        assert!(line(&|l| l.trim_start().starts_with("ring buffer full")).ends_with(&max));
        let switch = line(&|l| l.contains(" switch ") && l.contains(" tracker "));
        assert!(switch.contains(&max), "{switch}");
        let wq = line(&|l| l.contains(" wq ") && l.contains(" tracker "));
        assert!(wq.contains(&seconds(u64::MAX)), "{wq}");
    }

    /// The off-CPU stack threshold of `-S offcpu=DUR` is shown with the stacks.
    #[test]
    fn summary_shows_the_offcpu_threshold() {
        let mut capture = FakeCapture::sample();
        capture.info.settings.stacks = vec!["timer=99hz".into(), "offcpu=1ms".into()];
        let text = summary(&capture, &Filter::default());
        assert!(
            text.contains("\noff-CPU     stacks of blocks of at least 1ms\n"),
            "{text}"
        );
    }

    /// A loss of a record the recorder consumes is named as wprof's own, not
    /// as a probe of the script.
    #[test]
    fn drops_of_internal_records_are_named_as_such() {
        let (mut capture, _) = crate::render::system_fixture::system();
        let task = (capture.schemas.iter().position(|s| s.name == "task")).expect("task schema");
        let stats = capture.stats.as_mut().expect("finished");
        stats.record_drops.push(RecordDrops {
            record: RecordId(task as u32),
            reason: DropReason::RingBufferFull,
            count: 7,
        });
        let text = summary(&capture, &Filter::default());
        let line = text
            .lines()
            .find(|l| l.contains("task (wprof's own): "))
            .unwrap_or_default();
        assert!(line.trim_end().ends_with(" 7"), "{text}");
    }

    /// Dates around epochs, leap days and centuries.
    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(-1), (1969, 12, 31));
        assert_eq!(civil_date(11_016), (2000, 2, 29));
        assert_eq!(civil_date(11_017), (2000, 3, 1));
        assert_eq!(civil_date(20_614), (2026, 6, 10));
        assert_eq!(civil_date(47_540), (2100, 2, 28));
        assert_eq!(civil_date(47_541), (2100, 3, 1));
    }
}
