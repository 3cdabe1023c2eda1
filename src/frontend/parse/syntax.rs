//! Syntax errors: a pest failure → one [`ScriptError`] that names what was
//! expected in the script's terms ("expected expression", "missing `}`") rather
//! than grammar rule names, pointing at the offending token.

use pest::error::{Error, ErrorVariant, InputLocation};

use super::Rule;
use super::scan::Scanned;
use crate::frontend::ast::Span;
use crate::frontend::diag::ScriptError;

/// Converts pest's error; `scanned` tells where unclosed brackets were opened.
pub(super) fn error(source: &str, error: &Error<Rule>, scanned: &Scanned) -> ScriptError {
    let at = match error.location {
        InputLocation::Pos(at) => at,
        InputLocation::Span((start, _)) => start,
    };
    match &error.variant {
        ErrorVariant::ParsingError { positives, .. } => expected(source, at, positives, scanned),
        // pest's only custom errors are its call and stack limits.
        ErrorVariant::CustomError { .. } => super::too_deep(Span::new(at, at)),
    }
}

fn expected(source: &str, at: usize, rules: &[Rule], scanned: &Scanned) -> ScriptError {
    let wanted = descriptions(rules);
    let (span, found) = token_at(source, at);
    let Some(found) = found else {
        return at_end(source, span, &wanted, scanned);
    };
    let message = match wanted.is_empty() {
        true => format!("unexpected {found}"),
        false => format!("expected {}, found {found}", join(&wanted)),
    };
    let error = ScriptError::new(span, message).with_label(format!("unexpected {found}"));
    match help(source, &wanted, scanned) {
        Some(help) => error.with_help(help),
        None => error,
    }
}

/// A hint for the likely cause: an unclosed block swallowing the next probe, a
/// missing `;`, or a statement outside any probe.
fn help(source: &str, wanted: &[&str], scanned: &Scanned) -> Option<String> {
    if wanted.contains(&"`}`")
        && let Some(open) = unclosed_brace(source, scanned)
    {
        return Some(open);
    }
    if wanted.contains(&"record name") || wanted == ["`<`"] {
        return Some("a record statement is written `record NAME < item; item; ... >`".to_owned());
    }
    if wanted.contains(&"`;`") {
        return Some("statements are separated by `;`".to_owned());
    }
    wanted
        .contains(&"`{`")
        .then(|| "a probe is written `spec[, spec...] [/predicate/] { statements }`".to_owned())
}

/// Where the innermost `{` left open by the end of the script was opened.
fn unclosed_brace(source: &str, scanned: &Scanned) -> Option<String> {
    let open = *scanned
        .unclosed
        .iter()
        .rev()
        .find(|&&at| source.as_bytes()[at] == b'{')?;
    let (line, column) = line_col(source, open);
    Some(format!(
        "the `{{` at line {line}, column {column} is never closed"
    ))
}

/// Errors at the end of the script: usually an unclosed bracket.
fn at_end(source: &str, span: Span, wanted: &[&str], scanned: &Scanned) -> ScriptError {
    let closer = ["`}`", "`)`", "`]`"]
        .into_iter()
        .find(|closer| wanted.contains(closer));
    let Some(closer) = closer else {
        let message = format!("expected {}, found end of script", join(wanted));
        return ScriptError::new(span, message).with_label("script ends after this");
    };
    let error = ScriptError::new(span, format!("missing {closer}"))
        .with_label(format!("expected {closer} after this"));
    match scanned.unclosed.last() {
        Some(&open) => {
            let (line, column) = line_col(source, open);
            let opener = &source[open..=open];
            error.with_help(format!(
                "the `{opener}` at line {line}, column {column} is never closed"
            ))
        }
        None => error,
    }
}

/// What each expected rule means to a script author, most useful first,
/// without repeats; operators are left out when anything else fits.
fn descriptions(rules: &[Rule]) -> Vec<&'static str> {
    let mut wanted: Vec<&str> = Vec::new();
    for description in rules.iter().filter_map(|&rule| describe(rule)) {
        if !wanted.contains(&description) {
            wanted.push(description);
        }
    }
    if wanted.iter().any(|&d| d != "operator") {
        wanted.retain(|&d| d != "operator");
    }
    if wanted.contains(&"`{`") {
        wanted.retain(|&d| !matches!(d, "predicate" | "probe name" | "`,`" | "`<`"));
    }
    if wanted.contains(&"statement") {
        wanted.retain(|&d| d != "expression");
    }
    wanted.sort_by_key(|d| d.starts_with('`'));
    wanted
}

fn describe(rule: Rule) -> Option<&'static str> {
    Some(match rule {
        Rule::expr
        | Rule::binary
        | Rule::operand
        | Rule::cast
        | Rule::unary_op
        | Rule::paren
        | Rule::int
        | Rule::string
        | Rule::boolean
        | Rule::call
        | Rule::map
        | Rule::map_name
        | Rule::positional
        | Rule::positional_count
        | Rule::ident => "expression",
        Rule::if_stmt
        | Rule::while_stmt
        | Rule::unroll_stmt
        | Rule::let_stmt
        | Rule::assign_stmt
        | Rule::expr_stmt
        | Rule::break_stmt
        | Rule::continue_stmt
        | Rule::return_stmt
        | Rule::record_stmt => "statement",
        Rule::infix_op
        | Rule::assign_op
        | Rule::postfix_op
        | Rule::tuple_index
        | Rule::field
        | Rule::arrow
        | Rule::index
        | Rule::map_keys
        | Rule::question => "operator",
        Rule::probe | Rule::probe_spec | Rule::preproc => "probe",
        Rule::predicate => "predicate",
        Rule::provider
        | Rule::quoted_part
        | Rule::path_part
        | Rule::relative_path
        | Rule::word_part => "probe name",
        Rule::field_name => "field name",
        Rule::record_name => "record name",
        Rule::tuple_num => "tuple index",
        Rule::var => "`$` variable",
        Rule::type_name => "type",
        Rule::EOI => "end of script",
        _ => return token(rule),
    })
}

fn token(rule: Rule) -> Option<&'static str> {
    Some(match rule {
        Rule::semi => "`;`",
        Rule::comma => "`,`",
        Rule::lparen => "`(`",
        Rule::rparen => "`)`",
        Rule::lbrace => "`{`",
        Rule::rbrace => "`}`",
        Rule::rbracket => "`]`",
        Rule::colon => "`:`",
        Rule::pred_end => "`/` ending the predicate",
        Rule::langle => "`<`",
        _ => return None,
    })
}

/// The token starting at `at` (a word, a number or one character) as shown in
/// messages, or `None` at the end of the script.
fn token_at(source: &str, at: usize) -> (Span, Option<String>) {
    let rest = &source[at.min(source.len())..];
    let Some(first) = rest.chars().next() else {
        // Point at the last character: an empty span at the end renders no caret.
        let text = source.trim_end();
        let last = text.chars().next_back().map_or(0, char::len_utf8);
        return (Span::new(text.len() - last, text.len()), None);
    };
    let len = match first.is_ascii_alphanumeric() || first == '_' {
        true => rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len()),
        false => first.len_utf8(),
    };
    let found = match first {
        '\n' | '\r' => "end of line".to_owned(),
        c if c.is_whitespace() => "whitespace".to_owned(),
        _ => format!("`{}`", &rest[..len]),
    };
    (Span::new(at, at + len), Some(found))
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(source: &str, at: usize) -> (usize, usize) {
    let before = &source[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |nl| nl + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// `a`, `a or b`, `a, b or c`.
fn join(items: &[&str]) -> String {
    match items {
        [] => "something else".to_owned(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}
