//! Built-ins about watchpoints: `unwatch(addr)` removes the watchpoints set
//! on an address (`providers::watchpoint`).

use std::io::{self, Write};

use super::{Entry, Kind, Site, Statement, Written};
use crate::codegen::lower::Lowerer;
use crate::frontend::check::Checker;
use crate::frontend::checked::TCall;
use crate::frontend::types::Type;
use crate::output::printer::{Printed, Printer};
use crate::output::value::Value;
use crate::vocab::BuiltinMessage;

/// `unwatch(addr)`: sends the address; user space removes every watchpoint
/// on it (none is not an error, as in bpftrace).
pub struct Unwatch;

impl Statement for Unwatch {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TCall> {
        let [address] = site.args else {
            return cx.fail(site.span, "unwatch() takes one address");
        };
        let address = cx.expr(address)?;
        if !matches!(address.ty, Type::Int { .. } | Type::Ptr(_)) {
            let message = format!("unwatch() needs an address, not {}", address.ty);
            return cx.fail(address.span, &message);
        }
        Some(TCall::new(site.id, vec![address]))
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall) {
        let message = cx.message(call.builtin);
        cx.send_message(message, &call.args);
    }

    fn print(
        &self,
        cx: &Printer,
        message: &BuiltinMessage,
        bytes: &[u8],
        _out: &mut dyn Write,
    ) -> io::Result<Printed> {
        let values = cx.decode(bytes, &message.args)?;
        match values.first().and_then(Value::as_bits) {
            Some(address) => Ok(Printed::Unwatch(address)),
            None => Err(io::Error::other(format!("unwatch() sent {values:?}"))),
        }
    }
}

pub(super) const TABLE: &[Entry] = &[Entry {
    name: "unwatch",
    written: Written::Call,
    indexed: false,
    signature: "unwatch(addr)",
    doc: "Removes the watchpoints set on an address (watchpoint probes on a function's argument).",
    example: "uprobe:/bin/x:release { unwatch(arg0); }",
    kind: Kind::Statement(&Unwatch),
}];
