//! Built-ins about time: `nsecs`, `elapsed` and `time(fmt)`.

use std::io::{self, Write};

use super::context::Helper0;
use super::task::u64_call;
use super::{Entry, Expression, Kind, Site, Statement, Written};
use crate::codegen::helpers::KTIME_GET_NS;
use crate::codegen::ir::{AluOp, Src};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::ast::ExprKind;
use crate::frontend::check::Checker;
use crate::frontend::checked::{TCall, TExpr};
use crate::frontend::types::Type;
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
        _cx: &Printer,
        message: &BuiltinMessage,
        _bytes: &[u8],
        out: &mut dyn Write,
    ) -> io::Result<Printed> {
        let format = message.text.as_deref().unwrap_or(DEFAULT_TIME_FORMAT);
        let text = format_time(format, std::time::SystemTime::now()).map_err(io::Error::other)?;
        out.write_all(&text)?;
        Ok(Printed::Done)
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
];
