//! Syntax tree: what `parse` produces from script text and `check` consumes.
//!
//! Nodes keep the byte span of the text they came from so every later stage can
//! point diagnostics back at the script. Names are kept as written; resolving
//! builtins, probe kinds and map types is the checker's job.

use std::fmt;

use crate::capture::model::RecordOrigin;

/// A byte range in the script source.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        Span { start, end }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
}

impl From<Span> for miette::SourceSpan {
    fn from(span: Span) -> Self {
        (span.start, span.end.saturating_sub(span.start)).into()
    }
}

/// A whole script: probe blocks, span blocks and C type definitions, each
/// in source order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Script {
    pub probes: Vec<ProbeBlock>,
    pub spans: Vec<SpanBlock>,
    /// `struct`, `union`, `enum` and `typedef` definitions at the top
    /// level (those defined inside them are in their members' types).
    pub types: Vec<CDefinition>,
}

/// A C type definition written in a script.
#[derive(Clone, Debug, PartialEq)]
pub enum CDefinition {
    /// `struct NAME { ... }` or `union NAME { ... }`; `struct NAME;` has no members.
    Record(CRecord),
    /// `enum [NAME] { A, B = 2 }`: its enumerators are constants.
    Enum(CEnum),
    /// `typedef TYPE NAME;`
    Typedef { name: String, ty: CType, span: Span },
}

/// A struct or union as written.
#[derive(Clone, Debug, PartialEq)]
pub struct CRecord {
    pub union: bool,
    /// `None` for an anonymous one (`struct { int n; } a;`).
    pub name: Option<String>,
    /// `None` for a declaration without a body (`struct task_struct;`).
    pub members: Option<Vec<CMember>>,
    pub span: Span,
}

/// One member; a nameless one is an anonymous struct or union whose
/// members belong to the parent.
#[derive(Clone, Debug, PartialEq)]
pub struct CMember {
    pub name: Option<String>,
    pub ty: CType,
    /// The width of a bitfield (`unsigned a:4`).
    pub bits: Option<u32>,
    pub span: Span,
}

/// An enum as written, its values computed.
#[derive(Clone, Debug, PartialEq)]
pub struct CEnum {
    pub name: Option<String>,
    pub values: Vec<(String, i64)>,
    pub span: Span,
}

/// A type as a declaration writes it.
#[derive(Clone, Debug, PartialEq)]
pub enum CType {
    /// A type by name: `int`, `unsigned long`, `uint32_t`, `struct task_struct`.
    Named {
        name: String,
        span: Span,
    },
    /// A struct or union defined in place (named or not).
    Record(Box<CRecord>),
    /// An enum defined in place.
    Enum(Box<CEnum>),
    Pointer(Box<CType>),
    Array(Box<CType>, u32),
}

/// `spec[, spec...] [/predicate/] { statements }`, or with a record block
/// `spec [/predicate/] < items > [{ statements }]`.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeBlock {
    pub specs: Vec<ProbeSpec>,
    pub predicate: Option<Expr>,
    /// `< item; item; ... >`: record one capture event per hit.
    pub record: Option<Record>,
    /// The actions; empty for a block that only records.
    pub body: Block,
    /// Whether the user's script or a built-in tracker wrote it.
    pub origin: RecordOrigin,
    pub span: Span,
}

/// `< item; item; ... >`
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub items: Vec<RecordItem>,
    pub span: Span,
}

/// `name = expr`, or a bare expression (`pid`, `arg0`, `args.filename`,
/// `stack`, `ustack`, `kstack`) named after itself.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordItem {
    pub name: Option<String>,
    pub value: Expr,
    pub span: Span,
}

/// `span NAME [by KEY] { START_PROBE [/pred/] [< items >]  END_PROBE [/pred/] [< items >] }`:
/// pairs each start with the next end of the same key (default: the thread)
/// into one event with a duration.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanBlock {
    pub name: String,
    pub key: Option<Expr>,
    pub start: SpanEnd,
    pub end: SpanEnd,
    /// Whether the user's script or a built-in tracker wrote it.
    pub origin: RecordOrigin,
    pub span: Span,
}

/// One end of a span: its probes, predicate and recorded items.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanEnd {
    pub specs: Vec<ProbeSpec>,
    pub predicate: Option<Expr>,
    pub record: Option<Record>,
    pub span: Span,
}

/// One attach point as written, split at `:`, e.g. `uprobe:libc:malloc` becomes
/// provider `uprobe` and parts `["libc", "malloc"]`. `BEGIN` has no parts.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeSpec {
    pub provider: String,
    pub parts: Vec<String>,
    pub span: Span,
}

impl fmt::Display for ProbeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.provider)?;
        for part in &self.parts {
            write!(f, ":{part}")?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    /// An expression evaluated for its effect: `printf(...)`, `@x[k]++`, `exit()`.
    Expr(Expr),
    /// `target = value`, or `target op= value` when `op` is set.
    Assign {
        target: Expr,
        op: Option<BinOp>,
        value: Expr,
    },
    If {
        cond: Expr,
        then: Block,
        /// `else { }` or `else if` (an `If` statement wrapped in a block).
        otherwise: Option<Block>,
    },
    /// `unroll(N) { ... }`
    Unroll {
        count: Expr,
        body: Block,
    },
    While {
        cond: Expr,
        body: Block,
    },
    /// `record NAME < items >`: emit a capture event named `NAME`.
    Record {
        name: String,
        record: Record,
    },
    Break,
    Continue,
    Return,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// Integer literal (decimal, hex `0x`, octal `0`, with optional `_` separators).
    Int(u64),
    /// String literal with escapes already decoded.
    Str(String),
    /// `true` / `false`.
    Bool(bool),
    /// A bare word: builtin such as `pid`, `comm`, `arg0`, `args`, `retval`.
    Ident(String),
    /// `$name` scratch variable.
    Var(String),
    /// `$1`..`$N` positional parameter.
    Positional(u32),
    /// `$#`
    PositionalCount,
    /// `@name` or `@name[k]` or `@name[k1, k2]`; `name` is empty for `@`.
    Map {
        name: String,
        keys: Vec<Expr>,
    },
    /// `name(args...)`
    Call {
        name: String,
        args: Vec<Expr>,
    },
    Unary {
        op: UnOp,
        expr: Box<Expr>,
    },
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// `cond ? a : b`
    Ternary {
        cond: Box<Expr>,
        then: Box<Expr>,
        otherwise: Box<Expr>,
    },
    /// `expr.field` or `expr->field` (`arrow` tells which was written).
    Field {
        expr: Box<Expr>,
        field: String,
        arrow: bool,
    },
    /// `expr.0` on a tuple.
    TupleIndex {
        expr: Box<Expr>,
        index: u32,
    },
    /// `expr[index]` on a pointer or array.
    Index {
        expr: Box<Expr>,
        index: Box<Expr>,
    },
    /// `(a, b, ...)`, at least two elements.
    Tuple(Vec<Expr>),
    /// `(type)expr`
    Cast {
        ty: TypeName,
        expr: Box<Expr>,
    },
    /// A type where a call takes one: `sizeof(struct task_struct)`.
    Type(TypeName),
    /// `x++`, `++x`, `x--`, `--x` on a variable or map element.
    IncDec {
        target: Box<Expr>,
        increment: bool,
        prefix: bool,
    },
}

impl Expr {
    /// The expressions directly inside this one, in source order.
    pub fn children(&self) -> Vec<&Expr> {
        match &self.kind {
            ExprKind::Map { keys: list, .. }
            | ExprKind::Call { args: list, .. }
            | ExprKind::Tuple(list) => list.iter().collect(),
            ExprKind::Unary { expr: inner, .. }
            | ExprKind::Field { expr: inner, .. }
            | ExprKind::TupleIndex { expr: inner, .. }
            | ExprKind::Cast { expr: inner, .. }
            | ExprKind::IncDec { target: inner, .. } => vec![inner],
            ExprKind::Binary { lhs, rhs, .. }
            | ExprKind::Index {
                expr: lhs,
                index: rhs,
            } => vec![lhs, rhs],
            ExprKind::Ternary {
                cond,
                then,
                otherwise,
            } => vec![cond, then, otherwise],
            ExprKind::Int(_)
            | ExprKind::Str(_)
            | ExprKind::Bool(_)
            | ExprKind::Ident(_)
            | ExprKind::Var(_)
            | ExprKind::Positional(_)
            | ExprKind::PositionalCount
            | ExprKind::Type(_) => Vec::new(),
        }
    }

    /// The expressions directly inside this one, to rewrite in place.
    pub fn children_mut(&mut self) -> Vec<&mut Expr> {
        match &mut self.kind {
            ExprKind::Map { keys: list, .. }
            | ExprKind::Call { args: list, .. }
            | ExprKind::Tuple(list) => list.iter_mut().collect(),
            ExprKind::Unary { expr: inner, .. }
            | ExprKind::Field { expr: inner, .. }
            | ExprKind::TupleIndex { expr: inner, .. }
            | ExprKind::Cast { expr: inner, .. }
            | ExprKind::IncDec { target: inner, .. } => vec![inner],
            ExprKind::Binary { lhs, rhs, .. }
            | ExprKind::Index {
                expr: lhs,
                index: rhs,
            } => vec![lhs, rhs],
            ExprKind::Ternary {
                cond,
                then,
                otherwise,
            } => vec![cond, then, otherwise],
            ExprKind::Int(_)
            | ExprKind::Str(_)
            | ExprKind::Bool(_)
            | ExprKind::Ident(_)
            | ExprKind::Var(_)
            | ExprKind::Positional(_)
            | ExprKind::PositionalCount
            | ExprKind::Type(_) => Vec::new(),
        }
    }

    /// Whether this expression or one inside it reads or writes map `@name`.
    pub fn mentions_map(&self, name: &str) -> bool {
        matches!(&self.kind, ExprKind::Map { name: n, .. } if n == name)
            || self.children().into_iter().any(|e| e.mentions_map(name))
    }
}

/// A type as written in a cast: `uint32`, `int8`, `struct task_struct *`.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeName {
    pub name: String,
    pub pointer_depth: u8,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// `!`
    Not,
    /// `~`
    BitNot,
    /// `-`
    Neg,
    /// `*` dereference
    Deref,
    /// `&` address-of
    AddrOf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    LogicalAnd,
    LogicalOr,
}

impl BinOp {
    /// The operator as written in scripts.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::BitAnd => "&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::LogicalAnd => "&&",
            BinOp::LogicalOr => "||",
        }
    }

    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }
}
