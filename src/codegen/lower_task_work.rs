//! Lowering of `-S offcpu=DUR`'s task work. Where the kernel has the
//! task-work kfunc, the `stack(offcpu, pending)` block does not run at
//! every task's `sys_exit`: the `sched_switch` program schedules it as a
//! callback in the task switched in after a long block in a system call,
//! and the kernel runs it there on the task's way back to user space.
//! Input: the program's groups of blocks, the stack maps; output: the IR
//! of the scheduling and of the callback's own first steps
//! (`docs/unwinding.md`, "Off-CPU stacks").

use crate::capture::model::DropReason;
use crate::codegen::helpers::{
    GET_CURRENT_PID_TGID, MAP_DELETE_ELEM, MAP_LOOKUP_ELEM, MAP_UPDATE_ELEM,
};
use crate::codegen::ir::{Arg, Base, Cond, Inst, Label, Size, Src, VReg};
use crate::codegen::lower::Lowerer;
use crate::codegen::stack_layout::records_of;
use crate::frontend::checked::{
    CheckedProbe, CheckedProgram, OffcpuStack, RecordRef, RecordRole, TaskWork,
};
use crate::vocab::{MapId, TASK_WORK_BYTES};

/// `bpf_map_update_elem` flag: only when the key is absent (a work still
/// scheduled keeps its element).
const BPF_NOEXIST: i64 = 1;

/// The program groups (indices) whose switch stacks schedule the callback,
/// and whose blocks the callback runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CallbackGroups {
    pub switch: usize,
    pub callback: usize,
}

/// Which groups `-S offcpu=DUR`'s task work joins, when the kernel has the
/// kfunc: the one with `stack(offcpu, NEXT)` and the one of the
/// `stack(offcpu, pending)` block, which is then no program of its own.
pub(super) fn callback_groups(
    program: &CheckedProgram,
    groups: &[Vec<(usize, &CheckedProbe)>],
) -> Option<CallbackGroups> {
    program.task_work?;
    let offcpu = |probe: &CheckedProbe, pending: bool| {
        records_of(probe).any(|record| match &record.offcpu_stack {
            Some(OffcpuStack::Pending) => pending,
            Some(OffcpuStack::Switch(_)) => !pending,
            None => false,
        })
    };
    let switch = groups
        .iter()
        .position(|blocks| blocks.iter().any(|(_, probe)| offcpu(probe, false)))?;
    let callback = groups
        .iter()
        .position(|blocks| blocks.iter().all(|(_, probe)| offcpu(probe, true)))?;
    Some(CallbackGroups { switch, callback })
}

impl Lowerer<'_> {
    /// The work map and kfunc, under `-S offcpu=DUR` with the kfunc.
    pub(super) fn task_work(&self) -> Option<(MapId, TaskWork)> {
        Some((self.stack_maps().task_work?, self.program.task_work?))
    }

    /// Schedules the callback in `task` (the BTF pointer of the task
    /// switched in, whose offcpu storage is `storage`), keyed by its thread
    /// id. When the kfunc cannot (no memory, or a work still scheduled) the
    /// blocks' user stack is lost: counted, and no longer waited for.
    pub(super) fn schedule_task_work(&mut self, task: VReg, storage: VReg) {
        let Some((map, work)) = self.task_work() else {
            unreachable!("scheduled only under -S offcpu=DUR with the kfunc")
        };
        let (lost, done) = (self.label(), self.label());
        let key = self.alloc(8);
        let tid = self.load_sized(Base::Reg(task), work.task_pid as i16, Size::U32);
        self.store_sized(Base::Frame, key, Src::Reg(tid), Size::U32);
        let empty = self.alloc(TASK_WORK_BYTES);
        self.store_sized(Base::Frame, empty, Src::Imm(0), Size::U64);
        let insert = vec![
            Arg::Map(map),
            Arg::Frame(key),
            Arg::Frame(empty),
            Arg::Imm(BPF_NOEXIST),
        ];
        self.call_result(MAP_UPDATE_ELEM, insert);
        let value = self.call_result(MAP_LOOKUP_ELEM, vec![Arg::Map(map), Arg::Frame(key)]);
        self.branch(Cond::Eq, value, Src::Imm(0), lost);
        let callback = self.vreg();
        self.emit(Inst::TaskWorkCallback { dst: callback });
        let error = self.vreg();
        self.emit(Inst::Kfunc {
            btf_id: work.kfunc,
            args: vec![
                Arg::Reg(task),
                Arg::Reg(value),
                Arg::Map(map),
                Arg::Reg(callback),
                Arg::Imm(0),
            ],
            ret: Some(error),
        });
        self.branch(Cond::Eq, error, Src::Imm(0), done);
        self.emit(Inst::Bind(lost));
        self.comment("no callback: the blocks' user stack is lost");
        self.pending_sent(storage);
        let record = self.pending_record();
        self.count_drop(record, DropReason::StackLost);
        self.emit(Inst::Bind(done));
    }

    /// The callback's first step: it deletes its element (the kernel keeps
    /// the running work's own), so that an exited task leaves none and the
    /// task's next long block schedules a new work.
    pub(super) fn delete_task_work(&mut self) {
        let Some((map, _)) = self.task_work() else {
            unreachable!("the callback runs under -S offcpu=DUR with the kfunc")
        };
        let key = self.alloc(8);
        let tid = self.call_result(GET_CURRENT_PID_TGID, vec![]);
        self.store_sized(Base::Frame, key, Src::Reg(tid), Size::U32);
        self.call_result(MAP_DELETE_ELEM, vec![Arg::Map(map), Arg::Frame(key)]);
    }

    /// A task that exits with its work scheduled runs it with no address
    /// space left: there is no user stack to send (jump to `skip`), and its
    /// blocks wait no longer.
    pub(super) fn skip_exiting_task(&mut self, storage: VReg, skip: Label) {
        let task = self.curtask();
        let slot = self.alloc(8);
        self.read_task_mm(task, Arg::Frame(slot));
        let mm = self.load_sized(Base::Frame, slot, Size::U64);
        let live = self.label();
        self.branch(Cond::Ne, mm, Src::Imm(0), live);
        self.pending_sent(storage);
        self.emit(Inst::Jump(skip));
        self.emit(Inst::Bind(live));
    }

    /// The record the callback sends (the `stack(offcpu, pending)` one).
    fn pending_record(&self) -> RecordRef {
        (self.program.probes.iter())
            .flat_map(records_of)
            .find_map(|record| match (&record.offcpu_stack, &record.role) {
                (Some(OffcpuStack::Pending), RecordRole::Instant(id)) => Some(*id),
                _ => None,
            })
            .expect("the callback's block records `stack(offcpu, pending)`")
    }
}
