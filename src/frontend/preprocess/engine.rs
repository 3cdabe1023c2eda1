//! The directive machine: walks the lines of a script or header, keeps the
//! conditional stack, defines macros, reads included headers (keeping
//! their macros, ignoring their C declarations) and hands the script's
//! active text to its caller, region by region, for expansion.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::builtin_macros::{SCHED_HEADER, TASK_STATES};
use super::cond::evaluate;
use super::include::{Found, IncludeName, MAX_HEADER_BYTES, SearchPath};
use super::lex::{TokKind, Token, lex};
use super::macros::{MacroTable, Origin, PpTok, parse_define, tokens_of};
use crate::frontend::ast::Span;
use crate::frontend::diag::ScriptError;

/// Headers nested deeper than this are a loop.
const MAX_INCLUDE_DEPTH: usize = 64;

/// Text being read: the script or a header.
pub(super) struct File<'a> {
    pub text: &'a str,
    /// The file's path; `None` for a script given on the command line.
    pub path: Option<&'a Path>,
    /// Where `#include "..."` looks first.
    pub dir: Option<PathBuf>,
    /// The search directory the file was found in, for `#include_next`.
    pub dir_index: Option<usize>,
    /// A system header: includes it cannot find are skipped, and unknown
    /// function-like names in `#if` count as 0.
    pub system: bool,
    /// For a header, the script's `#include` (or `--include`) that read it:
    /// its errors point there.
    pub site: Option<Span>,
}

/// One branch level of `#if ... #endif`.
struct Cond {
    /// The current branch is being read.
    taking: bool,
    /// Some branch of this level was (or is being) read.
    taken: bool,
    /// The enclosing level is being read.
    parent: bool,
    seen_else: bool,
    /// The `#if` line in its file.
    span: Span,
}

/// A line of tokens, without its line end.
struct Line<'t> {
    tokens: &'t [Token],
    /// From its first token to its line end (comments included).
    start: usize,
    end: usize,
}

/// Preprocessing state shared by the script and every header it reads.
pub(super) struct Engine {
    pub macros: MacroTable,
    pub search: SearchPath,
    pub errors: Vec<ScriptError>,
    /// Things skipped that the user may want to know about.
    pub notes: Vec<String>,
    once: HashSet<PathBuf>,
    depth: usize,
}

/// What the caller does with active text of the script.
pub(super) type OnText<'c> = dyn FnMut(&mut Engine, &[Token]) + 'c;

impl Engine {
    pub fn new(macros: MacroTable, search: SearchPath) -> Engine {
        Engine {
            macros,
            search,
            errors: Vec::new(),
            notes: Vec::new(),
            once: HashSet::new(),
            depth: 0,
        }
    }

    /// Walks `file`; active text lines go to `on_text` in runs between
    /// directives. Returns the ranges to blank: directive lines and lines
    /// of branches not taken.
    pub fn walk(&mut self, file: &File, on_text: &mut OnText) -> Vec<(usize, usize)> {
        let tokens = lex(file.text);
        let mut blanks = Vec::new();
        let mut conds: Vec<Cond> = Vec::new();
        let mut run: Vec<Token> = Vec::new();
        for line in lines(file.text, &tokens) {
            let active = conds.last().is_none_or(|c| c.taking && c.parent);
            let is_directive = line.tokens[0].kind == TokKind::Punct
                && &file.text[line.tokens[0].start..line.tokens[0].end] == "#";
            if !is_directive {
                if active {
                    run.extend_from_slice(line.tokens);
                } else {
                    blanks.push((line.start, line.end));
                }
                continue;
            }
            on_text(self, &run);
            run.clear();
            blanks.push((line.start, line.end));
            if file.site.is_none() && line.start == 0 && file.text.starts_with("#!") {
                continue;
            }
            self.directive(file, &line, &mut conds, active);
        }
        on_text(self, &run);
        if let Some(open) = conds.last() {
            self.error(file, open.span, "this `#if` has no `#endif`".into());
        }
        blanks
    }

    /// Records an error at `span` of `file`.
    pub fn error(&mut self, file: &File, span: Span, message: String) {
        let error = match (file.site, file.path) {
            (Some(site), path) => {
                let at = span.start.min(file.text.len());
                let line = file.text[..at].matches('\n').count() + 1;
                let path = path.map_or("<header>".into(), |p| p.display().to_string());
                ScriptError::new(site, format!("{path}:{line}: {message}"))
            }
            (None, _) => ScriptError::new(span, message),
        };
        self.errors.push(error);
    }

    fn directive(&mut self, file: &File, line: &Line, conds: &mut Vec<Cond>, active: bool) {
        let Some(name_token) = line.tokens.get(1) else {
            return;
        };
        let name = &file.text[name_token.start..name_token.end];
        let rest = &line.tokens[2..];
        let at = Span::new(line.start, line.end);
        if self.conditional(file, name, rest, at, conds) || !active {
            return;
        }
        let words = || file_tokens(file, rest);
        match name {
            "define" => match parse_define(&words()) {
                Ok((name, mac)) => self.macros.define(name, mac),
                Err(e) => self.error(file, at, e.0),
            },
            "undef" => match rest.first() {
                Some(t) if t.kind == TokKind::Ident => {
                    self.macros.undef(&file.text[t.start..t.end])
                }
                _ => self.error(file, at, "`#undef` needs a macro name".into()),
            },
            "include" | "include_next" => {
                self.include_directive(file, rest, name == "include_next", at);
            }
            "error" => {
                let text = file.text[name_token.end..line.end].trim();
                self.error(file, at, format!("#error {text}"));
            }
            "warning" => {
                let text = file.text[name_token.end..line.end].trim();
                self.notes.push(format!("#warning {text}"));
            }
            "pragma" => {
                let once = rest
                    .first()
                    .is_some_and(|t| &file.text[t.start..t.end] == "once");
                if let (true, Some(path)) = (once, file.path) {
                    self.once.insert(path.to_path_buf());
                }
            }
            "line" | "ident" | "sccs" | "assert" | "unassert" => {}
            other => self.error(
                file,
                at,
                format!("unknown preprocessor directive `#{other}`"),
            ),
        }
    }

    /// Handles `#if`-family directives (in taken and skipped branches
    /// alike); false for any other directive.
    fn conditional(
        &mut self,
        file: &File,
        name: &str,
        rest: &[Token],
        at: Span,
        conds: &mut Vec<Cond>,
    ) -> bool {
        let active = conds.last().is_none_or(|c| c.taking && c.parent);
        match name {
            "if" | "ifdef" | "ifndef" => {
                let taking = active && self.test(file, name, rest, at);
                conds.push(Cond {
                    taking,
                    taken: taking,
                    parent: active,
                    seen_else: false,
                    span: at,
                });
            }
            "elif" | "elifdef" | "elifndef" | "else" => {
                let Some(cond) = conds.last_mut() else {
                    self.error(file, at, format!("`#{name}` without `#if`"));
                    return true;
                };
                if cond.seen_else {
                    self.error(file, at, format!("`#{name}` after `#else`"));
                    return true;
                }
                cond.seen_else = name == "else";
                let (parent, taken) = (cond.parent, cond.taken);
                let test = name != "else";
                let taking = parent && !taken && (!test || self.test(file, name, rest, at));
                let cond = conds.last_mut().expect("checked above");
                cond.taking = taking;
                cond.taken |= taking;
            }
            "endif" => {
                if conds.pop().is_none() {
                    self.error(file, at, "`#endif` without `#if`".into());
                }
            }
            _ => return false,
        }
        true
    }

    /// Whether the condition of `#if`, `#ifdef`, `#elif`... holds.
    fn test(&mut self, file: &File, name: &str, rest: &[Token], at: Span) -> bool {
        let wants_defined = match name {
            "ifdef" | "elifdef" => Some(true),
            "ifndef" | "elifndef" => Some(false),
            _ => None,
        };
        if let Some(wanted) = wants_defined {
            return match rest.first() {
                Some(t) if t.kind == TokKind::Ident => {
                    self.macros.is_defined(&file.text[t.start..t.end]) == wanted
                }
                _ => {
                    self.error(file, at, format!("`#{name}` needs a macro name"));
                    false
                }
            };
        }
        match self.evaluate_if(file, file_tokens(file, rest)) {
            Ok(value) => value,
            Err(message) => {
                self.error(file, at, format!("in `#{name}`: {message}"));
                false
            }
        }
    }

    /// An `#if` expression: `defined` and `__has_include` resolved, macros
    /// expanded, other names 0.
    fn evaluate_if(&mut self, file: &File, tokens: Vec<PpTok>) -> Result<bool, String> {
        let tokens = self.resolve_operators(file, tokens)?;
        let expanded = self.macros.expand(tokens).map_err(|e| e.0)?;
        let tokens = self.resolve_operators(file, expanded)?;
        let tokens = unknown_names_to_zero(tokens, file.system)?;
        let unknown = |_: &str| Ok(0);
        evaluate(&tokens, &unknown).map(|n| n.bits != 0)
    }

    /// Replaces `defined X`, `defined(X)` and `__has_include(<h>)` with 1 or 0.
    fn resolve_operators(&self, file: &File, tokens: Vec<PpTok>) -> Result<Vec<PpTok>, String> {
        let mut out = Vec::with_capacity(tokens.len());
        let mut at = 0;
        while at < tokens.len() {
            let token = &tokens[at];
            let (value, used) = match &*token.text {
                "defined" if token.kind == TokKind::Ident => self.defined(&tokens[at + 1..])?,
                "__has_include" | "__has_include_next" if token.kind == TokKind::Ident => {
                    let (include, used) = has_include_name(&tokens[at + 1..])?;
                    let after = (&*token.text == "__has_include_next")
                        .then_some(file.dir_index)
                        .flatten();
                    let found = self
                        .search
                        .find(&include, file.dir.as_deref(), after)
                        .is_some()
                        || (include.angled && include.name == SCHED_HEADER);
                    (found, used)
                }
                _ => {
                    out.push(token.clone());
                    at += 1;
                    continue;
                }
            };
            let text = if value { "1" } else { "0" };
            out.push(PpTok::new(TokKind::Number, text, true, token.origin));
            at += 1 + used;
        }
        Ok(out)
    }

    /// `X` or `(X)` after `defined`: whether X is a macro, and tokens used.
    fn defined(&self, after: &[PpTok]) -> Result<(bool, usize), String> {
        let bad = || "`defined` needs a macro name".to_string();
        match after {
            [name, ..] if name.kind == TokKind::Ident => {
                Ok((self.macros.is_defined(&name.text), 1))
            }
            [open, name, close, ..]
                if open.is(TokKind::Punct, "(")
                    && name.kind == TokKind::Ident
                    && close.is(TokKind::Punct, ")") =>
            {
                Ok((self.macros.is_defined(&name.text), 3))
            }
            _ => Err(bad()),
        }
    }

    /// `#include "name"`, `#include <name>` or a macro giving either.
    fn include_directive(&mut self, file: &File, rest: &[Token], next: bool, span: Span) {
        let include = match include_name(file, rest) {
            Some(include) => include,
            None => {
                let expanded = self.macros.expand(file_tokens(file, rest));
                match expanded
                    .ok()
                    .and_then(|t| has_include_name(&wrap_parens(t)).ok())
                {
                    Some((include, _)) => include,
                    None => {
                        let message = "`#include` needs \"FILE\" or <FILE>".to_string();
                        return self.error(file, span, message);
                    }
                }
            }
        };
        let after = if next { file.dir_index } else { None };
        self.include(file, &include, after, span);
    }

    /// Reads the header `include` names, written in `file` at `span`.
    pub fn include(
        &mut self,
        file: &File,
        include: &IncludeName,
        after: Option<usize>,
        span: Span,
    ) {
        let Some(found) = self.search.find(include, file.dir.as_deref(), after) else {
            self.missing_include(file, include, span);
            return;
        };
        if self.once.contains(&found.path) {
            return;
        }
        if self.depth >= MAX_INCLUDE_DEPTH {
            let message = format!("headers nest deeper than {MAX_INCLUDE_DEPTH} levels (a loop?)");
            return self.error(file, span, message);
        }
        let text = match read_header(&found.path) {
            Ok(text) => text,
            Err(message) => return self.error(file, span, message),
        };
        let header = header_file(&text, &found, file.site.unwrap_or(span));
        self.depth += 1;
        self.walk(&header, &mut |_, _| {});
        self.depth -= 1;
        if include.angled && include.name == SCHED_HEADER {
            self.define_task_states();
        }
    }

    fn missing_include(&mut self, file: &File, include: &IncludeName, span: Span) {
        if include.angled && include.name == SCHED_HEADER {
            self.define_task_states();
        } else if file.system {
            self.notes.push(format!(
                "skipped `{}`, included by {}, which is not on this machine",
                include.name,
                file.path
                    .map_or("a header".into(), |p| p.display().to_string())
            ));
        } else {
            let message = format!(
                "`{}`: file not found (searched {})",
                include.name,
                self.search.describe()
            );
            self.error(file, span, message);
        }
    }

    /// The kernel's task states, where no header defined them.
    fn define_task_states(&mut self) {
        for (name, body) in TASK_STATES {
            if !self.macros.is_defined(name) {
                let (name, mac) = parse_define(&tokens_of(&format!("{name} {body}"), 0, None))
                    .expect("the task-state table is valid C");
                self.macros.define(name, mac);
            }
        }
    }
}

/// The lines of `text`, each with at least one token.
fn lines<'t>(text: &str, tokens: &'t [Token]) -> Vec<Line<'t>> {
    let mut lines = Vec::new();
    let mut first = 0;
    for (i, token) in tokens.iter().enumerate() {
        let last = i + 1 == tokens.len();
        if token.kind != TokKind::Newline && !last {
            continue;
        }
        let end = if token.kind == TokKind::Newline {
            i
        } else {
            i + 1
        };
        if end > first {
            let line_end = if token.kind == TokKind::Newline {
                token.start
            } else {
                text.len()
            };
            lines.push(Line {
                tokens: &tokens[first..end],
                start: tokens[first].start,
                end: line_end,
            });
        }
        first = i + 1;
    }
    lines
}

/// Tokens of `file` as preprocessor tokens with their offsets.
fn file_tokens(file: &File, tokens: &[Token]) -> Vec<PpTok> {
    tokens
        .iter()
        .map(|t| {
            PpTok::new(
                t.kind,
                &file.text[t.start..t.end],
                t.space_before,
                Origin::Source(t.start, t.end),
            )
        })
        .collect()
}

/// `"name"` or `<name>` written directly after `#include`.
fn include_name(file: &File, rest: &[Token]) -> Option<IncludeName> {
    let first = rest.first()?;
    let text = &file.text[first.start..first.end];
    if first.kind == TokKind::Str && text.len() >= 2 && text.ends_with('"') {
        return Some(IncludeName {
            name: text[1..text.len() - 1].to_string(),
            angled: false,
        });
    }
    if text != "<" {
        return None;
    }
    let close = rest.iter().find(|t| &file.text[t.start..t.end] == ">")?;
    Some(IncludeName {
        name: file.text[first.end..close.start].trim().to_string(),
        angled: true,
    })
}

/// `(` tokens `)` around a macro-expanded include name, for
/// [`has_include_name`].
fn wrap_parens(tokens: Vec<PpTok>) -> Vec<PpTok> {
    let paren = |p| PpTok::new(TokKind::Punct, p, false, Origin::Source(0, 0));
    let mut out = vec![paren("(")];
    out.extend(tokens);
    out.push(paren(")"));
    out
}

/// `("name")` or `(<name>)` after `__has_include`, and the tokens used.
fn has_include_name(after: &[PpTok]) -> Result<(IncludeName, usize), String> {
    let bad = || "`__has_include` needs (\"FILE\") or (<FILE>)".to_string();
    if !after.first().is_some_and(|t| t.is(TokKind::Punct, "(")) {
        return Err(bad());
    }
    let close = after
        .iter()
        .position(|t| t.is(TokKind::Punct, ")"))
        .ok_or_else(bad)?;
    let inner = &after[1..close];
    let include = match inner {
        [name] if name.kind == TokKind::Str => IncludeName {
            name: name.text.trim_matches('"').to_string(),
            angled: false,
        },
        [open, middle @ .., end] if open.is(TokKind::Punct, "<") && end.is(TokKind::Punct, ">") => {
            IncludeName {
                name: middle.iter().map(|t| &*t.text).collect(),
                angled: true,
            }
        }
        _ => return Err(bad()),
    };
    Ok((include, close + 1))
}

/// Names left after expansion are 0 in `#if`; a call of an unknown
/// function-like macro is 0 in system headers and an error elsewhere.
fn unknown_names_to_zero(tokens: Vec<PpTok>, lenient: bool) -> Result<Vec<PpTok>, String> {
    let mut out = Vec::with_capacity(tokens.len());
    let mut at = 0;
    while at < tokens.len() {
        let token = &tokens[at];
        at += 1;
        if token.kind != TokKind::Ident {
            out.push(token.clone());
            continue;
        }
        if tokens.get(at).is_some_and(|t| t.is(TokKind::Punct, "(")) {
            if !lenient {
                return Err(format!(
                    "`{}` is not a defined function-like macro",
                    token.text
                ));
            }
            let mut depth = 0;
            while let Some(t) = tokens.get(at) {
                at += 1;
                if t.is(TokKind::Punct, "(") {
                    depth += 1;
                } else if t.is(TokKind::Punct, ")") {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
            }
        }
        out.push(PpTok::new(
            TokKind::Number,
            "0",
            token.space_before,
            token.origin,
        ));
    }
    Ok(out)
}

fn read_header(path: &Path) -> Result<String, String> {
    let too_big = fs::metadata(path).is_ok_and(|m| m.len() > MAX_HEADER_BYTES);
    if too_big {
        return Err(format!(
            "{} is larger than {MAX_HEADER_BYTES} bytes; not read",
            path.display()
        ));
    }
    let bytes = fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn header_file<'a>(text: &'a str, found: &'a Found, site: Span) -> File<'a> {
    File {
        text,
        path: Some(&found.path),
        dir: found.path.parent().map(Path::to_path_buf),
        dir_index: found.dir_index,
        system: found.system,
        site: Some(site),
    }
}
