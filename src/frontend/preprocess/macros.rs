//! Macros: `#define` bodies → a table, and token streams → their expansion
//! (object-like and function-like macros, `#` and `##`, `__VA_ARGS__`),
//! rescanned as C does, a macro never expanding inside its own expansion.
//! Every expanded token remembers the script text its outermost use
//! covered, so the expansion can replace exactly that text.

use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use super::lex::{TokKind, lex};

/// Tokens one expansion may produce; past this a definition is runaway.
const MAX_EXPANSION: usize = 1 << 20;

/// Where a token came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Written in the text at these byte offsets.
    Source(usize, usize),
    /// Produced by expanding a macro use written at these offsets.
    Expanded(usize, usize),
}

impl Origin {
    fn range(self) -> (usize, usize) {
        match self {
            Origin::Source(a, b) | Origin::Expanded(a, b) => (a, b),
        }
    }
}

/// A token being expanded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PpTok {
    pub kind: TokKind,
    pub text: Rc<str>,
    pub space_before: bool,
    pub origin: Origin,
    /// Macros that may not expand this token again (C's hide set).
    hide: Vec<Rc<str>>,
}

impl PpTok {
    pub fn new(kind: TokKind, text: &str, space_before: bool, origin: Origin) -> PpTok {
        PpTok {
            kind,
            text: Rc::from(text),
            space_before,
            origin,
            hide: Vec::new(),
        }
    }

    pub fn is(&self, kind: TokKind, text: &str) -> bool {
        self.kind == kind && &*self.text == text
    }
}

/// The tokens of `text` (no line ends), all with origin `origin`, or with
/// their own offsets (plus `base`) when `origin` is `None`.
pub fn tokens_of(text: &str, base: usize, origin: Option<Origin>) -> Vec<PpTok> {
    lex(text)
        .into_iter()
        .filter(|t| t.kind != TokKind::Newline)
        .map(|t| {
            let origin = origin.unwrap_or(Origin::Source(base + t.start, base + t.end));
            PpTok::new(t.kind, &text[t.start..t.end], t.space_before, origin)
        })
        .collect()
}

/// One `#define`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Macro {
    /// Parameter names of a function-like macro; `None` for object-like.
    pub params: Option<Vec<String>>,
    /// The last parameter is `...` (`__VA_ARGS__`) or `name...`.
    pub variadic: bool,
    pub body: Vec<PpTok>,
}

/// Why a definition or expansion failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MacroError(pub String);

/// `NAME BODY` or `NAME(PARAMS) BODY`: the text after `#define`.
pub fn parse_define(tokens: &[PpTok]) -> Result<(String, Macro), MacroError> {
    let Some(name) = tokens.first().filter(|t| t.kind == TokKind::Ident) else {
        return Err(MacroError("`#define` needs a macro name".into()));
    };
    let function_like = tokens
        .get(1)
        .is_some_and(|t| t.is(TokKind::Punct, "(") && !t.space_before);
    if !function_like {
        let body = tokens[1..].to_vec();
        return Ok((
            name.text.to_string(),
            Macro {
                params: None,
                variadic: false,
                body,
            },
        ));
    }
    let mut params = Vec::new();
    let mut variadic = false;
    let mut at = 2;
    loop {
        let token = tokens.get(at).ok_or_else(|| {
            MacroError(format!(
                "the parameter list of `{}` is not closed",
                name.text
            ))
        })?;
        at += 1;
        match (token.kind, &*token.text) {
            (TokKind::Punct, ")") => break,
            (TokKind::Punct, ",") => {}
            (TokKind::Punct, "...") => {
                variadic = true;
                params.push("__VA_ARGS__".to_string());
            }
            (TokKind::Ident, param) if !variadic => {
                params.push(param.to_string());
                if tokens.get(at).is_some_and(|t| t.is(TokKind::Punct, "...")) {
                    variadic = true;
                    at += 1;
                }
            }
            _ => {
                return Err(MacroError(format!(
                    "`{}` in the parameter list of `{}` is not a parameter name",
                    token.text, name.text
                )));
            }
        }
    }
    Ok((
        name.text.to_string(),
        Macro {
            params: Some(params),
            variadic,
            body: tokens[at..].to_vec(),
        },
    ))
}

/// The macros defined so far.
#[derive(Clone, Debug, Default)]
pub struct MacroTable {
    macros: HashMap<String, Macro>,
}

impl MacroTable {
    pub fn define(&mut self, name: String, mac: Macro) {
        self.macros.insert(name, mac);
    }

    pub fn undef(&mut self, name: &str) {
        self.macros.remove(name);
    }

    pub fn is_defined(&self, name: &str) -> bool {
        self.macros.contains_key(name)
    }

    /// Expands every macro use in `input`, rescanning results.
    pub fn expand(&self, input: Vec<PpTok>) -> Result<Vec<PpTok>, MacroError> {
        let mut input: VecDeque<PpTok> = input.into();
        let mut out = Vec::with_capacity(input.len());
        let mut produced = 0usize;
        while let Some(token) = input.pop_front() {
            let mac = match token.kind {
                TokKind::Ident if !token.hide.iter().any(|h| **h == *token.text) => {
                    self.macros.get(&*token.text)
                }
                _ => None,
            };
            let Some(mac) = mac else {
                out.push(token);
                continue;
            };
            let expansion = match &mac.params {
                None => Some(self.object_body(&token, mac)?),
                Some(_) => self.function_use(&token, mac, &mut input)?,
            };
            match expansion {
                Some(tokens) => {
                    produced += tokens.len();
                    if produced > MAX_EXPANSION {
                        return Err(MacroError(format!(
                            "the expansion of `{}` grows past {MAX_EXPANSION} tokens",
                            token.text
                        )));
                    }
                    for t in tokens.into_iter().rev() {
                        input.push_front(t);
                    }
                }
                None => out.push(token),
            }
        }
        Ok(out)
    }

    fn object_body(&self, name: &PpTok, mac: &Macro) -> Result<Vec<PpTok>, MacroError> {
        let body = paste(mac.body.clone())?;
        let mut hide = name.hide.clone();
        hide.push(name.text.clone());
        Ok(retag(body, name.origin, &hide, name.space_before))
    }

    /// The expansion of a function-like macro use, or `None` when no `(`
    /// follows (the name is then an ordinary identifier).
    fn function_use(
        &self,
        name: &PpTok,
        mac: &Macro,
        input: &mut VecDeque<PpTok>,
    ) -> Result<Option<Vec<PpTok>>, MacroError> {
        if !input.front().is_some_and(|t| t.is(TokKind::Punct, "(")) {
            return Ok(None);
        }
        let (args, close) = collect_args(&name.text, input)?;
        let params = mac.params.as_deref().unwrap_or_default();
        let args = match_args(&name.text, params, mac.variadic, args)?;
        let (start, _) = name.origin.range();
        let (_, end) = close.origin.range();
        let origin = Origin::Expanded(start, end);
        let body = self.substitute(mac, params, &args)?;
        let body = paste(body)?;
        let mut hide: Vec<Rc<str>> = name
            .hide
            .iter()
            .filter(|h| close.hide.contains(h))
            .cloned()
            .collect();
        hide.push(name.text.clone());
        Ok(Some(retag(body, origin, &hide, name.space_before)))
    }

    /// The body with parameters replaced: stringified after `#`, as written
    /// next to `##`, fully expanded elsewhere.
    fn substitute(
        &self,
        mac: &Macro,
        params: &[String],
        args: &[Vec<PpTok>],
    ) -> Result<Vec<PpTok>, MacroError> {
        let param_of = |t: &PpTok| {
            (t.kind == TokKind::Ident)
                .then(|| params.iter().position(|p| **p == *t.text))
                .flatten()
        };
        let mut out = Vec::new();
        let body = &mac.body;
        let mut i = 0;
        while i < body.len() {
            let token = &body[i];
            if token.is(TokKind::Punct, "#")
                && let Some(n) = body.get(i + 1).and_then(param_of)
            {
                out.push(PpTok::new(
                    TokKind::Str,
                    &stringify(&args[n]),
                    token.space_before,
                    token.origin,
                ));
                i += 2;
                continue;
            }
            let Some(n) = param_of(token) else {
                out.push(token.clone());
                i += 1;
                continue;
            };
            let pasted = body.get(i + 1).is_some_and(|t| t.is(TokKind::Punct, "##"))
                || (i > 0 && body[i - 1].is(TokKind::Punct, "##"));
            let mut arg = if pasted {
                args[n].clone()
            } else {
                self.expand(args[n].clone())?
            };
            if let Some(first) = arg.first_mut() {
                first.space_before = token.space_before;
            }
            out.extend(arg);
            i += 1;
        }
        Ok(out)
    }
}

/// The arguments of a use, split at top-level commas, and the closing `)`.
fn collect_args(
    name: &str,
    input: &mut VecDeque<PpTok>,
) -> Result<(Vec<Vec<PpTok>>, PpTok), MacroError> {
    input.pop_front();
    let mut args = vec![Vec::new()];
    let mut depth = 0usize;
    while let Some(token) = input.pop_front() {
        match (token.kind, &*token.text) {
            (TokKind::Punct, ")") if depth == 0 => return Ok((args, token)),
            (TokKind::Punct, ",") if depth == 0 => {
                args.push(Vec::new());
                continue;
            }
            (TokKind::Punct, "(") => depth += 1,
            (TokKind::Punct, ")") => depth -= 1,
            _ => {}
        }
        args.last_mut().expect("one argument at least").push(token);
    }
    Err(MacroError(format!(
        "the arguments of `{name}(` are not closed"
    )))
}

/// Arguments lined up with parameters; extra arguments of a variadic
/// macro join `__VA_ARGS__`.
fn match_args(
    name: &str,
    params: &[String],
    variadic: bool,
    mut args: Vec<Vec<PpTok>>,
) -> Result<Vec<Vec<PpTok>>, MacroError> {
    if params.is_empty() && args.len() == 1 && args[0].is_empty() {
        return Ok(Vec::new());
    }
    if variadic && args.len() > params.len() {
        let rest = args.split_off(params.len() - 1);
        let mut joined = Vec::new();
        for (i, arg) in rest.into_iter().enumerate() {
            if i > 0 {
                joined.push(PpTok::new(TokKind::Punct, ",", false, Origin::Source(0, 0)));
            }
            joined.extend(arg);
        }
        args.push(joined);
    }
    if variadic && args.len() + 1 == params.len() {
        args.push(Vec::new());
    }
    if args.len() != params.len() {
        return Err(MacroError(format!(
            "`{name}` takes {} argument{} but {} were given",
            params.len(),
            if params.len() == 1 { "" } else { "s" },
            args.len()
        )));
    }
    Ok(args)
}

/// Joins the tokens around each `##` into one token.
fn paste(body: Vec<PpTok>) -> Result<Vec<PpTok>, MacroError> {
    if !body.iter().any(|t| t.is(TokKind::Punct, "##")) {
        return Ok(body);
    }
    let mut out: Vec<PpTok> = Vec::with_capacity(body.len());
    let mut tokens = body.into_iter().peekable();
    while let Some(token) = tokens.next() {
        if !token.is(TokKind::Punct, "##") {
            out.push(token);
            continue;
        }
        let right = tokens.next();
        match (out.pop(), right) {
            (Some(left), Some(right)) => {
                let text = format!("{}{}", left.text, right.text);
                let mut lexed = tokens_of(&text, 0, Some(left.origin));
                if lexed.len() > 1 {
                    return Err(MacroError(format!(
                        "`##` joins `{}` and `{}` into `{text}`, which is not one token",
                        left.text, right.text
                    )));
                }
                let mut joined = lexed
                    .pop()
                    .unwrap_or_else(|| PpTok::new(TokKind::Other, "", false, left.origin));
                joined.space_before = left.space_before;
                out.push(joined);
            }
            (Some(only), None) | (None, Some(only)) => out.push(only),
            (None, None) => {}
        }
    }
    Ok(out)
}

/// `#arg`: the argument's text as a string literal.
fn stringify(arg: &[PpTok]) -> String {
    let text = join(arg);
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        if matches!(c, '"' | '\\') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

/// Tokens of an expansion: the use's origin and hide set, and the use's
/// leading space on the first.
fn retag(body: Vec<PpTok>, origin: Origin, hide: &[Rc<str>], space: bool) -> Vec<PpTok> {
    let (start, end) = origin.range();
    body.into_iter()
        .enumerate()
        .map(|(i, mut t)| {
            t.origin = Origin::Expanded(start, end);
            for h in hide {
                if !t.hide.contains(h) {
                    t.hide.push(h.clone());
                }
            }
            if i == 0 {
                t.space_before = space;
            }
            t
        })
        .collect()
}

/// Tokens as text, a space wherever one separated them.
pub fn join(tokens: &[PpTok]) -> String {
    let mut text = String::new();
    for (i, t) in tokens.iter().enumerate() {
        if i > 0 && t.space_before {
            text.push(' ');
        }
        text.push_str(&t.text);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(defines: &[&str]) -> MacroTable {
        let mut table = MacroTable::default();
        for d in defines {
            let (name, mac) = parse_define(&tokens_of(d, 0, None)).expect("defines");
            table.define(name, mac);
        }
        table
    }

    fn expand(table: &MacroTable, text: &str) -> String {
        join(&table.expand(tokens_of(text, 0, None)).expect("expands"))
    }

    /// Object-like macros expand and rescan; a macro does not expand inside itself.
    #[test]
    fn expands_object_like_macros() {
        let t = table(&[
            "A 1",
            "B (A+2)",
            "SELF SELF + 1",
            "PF_INET 2",
            "AF_INET PF_INET",
        ]);
        assert_eq!(expand(&t, "B * 2"), "(1+2) * 2");
        assert_eq!(expand(&t, "SELF"), "SELF + 1");
        assert_eq!(expand(&t, "AF_INET"), "2");
        assert_eq!(expand(&t, "@B[$A]"), "@B[$A]");
    }

    /// Function-like macros take arguments, expanded before substitution,
    /// and need a `(` to expand.
    #[test]
    fn expands_function_like_macros() {
        let t = table(&[
            "ADD(a, b) ((a) + (b))",
            "TWO 2",
            "STR(x) #x",
            "CAT(a, b) a ## b",
            "V(f, ...) f(__VA_ARGS__)",
        ]);
        assert_eq!(expand(&t, "ADD(TWO, ADD(1, 3))"), "((2) + (((1) + (3))))");
        assert_eq!(expand(&t, "ADD + 1"), "ADD + 1");
        assert_eq!(expand(&t, "STR(a \"b\")"), "\"a \\\"b\\\"\"");
        assert_eq!(expand(&t, "CAT(TW, O)"), "2");
        assert_eq!(expand(&t, "V(g, 1, 2)"), "g(1, 2)");
    }

    /// Expanded tokens carry the span of the whole use, nested uses included.
    #[test]
    fn expansions_remember_their_use() {
        let t = table(&["ADD(a, b) a + b", "ONE 1"]);
        let out = t.expand(tokens_of("x ADD(ONE, 2) y", 0, None)).unwrap();
        let origins: Vec<Origin> = out.iter().map(|t| t.origin).collect();
        assert_eq!(
            origins,
            [
                Origin::Source(0, 1),
                Origin::Expanded(2, 13),
                Origin::Expanded(2, 13),
                Origin::Expanded(2, 13),
                Origin::Source(14, 15)
            ]
        );
    }

    /// Wrong argument counts and runaway definitions are errors, not hangs.
    #[test]
    fn reports_bad_uses() {
        let t = table(&["F(a, b) a", "G(x) G(x) G(x)"]);
        let error = t.expand(tokens_of("F(1)", 0, None)).unwrap_err();
        assert_eq!(error.0, "`F` takes 2 arguments but 1 were given");
        let unclosed = t.expand(tokens_of("F(1, 2", 0, None)).unwrap_err();
        assert!(unclosed.0.contains("not closed"), "{unclosed:?}");
        assert_eq!(expand(&t, "G(1)"), "G(1) G(1)");
    }
}
