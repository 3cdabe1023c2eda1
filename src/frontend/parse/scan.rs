//! Lexical pre-scan: script text → errors pest would report poorly (unterminated
//! strings and comments, runaway bracket nesting) and where brackets are left
//! open, which syntax errors use to point at the unclosed `{`.

use crate::frontend::ast::Span;
use crate::frontend::diag::ScriptError;

/// Brackets nested deeper than this are rejected before pest sees them, so the
/// recursive-descent parser never comes near the end of the stack.
const MAX_NESTING: usize = 128;

/// What the scan found.
#[derive(Debug, Default)]
pub(super) struct Scanned {
    pub errors: Vec<ScriptError>,
    /// Offsets of brackets still open at the end of the script, outermost first.
    pub unclosed: Vec<usize>,
}

/// Walks the script once, skipping comments, strings and preprocessor lines.
pub(super) fn scan(source: &str) -> Scanned {
    let bytes = source.as_bytes();
    let mut scanned = Scanned::default();
    let mut at = 0;
    let mut line_start = true;
    while at < bytes.len() {
        let byte = bytes[at];
        let next = bytes.get(at + 1).copied();
        at = match (byte, next) {
            (b'#', _) if line_start => skip_line(bytes, at),
            (b'/', Some(b'/')) => skip_line(bytes, at),
            (b'/', Some(b'*')) if scanned.unclosed.is_empty() && in_attach_point(bytes, at) => {
                at + 2
            }
            (b'/', Some(b'*')) => block_comment(bytes, at, &mut scanned.errors),
            (b'"', _) => string(bytes, at, &mut scanned.errors),
            (b'(' | b'[' | b'{', _) => {
                scanned.unclosed.push(at);
                if scanned.unclosed.len() > MAX_NESTING {
                    scanned.errors.push(super::too_deep(Span::new(at, at + 1)));
                    return scanned;
                }
                at + 1
            }
            (b')' | b']' | b'}', _) => {
                scanned.unclosed.pop();
                at + 1
            }
            _ => at + 1,
        };
        line_start = match byte {
            b'\n' => true,
            b' ' | b'\t' | b'\r' => line_start,
            _ => false,
        };
        if at > 0 && bytes[at - 1] == b'\n' {
            line_start = true;
        }
    }
    scanned
}

/// Whether `at` is inside an attach point's word (`uprobe:/usr/lib/*/libc.so.6:f`),
/// where `/*` is a path wildcard, as bpftrace lexes it, not a comment.
fn in_attach_point(bytes: &[u8], at: usize) -> bool {
    let word_start = bytes[..at]
        .iter()
        .rposition(|b| b.is_ascii_whitespace() || b",;{}".contains(b))
        .map_or(0, |i| i + 1);
    let word = &bytes[word_start..at];
    let provider_end = word.iter().position(|&b| b == b':');
    provider_end.is_some_and(|end| {
        end > 0
            && word[..end]
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'_')
    })
}

/// The offset just past the end of the line at `at`, following `\` continuations.
fn skip_line(bytes: &[u8], mut at: usize) -> usize {
    while at < bytes.len() {
        match bytes[at] {
            b'\\' if bytes.get(at + 1) == Some(&b'\n') => at += 2,
            b'\n' => return at + 1,
            _ => at += 1,
        }
    }
    at
}

fn block_comment(bytes: &[u8], start: usize, errors: &mut Vec<ScriptError>) -> usize {
    let body = &bytes[start + 2..];
    if let Some(end) = body.windows(2).position(|pair| pair == b"*/") {
        return start + 2 + end + 2;
    }
    let error = ScriptError::new(Span::new(start, start + 2), "unterminated comment")
        .with_label("comment starts here")
        .with_help("close it with `*/`");
    errors.push(error);
    bytes.len()
}

/// Skips a string literal; strings end at their line.
fn string(bytes: &[u8], start: usize, errors: &mut Vec<ScriptError>) -> usize {
    let mut at = start + 1;
    while at < bytes.len() {
        match bytes[at] {
            b'"' => return at + 1,
            b'\\' if bytes.get(at + 1).is_some_and(|&b| b != b'\n') => at += 2,
            b'\n' => break,
            _ => at += 1,
        }
    }
    let end = at.min(bytes.len());
    let error = ScriptError::new(Span::new(start, end), "unterminated string")
        .with_label("string starts here")
        .with_help("close it with `\"` on the same line");
    errors.push(error);
    end
}
