//! `--fail-if` gates: expressions that fail a CI job on a regression.
//!
//! Input: the expression text ([`parse`]), then metric observations
//! ([`Gate::evaluate`]). Output: whether the gate fails, and why, per
//! condition. Errors point at the column of the problem.
//!
//! # Syntax
//! ```text
//! gate       := or
//! or         := and (("||" | "or") and)*
//! and        := primary (("&&" | "and") primary)*
//! primary    := "(" or ")" | condition
//! condition  := metric (">" | ">=" | "<" | "<=") threshold
//! metric     := [kind ":"] name "." stat        kind: span record thread process func
//! name       := text up to the last "." | '"' any text '"'
//! threshold  := ("+" | "-") number "%"          relative change against the baseline
//!             | ("+" | "-") number [unit]       absolute change against the baseline
//!             | number [unit | "%"]             budget on the candidate (or the one capture)
//! unit       := ns us µs ms s | B KB MB GB KiB MiB GiB | k M
//! ```
//! Examples: `span:request.p99 > +10%`, `thread:worker.oncpu > +5%`,
//! `func:parse_json.total > +5%`, `record:malloc.count > +0%`,
//! `cpu.context_switches > +20%`, `span:request.p99 > 5ms`,
//! `span:request.p50 > +5% && span:request.p99 > +10%`. A percentile stat may
//! have decimals (`p99.9`). A `%` without a sign is a ratio budget
//! (`thread:worker.coverage < 90%`).
//!
//! # Meaning
//! The expression states the failure: the gate fails when it is true. A
//! change (signed threshold) is true only when the change passes the
//! threshold *and* the metric's verdict says the change is significant in
//! that direction, so noise never fails a build. Without a verdict (one run
//! per side, nothing to test) the threshold alone decides, and the outcome
//! says so. A budget (unsigned threshold) compares the candidate's value.
//!
//! `--budget` expressions ([`parse_budget`]) state what must hold instead,
//! SLO-style (`span:request.p99 < 5ms`): only budgets are allowed, and the
//! gate fails when the expression is false.

mod eval;
mod parse;

use std::fmt;

use miette::{Diagnostic, LabeledSpan, SourceCode};
use thiserror::Error;

pub use eval::{ConditionOutcome, GateOutcome, Observation, format_value, relative_change};
pub use parse::{parse, parse_budget};

/// A parsed `--fail-if` or `--budget` expression.
#[derive(Clone, Debug, PartialEq)]
pub struct Gate {
    /// The expression as given.
    pub text: String,
    pub kind: GateKind,
    root: Node,
}

/// What an expression states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateKind {
    /// `--fail-if`: the failure; the gate fails when it is true.
    FailIf,
    /// `--budget`: what must hold; the gate fails when it is false.
    Budget,
}

impl GateKind {
    /// Its command-line option.
    pub fn option(self) -> &'static str {
        match self {
            GateKind::FailIf => "--fail-if",
            GateKind::Budget => "--budget",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Node {
    Condition(Condition),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
}

/// `metric op threshold`.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    pub metric: MetricName,
    pub op: Op,
    pub threshold: Threshold,
    /// Byte ranges in [`Gate::text`], for errors.
    metric_span: (usize, usize),
    threshold_span: (usize, usize),
}

/// A metric's name: `span:request.p99` is kind `span`, subject `request`,
/// stat `p99`; `cpu.context_switches` has no kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MetricName {
    pub kind: Option<MetricKind>,
    pub subject: String,
    pub stat: String,
}

impl fmt::Display for MetricName {
    /// The canonical spelling, quoting subjects that need it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(kind) = self.kind {
            write!(f, "{}:", kind.name())?;
        }
        if parse::needs_quotes(&self.subject) {
            write!(f, "\"{}\".{}", self.subject, self.stat)
        } else {
            write!(f, "{}.{}", self.subject, self.stat)
        }
    }
}

/// What a metric is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetricKind {
    Span,
    Record,
    Thread,
    Process,
    Func,
}

impl MetricKind {
    pub const ALL: [MetricKind; 5] = [
        MetricKind::Span,
        MetricKind::Record,
        MetricKind::Thread,
        MetricKind::Process,
        MetricKind::Func,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MetricKind::Span => "span",
            MetricKind::Record => "record",
            MetricKind::Thread => "thread",
            MetricKind::Process => "process",
            MetricKind::Func => "func",
        }
    }
}

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Greater,
    GreaterOrEqual,
    Less,
    LessOrEqual,
}

impl Op {
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Greater => ">",
            Op::GreaterOrEqual => ">=",
            Op::Less => "<",
            Op::LessOrEqual => "<=",
        }
    }

    fn holds(self, left: f64, right: f64) -> bool {
        match self {
            Op::Greater => left > right,
            Op::GreaterOrEqual => left >= right,
            Op::Less => left < right,
            Op::LessOrEqual => left <= right,
        }
    }
}

/// What a metric's values measure; a threshold must measure the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dimension {
    /// Nanoseconds.
    Time,
    Bytes,
    /// Counts, rates and other plain numbers.
    Number,
    /// A fraction (coverage); `90%` is 0.9.
    Ratio,
}

impl Dimension {
    fn describe(self) -> &'static str {
        match self {
            Dimension::Time => "a duration",
            Dimension::Bytes => "a size",
            Dimension::Number => "a plain number",
            Dimension::Ratio => "a ratio",
        }
    }
}

/// A value in its dimension's base unit (ns, bytes, plain, fraction).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quantity {
    pub value: f64,
    pub dimension: Dimension,
}

/// The right-hand side of a condition.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Threshold {
    /// `+10%`: a change relative to the baseline, as a fraction (0.10).
    Relative(f64),
    /// `+2ms`: a change against the baseline in the metric's unit.
    Delta(Quantity),
    /// `5ms`: a budget for the candidate's value.
    Budget(Quantity),
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Threshold::Relative(fraction) => write!(f, "{:+}%", fraction * 100.0),
            Threshold::Delta(q) => write!(f, "{:+} ({})", q.value, q.dimension.describe()),
            Threshold::Budget(q) => write!(f, "{} ({})", q.value, q.dimension.describe()),
        }
    }
}

/// A malformed gate or one that cannot be evaluated, pointing at the column.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{option} `{expression}`: {message} (column {column})", option = self.kind.option(), column = self.column())]
pub struct GateError {
    pub kind: GateKind,
    pub expression: String,
    pub message: String,
    /// Byte range of the offending text.
    pub start: usize,
    pub end: usize,
    pub help: Option<String>,
}

impl GateError {
    fn new(expression: &str, (start, end): (usize, usize), message: impl Into<String>) -> Self {
        GateError {
            kind: GateKind::FailIf,
            expression: expression.to_owned(),
            message: message.into(),
            start,
            end,
            help: None,
        }
    }

    fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    fn in_gate(mut self, kind: GateKind) -> Self {
        self.kind = kind;
        self
    }

    /// Renders the error as text, the expression with a caret under the
    /// problem (for messages that are not miette reports).
    pub fn render(&self) -> String {
        let handler =
            miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor())
                .with_links(false)
                .with_width(100);
        let mut out = String::new();
        handler
            .render_report(&mut out, self)
            .expect("rendering into a String cannot fail");
        out
    }

    /// The 1-based column (in characters) where the problem starts.
    pub fn column(&self) -> usize {
        self.expression
            .get(..self.start)
            .map_or(1, |before| before.chars().count() + 1)
    }
}

impl Gate {
    /// An error about the metric of `condition` (one of this gate's), e.g.
    /// that the captures cannot compare it.
    pub fn metric_error(
        &self,
        condition: &Condition,
        message: impl Into<String>,
        help: impl Into<String>,
    ) -> GateError {
        GateError::new(&self.text, condition.metric_span, message)
            .with_help(help)
            .in_gate(self.kind)
    }
}

impl Diagnostic for GateError {
    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(&self.expression)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let len = self.end.saturating_sub(self.start).max(1);
        Some(Box::new(std::iter::once(LabeledSpan::new(
            Some(self.message.clone()),
            self.start,
            len,
        ))))
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|help| Box::new(help) as Box<dyn fmt::Display>)
    }
}
