//! C type definitions in scripts: the text of one `struct`, `union`,
//! `enum` or `typedef` definition → [`CDefinition`]s. Declarators follow C
//! (`int *z[4]`, `char (*p)[8]`, bitfields `unsigned a:4, b:8`); enum
//! values and array sizes are constant expressions over earlier
//! enumerators. Layout is the checker's business.

use std::collections::HashMap;

use crate::frontend::ast::{CDefinition, CEnum, CMember, CRecord, CType, Span};
use crate::frontend::diag::ScriptError;
use crate::frontend::preprocess::cond::evaluate;
use crate::frontend::preprocess::lex::{TokKind, lex};
use crate::frontend::preprocess::macros::{Origin, PpTok};

/// Words that make up C's built-in type names, in any order.
const TYPE_WORDS: [&str; 10] = [
    "void", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "_Bool",
];

/// Qualifiers and storage classes a declaration may carry; they change
/// nothing a script can observe.
const IGNORED_WORDS: [&str; 7] = [
    "const",
    "volatile",
    "restrict",
    "__restrict",
    "static",
    "extern",
    "register",
];

/// Enumerator values known so far in the script, for later definitions.
pub type Enumerators = HashMap<String, i64>;

/// Parses one definition written at `base` in the script.
pub fn parse(text: &str, base: usize, known: &mut Enumerators) -> Result<CDefinition, ScriptError> {
    let tokens: Vec<PpTok> = lex(text)
        .into_iter()
        .filter(|t| t.kind != TokKind::Newline)
        .map(|t| {
            let origin = Origin::Source(base + t.start, base + t.end);
            PpTok::new(t.kind, &text[t.start..t.end], t.space_before, origin)
        })
        .collect();
    let mut parser = Parser {
        tokens: &tokens,
        at: 0,
        known,
        end: base + text.len(),
    };
    let definition = parser.definition()?;
    match parser.peek() {
        None => Ok(definition),
        Some(t) => Err(parser.error_at(t, format!("unexpected `{}` after the definition", t.text))),
    }
}

struct Parser<'t, 'k> {
    tokens: &'t [PpTok],
    at: usize,
    known: &'k mut Enumerators,
    /// The offset just past the definition, where "ends too early" points.
    end: usize,
}

/// A type transformation a declarator applies, innermost first.
#[derive(Clone, Copy)]
enum Derive {
    Pointer,
    Array(u32),
    Function,
}

impl Parser<'_, '_> {
    fn peek(&self) -> Option<&PpTok> {
        self.tokens.get(self.at)
    }

    fn peek_is(&self, text: &str) -> bool {
        self.peek().is_some_and(|t| &*t.text == text)
    }

    fn eat(&mut self, text: &str) -> bool {
        let found = self.peek_is(text);
        self.at += usize::from(found);
        found
    }

    fn span_of(t: &PpTok) -> Span {
        match t.origin {
            Origin::Source(a, b) | Origin::Expanded(a, b) => Span::new(a, b),
        }
    }

    fn here(&self) -> Span {
        self.peek()
            .map_or(Span::new(self.end, self.end), Self::span_of)
    }

    fn error_at(&self, t: &PpTok, message: String) -> ScriptError {
        ScriptError::new(Self::span_of(t), message)
    }

    fn expect(&mut self, text: &str) -> Result<(), ScriptError> {
        if self.eat(text) {
            return Ok(());
        }
        let found = self
            .peek()
            .map_or("the end".into(), |t| format!("`{}`", t.text));
        Err(ScriptError::new(
            self.here(),
            format!("expected `{text}`, found {found}"),
        ))
    }

    fn ident(&mut self) -> Option<(String, Span)> {
        let t = self.peek().filter(|t| t.kind == TokKind::Ident)?.clone();
        self.at += 1;
        Some((t.text.to_string(), Self::span_of(&t)))
    }

    fn definition(&mut self) -> Result<CDefinition, ScriptError> {
        let start = self.here();
        if self.eat("typedef") {
            let base = self.specifiers()?;
            let (name, ty, span) = self.declarator(base)?;
            let name = name.ok_or_else(|| ScriptError::new(span, "a typedef needs a name"))?;
            self.expect(";")?;
            return Ok(CDefinition::Typedef {
                name,
                ty,
                span: start.to(span),
            });
        }
        let definition = match self.specifiers()? {
            CType::Record(record) => CDefinition::Record(*record),
            CType::Enum(e) => CDefinition::Enum(*e),
            CType::Named { name, span } => {
                let or_declaration = if name.starts_with("enum") {
                    ""
                } else {
                    " or `;`"
                };
                return Err(ScriptError::new(
                    start.to(span),
                    format!("expected a `{{ … }}` body{or_declaration} after `{name}`"),
                ));
            }
            CType::Pointer(_) | CType::Array(..) => {
                unreachable!("specifiers() returns no derived types")
            }
        };
        self.eat(";");
        Ok(definition)
    }

    /// The type part of a declaration: built-in words, a typedef name, or
    /// a struct, union or enum (defined here or named).
    fn specifiers(&mut self) -> Result<CType, ScriptError> {
        let start = self.here();
        let mut words: Vec<String> = Vec::new();
        let mut named = None;
        while let Some(t) = self.peek().cloned() {
            let word = &*t.text;
            if IGNORED_WORDS.contains(&word) {
                self.at += 1;
            } else if is_attribute(word) {
                return Err(attribute_refused(&t));
            } else if TYPE_WORDS.contains(&word) {
                words.push(word.to_string());
                self.at += 1;
            } else if matches!(word, "struct" | "union" | "enum")
                && words.is_empty()
                && named.is_none()
            {
                self.at += 1;
                named = Some(self.tagged(word, Self::span_of(&t))?);
            } else if t.kind == TokKind::Ident && words.is_empty() && named.is_none() {
                self.at += 1;
                named = Some(CType::Named {
                    name: word.to_string(),
                    span: Self::span_of(&t),
                });
            } else {
                break;
            }
        }
        match (named, words.is_empty()) {
            (Some(ty), true) => Ok(ty),
            (None, false) => Ok(CType::Named {
                name: builtin_name(&words),
                span: start.to(self.previous_span()),
            }),
            (Some(_), false) => Err(ScriptError::new(start, "conflicting type names")),
            (None, true) => Err(ScriptError::new(start, "expected a type")),
        }
    }

    fn previous_span(&self) -> Span {
        self.tokens
            .get(self.at.wrapping_sub(1))
            .map_or(Span::new(self.end, self.end), Self::span_of)
    }

    /// After `struct`/`union`/`enum`: a name, a body, or both.
    fn tagged(&mut self, tag: &str, start: Span) -> Result<CType, ScriptError> {
        let name = self.ident();
        if !self.peek_is("{") {
            let Some((name, span)) = name else {
                return Err(ScriptError::new(
                    self.here(),
                    format!("`{tag}` needs a name or a body"),
                ));
            };
            if tag != "enum" && self.peek_is(";") && self.at + 1 == self.tokens.len() {
                return Ok(CType::Record(Box::new(CRecord {
                    union: tag == "union",
                    name: Some(name),
                    members: None,
                    span: start.to(span),
                })));
            }
            return Ok(CType::Named {
                name: format!("{tag} {name}"),
                span: start.to(span),
            });
        }
        let name = name.map(|(n, _)| n);
        if tag == "enum" {
            let values = self.enumerators()?;
            return Ok(CType::Enum(Box::new(CEnum {
                name,
                values,
                span: start.to(self.previous_span()),
            })));
        }
        let members = self.members()?;
        Ok(CType::Record(Box::new(CRecord {
            union: tag == "union",
            name,
            members: Some(members),
            span: start.to(self.previous_span()),
        })))
    }

    /// `{ member; ... }`; the last `;` may be left out.
    fn members(&mut self) -> Result<Vec<CMember>, ScriptError> {
        self.expect("{")?;
        let mut members = Vec::new();
        while !self.eat("}") {
            if self.eat(";") {
                continue;
            }
            let base = self.specifiers()?;
            if self.peek_is(";") || self.peek_is("}") {
                let span = self.previous_span();
                members.push(CMember {
                    name: None,
                    ty: base,
                    bits: None,
                    span,
                });
                continue;
            }
            loop {
                members.push(self.member(base.clone())?);
                if !self.eat(",") {
                    break;
                }
            }
            if !self.peek_is("}") {
                self.expect(";")?;
            }
        }
        Ok(members)
    }

    /// One declarator of a member, with its bitfield width.
    fn member(&mut self, base: CType) -> Result<CMember, ScriptError> {
        let (name, ty, span) = if self.peek_is(":") {
            (None, base, self.here())
        } else {
            self.declarator(base)?
        };
        if let Some(t) = self.peek().filter(|t| is_attribute(&t.text)) {
            return Err(attribute_refused(t));
        }
        let bits = if self.eat(":") {
            let (value, _) = self.constant(&[",", ";", "}"])?;
            let bits = u32::try_from(value)
                .ok()
                .filter(|&b| b <= 64)
                .ok_or_else(|| {
                    ScriptError::new(span, format!("bitfield width {value} is out of range"))
                })?;
            Some(bits)
        } else {
            None
        };
        if name.is_none() && bits.is_none() {
            return Err(ScriptError::new(span, "a member needs a name"));
        }
        Ok(CMember {
            name,
            ty,
            bits,
            span,
        })
    }

    /// A declarator applied to `base`: the declared name (if any), its type
    /// and its span.
    fn declarator(&mut self, base: CType) -> Result<(Option<String>, CType, Span), ScriptError> {
        let start = self.here();
        let (name, derives) = self.derives()?;
        let mut ty = base;
        for derive in derives {
            ty = match derive {
                Derive::Pointer => CType::Pointer(Box::new(ty)),
                Derive::Array(n) => CType::Array(Box::new(ty), n),
                // A function is only ever pointed to; its pointer is an address.
                Derive::Function => CType::Named {
                    name: "void".into(),
                    span: start,
                },
            };
        }
        Ok((name, ty, start.to(self.previous_span())))
    }

    /// The name and the derivations (innermost first) of a declarator.
    fn derives(&mut self) -> Result<(Option<String>, Vec<Derive>), ScriptError> {
        let mut pointers = 0;
        while self.eat("*") {
            pointers += 1;
            while self
                .peek()
                .is_some_and(|t| IGNORED_WORDS.contains(&&*t.text))
            {
                self.at += 1;
            }
        }
        let nested = self.peek_is("(")
            && self
                .tokens
                .get(self.at + 1)
                .is_some_and(|t| matches!(&*t.text, "*" | "("));
        let (name, inner) = if nested {
            self.at += 1;
            let inner = self.derives()?;
            self.expect(")")?;
            inner
        } else {
            (self.ident().map(|(n, _)| n), Vec::new())
        };
        let mut suffixes = Vec::new();
        loop {
            if self.eat("[") {
                let (n, span) = self.constant(&["]"])?;
                self.expect("]")?;
                let n = u32::try_from(n).map_err(|_| {
                    ScriptError::new(span, format!("array length {n} is out of range"))
                })?;
                suffixes.push(Derive::Array(n));
            } else if self.eat("(") {
                self.skip_balanced()?;
                suffixes.push(Derive::Function);
            } else {
                break;
            }
        }
        let mut derives = vec![Derive::Pointer; pointers];
        derives.extend(suffixes.into_iter().rev());
        derives.extend(inner);
        Ok((name, derives))
    }

    /// Skips a function's parameter list after its `(`.
    fn skip_balanced(&mut self) -> Result<(), ScriptError> {
        let mut depth = 1;
        while depth > 0 {
            let t = self
                .peek()
                .ok_or_else(|| ScriptError::new(self.here(), "unclosed `(`"))?;
            depth += match &*t.text {
                "(" => 1,
                ")" => -1,
                _ => 0,
            };
            self.at += 1;
        }
        Ok(())
    }

    /// `{ A, B = 2, C }`: each value is the previous one plus one unless given.
    fn enumerators(&mut self) -> Result<Vec<(String, i64)>, ScriptError> {
        self.expect("{")?;
        let mut values = Vec::new();
        let mut next = 0i64;
        while !self.eat("}") {
            let Some((name, _)) = self.ident() else {
                let found = self
                    .peek()
                    .map_or("the end".into(), |t| format!("`{}`", t.text));
                return Err(ScriptError::new(
                    self.here(),
                    format!("expected an enumerator name, found {found}"),
                ));
            };
            if self.eat("=") {
                next = self.constant(&[",", "}"])?.0;
            }
            self.known.insert(name.clone(), next);
            values.push((name, next));
            next = next.wrapping_add(1);
            if !self.eat(",") {
                self.expect("}")?;
                break;
            }
        }
        Ok(values)
    }

    /// A constant expression up to one of `stops` (at bracket depth 0),
    /// and its span.
    fn constant(&mut self, stops: &[&str]) -> Result<(i64, Span), ScriptError> {
        let start = self.at;
        let mut depth = 0i32;
        while let Some(t) = self.peek() {
            match &*t.text {
                "(" | "[" => depth += 1,
                ")" | "]" if depth > 0 => depth -= 1,
                stop if depth == 0 && stops.contains(&stop) => break,
                _ => {}
            }
            self.at += 1;
        }
        let tokens = &self.tokens[start..self.at];
        let span = match (tokens.first(), tokens.last()) {
            (Some(a), Some(b)) => Self::span_of(a).to(Self::span_of(b)),
            _ => self.here(),
        };
        let known = &*self.known;
        let lookup = |name: &str| {
            known
                .get(name)
                .copied()
                .ok_or_else(|| format!("`{name}` is not a constant defined before"))
        };
        evaluate(tokens, &lookup)
            .map(|n| (n.as_i64(), span))
            .map_err(|e| ScriptError::new(span, e))
    }
}

/// The canonical spelling of C's built-in type words: `int unsigned` and
/// `unsigned` are `unsigned int`, `long int` is `long`.
fn builtin_name(words: &[String]) -> String {
    let count = |w: &str| words.iter().filter(|x| *x == w).count();
    let unsigned = count("unsigned") > 0;
    let signed = count("signed") > 0;
    let longs = count("long");
    let base = if count("char") > 0 {
        "char"
    } else if count("short") > 0 {
        "short"
    } else if count("double") > 0 {
        "double"
    } else if count("float") > 0 {
        "float"
    } else if count("void") > 0 {
        "void"
    } else if count("_Bool") > 0 {
        "_Bool"
    } else {
        "int"
    };
    let base = match (base, longs) {
        ("int", 1) => "long",
        ("int", n) if n >= 2 => "long long",
        ("double", n) if n >= 1 => "long double",
        (other, _) => other,
    };
    match (unsigned, signed, base) {
        (true, _, b) => format!("unsigned {b}"),
        (_, true, "char") => "signed char".into(),
        (_, _, b) => b.into(),
    }
}

/// GCC's layout attributes, which clang applies to bpftrace's definitions.
fn is_attribute(word: &str) -> bool {
    word.starts_with("__attribute") || matches!(word, "__aligned" | "__packed")
}

/// The refusal of an attribute at `t`, with the layout to write instead.
fn attribute_refused(t: &PpTok) -> ScriptError {
    ScriptError::new(
        Parser::span_of(t),
        format!("`{}` is not supported in script type definitions", t.text),
    )
    .with_help(
        "script structs get C's natural layout: drop the attribute and spell the layout \
         out with padding members (`char __pad[4];`) where it differs",
    )
}

#[cfg(test)]
#[path = "cdecl_tests.rs"]
mod tests;
