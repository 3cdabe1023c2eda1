//! Stacks as values: `kstack` and `ustack`, bare or as calls with a mode
//! (`perf`, `bpftrace`) and a depth, printed by `printf("%s")`, `print()`
//! and maps, and usable as map keys, as bpftrace 0.17 does. The record items
//! of the same names (`< kstack >`) are `record.rs`'s.

use super::{Entry, Expression, Kind, Site, Written};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::ast::{Expr, ExprKind};
use crate::frontend::check::Checker;
use crate::frontend::checked::{TCall, TExpr};
use crate::frontend::diag::ScriptError;
use crate::frontend::types::Type;
use crate::vocab::{StackMode, StackType};

/// `kstack`/`ustack`: the call has no args; its type holds the stack's
/// mode and depth.
pub struct StackValue {
    pub user: bool,
}

impl Expression for StackValue {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let stack = stack_type(cx, self.user, site)?;
        cx.values.stack_depths.insert(stack.depth);
        cx.values.user_addresses |= stack.user;
        Some(site.value(Vec::new(), Type::Stack(stack)))
    }

    fn lower(&self, cx: &mut Lowerer, _call: &TCall, ty: &Type) -> Value {
        let Type::Stack(stack) = ty else {
            unreachable!("stacks are checked as Type::Stack")
        };
        Value::Int(cx.stack_value(*stack))
    }
}

/// The mode and depth of `kstack([mode][, depth])`.
fn stack_type(cx: &mut Checker, user: bool, site: &Site) -> Option<StackType> {
    let mut stack = StackType {
        user,
        mode: StackMode::Bpftrace,
        depth: StackType::DEFAULT_DEPTH,
    };
    let (mode, depth) = match site.args {
        [] => (None, None),
        [
            one @ Expr {
                kind: ExprKind::Ident(_),
                ..
            },
        ] => (Some(one), None),
        [depth] => (None, Some(depth)),
        [mode, depth] => (Some(mode), Some(depth)),
        _ => return usage(cx, user, site),
    };
    if let Some(mode) = mode {
        stack.mode = match &mode.kind {
            ExprKind::Ident(word) if word == "bpftrace" => StackMode::Bpftrace,
            ExprKind::Ident(word) if word == "perf" => StackMode::Perf,
            _ => return usage(cx, user, site),
        };
    }
    if let Some(depth) = depth {
        let ExprKind::Int(n) = depth.kind else {
            return usage(cx, user, site);
        };
        if !(1..=u64::from(StackType::MAX_DEPTH)).contains(&n) {
            let message = format!(
                "{}'s depth must be from 1 to {}, not {n}",
                stack.name(),
                StackType::MAX_DEPTH
            );
            return cx.fail(depth.span, &message);
        }
        stack.depth = n as u32;
    }
    Some(stack)
}

fn usage<T>(cx: &mut Checker, user: bool, site: &Site) -> Option<T> {
    let name = if user { "ustack" } else { "kstack" };
    let message = format!("{name} takes an optional mode and an optional depth");
    let help = format!(
        "write `{name}`, `{name}(16)`, `{name}(perf)` or `{name}(perf, 16)` (modes: bpftrace, perf; the depth an integer literal)"
    );
    cx.error(ScriptError::new(site.span, message).with_help(help));
    None
}

pub(super) const TABLE: &[Entry] = &[
    Entry {
        name: "kstack",
        written: Written::WordOrCall,
        indexed: false,
        signature: "kstack, kstack([mode,] [depth])",
        doc: "The kernel stack, printed one `function+offset` per line (`perf` mode: address, symbol).",
        example: "tracepoint:syscalls:sys_enter_write { @[kstack(perf, 4)] = count(); }",
        kind: Kind::Expression(&StackValue { user: false }),
    },
    Entry {
        name: "ustack",
        written: Written::WordOrCall,
        indexed: false,
        signature: "ustack, ustack([mode,] [depth])",
        doc: "The user stack, per thread as bpftrace keeps it; frames name their functions even after the process exits.",
        example: "uprobe:/bin/x:f { printf(\"%s\\n\", ustack); }",
        kind: Kind::Expression(&StackValue { user: true }),
    },
];
