//! Built-ins on maps: `delete(@m[key])` in the probe, `clear(@m)` and
//! `zero(@m)` by user space when their message arrives.

use std::io::{self, Write};

use super::{Entry, Kind, Site, Statement, Written};
use crate::codegen::lower::Lowerer;
use crate::frontend::ast::{Expr, ExprKind};
use crate::frontend::check::Checker;
use crate::frontend::checked::TCall;
use crate::output::printer::{MapOp, Printed, Printer};
use crate::vocab::BuiltinMessage;

/// `delete(@m[key])` or `delete(@m, key)`: the call's map, with the key as
/// its one arg (none for a map without keys).
pub struct Delete;

impl Statement for Delete {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TCall> {
        let (name, keys, map_span) = match site.args {
            [
                Expr {
                    kind: ExprKind::Map { name, keys },
                    span,
                },
            ] => (name, keys.clone(), *span),
            [
                Expr {
                    kind: ExprKind::Map { name, keys },
                    span,
                },
                key,
            ] if keys.is_empty() => (name, vec![key.clone()], *span),
            _ => {
                return cx.fail(
                    site.span,
                    "delete() takes a map element: `delete(@m[key])` or `delete(@m, key)`",
                );
            }
        };
        let map = cx.lookup_map(name, map_span)?;
        let key = cx.map_key(&keys, map_span)?;
        let mut call = TCall::new(site.id, key.into_iter().collect());
        call.map = Some(map);
        Some(call)
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall) {
        let map = call.map.expect("the checker names the map");
        cx.delete(map, call.args.first());
    }
}

/// What `clear` and `zero` have user space do.
#[derive(Clone, Copy)]
pub enum Reset {
    /// `clear(@m)`: delete every entry.
    Clear,
    /// `zero(@m)`: set every value to zero.
    Zero,
}

/// `clear(@m)` and `zero(@m)`: the call's map.
pub struct ResetMap(pub Reset);

impl Statement for ResetMap {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TCall> {
        let name = super::get(site.id).name;
        let map = cx.whole_map(name, site.args, site.span)?;
        let mut call = TCall::new(site.id, Vec::new());
        call.map = Some(map);
        Some(call)
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall) {
        let mut message = cx.message(call.builtin);
        message.map = call.map.map(|map| cx.map_id(map));
        cx.send_message(message, &[]);
    }

    fn print(
        &self,
        _cx: &Printer,
        message: &BuiltinMessage,
        _bytes: &[u8],
        _out: &mut dyn Write,
    ) -> io::Result<Printed> {
        let map = message
            .map
            .ok_or_else(|| io::Error::other("a clear or zero message without its map"))?;
        Ok(Printed::Map(match self.0 {
            Reset::Clear => MapOp::Clear(map),
            Reset::Zero => MapOp::Zero(map),
        }))
    }
}

pub(super) const TABLE: &[Entry] = &[
    Entry {
        name: "delete",
        written: Written::Call,
        indexed: false,
        signature: "delete(@m[key]), delete(@m, key)",
        doc: "Removes one entry of a map.",
        example: "uprobe:/bin/x:f { @start[tid] = nsecs; } uretprobe:/bin/x:f { delete(@start[tid]); }",
        kind: Kind::Statement(&Delete),
    },
    Entry {
        name: "clear",
        written: Written::Call,
        indexed: false,
        signature: "clear(@m)",
        doc: "Removes every entry of a map.",
        example: "profile:hz:99 { @[comm] = count(); } interval:s:1 { print(@); clear(@); }",
        kind: Kind::Statement(&ResetMap(Reset::Clear)),
    },
    Entry {
        name: "zero",
        written: Written::Call,
        indexed: false,
        signature: "zero(@m)",
        doc: "Sets every value of a map to zero, keeping its keys.",
        example: "profile:hz:99 { @[comm] = count(); } interval:s:1 { print(@); zero(@); }",
        kind: Kind::Statement(&ResetMap(Reset::Zero)),
    },
];
