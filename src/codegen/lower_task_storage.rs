//! Lowering maps keyed by a task: task-local storage. Reads see 0 when the
//! task has no value; stores create it.

use crate::codegen::helpers::*;
use crate::codegen::ir::{Arg, Base, Cond, Inst, Src, VReg};
use crate::codegen::lower::Lowerer;
use crate::frontend::checked::{MapRef, TExpr};

impl Lowerer<'_> {
    /// `bpf_task_storage_get(map, task, NULL, flags)`: the value's address or 0.
    pub(super) fn task_storage_get(&mut self, map: MapRef, task: &TExpr, create: bool) -> VReg {
        let task = self.int_expr(task);
        let flags = if create {
            LOCAL_STORAGE_GET_F_CREATE
        } else {
            0
        };
        let pointer = self.vreg();
        let args = vec![
            Arg::Map(self.maps.script[map.0].id),
            Arg::Reg(task),
            Arg::Imm(0),
            Arg::Imm(flags),
        ];
        self.emit(Inst::Call {
            helper: TASK_STORAGE_GET,
            args,
            ret: Some(pointer),
        });
        pointer
    }

    /// Copy `bytes` at `r10 + buffer` into the task's value, creating it.
    pub(super) fn task_storage_store(
        &mut self,
        map: MapRef,
        task: &TExpr,
        buffer: i16,
        bytes: u32,
    ) {
        self.comment(format!("{} task storage", self.program_maps()[map.0].name));
        let pointer = self.task_storage_get(map, task, true);
        let skip = self.label();
        self.branch(Cond::Eq, pointer, Src::Imm(0), skip);
        self.copy((Base::Reg(pointer), 0), (Base::Frame, buffer), bytes);
        self.emit(Inst::Bind(skip));
    }

    pub(super) fn task_storage_delete(&mut self, map: MapRef, task: &TExpr) {
        let task = self.int_expr(task);
        let args = vec![Arg::Map(self.maps.script[map.0].id), Arg::Reg(task)];
        self.emit(Inst::Call {
            helper: TASK_STORAGE_DELETE,
            args,
            ret: None,
        });
    }
}
