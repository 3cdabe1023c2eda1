//! Offsets in preprocessed text → offsets in the script as written. Text
//! outside macro uses keeps its place (directives and skipped lines become
//! spaces of the same length); a macro use is replaced by its expansion,
//! whose every offset maps back to the whole use.

use crate::frontend::ast::Span;

/// One replaced range: `written` in the script became `expanded` in the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replacement {
    pub written: (usize, usize),
    pub expanded: (usize, usize),
}

/// The replacements of one preprocessed script, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpanMap {
    replacements: Vec<Replacement>,
}

impl SpanMap {
    /// `replacements` must be in order and must not overlap.
    pub fn new(replacements: Vec<Replacement>) -> SpanMap {
        SpanMap { replacements }
    }

    /// The script span that output span `span` came from.
    pub fn to_written(&self, span: Span) -> Span {
        Span::new(
            self.start(span.start),
            self.end(span.end).max(self.start(span.start)),
        )
    }

    /// The replacement at or before output offset `at`.
    fn before(&self, at: usize) -> Option<&Replacement> {
        let index = self.replacements.partition_point(|r| r.expanded.0 <= at);
        index.checked_sub(1).map(|i| &self.replacements[i])
    }

    fn start(&self, at: usize) -> usize {
        match self.before(at) {
            None => at,
            Some(r) if at < r.expanded.1 => r.written.0,
            Some(r) => at - r.expanded.1 + r.written.1,
        }
    }

    /// Like `start`, but an end inside (or just past) an expansion maps to
    /// the end of the use.
    fn end(&self, at: usize) -> usize {
        let index = self.replacements.partition_point(|r| r.expanded.0 < at);
        match index.checked_sub(1).map(|i| &self.replacements[i]) {
            None => at,
            Some(r) if at <= r.expanded.1 => r.written.1,
            Some(r) => at - r.expanded.1 + r.written.1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ab FOO cd` with `FOO` (4..7) expanded to `(1+2)` (4..9).
    fn map() -> SpanMap {
        SpanMap::new(vec![Replacement {
            written: (3, 6),
            expanded: (3, 8),
        }])
    }

    /// Spans before, after and inside an expansion map to the text written.
    #[test]
    fn maps_spans_back() {
        let map = map();
        assert_eq!(map.to_written(Span::new(0, 2)), Span::new(0, 2));
        assert_eq!(map.to_written(Span::new(9, 11)), Span::new(7, 9));
        assert_eq!(map.to_written(Span::new(4, 5)), Span::new(3, 6));
        assert_eq!(map.to_written(Span::new(0, 8)), Span::new(0, 6));
        assert_eq!(map.to_written(Span::new(3, 11)), Span::new(3, 9));
    }

    /// Without replacements offsets are unchanged.
    #[test]
    fn identity_without_macros() {
        let span = Span::new(5, 10);
        assert_eq!(SpanMap::default().to_written(span), span);
    }
}
