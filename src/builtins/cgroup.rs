//! Built-ins about cgroups: `cgroup` (the current task's cgroup v2 id),
//! `cgroupid(path)` (a cgroup's id, when compiling) and
//! `cgroup_path(id[, filter])` (printed as the cgroup's paths).

use super::context::Helper0;
use super::{Entry, Expression, Kind, Site, Written};
use crate::codegen::helpers::GET_CURRENT_CGROUP_ID;
use crate::codegen::ir::{Base, Src};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::ast::{Expr, ExprKind};
use crate::frontend::check::Checker;
use crate::frontend::checked::{TCall, TExpr, TExprKind};
use crate::frontend::types::Type;

/// `cgroupid(path)`: the id of the cgroup at `path` (its directory's inode
/// number), looked up when compiling.
pub struct CgroupId;

impl Expression for CgroupId {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let [
            Expr {
                kind: ExprKind::Str(path),
                ..
            },
        ] = site.args
        else {
            return cx.fail(
                site.span,
                "cgroupid() takes a cgroup path as a string literal",
            );
        };
        match cx.env.cgroup_id(path) {
            Ok(id) => Some(TExpr {
                kind: TExprKind::Int(id),
                ty: Type::U64,
                span: site.span,
            }),
            Err(why) => cx.fail(site.span, &format!("cgroupid(): {why}")),
        }
    }
}

/// `cgroup_path(id[, filter])`: printed as `hierarchy:path` for every
/// mounted hierarchy (those whose name matches the glob `filter`) that has
/// the cgroup, joined by `,`. The call's arg is the id, its const the
/// filter's index in the program's texts.
pub struct CgroupPath;

impl Expression for CgroupPath {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TExpr> {
        let (id, filter) = match site.args {
            [id] => (id, "*"),
            [
                id,
                Expr {
                    kind: ExprKind::Str(filter),
                    ..
                },
            ] => (id, filter.as_str()),
            _ => {
                return cx.fail(
                    site.span,
                    "cgroup_path() takes a cgroup id and an optional filter string literal",
                );
            }
        };
        let id = cx.expr(id)?;
        if !id.ty.is_int() {
            let message = format!("cgroup_path() needs a cgroup id, not {}", id.ty);
            return cx.fail(id.span, &message);
        }
        let mut call = TCall::new(site.id, vec![id]);
        call.consts = vec![cx.values.text(filter)];
        Some(TExpr {
            kind: TExprKind::Call(Box::new(call)),
            ty: Type::CgroupPath,
            span: site.span,
        })
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall, _ty: &Type) -> Value {
        let id = cx.int_expr(&call.args[0]);
        let buffer = cx.alloc(16);
        cx.store(Base::Frame, buffer, Src::Imm(call.consts[0] as i32));
        cx.store(Base::Frame, buffer + 8, Src::Reg(id));
        Value::Mem(buffer)
    }
}

pub(super) const TABLE: &[Entry] = &[
    Entry {
        name: "cgroup",
        written: Written::Word,
        indexed: false,
        signature: "cgroup",
        doc: "The cgroup (v2) id of the current task.",
        example: "tracepoint:syscalls:sys_enter_openat { @[cgroup] = count(); }",
        kind: Kind::Expression(&Helper0 {
            helper: GET_CURRENT_CGROUP_ID,
        }),
    },
    Entry {
        name: "cgroupid",
        written: Written::Call,
        indexed: false,
        signature: "cgroupid(path)",
        doc: "The id of the cgroup at a path, as `cgroup` gives it.",
        example: "tracepoint:syscalls:sys_enter_openat /cgroup == cgroupid(\"/sys/fs/cgroup\")/ { @ = count(); }",
        kind: Kind::Expression(&CgroupId),
    },
    Entry {
        name: "cgroup_path",
        written: Written::Call,
        indexed: false,
        signature: "cgroup_path(id[, filter])",
        doc: "A cgroup id, printed as `hierarchy:path` in each mounted hierarchy (matching the glob `filter`).",
        example: "BEGIN { print(cgroup_path(cgroup)); exit(); }",
        kind: Kind::Expression(&CgroupPath),
    },
];
