//! Lowering the user-stack snapshot of a record (`docs/unwinding.md`,
//! "Stack snapshots"): when the current task's user stack found no table
//! (`NO_PROCESS`, `UNKNOWN_MAPPING`, `TABLE_PENDING`), its registers, its address space's
//! identity and the top of its stack go after the message's frames
//! ([`snapshot`] layout), for the recorder to walk once the tables exist.
//! Stacks walked with tables pay one flag test; copies are skipped while
//! the ring buffer is more than an eighth full. The return addresses
//! pending uretprobes replaced with their trampoline are put back in the
//! copy, so the walk in user space goes through them as the BPF walk does.

use crate::codegen::helpers::*;
use crate::codegen::ir::{AluOp, Arg, Base, Cond, Inst, Label, Size, Src, VReg};
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

/// Pending uretprobes whose return addresses a copy gets back: recursion
/// deeper than this under a uretprobe keeps the outer trampolines.
const COPY_RETURN_INSTANCES: u32 = 8;

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
        let bp = self.load_sized(Base::Reg(regs), x86_64::RBP as i16, Size::U64);
        self.store_reg(Base::Reg(at), snapshot::BP, bp, Size::U64);
        // The sp the BPF walk started from (out of a uretprobe's trampoline).
        let sp = self.load_sized(Base::Reg(state), state::START_SP, Size::U64);
        self.store_reg(Base::Reg(at), snapshot::SP, sp, Size::U64);
        self.store_reg(Base::Reg(at), snapshot::START_STACK, start_stack, Size::U64);
        self.store_reg(Base::Reg(at), snapshot::END_CODE, end_code, Size::U64);
        let len = self.snapshot_length(sp, start_stack);
        let to = self.offset_pointer(at, snapshot::HEADER);
        let read = self.call_result(
            PROBE_READ_USER,
            vec![Arg::Reg(to), Arg::Reg(len), Arg::Reg(sp)],
        );
        self.branch(Cond::Ne, read, Src::Imm(0), done);
        self.restore_return_addresses(state, to, sp, len);
        self.store_reg(Base::Reg(at), snapshot::LEN, len, Size::U32);
        self.alu(AluOp::Add, bytes, Src::Imm(snapshot::HEADER as i32));
        self.alu(AluOp::Add, bytes, Src::Reg(len));
        self.alu(AluOp::Or, user.flags, Src::Imm(flags::SNAPSHOT as i32));
        self.emit(Inst::Bind(done));
    }

    /// Writes into the copy (`len` bytes at `copy`, read from `sp`) the
    /// return addresses the task's pending uretprobes (up to
    /// [`COPY_RETURN_INSTANCES`], innermost first, listed in the unwind
    /// state) replaced with their trampoline: each instance's `stack` is
    /// the slot, `orig_ret_vaddr` the address. An instance below `sp` was
    /// left by a `longjmp`; a slot that no longer holds the trampoline is
    /// not its.
    fn restore_return_addresses(&mut self, state: VReg, copy: VReg, sp: VReg, len: VReg) {
        let Some(returns) = (self.program.mm_layout)
            .and_then(|mm| mm.xol)
            .map(|xol| xol.returns)
        else {
            return;
        };
        let done = self.label();
        let trampoline = self.load_sized(Base::Reg(state), state::TRAMPOLINE, Size::U64);
        self.branch(Cond::Eq, trampoline, Src::Imm(0), done);
        let instance = self.load_sized(Base::Reg(state), state::RETURN_INSTANCES, Size::U64);
        let read = self.alloc(8);
        for _ in 0..COPY_RETURN_INSTANCES {
            let next = self.label();
            self.branch(Cond::Eq, instance, Src::Imm(0), done);
            self.read_kernel_word(instance, returns.instance_stack, read, done);
            let offset = self.load_sized(Base::Frame, read, Size::U64);
            self.branch(Cond::Lt, offset, Src::Reg(sp), next);
            self.alu(AluOp::Sub, offset, Src::Reg(sp));
            let end = self.offset_pointer(offset, 8);
            self.branch(Cond::Gt, end, Src::Reg(len), done);
            self.clamp_max(offset, snapshot::STACK_BYTES - 8);
            let slot = self.vreg();
            self.mov(slot, copy);
            self.alu(AluOp::Add, slot, Src::Reg(offset));
            let word = self.load_sized(Base::Reg(slot), 0, Size::U64);
            self.branch(Cond::Ne, word, Src::Reg(trampoline), next);
            let from = self.offset_pointer(instance, returns.instance_orig_ret);
            self.call_result(
                PROBE_READ_KERNEL,
                vec![Arg::Reg(slot), Arg::Imm(8), Arg::Reg(from)],
            );
            self.emit(Inst::Bind(next));
            self.read_kernel_word(instance, returns.instance_next, read, done);
            let following = self.load_sized(Base::Frame, read, Size::U64);
            self.mov(instance, following);
        }
        self.emit(Inst::Bind(done));
    }

    /// Reads the kernel word at `pointer + offset` into the frame slot
    /// `to`; jumps to `failed` when the read faults.
    fn read_kernel_word(&mut self, pointer: VReg, offset: u32, to: i16, failed: Label) {
        let from = self.offset_pointer(pointer, offset);
        let result = self.call_result(
            PROBE_READ_KERNEL,
            vec![Arg::Frame(to), Arg::Imm(8), Arg::Reg(from)],
        );
        self.branch(Cond::Ne, result, Src::Imm(0), failed);
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
