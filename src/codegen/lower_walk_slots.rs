//! Which of a task's off-CPU unwind states (`stack_layout::offcpu`) a
//! switch-out walks into. Each state keeps its last walk for the walk cache
//! (`unwind::walk_cache_bpf`), so a task that leaves the CPU at two places in
//! turn (blocked in `read`, preempted on `write`'s way out) finds each walk
//! again. The choice only picks where the unwinder looks: whether a kept
//! walk is reused is decided there, by every input and word it read.

use crate::codegen::helpers::TASK_PT_REGS;
use crate::codegen::ir::{AluOp, Arg, Base, Cond, Inst, Size, Src, VReg};
use crate::codegen::lower::Lowerer;
use crate::codegen::stack_layout::offcpu;
use crate::unwind::maps::{state, walk_cache as wc};
use crate::vocab::x86_64;

impl Lowerer<'_> {
    /// The state of `task` (the current task; `storage` its off-CPU
    /// storage) to walk its user stack into: the one whose kept walk starts
    /// from the task's user `ip` and `sp`, else the one not holding the
    /// latest walk. Notes it as the latest.
    pub(super) fn walk_state_to_use(&mut self, task: VReg, storage: VReg) -> VReg {
        self.comment("the task's unwind state whose kept walk starts here");
        let regs = self.call_result(TASK_PT_REGS, vec![Arg::Reg(task)]);
        let ip = self.load_sized(Base::Reg(regs), x86_64::RIP as i16, Size::U64);
        let sp = self.load_sized(Base::Reg(regs), x86_64::RSP as i16, Size::U64);
        let index = self.vreg();
        let chosen = self.label();
        for slot in 0..offcpu::WALKS {
            let other = self.label();
            let at = offcpu::STATE + (slot * state::BYTES) as i16;
            let valid = self.load_sized(Base::Reg(storage), at + wc::VALID, Size::U32);
            self.branch(Cond::Eq, valid, Src::Imm(0), other);
            let kept_ip = self.load_sized(Base::Reg(storage), at + wc::IP, Size::U64);
            self.branch(Cond::Ne, kept_ip, Src::Reg(ip), other);
            let kept_sp = self.load_sized(Base::Reg(storage), at + wc::SP, Size::U64);
            self.branch(Cond::Ne, kept_sp, Src::Reg(sp), other);
            self.mov_imm(index, slot as i32);
            self.emit(Inst::Jump(chosen));
            self.emit(Inst::Bind(other));
        }
        let last = self.load_sized(Base::Reg(storage), offcpu::LAST, Size::U32);
        self.mov(index, last);
        self.alu(AluOp::Xor, index, Src::Imm(1));
        self.emit(Inst::Bind(chosen));
        self.alu(AluOp::And, index, Src::Imm(1));
        self.store_reg(Base::Reg(storage), offcpu::LAST, index, Size::U32);
        self.state_at(storage, index)
    }

    /// The state holding the task's latest walk.
    pub(super) fn latest_walk_state(&mut self, storage: VReg) -> VReg {
        let index = self.load_sized(Base::Reg(storage), offcpu::LAST, Size::U32);
        self.alu(AluOp::And, index, Src::Imm(1));
        self.state_at(storage, index)
    }

    /// `storage + STATE + index * state::BYTES`, `index` 0 or 1 (a bounded
    /// offset: the verifier checks every access against both).
    fn state_at(&mut self, storage: VReg, index: VReg) -> VReg {
        self.alu(AluOp::Mul, index, Src::Imm(state::BYTES as i32));
        self.alu(AluOp::Add, index, Src::Imm(i32::from(offcpu::STATE)));
        let at = self.vreg();
        self.mov(at, storage);
        self.alu(AluOp::Add, at, Src::Reg(index));
        at
    }
}
