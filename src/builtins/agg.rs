//! Aggregations, the values of maps assigned as `@m[k] = f(x)`: `count`,
//! `sum`, `min`, `max`, `avg`, `stats`, `hist`, `lhist`. Each names an
//! [`AggFunc`], the kind of value the map holds: codegen lays out and updates
//! it, user space combines it over CPUs and prints it.

use super::{Aggregation, Entry, Kind, Site, Written};
use crate::frontend::ast::{Expr, ExprKind};
use crate::frontend::check::Checker;
use crate::frontend::checked::TExpr;
use crate::vocab::AggFunc;

/// An aggregation of one integer argument (`count` takes none).
pub struct Aggregate(pub AggFunc);

impl Aggregation for Aggregate {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<(AggFunc, Option<TExpr>)> {
        let func = self.0;
        let name = func.name();
        let expected = usize::from(func != AggFunc::Count);
        if site.args.len() != expected {
            let what = if expected == 0 {
                "no arguments"
            } else {
                "one integer argument"
            };
            return cx.fail(site.span, &format!("{name}() takes {what}"));
        }
        let arg = match site.args.first() {
            None => None,
            Some(arg) => Some(cx.int_arg(arg, name)?),
        };
        Some((func, arg))
    }
}

/// `lhist(value, min, max, step)`, with literal bounds and step.
pub struct Lhist;

impl Aggregation for Lhist {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<(AggFunc, Option<TExpr>)> {
        let [value, min, max, step] = site.args else {
            return cx.fail(site.span, "lhist() takes a value, min, max and step");
        };
        let value = cx.int_arg(value, "lhist")?;
        let mut constant = |e: &Expr, what: &str| match e.kind {
            ExprKind::Int(n) => Some(n as i64),
            _ => cx.fail(
                e.span,
                &format!("lhist() {what} must be an integer literal"),
            ),
        };
        let (min, max, step) = (
            constant(min, "min")?,
            constant(max, "max")?,
            constant(step, "step")?,
        );
        if step <= 0 || max <= min {
            return cx.fail(site.span, "lhist() needs min < max and a positive step");
        }
        if (max - min) / step > 1000 {
            return cx.fail(site.span, "lhist() would have more than 1000 buckets");
        }
        Some((AggFunc::Lhist { min, max, step }, Some(value)))
    }
}

pub(super) const TABLE: &[Entry] = &[
    Entry {
        name: "count",
        written: Written::Call,
        indexed: false,
        signature: "count()",
        doc: "How many times the assignment ran.",
        example: "tracepoint:syscalls:sys_enter_write { @[comm] = count(); }",
        kind: Kind::Aggregation(&Aggregate(AggFunc::Count)),
    },
    Entry {
        name: "sum",
        written: Written::Call,
        indexed: false,
        signature: "sum(x)",
        doc: "The sum of the values.",
        example: "tracepoint:syscalls:sys_enter_write { @bytes[comm] = sum(args.count); }",
        kind: Kind::Aggregation(&Aggregate(AggFunc::Sum)),
    },
    Entry {
        name: "min",
        written: Written::Call,
        indexed: false,
        signature: "min(x)",
        doc: "The smallest value.",
        example: "tracepoint:syscalls:sys_enter_write { @least = min(args.count); }",
        kind: Kind::Aggregation(&Aggregate(AggFunc::Min)),
    },
    Entry {
        name: "max",
        written: Written::Call,
        indexed: false,
        signature: "max(x)",
        doc: "The largest value.",
        example: "tracepoint:syscalls:sys_enter_write { @most = max(args.count); }",
        kind: Kind::Aggregation(&Aggregate(AggFunc::Max)),
    },
    Entry {
        name: "avg",
        written: Written::Call,
        indexed: false,
        signature: "avg(x)",
        doc: "The average of the values (integer division).",
        example: "tracepoint:syscalls:sys_enter_write { @mean = avg(args.count); }",
        kind: Kind::Aggregation(&Aggregate(AggFunc::Avg)),
    },
    Entry {
        name: "stats",
        written: Written::Call,
        indexed: false,
        signature: "stats(x)",
        doc: "Count, average and total of the values.",
        example: "tracepoint:syscalls:sys_enter_write { @s = stats(args.count); }",
        kind: Kind::Aggregation(&Aggregate(AggFunc::Stats)),
    },
    Entry {
        name: "hist",
        written: Written::Call,
        indexed: false,
        signature: "hist(x)",
        doc: "A power-of-two histogram of the values.",
        example: "tracepoint:syscalls:sys_enter_write { @sizes = hist(args.count); }",
        kind: Kind::Aggregation(&Aggregate(AggFunc::Hist)),
    },
    Entry {
        name: "lhist",
        written: Written::Call,
        indexed: false,
        signature: "lhist(x, min, max, step)",
        doc: "A linear histogram of the values, `step` wide from `min` to `max`.",
        example: "tracepoint:syscalls:sys_enter_write { @sizes = lhist(args.count, 0, 4096, 512); }",
        kind: Kind::Aggregation(&Lhist),
    },
];
