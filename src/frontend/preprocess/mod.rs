//! Preprocessing, the first front-end stage: script text → text the parser
//! reads, as bpftrace hands a script's `#` lines to clang. Conditionals,
//! `#define`/`#undef` (object-like and function-like macros), `#include`
//! (macros of headers are kept, their C declarations ignored: types come
//! from BTF and the script), and macro expansion in the script. Output
//! offsets map back to the script as written ([`SpanMap`]) so diagnostics
//! point at the macro use and can say what it expanded to.

mod builtin_macros;
pub(crate) mod cond;
mod engine;
mod include;
pub(crate) mod lex;
pub(crate) mod macros;
mod spans;

use std::path::{Path, PathBuf};

use self::engine::{Engine, File};
use self::include::{IncludeName, SearchPath, system_dirs};
use self::lex::Token;
use self::macros::{MacroTable, Origin, PpTok, join, parse_define, tokens_of};
pub use self::spans::{Replacement, SpanMap};
use crate::frontend::ast::Span;
use crate::frontend::diag::ScriptError;

pub use builtin_macros::{REPORTED_STATE_LETTERS, TASK_STATES, header_defining};

/// What preprocessing may look at besides the script.
#[derive(Clone, Debug, Default)]
pub struct Setup<'a> {
    /// `--include-dir`: searched before the system directories.
    pub include_dirs: &'a [PathBuf],
    /// `--include`: read before the script, as `#include "FILE"`.
    pub include_files: &'a [PathBuf],
    /// Kernel BTF is readable: `BPFTRACE_HAVE_BTF` is defined.
    pub have_btf: bool,
    /// The script file, whose directory `#include "..."` searches first.
    pub script_path: Option<&'a Path>,
}

/// A preprocessed script.
#[derive(Clone, Debug, Default)]
pub struct Preprocessed {
    /// What the parser reads.
    pub text: String,
    /// Offsets in `text` → offsets in the script.
    pub map: SpanMap,
    /// Every macro use in the script, with what it became.
    pub expansions: Vec<Expansion>,
    /// Things skipped (missing nested system headers, `#warning`s).
    pub notes: Vec<String>,
}

/// One macro use in the script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expansion {
    /// The use as written (`TASK_RUNNING`, `MAX(a, b)`).
    pub written: Span,
    /// The macro's name.
    pub name: String,
    /// What the parser read in its place.
    pub text: String,
}

impl Expansion {
    /// Help for a diagnostic at this use.
    pub fn help(&self) -> String {
        format!("`{}` is a macro; it expands to `{}`", self.name, self.text)
    }
}

/// Preprocesses `text`; errors point into it.
pub fn preprocess(text: &str, setup: &Setup) -> Result<Preprocessed, Vec<ScriptError>> {
    let search = SearchPath::new(setup.include_dirs, system_dirs());
    let mut engine = Engine::new(predefined(setup.have_btf), search);
    let dir = setup
        .script_path
        .and_then(Path::parent)
        .map(|d| {
            if d.as_os_str().is_empty() {
                Path::new(".")
            } else {
                d
            }
        })
        .or(Some(Path::new(".")))
        .map(Path::to_path_buf);
    let script = File {
        text,
        path: setup.script_path,
        dir,
        dir_index: None,
        system: false,
        site: None,
    };
    for path in setup.include_files {
        forced_include(&mut engine, &script, path);
    }
    let mut replacements = Vec::new();
    let blanks = engine.walk(&script, &mut |engine, tokens| {
        expand_region(engine, text, tokens, &mut replacements)
    });
    if !engine.errors.is_empty() {
        return Err(engine.errors);
    }
    Ok(assemble(text, &blanks, replacements, engine.notes))
}

/// The compiler's predefined macros, and `BPFTRACE_HAVE_BTF` with BTF.
fn predefined(have_btf: bool) -> MacroTable {
    let mut table = MacroTable::default();
    let btf = have_btf.then_some((builtin_macros::HAVE_BTF, "1"));
    for (name, body) in builtin_macros::PREDEFINED.iter().copied().chain(btf) {
        let (name, mac) = parse_define(&tokens_of(&format!("{name} {body}"), 0, None))
            .expect("predefined macros are valid C");
        table.define(name, mac);
    }
    table
}

/// `--include FILE`: its macros before the script's. FILE is searched as
/// `#include "FILE"` from the current directory (`--include errno.h`
/// finds `/usr/include/errno.h`, as clang's `-include` does for bpftrace).
fn forced_include(engine: &mut Engine, script: &File, path: &Path) {
    let include = IncludeName {
        name: path.display().to_string(),
        angled: false,
    };
    let cwd = File {
        dir: Some(PathBuf::from(".")),
        ..*script
    };
    if engine
        .search
        .find(&include, cwd.dir.as_deref(), None)
        .is_none()
    {
        let message = format!(
            "--include {}: file not found (searched ., {})",
            path.display(),
            engine.search.describe()
        );
        engine
            .errors
            .push(ScriptError::new(Span::new(0, 0), message));
        return;
    }
    engine.include(&cwd, &include, None, Span::new(0, 0));
}

/// Expands the macros of one run of active script lines into replacements.
fn expand_region(engine: &mut Engine, text: &str, tokens: &[Token], out: &mut Vec<MacroUse>) {
    if tokens.is_empty() {
        return;
    }
    let input: Vec<PpTok> = tokens
        .iter()
        .map(|t| {
            PpTok::new(
                t.kind,
                &text[t.start..t.end],
                t.space_before,
                Origin::Source(t.start, t.end),
            )
        })
        .collect();
    match engine.macros.expand(input) {
        Ok(expanded) => out.extend(groups(&expanded, text)),
        Err(error) => {
            let span = Span::new(tokens[0].start, tokens[tokens.len() - 1].end);
            engine.errors.push(ScriptError::new(span, error.0));
        }
    }
}

/// A macro use and the text replacing it.
struct MacroUse {
    written: (usize, usize),
    text: String,
}

/// Maximal runs of expanded tokens, each replacing the text of its use.
fn groups(tokens: &[PpTok], text: &str) -> Vec<MacroUse> {
    let mut groups: Vec<(usize, usize, Vec<PpTok>)> = Vec::new();
    for token in tokens {
        let Origin::Expanded(start, end) = token.origin else {
            continue;
        };
        match groups.last_mut() {
            Some(group) if start < group.1 => {
                group.0 = group.0.min(start);
                group.1 = group.1.max(end);
                group.2.push(token.clone());
            }
            _ => groups.push((start, end, vec![token.clone()])),
        }
    }
    groups
        .into_iter()
        .map(|(start, end, tokens)| MacroUse {
            written: (start, end),
            text: separated(text, start, end, &join(&tokens)),
        })
        .collect()
}

/// `expansion` with a space added where it would glue onto a neighbouring word.
fn separated(text: &str, start: usize, end: usize, expansion: &str) -> String {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let before = word(text[..start].chars().next_back()) && word(expansion.chars().next());
    let after = word(text[end..].chars().next()) && word(expansion.chars().next_back());
    let mut out = String::with_capacity(expansion.len() + 2);
    if before {
        out.push(' ');
    }
    out.push_str(expansion);
    if after {
        out.push(' ');
    }
    out
}

/// The output text: directives and skipped lines blanked (line ends kept),
/// macro uses replaced.
fn assemble(
    text: &str,
    blanks: &[(usize, usize)],
    mut uses: Vec<MacroUse>,
    notes: Vec<String>,
) -> Preprocessed {
    let mut bytes = text.as_bytes().to_vec();
    for &(start, end) in blanks {
        for b in &mut bytes[start..end] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    }
    let blanked = String::from_utf8(bytes).expect("blanking whole lines keeps UTF-8 valid");
    uses.sort_by_key(|u| u.written.0);
    let mut out = String::with_capacity(text.len());
    let mut replacements = Vec::with_capacity(uses.len());
    let mut expansions = Vec::with_capacity(uses.len());
    let mut copied = 0;
    for used in uses {
        let (start, end) = used.written;
        out.push_str(&blanked[copied..start]);
        let at = out.len();
        out.push_str(&used.text);
        replacements.push(Replacement {
            written: (start, end),
            expanded: (at, out.len()),
        });
        let name_end = text[start..end]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(end, |n| start + n);
        expansions.push(Expansion {
            written: Span::new(start, end),
            name: text[start..name_end].to_string(),
            text: used.text.trim().to_string(),
        });
        copied = end;
    }
    out.push_str(&blanked[copied..]);
    Preprocessed {
        text: out,
        map: SpanMap::new(replacements),
        expansions,
        notes,
    }
}

#[cfg(test)]
mod tests;
