//! Built-ins about time: `nsecs`, `elapsed`, `time(fmt)` and
//! `strftime(fmt, nsecs)`.

use std::io::{self, Write};

use super::context::Helper0;
use super::task::u64_call;
use super::{Entry, Expression, Kind, Site, Statement, Written};
use crate::codegen::helpers::KTIME_GET_NS;
use crate::codegen::ir::{AluOp, Base, Src};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::ast::{Expr, ExprKind};
use crate::frontend::check::Checker;
use crate::frontend::checked::{TCall, TExpr, TExprKind};
use crate::frontend::types::Type;
use crate::output::json::TextKind;
use crate::output::printer::{Printed, Printer};
use crate::output::time::{DEFAULT_TIME_FORMAT, format_time};
use crate::vocab::{BuiltinMessage, GlobalSlot};

/// `elapsed`: nanoseconds since tracing started.
pub struct Elapsed;

impl Expression for Elapsed {
    fn check(&self, _cx: &mut Checker, site: &Site) -> Option<TExpr> {
        Some(u64_call(site))
    }

    fn lower(&self, cx: &mut Lowerer, _call: &TCall, _ty: &Type) -> Value {
        let now = cx.call0(KTIME_GET_NS);
        let start = cx.global(GlobalSlot::StartNs);
        cx.alu(AluOp::Sub, now, Src::Reg(start));
        Value::Int(now)
    }
}

/// `time([fmt])`: prints the wall-clock time when the message arrives.
/// The call keeps the format as its text.
pub struct Time;

impl Statement for Time {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TCall> {
        let format = match site.args {
            [] => DEFAULT_TIME_FORMAT.to_string(),
            [arg] => match &arg.kind {
                ExprKind::Str(format) => format.clone(),
                _ => return time_usage(cx, site),
            },
            _ => return time_usage(cx, site),
        };
        let mut call = TCall::new(site.id, Vec::new());
        call.text = Some(format);
        Some(call)
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall) {
        let mut message = cx.message(call.builtin);
        message.text = call.text.clone();
        cx.send_message(message, &[]);
    }

    fn print(
        &self,
        cx: &Printer,
        message: &BuiltinMessage,
        _bytes: &[u8],
        out: &mut dyn Write,
    ) -> io::Result<Printed> {
        let format = message.text.as_deref().unwrap_or(DEFAULT_TIME_FORMAT);
        let text = format_time(format, std::time::SystemTime::now()).map_err(io::Error::other)?;
        cx.write_text(TextKind::Time, &text, out)?;
        Ok(Printed::Done)
    }
}

/// `strftime(fmt, nsecs)`: a time since boot, printed in local time with
/// `strftime(3)`'s `fmt` plus `%f` (microseconds). The call's arg is the
/// time, its const the format's index in the program's texts.
pub struct Strftime;

impl Expression for Strftime {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let [
            Expr {
                kind: ExprKind::Str(format),
                ..
            },
            nsecs,
        ] = site.args
        else {
            return cx.fail(
                site.span,
                "strftime() takes a format string literal and nanoseconds since boot",
            );
        };
        let nsecs = cx.int_arg(nsecs, "strftime")?;
        let mut call = TCall::new(site.id, vec![nsecs]);
        call.consts = vec![cx.values.text(format)];
        Some(TExpr {
            kind: TExprKind::Call(Box::new(call)),
            ty: Type::Timestamp,
            span: site.span,
        })
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, _ty: &Type) -> Value {
        let nsecs = cx.int_expr(&call.args[0]);
        let buffer = cx.alloc(16);
        cx.store(Base::Frame, buffer, Src::Imm(call.consts[0] as i32));
        cx.store(Base::Frame, buffer + 8, Src::Reg(nsecs));
        Value::Mem(buffer)
    }
}

fn time_usage<T>(cx: &mut Checker, site: &Site) -> Option<T> {
    cx.fail(site.span, "time() takes an optional format string literal")
}

pub(super) const TABLE: &[Entry] = &[
    Entry {
        name: "nsecs",
        written: Written::Word,
        indexed: false,
        signature: "nsecs",
        doc: "Nanoseconds since boot (`bpf_ktime_get_ns`).",
        example: "BEGIN { @start = nsecs; exit(); }",
        kind: Kind::Expression(&Helper0 {
            helper: KTIME_GET_NS,
        }),
    },
    Entry {
        name: "elapsed",
        written: Written::Word,
        indexed: false,
        signature: "elapsed",
        doc: "Nanoseconds since tracing started.",
        example: "interval:s:1 { printf(\"%d s\\n\", elapsed / 1000000000); }",
        kind: Kind::Expression(&Elapsed),
    },
    Entry {
        name: "time",
        written: Written::Call,
        indexed: false,
        signature: "time([fmt])",
        doc: "Prints the local time with strftime's `fmt` (default `%H:%M:%S\\n`).",
        example: "interval:s:1 { time(\"%H:%M:%S \"); printf(\"tick\\n\"); }",
        kind: Kind::Statement(&Time),
    },
    Entry {
        name: "strftime",
        written: Written::Call,
        indexed: false,
        signature: "strftime(fmt, nsecs)",
        doc: "A time since boot (`nsecs`), printed in local time with strftime's `fmt` (`%f`: microseconds).",
        example: "BEGIN { printf(\"%s\\n\", strftime(\"%H:%M:%S.%f\", nsecs)); exit(); }",
        kind: Kind::Expression(&Strftime),
    },
];
