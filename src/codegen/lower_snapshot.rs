//! Lowering the user-stack snapshot of a record (`docs/unwinding.md`,
//! "Stack snapshots"): when the current task's user stack found no table
//! (`NO_PROCESS`, `UNKNOWN_MAPPING`, `TABLE_PENDING`), its registers, its address space's
//! identity and the top of its stack go after the message's frames
//! ([`snapshot`] layout), for the recorder to walk once the tables exist.
//! Stacks walked with tables pay one flag test; copies are skipped while
//! the ring buffer is more than an eighth full.

use crate::codegen::helpers::*;
use crate::codegen::ir::{AluOp, Arg, Base, Cond, Inst, Size, Src, VReg};
use crate::codegen::lower::Lowerer;
use crate::codegen::lower_stack::{StackTarget, UserFrames};
use crate::codegen::stack_layout::{KERNEL_FRAMES_BYTES, USER_FRAMES_BYTES, snapshot};
use crate::unwind::maps::{flags, state};
use crate::vocab::x86_64;

/// Copies are taken only while the ring buffer is at most this part full
/// (1/`SNAPSHOT_RING_SHARE`): a system-wide capture starts with every
/// process unread, and copies of 16 KiB each would crowd out the events
/// (seen: `-S waker` on a busy machine lost 13 k of 17 k events).
const SNAPSHOT_RING_SHARE: u32 = 8;

impl Lowerer<'_> {
    /// Appends the snapshot after the `bytes` of frames at
    /// `target.frames_at` when the user walk (its state in
    /// `user.snapshot_state`, 0 for none: the stack is not the current
    /// task's) found no table; adds its size to `bytes` and sets
    /// `SNAPSHOT` in the user flags. A stack the copy cannot read is sent
    /// without one.
    pub(super) fn snapshot_user_stack(
        &mut self,
        target: StackTarget,
        user: &UserFrames,
        bytes: VReg,
    ) {
        let done = self.label();
        self.branch(Cond::Eq, user.snapshot_state, Src::Imm(0), done);
        let missing = self.vreg();
        self.mov(missing, user.flags);
        let no_table = flags::NO_PROCESS | flags::UNKNOWN_MAPPING | flags::TABLE_PENDING;
        self.alu(AluOp::And, missing, Src::Imm(no_table as i32));
        self.branch(Cond::Eq, missing, Src::Imm(0), done);
        self.comment("no table: copy the user registers and stack, if the ring has room");
        let queued = self.call_result(
            RINGBUF_QUERY,
            vec![Arg::Map(self.maps.ringbuf), Arg::Imm(BPF_RB_AVAIL_DATA)],
        );
        let room = (self.maps.ringbuf_bytes / SNAPSHOT_RING_SHARE) as i32;
        self.branch(Cond::Gt, queued, Src::Imm(room), done);
        let state = user.snapshot_state;
        let start_stack = self.load_sized(Base::Reg(state), state::MM_START_STACK, Size::U64);
        let end_code = self.load_sized(Base::Reg(state), state::MM_END_CODE, Size::U64);
        self.clamp_max(bytes, USER_FRAMES_BYTES + KERNEL_FRAMES_BYTES);
        let at = self.offset_pointer(target.buf, target.frames_at);
        self.alu(AluOp::Add, at, Src::Reg(bytes));
        // The pc the BPF walk started from (out of a uprobe's slot).
        let ip = self.load_sized(Base::Reg(state), state::START_IP, Size::U64);
        self.store_reg(Base::Reg(at), snapshot::IP, ip, Size::U64);
        let task = self.call_result(GET_CURRENT_TASK_BTF, vec![]);
        let regs = self.call_result(TASK_PT_REGS, vec![Arg::Reg(task)]);
        let mut copy = |from: u16, to| {
            let value = self.load_sized(Base::Reg(regs), from as i16, Size::U64);
            self.store_reg(Base::Reg(at), to, value, Size::U64);
            value
        };
        let sp = copy(x86_64::RSP, snapshot::SP);
        copy(x86_64::RBP, snapshot::BP);
        self.store_reg(Base::Reg(at), snapshot::START_STACK, start_stack, Size::U64);
        self.store_reg(Base::Reg(at), snapshot::END_CODE, end_code, Size::U64);
        let len = self.snapshot_length(sp, start_stack);
        let to = self.offset_pointer(at, snapshot::HEADER);
        let read = self.call_result(
            PROBE_READ_USER,
            vec![Arg::Reg(to), Arg::Reg(len), Arg::Reg(sp)],
        );
        self.branch(Cond::Ne, read, Src::Imm(0), done);
        self.store_reg(Base::Reg(at), snapshot::LEN, len, Size::U32);
        self.alu(AluOp::Add, bytes, Src::Imm(snapshot::HEADER as i32));
        self.alu(AluOp::Add, bytes, Src::Reg(len));
        self.alu(AluOp::Or, user.flags, Src::Imm(flags::SNAPSHOT as i32));
        self.emit(Inst::Bind(done));
    }

    /// Bytes to copy from `sp`: [`snapshot::STACK_BYTES`], but not past
    /// the main thread's initial stack pointer (`mm->start_stack`, below
    /// the arguments and environment, where the stack may end within a
    /// page).
    fn snapshot_length(&mut self, sp: VReg, start_stack: VReg) -> VReg {
        let len = self.vreg();
        self.mov_imm(len, snapshot::STACK_BYTES as i32);
        let full = self.label();
        self.branch(Cond::Ge, sp, Src::Reg(start_stack), full);
        self.mov(len, start_stack);
        self.alu(AluOp::Sub, len, Src::Reg(sp));
        self.emit(Inst::Bind(full));
        self.clamp_max(len, snapshot::STACK_BYTES);
        len
    }
}
