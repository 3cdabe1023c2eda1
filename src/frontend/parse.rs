//! Parser: script text → [`Script`], or [`ScriptErrors`] pointing into the text.
//!
//! Three passes: a lexical scan reports unterminated strings and comments and
//! bounds bracket nesting (`parse/scan.rs`); the pest grammar
//! (`grammar/wprof.pest`) builds a parse tree, its failures turned into readable
//! errors (`parse/syntax.rs`); this file and `parse/expr.rs` lower the parse tree
//! to the AST. pest types stay inside this module.

mod cdecl;
mod expr;
mod scan;
mod syntax;
#[cfg(test)]
mod tests;

use pest::Parser as _;

use super::ast::{
    Block, ProbeBlock, ProbeSpec, Record, RecordItem, Script, Span, SpanBlock, SpanEnd, Stmt,
    StmtKind,
};
use super::diag::{ScriptError, ScriptErrors};
use crate::capture::model::RecordOrigin;

#[derive(pest_derive::Parser)]
#[grammar = "grammar/wprof.pest"]
struct Grammar;

type Pair<'i> = pest::iterators::Pair<'i, Rule>;

/// How deep the syntax tree may grow: later stages walk it recursively, so the
/// bound keeps every stage within the default 2 MiB thread stack.
const MAX_DEPTH: usize = 256;

/// Parses a whole script; `name` is its path, or [`super::diag::INLINE_SCRIPT_NAME`].
pub fn parse(source: &str, name: &str) -> Result<Script, ScriptErrors> {
    parse_text(source).map_err(|errors| ScriptErrors::new(name, source, errors))
}

/// Parses a C type as a declaration writes it (`const char *const *`,
/// `struct sk_buff *`), as tracepoint formats give their fields' types.
pub fn c_type(text: &str) -> Result<super::ast::CType, ScriptError> {
    let declaration = format!("typedef {text} __wprof_type;");
    match cdecl::parse(&declaration, 0, &mut cdecl::Enumerators::new())? {
        super::ast::CDefinition::Typedef { ty, .. } => Ok(ty),
        _ => unreachable!("a typedef parses as one"),
    }
}

/// Parses a whole script; errors point into `source`.
pub fn parse_text(source: &str) -> Result<Script, Vec<ScriptError>> {
    super::limits::check_size(source).map_err(|error| vec![error])?;
    let scanned = scan::scan(source);
    if !scanned.errors.is_empty() {
        return Err(scanned.errors);
    }
    let mut pairs = Grammar::parse(Rule::script, source)
        .map_err(|error| vec![syntax::error(source, &error, &scanned)])?;
    let root = pairs
        .next()
        .expect("grammar: `script` is the only top-level pair");
    let mut builder = Builder::default();
    match builder.script(root) {
        Ok(script) if builder.errors.is_empty() => Ok(script),
        _ => Err(builder.errors),
    }
}

/// A fatal error was recorded in [`Builder::errors`]; stop building.
struct Abort;

type Built<T> = Result<T, Abort>;

/// Lowers pest pairs to AST nodes, collecting errors found on the way
/// (bad literals) and bounding the tree's depth.
#[derive(Default)]
struct Builder {
    errors: Vec<ScriptError>,
    /// Worst-case depth of the tree node being built.
    depth: usize,
    /// Enumerators of the script's enums so far, for later constant expressions.
    enumerators: cdecl::Enumerators,
}

impl Builder {
    /// Accounts for `levels` more tree levels, failing past [`MAX_DEPTH`].
    fn enter(&mut self, span: Span, levels: usize) -> Built<()> {
        self.depth += levels;
        if self.depth <= MAX_DEPTH {
            return Ok(());
        }
        self.errors.push(too_deep(span));
        Err(Abort)
    }

    fn leave(&mut self, levels: usize) {
        self.depth -= levels;
    }

    fn script(&mut self, pair: Pair) -> Built<Script> {
        let mut script = Script::default();
        for item in pair.into_inner() {
            match item.as_rule() {
                Rule::probe => script.probes.push(self.probe(item)?),
                Rule::span_block => script.spans.push(self.span_block(item)?),
                Rule::c_definition => {
                    let at = item.as_span().start();
                    match cdecl::parse(item.as_str(), at, &mut self.enumerators) {
                        Ok(definition) => script.types.push(definition),
                        Err(error) => self.errors.push(error),
                    }
                }
                _ => {}
            }
        }
        Ok(script)
    }

    fn probe(&mut self, pair: Pair) -> Built<ProbeBlock> {
        let span = span_of(&pair);
        let mut specs = Vec::new();
        let mut predicate = None;
        let mut record = None;
        let mut body = None;
        for part in significant(pair) {
            match part.as_rule() {
                Rule::probe_spec => specs.push(probe_spec(part)),
                Rule::predicate => predicate = Some(self.expr(only_child(part))?),
                Rule::record => record = Some(self.record(part)?),
                _ => body = Some(self.block(part)?),
            }
        }
        let body = body.unwrap_or(Block {
            stmts: Vec::new(),
            span: Span::new(span.end, span.end),
        });
        Ok(ProbeBlock {
            specs,
            predicate,
            record,
            body,
            origin: RecordOrigin::Script,
            span,
        })
    }

    fn record(&mut self, pair: Pair) -> Built<Record> {
        let span = span_of(&pair);
        let mut items = Vec::new();
        for item in significant(pair) {
            let item_span = span_of(&item);
            let mut parts = significant(item);
            let first = parts.next().expect("grammar: an item has a value");
            let (name, value) = match first.as_rule() {
                Rule::item_name => {
                    let value = parts.next().expect("grammar: `name =` has a value");
                    (Some(first.as_str().to_string()), value)
                }
                _ => (None, first),
            };
            items.push(RecordItem {
                name,
                value: self.expr(value)?,
                span: item_span,
            });
        }
        Ok(Record { items, span })
    }

    fn span_block(&mut self, pair: Pair) -> Built<SpanBlock> {
        let span = span_of(&pair);
        let mut name = String::new();
        let mut key = None;
        let mut ends = Vec::new();
        for part in significant(pair) {
            match part.as_rule() {
                Rule::span_name => name = part.as_str().to_string(),
                Rule::span_end => ends.push(self.span_end(part)?),
                Rule::expr => key = Some(self.expr(part)?),
                _ => {}
            }
        }
        let [start, end]: [SpanEnd; 2] = ends.try_into().expect("grammar: a span has two ends");
        Ok(SpanBlock {
            name,
            key,
            start,
            end,
            origin: RecordOrigin::Script,
            span,
        })
    }

    fn span_end(&mut self, pair: Pair) -> Built<SpanEnd> {
        let span = span_of(&pair);
        let mut specs = Vec::new();
        let mut predicate = None;
        let mut record = None;
        for part in significant(pair) {
            match part.as_rule() {
                Rule::probe_spec => specs.push(probe_spec(part)),
                Rule::span_pred => predicate = Some(self.expr(only_child(part))?),
                Rule::record => record = Some(self.record(part)?),
                _ => {}
            }
        }
        Ok(SpanEnd {
            specs,
            predicate,
            record,
            span,
        })
    }

    fn block(&mut self, pair: Pair) -> Built<Block> {
        let span = span_of(&pair);
        self.enter(span, 1)?;
        let stmts = significant(pair)
            .map(|stmt| self.stmt(stmt))
            .collect::<Built<Vec<_>>>()?;
        self.leave(1);
        Ok(Block { stmts, span })
    }

    fn stmt(&mut self, pair: Pair) -> Built<Stmt> {
        let span = span_of(&pair);
        let kind = match pair.as_rule() {
            Rule::if_stmt => self.if_stmt(pair)?,
            Rule::while_stmt => {
                let (cond, body) = self.head_and_block(pair)?;
                StmtKind::While { cond, body }
            }
            Rule::unroll_stmt => {
                let (count, body) = self.head_and_block(pair)?;
                StmtKind::Unroll { count, body }
            }
            Rule::let_stmt | Rule::assign_stmt => self.assign(pair)?,
            Rule::record_stmt => self.record_stmt(pair)?,
            Rule::expr_stmt => StmtKind::Expr(self.expr(only_child(pair))?),
            Rule::break_stmt => StmtKind::Break,
            Rule::continue_stmt => StmtKind::Continue,
            Rule::return_stmt => StmtKind::Return,
            rule => unreachable!("grammar: {rule:?} is not a statement"),
        };
        Ok(Stmt { kind, span })
    }

    /// `if (cond) { } [else if ... | else { }]`; an `else if` becomes a block
    /// holding one `If` statement.
    fn if_stmt(&mut self, pair: Pair) -> Built<StmtKind> {
        let mut parts = significant(pair);
        let cond = self.expr(parts.next().expect("grammar: if has a condition"))?;
        let then = self.block(parts.next().expect("grammar: if has a block"))?;
        let otherwise = match parts.next() {
            None => None,
            Some(other) if other.as_rule() == Rule::block => Some(self.block(other)?),
            Some(nested) => {
                let span = span_of(&nested);
                self.enter(span, 1)?;
                let stmt = self.stmt(nested)?;
                self.leave(1);
                Some(Block {
                    stmts: vec![stmt],
                    span,
                })
            }
        };
        Ok(StmtKind::If {
            cond,
            then,
            otherwise,
        })
    }

    /// `record NAME < items >`
    fn record_stmt(&mut self, pair: Pair) -> Built<StmtKind> {
        let mut parts = significant(pair);
        let name = parts
            .next()
            .expect("grammar: a record statement has a name");
        let record = self.record(parts.next().expect("grammar: a record statement has items"))?;
        Ok(StmtKind::Record {
            name: name.as_str().to_owned(),
            record,
        })
    }

    /// The `(expr) { block }` shared by `while` and `unroll`.
    fn head_and_block(&mut self, pair: Pair) -> Built<(super::ast::Expr, Block)> {
        let mut parts = significant(pair);
        let head = self.expr(parts.next().expect("grammar: loop has a head"))?;
        let body = self.block(parts.next().expect("grammar: loop has a block"))?;
        Ok((head, body))
    }

    /// `target op= value`, `target = value` and `let $x = value`.
    fn assign(&mut self, pair: Pair) -> Built<StmtKind> {
        let mut op = None;
        let mut exprs = Vec::with_capacity(2);
        for part in significant(pair) {
            match part.as_rule() {
                Rule::assign_op => op = expr::compound_op(part.as_str()),
                Rule::var => exprs.push(expr::var(&part)),
                Rule::operand => exprs.push(self.operand(part)?),
                _ => exprs.push(self.expr(part)?),
            }
        }
        let [target, value] = <[_; 2]>::try_from(exprs)
            .unwrap_or_else(|_| unreachable!("grammar: assignment has two sides"));
        Ok(StmtKind::Assign { target, op, value })
    }
}

/// The error for input nested past [`MAX_DEPTH`] (or past what pest's stack allows).
fn too_deep(span: Span) -> ScriptError {
    ScriptError::new(span, "the script is nested too deeply")
        .with_label("nesting limit reached here")
        .with_help("split deeply nested expressions or blocks using scratch variables")
}

/// `provider:part:part` split at `:`; quoted parts lose their quotes and
/// escapes (and keep an offset after them).
fn probe_spec(pair: Pair) -> ProbeSpec {
    let span = span_of(&pair);
    let mut inner = pair.into_inner();
    let provider = inner
        .next()
        .expect("grammar: a probe spec starts with its provider")
        .as_str()
        .to_owned();
    let parts = inner
        .map(|part| match part.as_rule() {
            Rule::quoted_part => part
                .into_inner()
                .map(|p| match p.as_rule() {
                    Rule::quoted_text => unescape_quoted(p.as_str()),
                    _ => p.as_str().to_owned(),
                })
                .collect(),
            _ => part.as_str().to_owned(),
        })
        .collect();
    ProbeSpec {
        provider,
        parts,
        span,
    }
}

/// A quoted probe part's text: `\"` and `\\` stand for `"` and `\`
/// (`usdt:f:p:"\"name\""` names the probe `"name"`).
fn unescape_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('\\', Some(next @ ('"' | '\\'))) => {
                out.push(next);
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

/// The pair's byte range without trailing whitespace, which pest includes when
/// a rule ends in an optional part that matched nothing.
fn span_of(pair: &Pair) -> Span {
    let start = pair.as_span().start();
    Span::new(start, start + pair.as_str().trim_end().len())
}

/// Children that carry meaning: punctuation and keywords are dropped.
fn significant(pair: Pair) -> impl Iterator<Item = Pair> {
    pair.into_inner().filter(|child| !is_token(child.as_rule()))
}

/// The single meaningful child of a wrapper rule.
fn only_child(pair: Pair) -> Pair {
    significant(pair)
        .next()
        .expect("grammar: wrapper rule has one child")
}

/// Rules that only exist so syntax errors can name them.
fn is_token(rule: Rule) -> bool {
    matches!(
        rule,
        Rule::semi
            | Rule::comma
            | Rule::lparen
            | Rule::rparen
            | Rule::lbrace
            | Rule::rbrace
            | Rule::rbracket
            | Rule::question
            | Rule::colon
            | Rule::langle
            | Rule::rangle
            | Rule::kw_span
            | Rule::kw_by
            | Rule::pred_end
            | Rule::kw_if
            | Rule::kw_else
            | Rule::kw_while
            | Rule::kw_unroll
            | Rule::kw_let
            | Rule::kw_record
    )
}
