//! Diagnostics, source side: a source text and one error span → a small
//! window of the text around the span, which miette renders instead of the
//! whole source. Each line shows at most [`MAX_COLUMNS`] bytes (`…` marks what
//! is cut) and a span shows at most [`MAX_SPAN_LINES`] lines, so one error on
//! a 65 KB line prints a few hundred bytes, and miette's column arithmetic
//! (which panics past column 65,535) never sees a long line. Line and column
//! numbers stay those of the real source.

use miette::{MietteError, MietteSpanContents, SourceCode, SourceSpan, SpanContents};

use crate::frontend::ast::Span;

/// Bytes of a source line shown around an error.
pub const MAX_COLUMNS: usize = 120;

/// Lines of a multi-line span shown; the rest of the span is left out.
pub const MAX_SPAN_LINES: usize = 6;

/// Bytes shown before the span when a line is cut on the left.
const LEAD: usize = MAX_COLUMNS / 4;

/// Lines of context shown around the span (miette's default).
const CONTEXT_LINES: usize = 1;

/// Marks text cut from a line.
const MARK: &str = "…";

/// The window miette renders for one error, with the error's span in it.
#[derive(Debug)]
pub struct Excerpt {
    name: String,
    /// The shown lines, cut to the window, each ended by `\n`.
    text: String,
    /// 0-based number of the first shown line in the real source.
    first_line: usize,
    lines: Vec<ShownLine>,
    /// The error's span, as offsets into `text`.
    span: SourceSpan,
}

/// Where one shown line came from.
#[derive(Debug)]
struct ShownLine {
    /// Offset of the line's first byte in `Excerpt::text`.
    at: usize,
    /// Bytes of the `…` put before the shown part (0 or `MARK.len()`).
    mark: usize,
    /// The real source offsets of the line's start and of the shown part.
    line_start: usize,
    shown: (usize, usize),
}

impl Excerpt {
    /// The window of `source` (named `name`) around `span`.
    pub fn new(name: &str, source: &str, span: Span) -> Excerpt {
        let start = floor_boundary(source, span.start.min(source.len()));
        let end = floor_boundary(source, span.end.clamp(start, source.len()));
        let start_line = line_start(source, start);
        let from = context_start(source, start_line);
        let first_col = start - start_line;
        // Cut lines on the left only when the span starts too far right to show.
        let cut = if first_col + LEAD <= MAX_COLUMNS {
            0
        } else {
            first_col - LEAD
        };
        let mut excerpt = Excerpt {
            name: name.to_owned(),
            text: String::new(),
            first_line: source.as_bytes()[..from]
                .iter()
                .filter(|&&b| b == b'\n')
                .count(),
            lines: Vec::new(),
            span: SourceSpan::from((0, 0)),
        };
        let mut at = from;
        let mut span_lines = 0;
        let mut after = 0;
        // Context lines, the span's lines (at most MAX_SPAN_LINES), then
        // context again unless the span was cut short.
        while at <= source.len() {
            let before = at < start_line;
            let in_span = !before && (at == start_line || at < end);
            if in_span && span_lines == MAX_SPAN_LINES {
                break;
            }
            if !before && !in_span {
                if after == CONTEXT_LINES || at == source.len() {
                    break;
                }
                after += 1;
            }
            span_lines += usize::from(in_span);
            let (text_end, next) = line_end(source, at);
            excerpt.push_line(source, at, text_end, cut);
            at = next;
        }
        let (a, b) = (excerpt.map(start), excerpt.map(end));
        excerpt.span = SourceSpan::from((a, b.saturating_sub(a)));
        excerpt
    }

    /// The error's span within the excerpt.
    pub fn span(&self) -> SourceSpan {
        self.span
    }

    fn push_line(&mut self, source: &str, start: usize, end: usize, cut: usize) {
        let lo = ceil_boundary(source, (start + cut).min(end));
        let hi = floor_boundary(source, (lo + MAX_COLUMNS).min(end)).max(lo);
        let mark = if lo > start { MARK.len() } else { 0 };
        self.lines.push(ShownLine {
            at: self.text.len(),
            mark,
            line_start: start,
            shown: (lo, hi),
        });
        if mark > 0 {
            self.text.push_str(MARK);
        }
        self.text.push_str(&source[lo..hi]);
        if hi < end {
            self.text.push_str(MARK);
        }
        self.text.push('\n');
    }

    /// The excerpt offset showing real offset `at` (clamped into the window).
    fn map(&self, at: usize) -> usize {
        let index = self
            .lines
            .partition_point(|line| line.line_start <= at)
            .saturating_sub(1);
        let line = &self.lines[index];
        let (lo, hi) = line.shown;
        line.at + line.mark + at.clamp(lo, hi) - lo
    }
}

impl SourceCode for Excerpt {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let inner =
            self.text
                .as_str()
                .read_span(span, context_lines_before, context_lines_after)?;
        let line = inner.line();
        // miette reports the column only without context lines before.
        let column = match self.lines.get(line) {
            Some(shown) if context_lines_before == 0 => {
                (inner.column() + shown.shown.0 - shown.line_start).saturating_sub(shown.mark)
            }
            _ => inner.column(),
        };
        Ok(Box::new(MietteSpanContents::new_named(
            self.name.clone(),
            inner.data(),
            *inner.span(),
            self.first_line + line,
            column,
            inner.line_count(),
        )))
    }
}

/// The offset where the line holding `at` starts.
fn line_start(source: &str, at: usize) -> usize {
    source[..at].rfind('\n').map_or(0, |i| i + 1)
}

/// The start of the context shown before the line starting at `start_line`.
fn context_start(source: &str, start_line: usize) -> usize {
    (0..CONTEXT_LINES).fold(start_line, |at, _| match at {
        0 => 0,
        at => line_start(source, at - 1),
    })
}

/// The end of the line's text (before `\r\n` or `\n`) and the start of the next line.
fn line_end(source: &str, start: usize) -> (usize, usize) {
    match source[start..].find('\n') {
        Some(i) => {
            let end = start + i;
            let text_end = if source[..end].ends_with('\r') {
                end - 1
            } else {
                end
            };
            (text_end.max(start), end + 1)
        }
        None => (source.len(), source.len() + 1),
    }
}

pub(super) fn floor_boundary(s: &str, mut at: usize) -> usize {
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn ceil_boundary(s: &str, mut at: usize) -> usize {
    while !s.is_char_boundary(at) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of the excerpt for `span` of `source`, and the span within it.
    fn window(source: &str, start: usize, end: usize) -> (String, String) {
        let e = Excerpt::new("t", source, Span::new(start, end));
        let (a, len) = (e.span.offset(), e.span.len());
        let spanned = e.text[a..a + len].to_owned();
        (e.text, spanned)
    }

    /// A short script is shown whole, with one line of context on each side.
    #[test]
    fn short_lines_are_shown_whole() {
        let source = "a\nbb\nBEGIN { foo }\ncc\ndd\n";
        let start = source.find("foo").unwrap();
        let (text, spanned) = window(source, start, start + 3);
        assert_eq!(text, "bb\nBEGIN { foo }\ncc\n");
        assert_eq!(spanned, "foo");
    }

    /// A span far into a long line shows a window around it, marked on both sides.
    #[test]
    fn long_lines_are_cut_around_the_span() {
        let source = format!("{}foo{}\n", "x".repeat(70_000), "y".repeat(70_000));
        let (text, spanned) = window(&source, 70_000, 70_003);
        assert_eq!(spanned, "foo");
        assert!(
            text.starts_with(MARK) && text.ends_with(&format!("{MARK}\n")),
            "{text}"
        );
        assert!(
            text.len() <= MAX_COLUMNS + 2 * MARK.len() + 1,
            "{}",
            text.len()
        );
        assert_eq!(text.find("foo"), Some(MARK.len() + LEAD));
    }

    /// A span running past the window ends at the window's edge.
    #[test]
    fn long_spans_end_at_the_window() {
        let source = "!".repeat(100_000);
        let (text, spanned) = window(&source, 10, 100_000);
        assert_eq!(spanned.len(), MAX_COLUMNS - 10);
        assert!(text.ends_with(&format!("{MARK}\n")));
    }

    /// Only the first lines of a long multi-line span are shown, without context after.
    #[test]
    fn multi_line_spans_are_cut() {
        let source: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let start = source.find("line 10").unwrap();
        let end = source.find("line 90").unwrap();
        let e = Excerpt::new("t", &source, Span::new(start, end));
        assert_eq!(e.first_line, 9);
        assert_eq!(e.text.lines().count(), 1 + MAX_SPAN_LINES);
        assert!(e.text.ends_with("line 15\n"), "{}", e.text);
    }

    /// Line and column numbers are those of the real source, past a cut too.
    #[test]
    fn positions_are_real() {
        let source = format!("x\n{}foo\n", " ".repeat(70_000));
        let at = source.find("foo").unwrap();
        let e = Excerpt::new("t", &source, Span::new(at, at + 3));
        let contents = e.read_span(&e.span(), 0, 0).unwrap();
        assert_eq!((contents.line(), contents.column()), (1, 70_000));
        assert_eq!(contents.name(), Some("t"));
    }

    /// Cuts never split a character, `\r\n` line ends are not shown, and
    /// context lines are cut at the same columns (a short one shows as `…`).
    #[test]
    fn cuts_respect_characters_and_crlf() {
        let source = format!("{}foo\r\nnext\r\n", "é".repeat(50_000));
        let at = source.find("foo").unwrap();
        let (text, spanned) = window(&source, at, at + 3);
        assert_eq!(spanned, "foo");
        assert!(!text.contains('\r'));
        assert!(text.ends_with(&format!("foo\n{MARK}\n")), "{text}");
    }

    /// Spans at or past the end of the text, and empty texts, still make a window.
    #[test]
    fn spans_at_the_end() {
        assert_eq!(window("", 0, 0), ("\n".to_owned(), String::new()));
        assert_eq!(window("ab", 5, 9).1, "");
        let (text, _) = window("BEGIN {\n", 8, 8);
        assert!(text.starts_with("BEGIN {\n"), "{text}");
    }
}
