//! Front-end diagnostics: the error types every front-end stage reports through.
//!
//! A stage (parser, checker) produces [`ScriptError`]s, each pointing at a byte
//! span of the script; [`ScriptErrors`] bundles them with the text and name of
//! the source each points into ([`SourceMap`] when a program is merged from
//! several) so miette can render every error with a snippet, `name:line:col`
//! and a caret under the offending text.
//!
//! Output stays small whatever the input: at most [`MAX_SHOWN_ERRORS`] errors
//! are shown (the headline gives the total), each with a window of its
//! source ([`excerpt`]) and messages cut at [`MAX_TEXT`] bytes.

mod bpftrace;
mod excerpt;

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

use miette::{Diagnostic, GraphicalReportHandler, GraphicalTheme, LabeledSpan};
use thiserror::Error;

use self::excerpt::Excerpt;
use super::ast::Span;

/// Errors shown in full; the headline counts the others.
pub const MAX_SHOWN_ERRORS: usize = 20;

/// Bytes of a message, label or help shown; longer text is cut with `…`.
pub const MAX_TEXT: usize = 2048;

/// The name shown for a script given inline (`-e`) rather than from a file.
pub const INLINE_SCRIPT_NAME: &str = "<script>";

/// One user mistake in a script, with the span it points at.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{message}")]
pub struct ScriptError {
    /// What is wrong, as one sentence without a trailing period.
    pub message: String,
    /// The offending text.
    pub span: Span,
    /// Short text shown next to the caret; empty shows no label text.
    pub label: String,
    /// How to fix it, when there is something useful to say.
    pub help: Option<String>,
}

impl ScriptError {
    /// An error at `span` with no label text and no help.
    pub fn new(span: Span, message: impl Into<String>) -> Self {
        ScriptError {
            message: message.into(),
            span,
            label: String::new(),
            help: None,
        }
    }

    /// Sets the text shown beside the caret.
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    /// Sets the help line shown under the snippet.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

impl Diagnostic for ScriptError {
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let text = (!self.label.is_empty()).then(|| self.label.clone());
        let label = LabeledSpan::new_with_span(text, self.span);
        Some(Box::new(std::iter::once(label)))
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|help| Box::new(help) as Box<dyn fmt::Display>)
    }
}

/// Every error found in a program, each shown with the source text (script
/// file, `-e` program or built-in tracker) it points into.
#[derive(Debug)]
pub struct ScriptErrors {
    /// The errors, in the order found, with spans relative to their own source.
    pub errors: Vec<LocatedError>,
}

impl ScriptErrors {
    /// Bundles `errors` with the one script they point into.
    pub fn new(name: &str, source: &str, errors: Vec<ScriptError>) -> Self {
        SourceMap::new([(name, source)]).errors(errors)
    }

    /// Renders every error with its snippet, without colour or hyperlinks.
    pub fn render(&self) -> String {
        let handler = GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor())
            .with_links(false)
            .with_width(100)
            .with_wrap_lines(false);
        let mut out = String::new();
        handler
            .render_report(&mut out, self)
            .expect("rendering into a String cannot fail");
        out
    }
}

impl Diagnostic for ScriptErrors {
    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn Diagnostic> + 'a>> {
        let shown = self.errors.iter().take(MAX_SHOWN_ERRORS);
        Some(Box::new(shown.map(|e| e as &dyn Diagnostic)))
    }
}

/// A [`ScriptError`] with the source it points into; derefs to the error.
#[derive(Debug)]
pub struct LocatedError {
    error: ScriptError,
    name: Arc<str>,
    text: Arc<str>,
    /// The window shown, made when the error is first rendered.
    excerpt: OnceLock<Excerpt>,
}

impl LocatedError {
    fn excerpt(&self) -> &Excerpt {
        self.excerpt
            .get_or_init(|| Excerpt::new(&self.name, &self.text, self.error.span))
    }
}

impl std::ops::Deref for LocatedError {
    type Target = ScriptError;

    fn deref(&self) -> &ScriptError {
        &self.error
    }
}

impl fmt::Display for LocatedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&clip(&self.error.message))
    }
}

impl std::error::Error for LocatedError {}

impl Diagnostic for LocatedError {
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        Some(self.excerpt())
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let label = &self.error.label;
        let text = (!label.is_empty()).then(|| clip(label).into_owned());
        let span = LabeledSpan::new_with_span(text, self.excerpt().span());
        Some(Box::new(std::iter::once(span)))
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        let help = self.error.help.as_deref()?;
        Some(Box::new(clip(help).into_owned()))
    }
}

/// `text` cut to at most [`MAX_TEXT`] bytes (at a character boundary) and `…`.
fn clip(text: &str) -> Cow<'_, str> {
    if text.len() <= MAX_TEXT {
        return Cow::Borrowed(text);
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}…", &text[..end]))
}

/// Several sources laid end to end in one offset space, so that spans of a
/// program merged from them say which source they came from. Each source
/// starts one byte past the end of the previous one.
#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

#[derive(Clone, Debug)]
struct SourceFile {
    name: Arc<str>,
    text: Arc<str>,
    base: usize,
    /// Where each line starts in `text`, so that a line is found by binary search.
    line_starts: Arc<[usize]>,
}

impl SourceMap {
    /// Lays out `(name, text)` sources in order.
    pub fn new<'a>(sources: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut base = 0;
        let files = sources
            .into_iter()
            .map(|(name, text)| {
                let line_starts = std::iter::once(0)
                    .chain(text.match_indices('\n').map(|(i, _)| i + 1))
                    .collect();
                let file = SourceFile {
                    name: Arc::from(name),
                    text: Arc::from(text),
                    base,
                    line_starts,
                };
                base += text.len() + 1;
                file
            })
            .collect();
        SourceMap { files }
    }

    /// Where source `index` starts in the merged offset space.
    pub fn base(&self, index: usize) -> usize {
        self.files[index].base
    }

    /// Errors with merged-offset spans, each moved into its own source.
    pub fn errors(&self, errors: Vec<ScriptError>) -> ScriptErrors {
        let errors = errors
            .into_iter()
            .map(|mut error| {
                let file = self.file_at(error.span.start);
                error.span = Span::new(error.span.start - file.base, error.span.end - file.base);
                LocatedError {
                    error,
                    name: Arc::clone(&file.name),
                    text: Arc::clone(&file.text),
                    excerpt: OnceLock::new(),
                }
            })
            .collect();
        ScriptErrors { errors }
    }

    /// The line holding merged offset `at`: its file (only when there are
    /// several), 1-based number and text without the newline; `None` past the
    /// end of that file.
    pub fn line(&self, at: usize) -> Option<(Option<&str>, usize, &str)> {
        let file = self.file_at(at);
        let offset = at.checked_sub(file.base)?;
        if offset > file.text.len() {
            return None;
        }
        let line = file.line_starts.partition_point(|&start| start <= offset) - 1;
        let start = file.line_starts[line];
        let end = file
            .line_starts
            .get(line + 1)
            .map_or(file.text.len(), |next| next - 1);
        let name = (self.files.len() > 1).then_some(&*file.name);
        Some((name, line + 1, &file.text[start..end]))
    }

    /// Where merged offset `at` is: its file's name, 1-based line and
    /// column (in bytes), and that line's text; `None` past the file's end.
    pub fn position(&self, at: usize) -> Option<SourcePosition<'_>> {
        let file = self.file_at(at);
        let (_, line, text) = self.line(at)?;
        let line_start = file.line_starts[line - 1];
        Some(SourcePosition {
            name: &file.name,
            line,
            column: at - file.base - line_start + 1,
            text,
        })
    }

    fn file_at(&self, at: usize) -> &SourceFile {
        let index = self.files.partition_point(|f| f.base <= at);
        &self.files[index.saturating_sub(1)]
    }
}

/// A place in a script, as [`SourceMap::position`] finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourcePosition<'a> {
    pub name: &'a str,
    pub line: usize,
    pub column: usize,
    /// The whole line, without its newline.
    pub text: &'a str,
}

impl fmt::Display for ScriptErrors {
    /// The headline shown above the individual errors.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.errors.len() {
            1 => f.write_str("the script has an error"),
            n if n > MAX_SHOWN_ERRORS => write!(
                f,
                "the script has {n} errors; the first {MAX_SHOWN_ERRORS} are shown"
            ),
            n => write!(f, "the script has {n} errors"),
        }
    }
}

impl std::error::Error for ScriptErrors {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every related error renders its own snippet with `name:line:col`.
    #[test]
    fn renders_every_error_with_location() {
        let source = "BEGIN {\n  foo(;\n}\nEND { bar }\n";
        let first =
            ScriptError::new(Span::new(14, 15), "expected expression").with_label("unexpected `;`");
        let second = ScriptError::new(Span::new(24, 27), "unknown builtin `bar`")
            .with_label("not a builtin")
            .with_help("see the list of builtins");
        let errors = ScriptErrors::new("x.bt", source, vec![first, second]);
        let text = errors.render();
        assert!(text.contains("[x.bt:2:7]"), "{text}");
        assert!(text.contains("[x.bt:4:7]"), "{text}");
        assert!(text.contains("unexpected `;`"), "{text}");
        assert!(text.contains("help: see the list of builtins"), "{text}");
        assert!(text.contains("the script has 2 errors"), "{text}");
    }

    /// An empty label still puts a caret under the span.
    #[test]
    fn empty_label_still_points() {
        let error = ScriptError::new(Span::new(0, 5), "bad probe");
        let text = ScriptErrors::new(INLINE_SCRIPT_NAME, "BEGIN {}", vec![error]).render();
        assert!(text.contains("[<script>:1:1]"), "{text}");
        assert!(text.contains("─────"), "{text}");
    }

    /// An error past column 65,536 renders (miette panics on such widths)
    /// and still names the real line and column.
    #[test]
    fn renders_errors_past_column_65536() {
        let source = format!("{}BEGIN {{ foo }}", " ".repeat(70_000));
        let at = source.find("foo").unwrap();
        let error = ScriptError::new(Span::new(at, at + 3), "unknown identifier `foo`");
        let text = ScriptErrors::new("long.bt", &source, vec![error]).render();
        assert!(text.contains("[long.bt:1:70009]"), "{text}");
        assert!(text.contains("BEGIN { foo }"), "{text}");
        assert!(text.len() < 1000, "{} bytes", text.len());
    }

    /// Thousands of errors on one 65 KB line print a bounded report that
    /// says how many there were.
    #[test]
    fn caps_the_errors_shown() {
        let source = "@x = foo; ".repeat(6500);
        let errors: Vec<_> = (0..5000)
            .map(|i| ScriptError::new(Span::new(i * 10 + 5, i * 10 + 8), "unknown identifier"))
            .collect();
        let text = ScriptErrors::new("many.bt", &source, errors).render();
        assert!(text.contains("the script has 5000 errors; the first 20 are shown"));
        assert_eq!(text.matches("unknown identifier").count(), MAX_SHOWN_ERRORS);
        assert!(
            text.len() < 20 * MAX_SHOWN_ERRORS * 20,
            "{} bytes",
            text.len()
        );
    }

    /// Lines are found in each source: the first, one without a newline, the
    /// end of a file, and nothing past it.
    #[test]
    fn finds_source_lines() {
        let sources = SourceMap::new([("a", "ab\ncd\nef"), ("b", "x\n")]);
        assert_eq!(sources.line(0), Some((Some("a"), 1, "ab")));
        assert_eq!(sources.line(2), Some((Some("a"), 1, "ab")));
        assert_eq!(sources.line(3), Some((Some("a"), 2, "cd")));
        assert_eq!(sources.line(7), Some((Some("a"), 3, "ef")));
        assert_eq!(sources.line(8), Some((Some("a"), 3, "ef")));
        assert_eq!(sources.line(9), Some((Some("b"), 1, "x")));
        assert_eq!(sources.line(11), Some((Some("b"), 2, "")));
        assert_eq!(sources.line(12), None);
        let single = SourceMap::new([("a", "ab")]);
        assert_eq!(single.line(1), Some((None, 1, "ab")));
    }

    /// A message longer than the width stays on one line, whatever the
    /// length of the paths it names.
    #[test]
    fn messages_are_not_wrapped() {
        let message = format!("cannot read /{}/binary", "long-directory/".repeat(20));
        let error = ScriptError::new(Span::new(0, 5), message.clone());
        let text = ScriptErrors::new(INLINE_SCRIPT_NAME, "BEGIN {}", vec![error]).render();
        assert!(text.contains(&format!("× {message}\n")), "{text}");
    }

    /// Huge messages, labels and help texts are cut.
    #[test]
    fn cuts_long_texts() {
        let long = "m".repeat(100_000);
        let error = ScriptError::new(Span::new(0, 5), long.clone())
            .with_label(long.clone())
            .with_help(long);
        let text = ScriptErrors::new("x.bt", "BEGIN {}", vec![error]).render();
        assert!(text.len() < 4 * MAX_TEXT, "{} bytes", text.len());
        assert!(text.contains("m…"), "{text}");
    }
}
