//! Diagnostics as bpftrace 0.17 prints them, for wprof run under the name
//! `bpftrace`: `NAME:LINE:COL-ENDCOL: ERROR: message`, the source line and
//! `~` under the span (a span over several lines prints `NAME:LINE-ENDLINE:`
//! and the message only), then wprof's help as a `HINT:` line. A `-e`
//! program is `stdin`, as bpftrace names it. Input: located errors; output:
//! text.

use std::fmt::Write;

use super::excerpt::floor_boundary;
use super::{INLINE_SCRIPT_NAME, LocatedError, MAX_SHOWN_ERRORS, MAX_TEXT, ScriptErrors, clip};

impl ScriptErrors {
    /// Every shown error in bpftrace's form.
    pub fn render_as_bpftrace(&self) -> String {
        let mut out = String::new();
        for error in self.errors.iter().take(MAX_SHOWN_ERRORS) {
            render_one(error, &mut out);
        }
        out
    }
}

/// One error: its location, message, line, marker and hint.
fn render_one(error: &LocatedError, out: &mut String) {
    let text = &error.text;
    let start = floor_boundary(text, error.span.start.min(text.len()));
    let end = floor_boundary(text, error.span.end.clamp(start, text.len()));
    let (line, column) = line_column(text, start);
    let (end_line, end_column) = line_column(text, end);
    let message = clip(&error.message);
    let name = match &*error.name {
        INLINE_SCRIPT_NAME => "stdin",
        name => name,
    };
    let line_start = start + 1 - column;
    let line_text = text[line_start..].split('\n').next().unwrap_or_default();
    // Writing into a String cannot fail.
    if end_line > line {
        let _ = writeln!(out, "{name}:{line}-{end_line}: ERROR: {message}");
    } else {
        let _ = writeln!(out, "{name}:{line}:{column}-{end_column}: ERROR: {message}");
    }
    // Output stays small: a long line is not shown (its location is).
    if end_line == line && line_text.len() <= MAX_TEXT {
        let _ = writeln!(out, "{}", line_text.replace('\t', "    "));
        let lead: usize = text[line_start..start]
            .chars()
            .map(|c| if c == '\t' { 4 } else { 1 })
            .sum();
        let width = text[start..end].chars().count().max(1);
        let _ = writeln!(out, "{}{}", " ".repeat(lead), "~".repeat(width));
    }
    if let Some(help) = &error.help {
        let _ = writeln!(out, "HINT: {}", clip(help));
    }
}

/// The 1-based line and byte column of offset `at` in `text`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let column = at - before.rfind('\n').map_or(0, |newline| newline + 1) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use crate::frontend::ast::Span;
    use crate::frontend::diag::{ScriptError, ScriptErrors};

    /// One line: location with bpftrace's exclusive end column, the line,
    /// `~` under the span, the help as a hint.
    #[test]
    fn single_line_errors_mark_the_span() {
        let source = "BEGIN {}\nt:x:y { exit(); }";
        let error = ScriptError::new(Span::new(9, 14), "tracepoint not found: x:y")
            .with_help("list them with -l");
        let text = ScriptErrors::new("stdin", source, vec![error]).render_as_bpftrace();
        assert_eq!(
            text,
            "stdin:2:1-6: ERROR: tracepoint not found: x:y\nt:x:y { exit(); }\n~~~~~\nHINT: list them with -l\n"
        );
    }

    /// A span over several lines prints the line range and the message only.
    #[test]
    fn multi_line_errors_print_the_range() {
        let source = "BEGIN {\n  x\n}";
        let error = ScriptError::new(Span::new(0, 13), "bad block");
        let text = ScriptErrors::new("f.bt", source, vec![error]).render_as_bpftrace();
        assert_eq!(text, "f.bt:1-3: ERROR: bad block\n");
    }
}
