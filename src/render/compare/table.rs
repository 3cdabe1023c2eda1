//! The comparison as a table, in text (`--report`, standard output by
//! default) or Markdown (`--report-md`, for a pull-request comment or a CI
//! job summary): what was compared and how, what differs between the
//! captures, one row per metric (each side's median, the spread of its runs,
//! the change, the verdict as benchstat prints it), the metrics of one side
//! only, and the gates.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::PathBuf;

use super::rows::stats_of;
use super::{CompareOptions, Comparison, Row, Side};
use crate::analysis::gate::{Dimension, format_value};
use crate::render::format::Table;
use crate::render::{Captures, Destination, Render, RenderError};

/// Which kind of table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableFormat {
    Text,
    Markdown,
}

/// The `--report` (text) and `--report-md` renderer of a comparison.
#[derive(Clone, Debug)]
pub struct CompareTable {
    pub format: TableFormat,
    pub options: CompareOptions,
}

impl Render for CompareTable {
    fn render(&self, captures: &Captures<'_>, to: &Destination) -> Result<(), RenderError> {
        let comparison = captures.comparison(&self.options)?;
        let text = match self.format {
            TableFormat::Text => text(comparison, &self.options.select),
            TableFormat::Markdown => markdown(comparison, &self.options.select),
        };
        let mut out = to.open()?;
        out.write_all(text.as_bytes())?;
        out.flush()
    }
}

/// `a.data` or `a.data … e.data (5 captures)`.
fn captures_line(paths: &[PathBuf]) -> String {
    let name = |p: &PathBuf| p.display().to_string();
    match paths {
        [] => "none".to_owned(),
        [one] => name(one),
        [first, .., last] => format!(
            "{} … {} ({} captures)",
            name(first),
            name(last),
            paths.len()
        ),
    }
}

/// How the verdicts were reached, in a sentence.
fn method(comparison: &Comparison) -> String {
    let alpha = comparison.alpha;
    match (comparison.baseline.len(), comparison.candidate.len()) {
        (0, _) => "values are the medians of the runs".to_owned(),
        (1, 1) => format!(
            "one run a side: span durations and wake-up latencies are tested event by event \
             (Mann-Whitney U, p < {alpha}; events of one run are not independent, so the test \
             is over-confident: record several runs), other metrics are not tested"
        ),
        _ if comparison.paired => format!(
            "two-sided paired signed-rank test of the differences of run pairs (the \
             i-th candidate and baseline runs), p < {alpha}; ~ no significant change; ± the \
             largest deviation of a run from the median"
        ),
        _ => format!(
            "two-sided permutation test of the runs' mean values, p < {alpha}; \
             ~ no significant change; ± the largest deviation of a run from the median"
        ),
    }
}

/// A side's median in the metric's unit, with the spread of its runs.
fn side_cell(side: &Side, dimension: Dimension) -> String {
    let value = format_value(side.median, dimension);
    match side.spread() {
        Some(spread) => format!("{value} ±{:.0}%", spread * 100.0),
        None => value,
    }
}

/// `+12.1%`, `+∞%`, or empty.
fn change_cell(row: &Row) -> String {
    match row.change {
        Some(change) if change.is_infinite() => {
            format!("{}∞%", if change > 0.0 { "+" } else { "-" })
        }
        Some(change) => format!("{:+.1}%", change * 100.0),
        None => String::new(),
    }
}

/// The verdict as benchstat prints it, or why there is none.
fn verdict_cell(row: &Row) -> String {
    match (row.uncompared, &row.verdict, &row.baseline) {
        (Some(reason), _, _) => format!("not compared: {reason}"),
        (None, Some(verdict), _) => verdict.to_string(),
        (None, None, Some(_)) => "—".to_owned(),
        (None, None, None) => String::new(),
    }
}

/// The cells of one row: metric, (baseline,) candidate, (change, verdict).
fn cells(row: &Row, compared: bool) -> Vec<String> {
    let mut cells = vec![row.name.to_string()];
    if let (true, Some(base)) = (compared, &row.baseline) {
        cells.push(side_cell(base, row.dimension));
    }
    cells.push(side_cell(&row.candidate, row.dimension));
    if compared {
        cells.push(change_cell(row));
        cells.push(verdict_cell(row));
    }
    cells
}

fn headers(compared: bool) -> Vec<(&'static str, bool)> {
    match compared {
        true => vec![
            ("METRIC", true),
            ("BASELINE", false),
            ("CANDIDATE", false),
            ("CHANGE", false),
            ("VERDICT", true),
        ],
        false => vec![("METRIC", true), ("VALUE", false)],
    }
}

/// The comparison as aligned text.
pub fn text(comparison: &Comparison, select: &[glob::Pattern]) -> String {
    let compared = !comparison.baseline.is_empty();
    let mut out = String::new();
    if compared {
        writeln!(out, "candidate  {}", captures_line(&comparison.candidate)).ok();
        writeln!(out, "baseline   {}", captures_line(&comparison.baseline)).ok();
    } else {
        writeln!(out, "captures   {}", captures_line(&comparison.candidate)).ok();
    }
    writeln!(out, "method     {}", method(comparison)).ok();
    if let Some(warning) = comparison.power_warning() {
        writeln!(out, "warning    {warning}").ok();
    }
    for difference in &comparison.differences {
        let values = |v: &[String]| v.join(", ");
        let mut line = match compared {
            true => format!(
                "differs    {}: baseline {}; candidate {}",
                difference.what,
                values(&difference.baseline),
                values(&difference.candidate)
            ),
            false => format!(
                "differs    {}: {}",
                difference.what,
                values(&difference.candidate)
            ),
        };
        if let Some((globs, reason)) = difference.uncompared {
            write!(line, " ({} not compared: {reason})", globs.join(", ")).ok();
        }
        writeln!(out, "{line}").ok();
    }
    out.push('\n');
    let mut table = Table::new(&headers(compared));
    table.rows = comparison
        .selected(select)
        .map(|row| cells(row, compared))
        .collect();
    table.write(&mut out);
    for (label, names) in one_sided(comparison, select) {
        writeln!(out, "\n{label}: {}", names.join(", ")).ok();
    }
    if !comparison.gates.is_empty() {
        out.push_str("\ngates\n");
        for gate in &comparison.gates {
            let (head, details) = gate.summary();
            writeln!(out, "  {head}").ok();
            for detail in details {
                writeln!(out, "        {detail}").ok();
            }
        }
    }
    out
}

fn selects(select: &[glob::Pattern], name: &str) -> bool {
    select.is_empty() || select.iter().any(|glob| glob.matches(name))
}

/// The selected metrics of one side only, per side that has any: a
/// subject's stats as one `KIND:SUBJECT.*` when all of them are one-sided.
fn one_sided(
    comparison: &Comparison,
    select: &[glob::Pattern],
) -> Vec<(&'static str, Vec<String>)> {
    let compared: HashSet<String> = (comparison.rows.iter())
        .map(|row| stats_of(&row.name))
        .collect();
    let sides = [
        (true, "only in the baseline"),
        (false, "only in the candidate"),
    ];
    (sides.into_iter())
        .filter_map(|(baseline, label)| {
            let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
            let metrics = (comparison.one_sided.iter())
                .filter(|m| m.baseline == baseline && selects(select, &m.name));
            for metric in metrics {
                match groups.last_mut() {
                    Some((group, names)) if *group == metric.group => names.push(&metric.name),
                    _ => groups.push((&metric.group, vec![&metric.name])),
                }
            }
            let names: Vec<String> = (groups.into_iter())
                .flat_map(
                    |(group, names)| match names.len() > 1 && !compared.contains(group) {
                        true => vec![group.to_owned()],
                        false => names.into_iter().map(str::to_owned).collect(),
                    },
                )
                .collect();
            (!names.is_empty()).then_some((label, names))
        })
        .collect()
}

/// A Markdown table cell: pipes escaped, code in backticks where asked.
fn md(text: &str) -> String {
    text.replace('|', "\\|")
}

fn md_table(out: &mut String, rows: &[&Row], compared: bool) {
    let headers = headers(compared);
    let names: Vec<String> = headers.iter().map(|(h, _)| h.to_lowercase()).collect();
    writeln!(out, "| {} |", names.join(" | ")).ok();
    let rules: Vec<&str> = headers
        .iter()
        .map(|&(_, left)| if left { "---" } else { "--:" })
        .collect();
    writeln!(out, "|{}|", rules.join("|")).ok();
    for row in rows {
        let mut cells = cells(row, compared);
        cells[0] = format!("`{}`", cells[0]);
        let cells: Vec<String> = cells.iter().map(|c| md(c)).collect();
        writeln!(out, "| {} |", cells.join(" | ")).ok();
    }
}

/// The comparison as Markdown: gates first, then the significant changes,
/// then every metric in a collapsed section.
pub fn markdown(comparison: &Comparison, select: &[glob::Pattern]) -> String {
    let compared = !comparison.baseline.is_empty();
    let mut out = String::new();
    let title = match compared {
        true => format!(
            "### wprof: {} candidate against {} baseline captures\n",
            comparison.candidate.len(),
            comparison.baseline.len()
        ),
        false => format!(
            "### wprof: metrics of {} captures\n",
            comparison.candidate.len()
        ),
    };
    out.push_str(&title);
    if !comparison.gates.is_empty() {
        let failed = comparison.failed_gates().count();
        writeln!(
            out,
            "\n**{failed} of {} gates failed**\n",
            comparison.gates.len()
        )
        .ok();
        writeln!(out, "| result | gate | values |\n|---|---|---|").ok();
        for gate in &comparison.gates {
            let (_, details) = gate.summary();
            let status = if gate.outcome.failed {
                "**FAIL**"
            } else {
                "pass"
            };
            let expression = format!("`{} {}`", gate.kind.option(), gate.expression);
            writeln!(
                out,
                "| {status} | {} | {} |",
                md(&expression),
                md(&details.join("; "))
            )
            .ok();
        }
    }
    writeln!(out, "\n_{}_", method(comparison)).ok();
    if let Some(warning) = comparison.power_warning() {
        writeln!(out, "\n> **Warning**: {warning}").ok();
    }
    for difference in &comparison.differences {
        writeln!(
            out,
            "\n> The captures differ in **{}**: baseline {}; candidate {}{}",
            difference.what,
            md(&difference.baseline.join(", ")),
            md(&difference.candidate.join(", ")),
            difference
                .uncompared
                .map(|(globs, reason)| format!(" ({} not compared: {reason})", globs.join(", ")))
                .unwrap_or_default()
        )
        .ok();
    }
    let rows: Vec<&Row> = comparison.selected(select).collect();
    if compared {
        let changed: Vec<&Row> = (rows.iter().copied())
            .filter(|row| row.verdict.is_some_and(|v| v.is_significant()))
            .collect();
        writeln!(
            out,
            "\n**{} of {} metrics changed significantly**\n",
            changed.len(),
            rows.len()
        )
        .ok();
        if !changed.is_empty() {
            md_table(&mut out, &changed, compared);
        }
    }
    for (label, names) in one_sided(comparison, select) {
        let names: Vec<String> = names.iter().map(|n| format!("`{}`", md(n))).collect();
        writeln!(out, "\n_{label}_: {}", names.join(", ")).ok();
    }
    writeln!(
        out,
        "\n<details><summary>All {} metrics</summary>\n",
        rows.len()
    )
    .ok();
    md_table(&mut out, &rows, compared);
    out.push_str("\n</details>\n");
    out
}
