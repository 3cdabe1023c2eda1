//! Built-in variables and functions, each declared once, as ply's built-ins:
//! its name, how it is written, where it may stand (an expression, a
//! statement, a map aggregation, a record item), its signature and docs,
//! and in one impl how it is checked, how it lowers to BPF and how user
//! space prints what it sends.
//!
//! The stages look names up here and call the hooks; none matches on
//! built-in names (`args.NAME` is syntax, typed from the probe's context). Each family file ends with its `TABLE`; this module joins
//! them (a [`BuiltinId`] is an index into the joined table) and its tests
//! check that names are unique where they are looked up, that every entry
//! is documented and that every example compiles.

mod agg;
mod context;
mod kernel;
mod maps;
mod print;
mod record;
mod task;
mod text;
mod time;
mod types;
mod watch;

use std::io::{self, Write};
use std::sync::LazyLock;

use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::ast::{Expr, Span};
use crate::frontend::check::Checker;
use crate::frontend::check_record::RecordItems;
use crate::frontend::checked::{TCall, TExpr, TExprKind};
use crate::frontend::types::Type;
use crate::output::printer::{Printed, Printer};
use crate::vocab::AggFunc;
use crate::vocab::BuiltinMessage;

pub(crate) use crate::vocab::BuiltinId;

/// One built-in in one place of the language.
pub(crate) struct Entry {
    /// The word scripts write (`pid`; `arg` for `arg0`, `arg1`...).
    pub name: &'static str,
    /// How it is written.
    pub written: Written,
    /// The name takes a number (`arg0`, `arg1`...), given to the hooks.
    pub indexed: bool,
    /// Its uses as the docs show them: `str(ptr[, len])`.
    pub signature: &'static str,
    pub doc: &'static str,
    /// A whole script using it, which compiles.
    pub example: &'static str,
    pub kind: Kind,
}

/// How a built-in is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// A bare word: `pid`.
    Word,
    /// A call: `str(p)`, `exit()`.
    Call,
    /// Either: `stack` or `stack(timer)`.
    WordOrCall,
}

impl Written {
    /// Whether a use written as a call (or not) is written this way.
    pub(crate) fn fits(self, call: bool) -> bool {
        match self {
            Written::Word => !call,
            Written::Call => call,
            Written::WordOrCall => true,
        }
    }
}

/// Where a built-in stands, with its hooks.
pub(crate) enum Kind {
    /// An expression with a value.
    Expression(&'static dyn Expression),
    /// A statement of its own, with no value.
    Statement(&'static dyn Statement),
    /// `@m[k] = name(...)`: the map's values aggregate.
    Aggregation(&'static dyn Aggregation),
    /// An item of a record block: `< kstack >`.
    RecordItem(&'static dyn RecordItem),
}

/// One use of a built-in in a script, as its check hook sees it.
pub(crate) struct Site<'a> {
    /// The built-in, for the checked node.
    pub id: BuiltinId,
    /// The number after an indexed name (`arg3` is 3).
    pub index: u32,
    /// Written as a call (`stack(timer)`), not a bare word (`stack`).
    pub called: bool,
    /// The arguments of a call; empty for a bare word.
    pub args: &'a [Expr],
    pub span: Span,
}

impl Site<'_> {
    /// The checked use: a [`TCall`] of this built-in with `args`, of type `ty`.
    pub(crate) fn value(&self, args: Vec<TExpr>, ty: Type) -> TExpr {
        TExpr {
            kind: TExprKind::Call(Box::new(TCall::new(self.id, args))),
            ty,
            span: self.span,
        }
    }
}

/// A built-in with a value.
pub(crate) trait Expression: Sync {
    /// The typed expression of one use, or `None` once an error is reported.
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr>;

    /// The code of a use that `check` made a [`TCall`] of type `ty`;
    /// built-ins that check into other nodes (a string, a cast) are never
    /// lowered here.
    fn lower(&self, cx: &mut Lowerer, call: &TCall, ty: &Type) -> Value {
        let _ = (cx, ty);
        unreachable!("{} is checked into other nodes", get(call.builtin).name)
    }

    /// Whether a bare record item `name(x)` is named as `x` would be
    /// (`< str(args.filename) >` is `filename`).
    fn names_items_after_arg(&self) -> bool {
        false
    }
}

/// A built-in statement.
pub(crate) trait Statement: Sync {
    /// The checked call, or `None` once an error is reported.
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TCall>;

    /// The code of a checked call; it may send a message to user space.
    fn lower(&self, cx: &mut Lowerer, call: &TCall);

    /// Prints the message `lower` sent (statements that send none are never
    /// asked).
    fn print(
        &self,
        cx: &Printer,
        message: &BuiltinMessage,
        bytes: &[u8],
        out: &mut dyn Write,
    ) -> io::Result<Printed> {
        let _ = (cx, bytes, out);
        unreachable!("{} sends no messages", get(message.builtin).name)
    }
}

/// An aggregation function.
pub(crate) trait Aggregation: Sync {
    /// The aggregation and its checked argument.
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<(AggFunc, Option<TExpr>)>;
}

/// A record item.
pub(crate) trait RecordItem: Sync {
    /// Adds the item's fields, values or stack to the record.
    fn check(&self, cx: &mut Checker, site: &Site, items: &mut RecordItems) -> Option<()>;
}

/// Every family's table.
const FAMILIES: [&[Entry]; 11] = [
    context::TABLE,
    task::TABLE,
    time::TABLE,
    text::TABLE,
    kernel::TABLE,
    print::TABLE,
    maps::TABLE,
    agg::TABLE,
    record::TABLE,
    watch::TABLE,
    types::TABLE,
];

/// The joined table; a [`BuiltinId`] is an index into it.
static ALL: LazyLock<Vec<&'static Entry>> =
    LazyLock::new(|| FAMILIES.iter().flat_map(|table| table.iter()).collect());

/// The entry of a built-in.
pub(crate) fn get(id: BuiltinId) -> &'static Entry {
    ALL[usize::from(id.0)]
}

/// A built-in found by name, with its hooks.
pub(crate) struct Found<T> {
    pub hooks: T,
    pub id: BuiltinId,
    /// The number after an indexed name.
    pub index: u32,
    /// Written as a call.
    pub called: bool,
}

impl<T> Found<T> {
    /// The site of one use.
    pub(crate) fn site<'a>(&self, args: &'a [Expr], span: Span) -> Site<'a> {
        Site {
            id: self.id,
            index: self.index,
            called: self.called,
            args,
            span,
        }
    }
}

/// The built-in named `name` as written, whose kind `pick` accepts.
fn find<T>(name: &str, call: bool, pick: impl Fn(&Kind) -> Option<T>) -> Option<Found<T>> {
    ALL.iter().enumerate().find_map(|(index, entry)| {
        let fits = entry.written.fits(call);
        let number = match entry.indexed {
            false => (name == entry.name).then_some(0),
            true => name.strip_prefix(entry.name)?.parse().ok(),
        };
        let hooks = pick(&entry.kind)?;
        Some(Found {
            hooks,
            id: BuiltinId(u16::try_from(index).expect("fewer than 2^16 built-ins")),
            index: number.filter(|_| fits)?,
            called: call,
        })
    })
}

/// The expression built-in `name`, written as a call or a bare word.
pub(crate) fn expression(name: &str, call: bool) -> Option<Found<&'static dyn Expression>> {
    find(name, call, |kind| match kind {
        Kind::Expression(hooks) => Some(*hooks),
        _ => None,
    })
}

/// The statement built-in `name` (always a call).
pub(crate) fn statement(name: &str) -> Option<Found<&'static dyn Statement>> {
    find(name, true, |kind| match kind {
        Kind::Statement(hooks) => Some(*hooks),
        _ => None,
    })
}

/// The aggregation `name` (always a call).
pub(crate) fn aggregation(name: &str) -> Option<Found<&'static dyn Aggregation>> {
    find(name, true, |kind| match kind {
        Kind::Aggregation(hooks) => Some(*hooks),
        _ => None,
    })
}

/// The record item `name`, written as a call or a bare word.
pub(crate) fn record_item(name: &str, call: bool) -> Option<Found<&'static dyn RecordItem>> {
    find(name, call, |kind| match kind {
        Kind::RecordItem(hooks) => Some(*hooks),
        _ => None,
    })
}

/// The hooks of a checked expression built-in.
pub(crate) fn expression_hooks(id: BuiltinId) -> &'static dyn Expression {
    match get(id).kind {
        Kind::Expression(hooks) => hooks,
        _ => unreachable!("{} is not an expression", get(id).name),
    }
}

/// The hooks of a checked statement built-in.
pub(crate) fn statement_hooks(id: BuiltinId) -> &'static dyn Statement {
    match get(id).kind {
        Kind::Statement(hooks) => hooks,
        _ => unreachable!("{} is not a statement", get(id).name),
    }
}

/// The reference of every built-in (`wprof --builtins`): where it stands,
/// how it is written, what it does and an example.
pub fn reference() -> String {
    let sections = [
        ("Values", "expressions"),
        ("Statements", "statements"),
        ("Aggregations", "map values: `@m[key] = f(x)`"),
        ("Record items", "items of record blocks: `< item; ... >`"),
    ];
    let mut text = String::new();
    for (index, (title, what)) in sections.iter().enumerate() {
        text.push_str(&format!("{title} ({what}):\n"));
        let of_section = ALL.iter().filter(|e| section_of(&e.kind) == index);
        for entry in of_section {
            text.push_str(&format!(
                "  {}\n      {}\n      e.g. {}\n",
                entry.signature, entry.doc, entry.example
            ));
        }
        text.push('\n');
    }
    text
}

/// The section of [`reference`] a kind belongs to.
fn section_of(kind: &Kind) -> usize {
    match kind {
        Kind::Expression(_) => 0,
        Kind::Statement(_) => 1,
        Kind::Aggregation(_) => 2,
        Kind::RecordItem(_) => 3,
    }
}

/// Why `name(...)` cannot stand where a value is needed, when it is a
/// built-in of another kind.
pub(crate) fn misplaced_call(name: &str) -> Option<String> {
    if aggregation(name).is_some() {
        Some(format!(
            "{name}() must be assigned to a map: `@x = {name}(...)`"
        ))
    } else if statement(name).is_some() {
        Some(format!("{name}() has no value"))
    } else {
        None
    }
}

#[cfg(test)]
mod tests;
