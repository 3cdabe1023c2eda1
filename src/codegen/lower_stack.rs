//! Lowering the stacks of records into their messages (`docs/unwinding.md`,
//! "Record stacks"): the per-CPU scratch buffer a record with a stack is
//! built in, the user stack (the table unwinder; the kernel's frame-pointer
//! walk for processes without tables; a task's cached off-CPU stack), the
//! kernel stack (the tracer's own frames skipped in the kernel), and the
//! stack description of the header (frame counts, flags, kernel error).

use crate::codegen::helpers::*;
use crate::codegen::ir::{
    AluOp, Arg, Base, Cond, Inst, KernelWalkerSpec, Label, Size, Src, UnwinderSpec, VReg,
};
use crate::codegen::lower::Lowerer;
use crate::codegen::stack_layout::{
    BUILD_ID_STACK_MAX, GLUE_BYTES, KERNEL_FRAMES_BYTES, KERNEL_STACK_MAX, NEST_LEVELS, STATE_AT,
    StackMaps, USER_FRAMES_BYTES, offcpu,
};
use crate::frontend::checked::{OffcpuStack, StackKind, SwitchStack};
use crate::providers;
use crate::unwind::maps::{MAX_FRAMES, flags, input, state};
use crate::vocab::{AttachPoint, BUILD_ID_FRAME_BYTES, MapId, record_header as header, x86_64};

/// A scratch buffer taken for one record.
pub(super) struct Scratch {
    nest: VReg,
    level: VReg,
    /// The buffer (a map value pointer).
    pub(super) buf: VReg,
}

/// Where a record's stack goes: its frames into `buf` from `frames_at` on
/// (user frames, then kernel frames), its description at `buf + desc_at`
/// (laid out as the header from `KERNEL_FRAMES` to `ENTRY_RETURN`).
#[derive(Clone, Copy)]
pub(super) struct StackTarget {
    pub(super) buf: VReg,
    pub(super) frames_at: u32,
    pub(super) desc_at: i16,
}

impl StackTarget {
    /// The offset of a header field of the description.
    fn desc(&self, field: u32) -> i16 {
        self.desc_at + (field - header::KERNEL_FRAMES) as i16
    }

    /// Whether `buf` is the message itself (its header at `buf`), not a
    /// span's saved start.
    pub(super) fn is_message(&self) -> bool {
        self.desc_at == header::KERNEL_FRAMES as i16
    }
}

/// `bpf_get_stack` flags: the user stack, as build ids and file offsets.
const BPF_F_USER_BUILD_ID: i32 = 1 << 11;
/// `struct bpf_stack_build_id` status: no build id, the frame is an address.
const BPF_STACK_BUILD_ID_IP: i32 = 2;
/// `bpf_get_stack` flags: the low byte is the number of frames to skip.
const SKIP_MASK: i32 = 0xff;

impl Lowerer<'_> {
    pub(super) fn stack_maps(&self) -> StackMaps {
        self.maps
            .stacks
            .expect("records with stacks have the stack maps")
    }

    /// This CPU's scratch buffer for the next nesting level; jumps to
    /// `full` when every level is in use.
    pub(super) fn scratch_acquire(&mut self, full: Label) -> Scratch {
        let maps = self.stack_maps();
        self.comment("take this CPU's scratch buffer for the nesting level");
        let key = self.alloc(8);
        self.emit(Inst::Store {
            base: Base::Frame,
            offset: key,
            src: Src::Imm(0),
            size: Size::U32,
        });
        let nest = self.array_lookup(maps.nest, key);
        self.branch(Cond::Eq, nest, Src::Imm(0), full);
        let level = self.load_sized(Base::Reg(nest), 0, Size::U64);
        self.branch(Cond::Ge, level, Src::Imm(NEST_LEVELS as i32), full);
        let next = self.vreg();
        self.mov(next, level);
        self.alu(AluOp::Add, next, Src::Imm(1));
        self.store_reg(Base::Reg(nest), 0, next, Size::U64);
        self.store_reg(Base::Frame, key, level, Size::U32);
        let buf = self.array_lookup(maps.scratch, key);
        let found = self.label();
        self.branch(Cond::Ne, buf, Src::Imm(0), found);
        self.store_reg(Base::Reg(nest), 0, level, Size::U64);
        self.emit(Inst::Jump(full));
        self.emit(Inst::Bind(found));
        Scratch { nest, level, buf }
    }

    /// Gives the buffer back to the level below.
    pub(super) fn scratch_release(&mut self, scratch: &Scratch) {
        self.store_reg(Base::Reg(scratch.nest), 0, scratch.level, Size::U64);
    }

    /// Takes the record's stack into `target`; returns the bytes of frames
    /// written. `now` is the record's time (off-CPU blocks are measured to
    /// it; a switch-out's walk moves it past the walk).
    pub(super) fn take_stack(
        &mut self,
        parts: StackKind,
        offcpu: Option<&OffcpuStack>,
        target: StackTarget,
        now: VReg,
    ) -> VReg {
        let buf = Base::Reg(target.buf);
        for field in [
            header::KERNEL_FRAMES,
            header::STACK_FLAGS,
            header::ENTRY_RETURN,
        ] {
            self.store_imm(buf, target.desc(field), 0, Size::U64);
        }
        let user = UserFrames::empty(self);
        match offcpu {
            Some(OffcpuStack::Switch(switch)) => {
                self.switch_stack(parts, switch, target, now, &user);
            }
            Some(OffcpuStack::Pending) | None => {
                if parts.user() && offcpu.is_some() {
                    self.pending_user_stack(target, &user);
                } else if parts.user() {
                    self.current_user_stack(target, &user);
                }
                if parts.kernel() {
                    let source = KernelSource::Current {
                        caller_frames: 0,
                        walk: false,
                    };
                    self.kernel_stack(target, &user, source);
                }
            }
        }
        self.store_reg(buf, target.desc(header::USER_FRAMES), user.count, Size::U32);
        let bytes = self.load_sized(buf, target.desc(header::KERNEL_FRAMES), Size::U32);
        self.alu(AluOp::Lsh, bytes, Src::Imm(3));
        self.alu(AluOp::Add, bytes, Src::Reg(user.bytes));
        if parts.user() && target.is_message() && !self.program.frame_pointers_only {
            self.snapshot_user_stack(target, &user, bytes);
        }
        self.store_reg(buf, target.desc(header::STACK_FLAGS), user.flags, Size::U32);
        bytes
    }

    /// The current task's user stack through the unwinder, into the
    /// message; for a process without tables, the kernel's frame-pointer
    /// walk with build ids (its frames then name their files even if the
    /// process is gone before user space reads them).
    fn current_user_stack(&mut self, target: StackTarget, user: &UserFrames) {
        let buf = target.buf;
        let state = self.offset_pointer(buf, STATE_AT);
        let entry = if self.probe.function_entry {
            input::FUNCTION_ENTRY
        } else {
            0
        };
        self.unwind(state, entry, None);
        let walked = self.label();
        let done = self.label();
        let unwound_flags = self.load_sized(Base::Reg(state), state::FLAGS, Size::U32);
        self.mov(user.flags, unwound_flags);
        self.bit_clear_branch(user.flags, flags::NO_PROCESS, walked);
        self.comment("no unwind tables for the process: the kernel walks frame pointers");
        let to = self.offset_pointer(buf, target.frames_at);
        let user_flags = BPF_F_USER_STACK as i32 | BPF_F_USER_BUILD_ID;
        let got = self.get_stack(to, BUILD_ID_STACK_MAX, Src::Imm(user_flags));
        self.first_frame_out_of_line(state, to, got, FirstFrame::BuildId);
        self.clamp_bytes(got, USER_FRAMES_BYTES);
        self.mov(user.bytes, got);
        self.mov(user.count, got);
        self.alu(AluOp::Rsh, user.count, Src::Imm(5));
        self.alu(
            AluOp::Or,
            user.flags,
            Src::Imm((flags::KERNEL_WALK | flags::BUILD_ID) as i32),
        );
        if self.probe.function_entry {
            self.entry_return_address(buf, target.desc(header::ENTRY_RETURN));
        }
        self.emit(Inst::Jump(done));
        self.emit(Inst::Bind(walked));
        self.copy_state_frames(state, target, user);
        self.emit(Inst::Bind(done));
        self.mov(user.snapshot_state, state);
    }

    /// A kernel walk (`got` bytes of frames at `to`) starts at the task's
    /// `ip`: when the unwinder found it in a uprobe's out-of-line slot, the
    /// first frame becomes the address the walk starts from (`state::XOL_IP`).
    fn first_frame_out_of_line(&mut self, state: VReg, to: VReg, got: VReg, kind: FirstFrame) {
        let done = self.label();
        let xol_ip = self.load_sized(Base::Reg(state), state::XOL_IP, Size::U64);
        self.branch(Cond::Eq, xol_ip, Src::Imm(0), done);
        let bytes = match kind {
            FirstFrame::Address => 8,
            FirstFrame::BuildId => BUILD_ID_FRAME_BYTES as i32,
        };
        self.branch(Cond::Slt, got, Src::Imm(bytes), done);
        let start_ip = self.load_sized(Base::Reg(state), state::START_IP, Size::U64);
        match kind {
            FirstFrame::Address => self.store_reg(Base::Reg(to), 0, start_ip, Size::U64),
            FirstFrame::BuildId => {
                let ip_offset = BUILD_ID_FRAME_BYTES as i16 - 8;
                self.store_imm(Base::Reg(to), 0, BPF_STACK_BUILD_ID_IP, Size::U32);
                self.store_reg(Base::Reg(to), ip_offset, start_ip, Size::U64);
            }
        }
        self.emit(Inst::Bind(done));
    }

    /// `*(u64 *)regs->sp` at a function's first instruction: the return
    /// address into its caller, which a frame-pointer walk misses.
    fn entry_return_address(&mut self, buf: VReg, at: i16) {
        let ctx = self.ctx;
        let sp = self.load_sized(Base::Reg(ctx), x86_64::STACK_POINTER as i16, Size::U64);
        let to = self.offset_pointer(buf, at as u32);
        self.call(
            PROBE_READ_USER,
            vec![Arg::Reg(to), Arg::Imm(8), Arg::Reg(sp)],
        );
    }

    /// Copies an unwind state's frames to the target; sets the count and
    /// bytes in `user`.
    fn copy_state_frames(&mut self, state: VReg, target: StackTarget, user: &UserFrames) {
        let count = self.load_sized(Base::Reg(state), state::FRAMES, Size::U32);
        self.alu(AluOp::And, count, Src::Imm(MAX_FRAMES as i32));
        self.mov(user.count, count);
        self.mov(user.bytes, count);
        self.alu(AluOp::Lsh, user.bytes, Src::Imm(3));
        let none = self.label();
        self.branch(Cond::Eq, count, Src::Imm(0), none);
        let to = self.offset_pointer(target.buf, target.frames_at);
        let from = self.offset_pointer(state, state::STACK as u32);
        self.call(
            PROBE_READ_KERNEL,
            vec![Arg::Reg(to), Arg::Reg(user.bytes), Arg::Reg(from)],
        );
        self.emit(Inst::Bind(none));
    }

    /// The kernel stack after the user frames: of the current task (the
    /// tracer's own frames skipped), or of a task off the CPU.
    fn kernel_stack(&mut self, target: StackTarget, user: &UserFrames, source: KernelSource) {
        let to = self.offset_pointer(target.buf, target.frames_at);
        let user_bytes = self.vreg();
        self.mov(user_bytes, user.bytes);
        self.alu(
            AluOp::And,
            user_bytes,
            Src::Imm(USER_FRAMES_BYTES as i32 - 1),
        );
        self.alu(AluOp::Add, to, Src::Reg(user_bytes));
        let got = match source {
            KernelSource::Current {
                caller_frames,
                walk,
            } => {
                let skip = self.kernel_skip();
                // The walker starts above the program, from a raw
                // tracepoint's glue: the frames the measured skip counts.
                let raw_tracepoint = matches!(
                    self.probe.attach,
                    AttachPoint::TpBtf { .. } | AttachPoint::RawTracepoint { .. }
                );
                let walker = (self.program.kernel_walk).filter(|_| walk && raw_tracepoint);
                let got = match walker {
                    Some(task_stack) => self.walk_kernel_stack(to, skip, task_stack, user),
                    None => self.get_stack(to, KERNEL_STACK_MAX, Src::Reg(skip)),
                };
                self.flag_kernel_truncated(got, Src::Reg(skip), user);
                self.drop_glue_frames(to, got, caller_frames);
                got
            }
            KernelSource::Task(task) => {
                let got = self.vreg();
                let args = vec![
                    Arg::Reg(task),
                    Arg::Reg(to),
                    Arg::Imm(i64::from(KERNEL_STACK_MAX)),
                    Arg::Imm(0),
                ];
                self.emit(Inst::Call {
                    helper: GET_TASK_STACK,
                    args,
                    ret: Some(got),
                });
                self.flag_kernel_truncated(got, Src::Imm(0), user);
                got
            }
        };
        let fine = self.label();
        self.branch(Cond::Sge, got, Src::Imm(0), fine);
        let buf = Base::Reg(target.buf);
        self.store_reg(buf, target.desc(header::KERNEL_ERROR), got, Size::U32);
        self.emit(Inst::Bind(fine));
        self.clamp_bytes(got, KERNEL_FRAMES_BYTES);
        self.alu(AluOp::Rsh, got, Src::Imm(3));
        self.store_reg(buf, target.desc(header::KERNEL_FRAMES), got, Size::U32);
    }

    /// The current task's kernel frames after the tracer's into `to`: the
    /// ORC walker's, else (it gave up) the kernel's; flagged either way.
    fn walk_kernel_stack(
        &mut self,
        to: VReg,
        skip: VReg,
        task_stack: u32,
        user: &UserFrames,
    ) -> VReg {
        let maps = (self.stack_maps().orc).expect("a kernel walk has the walker's maps");
        self.function.kernel_walker = Some(KernelWalkerSpec { maps, task_stack });
        let (given_up, done) = (self.label(), self.label());
        let got = self.vreg();
        self.emit(Inst::KernelWalk { to, dst: got });
        self.branch(Cond::Slt, got, Src::Imm(0), given_up);
        self.alu(AluOp::Or, user.flags, Src::Imm(flags::KERNEL_ORC as i32));
        self.emit(Inst::Jump(done));
        self.emit(Inst::Bind(given_up));
        self.comment("the walk gave up: the kernel's walk");
        let kernel = self.get_stack(to, KERNEL_STACK_MAX, Src::Reg(skip));
        self.mov(got, kernel);
        let flag = Src::Imm(flags::KERNEL_ORC_GIVEN_UP as i32);
        self.alu(AluOp::Or, user.flags, flag);
        self.emit(Inst::Bind(done));
        got
    }

    /// Sets `KERNEL_TRUNCATED` in the user flags when the kernel's walk
    /// (`got` bytes after `skip` frames) reached the depth limit: the
    /// kernel stops at `perf_event_max_stack` frames, skipped ones included
    /// (127, the default, also the room), so the stack may go on.
    fn flag_kernel_truncated(&mut self, got: VReg, skip: Src, user: &UserFrames) {
        let whole = self.label();
        self.branch(Cond::Slt, got, Src::Imm(0), whole);
        let depth = self.vreg();
        self.mov(depth, got);
        self.alu(AluOp::Rsh, depth, Src::Imm(3));
        self.alu(AluOp::Add, depth, skip);
        self.branch(Cond::Lt, depth, Src::Imm(MAX_FRAMES as i32), whole);
        let cut = Src::Imm(flags::KERNEL_TRUNCATED as i32);
        self.alu(AluOp::Or, user.flags, cut);
        self.emit(Inst::Bind(whole));
    }

    /// Removes the first frames of the `got` bytes of frames at `to`: at a
    /// raw tracepoint the tracepoint's iterator when the first frame is in
    /// it (`stack_layout::tracepoint_glue`), then `caller_frames` more. The
    /// frames move down (`bpf_probe_read_kernel` copies upwards, so the
    /// overlap is safe).
    fn drop_glue_frames(&mut self, to: VReg, got: VReg, caller_frames: i32) {
        let raw_tracepoint = matches!(
            self.probe.attach,
            AttachPoint::TpBtf { .. } | AttachPoint::RawTracepoint { .. }
        );
        let glue = self.stack_maps().glue.filter(|_| raw_tracepoint);
        if glue.is_none() && caller_frames == 0 {
            return;
        }
        let done = self.label();
        let dropped = self.vreg();
        self.mov_imm(dropped, 8 * caller_frames);
        if let Some(glue) = glue {
            let counted = self.label();
            self.branch(Cond::Slt, got, Src::Imm(8), counted);
            let range = self.vreg();
            self.emit(Inst::MapValueAddr {
                dst: range,
                map: glue,
                offset: GLUE_BYTES * self.probe_index as u32,
            });
            let start = self.load_sized(Base::Reg(range), 0, Size::U64);
            let end = self.load_sized(Base::Reg(range), 8, Size::U64);
            let first = self.load_sized(Base::Reg(to), 0, Size::U64);
            self.branch(Cond::Lt, first, Src::Reg(start), counted);
            self.branch(Cond::Ge, first, Src::Reg(end), counted);
            self.alu(AluOp::Add, dropped, Src::Imm(8));
            self.emit(Inst::Bind(counted));
        }
        self.branch(Cond::Eq, dropped, Src::Imm(0), done);
        self.branch(Cond::Sle, got, Src::Reg(dropped), done);
        self.comment("drop the tracepoint's glue and caller frames");
        self.alu(AluOp::Sub, got, Src::Reg(dropped));
        let bytes = self.vreg();
        self.mov(bytes, got);
        self.alu(AluOp::And, bytes, Src::Imm(KERNEL_FRAMES_BYTES as i32 - 1));
        self.alu(
            AluOp::And,
            dropped,
            Src::Imm(KERNEL_FRAMES_BYTES as i32 - 1),
        );
        let from = self.vreg();
        self.mov(from, to);
        self.alu(AluOp::Add, from, Src::Reg(dropped));
        self.call(
            PROBE_READ_KERNEL,
            vec![Arg::Reg(to), Arg::Reg(bytes), Arg::Reg(from)],
        );
        self.emit(Inst::Bind(done));
    }

    /// `bpf_get_stack(ctx, to, max, flags)`.
    fn get_stack(&mut self, to: VReg, max: u32, flags: Src) -> VReg {
        let flags = match flags {
            Src::Imm(imm) => Arg::Imm(i64::from(imm)),
            Src::Reg(reg) => Arg::Reg(reg),
        };
        // A task-work callback has no context: the current task's stack.
        let (helper, of) = match self.in_task_work {
            true => (GET_TASK_STACK, self.curtask()),
            false => (GET_STACK, self.ctx),
        };
        let args = vec![Arg::Reg(of), Arg::Reg(to), Arg::Imm(i64::from(max)), flags];
        self.call_result(helper, args)
    }

    /// The skip count of this probe's kernel stacks (the tracer's frames,
    /// measured at start-up per program type).
    fn kernel_skip(&mut self) -> VReg {
        match providers::of(&self.probe.attach).kernel_stack_skip() {
            Some(slot) => {
                let skip = self.global(slot);
                self.alu(AluOp::And, skip, Src::Imm(SKIP_MASK));
                skip
            }
            None => self.constant(0),
        }
    }

    /// Sets the state's input and walks the current task's user stack;
    /// with `copy` (a task's own state) reuses its last walk while it holds.
    fn unwind(&mut self, state: VReg, input_bits: u32, copy: Option<VReg>) {
        let maps = self.stack_maps();
        let (Some(unwind), Some(mm)) = (maps.unwind, self.program.mm_layout) else {
            unreachable!("records with user stacks have unwind maps and the mm layout")
        };
        self.function.unwinder = Some(UnwinderSpec { maps: unwind, mm });
        self.store_imm(Base::Reg(state), state::INPUT, input_bits as i32, Size::U32);
        self.emit(Inst::Unwind { state, copy });
    }

    /// `stack(offcpu, NEXT)` at a context switch. The task switched out
    /// (the current one) leaves its switch-out time in its own storage, and
    /// its user stack, walked there, unless under `-S offcpu=DUR` it is in
    /// a system call (the stack is then taken at the call's return, only
    /// after a long block). Without a threshold the record takes that stack
    /// and the kernel stack below the switch; with one, when `NEXT` was off
    /// the CPU at least DUR, `NEXT`'s kernel stack as it sleeps and its
    /// stored user stack, or marks the user stack pending.
    fn switch_stack(
        &mut self,
        parts: StackKind,
        switch: &SwitchStack,
        target: StackTarget,
        now: VReg,
        user: &UserFrames,
    ) {
        let map = self
            .stack_maps()
            .offcpu
            .expect("`stack(offcpu, NEXT)` has its task storage");
        let threshold = self.program.offcpu_min_block_ns;
        let (untracked, stamped) = (self.label(), self.label());
        let prev_selected = self.int_expr(&switch.prev_selected);
        self.branch(Cond::Eq, prev_selected, Src::Imm(0), untracked);
        let prev = self.curtask();
        let storage = self.task_storage(map, prev, true);
        self.branch(Cond::Eq, storage, Src::Imm(0), untracked);
        if parts.user() {
            let walked = self.label();
            if threshold.is_some() {
                let in_syscall = self.in_syscall(prev);
                self.store_reg(
                    Base::Reg(storage),
                    offcpu::IN_SYSCALL,
                    in_syscall,
                    Size::U64,
                );
                self.branch(Cond::Ne, in_syscall, Src::Imm(0), walked);
            }
            let prev_state = self.walk_state_to_use(prev, storage);
            self.walk_user_stack(prev_state, target);
            if threshold.is_none() {
                self.copy_stored_frames(prev_state, target, user);
                self.mov(user.snapshot_state, prev_state);
            }
            self.emit(Inst::Bind(walked));
        }
        self.stamp_switch(target, now);
        self.store_reg(Base::Reg(storage), offcpu::OUT_NS, now, Size::U64);
        self.emit(Inst::Jump(stamped));
        self.emit(Inst::Bind(untracked));
        self.stamp_switch(target, now);
        self.emit(Inst::Bind(stamped));
        let Some(min_block_ns) = threshold else {
            if parts.kernel() {
                // The tracepoint is in `__schedule`: drop it too.
                let source = KernelSource::Current {
                    caller_frames: 1,
                    walk: true,
                };
                self.kernel_stack(target, user, source);
            }
            return;
        };
        let done = self.label();
        let next_selected = self.int_expr(&switch.next_selected);
        self.branch(Cond::Eq, next_selected, Src::Imm(0), done);
        let next = self.int_expr(&switch.next);
        let next_storage = self.task_storage(map, next, false);
        self.branch(Cond::Eq, next_storage, Src::Imm(0), done);
        let out = self.load_sized(Base::Reg(next_storage), offcpu::OUT_NS, Size::U64);
        self.branch(Cond::Eq, out, Src::Imm(0), done);
        let blocked = self.vreg();
        self.mov(blocked, now);
        self.alu(AluOp::Sub, blocked, Src::Reg(out));
        let min = self.constant(min_block_ns);
        self.branch(Cond::Lt, blocked, Src::Reg(min), done);
        self.comment("a long block: the stacks of the task switched in");
        if parts.user() {
            self.long_block_user_stack((next, next_storage), target, now, user);
        }
        if parts.kernel() {
            self.kernel_stack(target, user, KernelSource::Task(next));
        }
        self.emit(Inst::Bind(done));
    }

    /// Whether `task` (the current one, a BTF pointer) entered the kernel
    /// by a system call: its saved user registers have a system call
    /// number (`orig_ax` is -1 for interrupts and exceptions) and an ip
    /// (a kernel thread's are zero).
    fn in_syscall(&mut self, task: VReg) -> VReg {
        let regs = self.call_result(TASK_PT_REGS, vec![Arg::Reg(task)]);
        let orig_ax = self.load_sized(Base::Reg(regs), x86_64::ORIG_RAX as i16, Size::U64);
        let ip = self.load_sized(Base::Reg(regs), x86_64::RIP as i16, Size::U64);
        let result = self.vreg();
        self.mov_imm(result, 0);
        let no = self.label();
        self.branch(Cond::Slt, orig_ax, Src::Imm(0), no);
        self.branch(Cond::Eq, ip, Src::Imm(0), no);
        self.mov_imm(result, 1);
        self.emit(Inst::Bind(no));
        result
    }

    /// The user part of a long block's stack under `-S offcpu=DUR`: the
    /// stack walked at its switch-out, or, when its task blocked in a system
    /// call, none yet: the record is flagged `USER_PENDING` and the task
    /// (`next`, with its storage) remembers the first such switch-in, which
    /// its return's record (`stack(offcpu, pending)`) carries as its time,
    /// and its address space then, which an `execve` changes before it
    /// returns.
    fn long_block_user_stack(
        &mut self,
        (next, storage): (VReg, VReg),
        target: StackTarget,
        now: VReg,
        user: &UserFrames,
    ) {
        let walked = self.label();
        let done = self.label();
        let in_syscall = self.load_sized(Base::Reg(storage), offcpu::IN_SYSCALL, Size::U64);
        self.branch(Cond::Eq, in_syscall, Src::Imm(0), walked);
        self.mov_imm(user.flags, flags::USER_PENDING as i32);
        let from = self.load_sized(Base::Reg(storage), offcpu::PENDING_FROM, Size::U64);
        self.branch(Cond::Ne, from, Src::Imm(0), done);
        self.store_reg(Base::Reg(storage), offcpu::PENDING_FROM, now, Size::U64);
        self.count_waiting(1);
        let to = self.offset_pointer(storage, offcpu::PENDING_MM as u32);
        self.read_task_mm(next, Arg::Reg(to));
        if self.task_work().is_some() {
            self.schedule_task_work(next, storage);
        }
        self.emit(Inst::Jump(done));
        self.emit(Inst::Bind(walked));
        let state = self.latest_walk_state(storage);
        self.copy_stored_frames(state, target, user);
        if target.is_message() {
            // The frames are addresses of NEXT's process, not the current one's.
            let tgid = self.load_sized(Base::Reg(state), state::TGID, Size::U32);
            let at = header::STACK_TGID as i16;
            self.store_reg(Base::Reg(target.buf), at, tgid, Size::U32);
        }
        self.emit(Inst::Bind(done));
    }

    /// Reads `task->mm` (the identity of its address space; a BTF task
    /// pointer) into the 8 bytes at `to`.
    pub(super) fn read_task_mm(&mut self, task: VReg, to: Arg) {
        let Some(mm) = self.program.mm_layout else {
            unreachable!("records with user stacks have the mm layout")
        };
        let from = self.offset_pointer(task, mm.task_mm);
        self.call(PROBE_READ_KERNEL, vec![to, Arg::Imm(8), Arg::Reg(from)]);
    }

    /// The user part of the `stack(offcpu, pending)` record at a system
    /// call's return: the current task's user stack, unless an `execve`
    /// replaced its address space since its first pending block (`mm`
    /// changed): the stack is then the new program's, and the record says
    /// so with `USER_EXEC` and no user frames.
    fn pending_user_stack(&mut self, target: StackTarget, user: &UserFrames) {
        let map = self
            .stack_maps()
            .offcpu
            .expect("`stack(offcpu, pending)` has its task storage");
        let (walk, done) = (self.label(), self.label());
        let task = self.curtask();
        let storage = self.task_storage(map, task, false);
        self.branch(Cond::Eq, storage, Src::Imm(0), walk);
        let slot = self.alloc(8);
        self.read_task_mm(task, Arg::Frame(slot));
        let now_mm = self.load_sized(Base::Frame, slot, Size::U64);
        let then_mm = self.load_sized(Base::Reg(storage), offcpu::PENDING_MM, Size::U64);
        self.branch(Cond::Eq, now_mm, Src::Reg(then_mm), walk);
        self.comment("exec since the first pending block: not the blocks' user stack");
        self.mov_imm(user.flags, flags::USER_EXEC as i32);
        self.emit(Inst::Jump(done));
        self.emit(Inst::Bind(walk));
        self.current_user_stack(target, user);
        self.emit(Inst::Bind(done));
    }

    /// Copies a stored walk's frames and flags to the target.
    fn copy_stored_frames(&mut self, state: VReg, target: StackTarget, user: &UserFrames) {
        self.copy_state_frames(state, target, user);
        let stored = self.load_sized(Base::Reg(state), state::FLAGS, Size::U32);
        self.mov(user.flags, stored);
    }

    /// The switch's time (the record's, and the block's start), read once
    /// the switch-out's user walk is done: the task leaves the CPU only
    /// then, so the walk is not off-CPU time (the record is built with no
    /// time before it).
    fn stamp_switch(&mut self, target: StackTarget, now: VReg) {
        let after = self.call_result(KTIME_GET_NS, vec![]);
        self.mov(now, after);
        if target.is_message() {
            self.store_reg(Base::Reg(target.buf), header::TS as i16, now, Size::U64);
        }
    }

    /// `stack(offcpu, pending)`: nothing to send (jump to `skip`) unless
    /// the current task has long blocks waiting for their user stack.
    pub(super) fn pending_blocks(&mut self, skip: Label) -> PendingBlocks {
        let map = self
            .stack_maps()
            .offcpu
            .expect("`stack(offcpu, pending)` has its task storage");
        if self.in_task_work {
            self.delete_task_work();
        }
        let waiting = self.waiting_count();
        let tasks = self.load_sized(Base::Reg(waiting), 0, Size::U64);
        self.branch(Cond::Eq, tasks, Src::Imm(0), skip);
        let task = self.curtask();
        let storage = self.task_storage(map, task, false);
        self.branch(Cond::Eq, storage, Src::Imm(0), skip);
        let from = self.load_sized(Base::Reg(storage), offcpu::PENDING_FROM, Size::U64);
        self.branch(Cond::Eq, from, Src::Imm(0), skip);
        if self.in_task_work {
            self.skip_exiting_task(storage, skip);
        }
        PendingBlocks { storage, from }
    }

    /// The pending blocks are answered (or their record lost): none waits.
    pub(super) fn pending_sent(&mut self, storage: VReg) {
        self.store_imm(Base::Reg(storage), offcpu::PENDING_FROM, 0, Size::U64);
        self.count_waiting(-1);
    }

    /// The address of the count of tasks with long blocks waiting.
    fn waiting_count(&mut self) -> VReg {
        let map = (self.stack_maps().waiting)
            .expect("`-S offcpu=DUR` counts the tasks with blocks waiting");
        let count = self.vreg();
        self.emit(Inst::MapValueAddr {
            dst: count,
            map,
            offset: 0,
        });
        count
    }

    /// Adds `delta` to the count of tasks with long blocks waiting (a
    /// locked add: a full barrier, so the task's own `sys_exit` sees it).
    fn count_waiting(&mut self, delta: i32) {
        let count = self.waiting_count();
        let delta = self.constant(delta as i64 as u64);
        self.emit(Inst::AtomicAdd {
            base: count,
            offset: 0,
            src: delta,
            size: Size::U64,
        });
    }

    /// Walks the current task's user stack into `state`, its storage: the
    /// table unwinder (its last walk reused when the registers, mappings
    /// and every stack word it read are unchanged: `unwind::maps::walk_cache`;
    /// the target's unused state area holds the copy of the stack), or the
    /// kernel's frame-pointer walk for a process without tables yet.
    fn walk_user_stack(&mut self, state: VReg, target: StackTarget) {
        self.comment("walk the user stack into the task's storage");
        let copy = self.offset_pointer(target.buf, STATE_AT);
        self.unwind(state, 0, Some(copy));
        let unwound = self.load_sized(Base::Reg(state), state::FLAGS, Size::U32);
        let walked = self.label();
        self.bit_clear_branch(unwound, flags::NO_PROCESS, walked);
        let to = self.offset_pointer(state, state::STACK as u32);
        let got = self.get_stack(to, KERNEL_STACK_MAX, Src::Imm(BPF_F_USER_STACK as i32));
        self.first_frame_out_of_line(state, to, got, FirstFrame::Address);
        self.clamp_bytes(got, KERNEL_FRAMES_BYTES);
        self.alu(AluOp::Rsh, got, Src::Imm(3));
        self.store_reg(Base::Reg(state), state::FRAMES, got, Size::U32);
        self.alu(AluOp::Or, unwound, Src::Imm(flags::KERNEL_WALK as i32));
        self.store_reg(Base::Reg(state), state::FLAGS, unwound, Size::U32);
        self.emit(Inst::Bind(walked));
    }

    /// `bpf_task_storage_get(map, task, NULL, create ? F_CREATE : 0)`.
    fn task_storage(&mut self, map: MapId, task: VReg, create: bool) -> VReg {
        let flags = if create {
            LOCAL_STORAGE_GET_F_CREATE
        } else {
            0
        };
        let pointer = self.vreg();
        self.emit(Inst::Call {
            helper: TASK_STORAGE_GET,
            args: vec![Arg::Map(map), Arg::Reg(task), Arg::Imm(0), Arg::Imm(flags)],
            ret: Some(pointer),
        });
        pointer
    }

    /// Negative byte counts (helper errors) become 0, and every count is
    /// masked below `room`, a power of two, for the verifier.
    fn clamp_bytes(&mut self, bytes: VReg, room: u32) {
        let positive = self.label();
        self.branch(Cond::Sge, bytes, Src::Imm(0), positive);
        self.mov_imm(bytes, 0);
        self.emit(Inst::Bind(positive));
        self.alu(AluOp::And, bytes, Src::Imm(room as i32 - 1));
    }

    /// Bounds `value` (unsigned) by `max`, which the verifier then knows.
    pub(super) fn clamp_max(&mut self, value: VReg, max: u32) {
        let fits = self.label();
        self.branch(Cond::Le, value, Src::Imm(max as i32), fits);
        self.mov_imm(value, max as i32);
        self.emit(Inst::Bind(fits));
    }

    /// Jumps to `target` when none of `bits` is set in `value`.
    fn bit_clear_branch(&mut self, value: VReg, bits: u32, target: Label) {
        let masked = self.vreg();
        self.mov(masked, value);
        self.alu(AluOp::And, masked, Src::Imm(bits as i32));
        self.branch(Cond::Eq, masked, Src::Imm(0), target);
    }

    /// `bpf_map_lookup_elem(map, r10 + key)`.
    fn array_lookup(&mut self, map: MapId, key: i16) -> VReg {
        let found = self.vreg();
        self.emit(Inst::Call {
            helper: MAP_LOOKUP_ELEM,
            args: vec![Arg::Map(map), Arg::Frame(key)],
            ret: Some(found),
        });
        found
    }

    /// A new register holding `pointer + offset`.
    pub(super) fn offset_pointer(&mut self, pointer: VReg, offset: u32) -> VReg {
        let at = self.vreg();
        self.mov(at, pointer);
        self.alu(AluOp::Add, at, Src::Imm(offset as i32));
        at
    }

    fn call(&mut self, helper: u32, args: Vec<Arg>) {
        self.emit(Inst::Call {
            helper,
            args,
            ret: None,
        });
    }

    pub(super) fn load_sized(&mut self, base: Base, offset: i16, size: Size) -> VReg {
        let dst = self.vreg();
        self.emit(Inst::Load {
            dst,
            base,
            offset,
            size,
        });
        dst
    }

    pub(super) fn store_reg(&mut self, base: Base, offset: i16, src: VReg, size: Size) {
        self.emit(Inst::Store {
            base,
            offset,
            src: Src::Reg(src),
            size,
        });
    }

    pub(super) fn store_imm(&mut self, base: Base, offset: i16, value: i32, size: Size) {
        self.emit(Inst::Store {
            base,
            offset,
            src: Src::Imm(value),
            size,
        });
    }
}

/// How a kernel walk's user frames are laid out: addresses, or `struct
/// bpf_stack_build_id`s (`status: s32`, build id, then offset or address).
#[derive(Clone, Copy)]
enum FirstFrame {
    Address,
    BuildId,
}

/// Whose kernel stack: the current task's, without the tracer's frames
/// and `caller_frames` frames of the traced event's callers (with `walk`,
/// by the ORC walker where the program has it), or a task's that is off
/// the CPU.
enum KernelSource {
    Current { caller_frames: i32, walk: bool },
    Task(VReg),
}

/// The current task's long blocks waiting for their user stack: its
/// storage, and the switch-in time of the first.
pub(super) struct PendingBlocks {
    pub(super) storage: VReg,
    pub(super) from: VReg,
}

/// The user part of a stack as it is taken: count, bytes and flags, and
/// the unwind state of a walk of the current task's stack (0 for another
/// task's stack), which a stack without tables is copied for.
pub(super) struct UserFrames {
    count: VReg,
    bytes: VReg,
    pub(super) flags: VReg,
    pub(super) snapshot_state: VReg,
}

impl UserFrames {
    fn empty(cx: &mut Lowerer<'_>) -> Self {
        let [count, bytes, flags, snapshot_state] = [(); 4].map(|()| {
            let reg = cx.vreg();
            cx.mov_imm(reg, 0);
            reg
        });
        UserFrames {
            count,
            bytes,
            flags,
            snapshot_state,
        }
    }
}
