//! Front-end diagnostics: the error types every front-end stage reports through.
//!
//! A stage (parser, checker) produces [`ScriptError`]s, each pointing at a byte
//! span of the script; [`ScriptErrors`] bundles them with the script text and its
//! name so miette can render every error with a snippet, `name:line:col` and a
//! caret under the offending text.

use std::fmt;

use miette::{Diagnostic, GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource};
use thiserror::Error;

use super::ast::Span;

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

/// Every error found in one script, with the text they point into.
///
/// `Error` is implemented by hand: thiserror would take the field named `source`
/// for the error's cause.
#[derive(Debug, Diagnostic)]
pub struct ScriptErrors {
    /// The script text, named by its path or [`INLINE_SCRIPT_NAME`].
    #[source_code]
    pub source: NamedSource<String>,
    /// The errors, in the order found.
    #[related]
    pub errors: Vec<ScriptError>,
}

impl ScriptErrors {
    /// Bundles `errors` with the script they point into.
    pub fn new(name: &str, source: &str, errors: Vec<ScriptError>) -> Self {
        ScriptErrors {
            source: NamedSource::new(name, source.to_owned()),
            errors,
        }
    }

    /// Renders every error with its snippet, without colour or hyperlinks.
    pub fn render(&self) -> String {
        let handler = GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor())
            .with_links(false)
            .with_width(100);
        let mut out = String::new();
        handler
            .render_report(&mut out, self)
            .expect("rendering into a String cannot fail");
        out
    }
}

impl fmt::Display for ScriptErrors {
    /// The headline shown above the individual errors.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.errors.len() {
            1 => f.write_str("the script has an error"),
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
}
