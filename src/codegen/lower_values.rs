//! Lowering printed values that the kernel can only half compute: stacks
//! (`kstack`, `ustack`) as ids into stack trace maps, and user addresses,
//! whose threads are reported once so user space keeps their mappings.

use crate::builtins;
use crate::codegen::helpers::*;
use crate::codegen::ir::{AluOp, Arg, Base, Cond, Inst, Size, Src, VReg};
use crate::codegen::lower::{Lowerer, Value};
use crate::codegen::maps::RECENT_THREAD_SLOTS;
use crate::frontend::checked::{TExpr, TExprKind};
use crate::frontend::types::{Space, Type};
use crate::providers;
use crate::vocab::{BuiltinMessage, GlobalSlot, MapId, Message, MessageId, StackType};

impl Lowerer<'_> {
    /// `kstack`/`ustack`: `bpf_get_stackid` into the map of the stack's
    /// depth; a user stack carries the thread id in its high half, as
    /// bpftrace's does (so map keys are per thread).
    pub(crate) fn stack_value(&mut self, stack: StackType) -> VReg {
        let map = self.maps.value_stack(stack.depth);
        let flags = if stack.user { BPF_F_USER_STACK } else { 0 };
        let ctx = self.ctx;
        self.comment(format!("{} ({} frames)", stack.name(), stack.depth));
        let id = self.checked_call(
            GET_STACKID,
            vec![Arg::Reg(ctx), Arg::Map(map), Arg::Imm(flags)],
        );
        if stack.user {
            let thread = self.remember_thread();
            self.alu(AluOp::Lsh, thread, Src::Imm(32));
            self.alu(AluOp::Or, id, Src::Reg(thread));
        }
        id
    }

    /// The u64 at byte `offset` of the probe's context (a `pt_regs` register).
    pub(crate) fn context_u64(&mut self, offset: u16) -> VReg {
        let ctx = self.ctx;
        self.load(Base::Reg(ctx), offset as i16)
    }

    /// Whether `pointer` points into user memory: as `uptr()`/`kptr()` say,
    /// else as the probe's pointers do.
    pub(crate) fn reads_user_memory(&self, pointer: &TExpr) -> bool {
        annotated_space(pointer).unwrap_or(self.probe.user_memory)
    }

    /// The helper `str()` reads the string at `pointer` with: as
    /// [`Self::reads_user_memory`] says, except where the space is unknown
    /// (an address in BEGIN, timers, perf events; not `uptr()`/`kptr()`):
    /// `bpf_probe_read_str`, which picks it by the address, as bpftrace 0.17.
    pub(crate) fn string_read_helper(&self, pointer: &TExpr) -> u32 {
        let unknown = match &pointer.ty {
            Type::Ptr(ptr) => ptr.space == Space::Unknown,
            _ => !providers::of(&self.probe.attach).memory_space_known(),
        };
        if unknown && annotated_space(pointer).is_none() {
            PROBE_READ_STR
        } else if self.reads_user_memory(pointer) {
            PROBE_READ_USER_STR
        } else {
            PROBE_READ_KERNEL_STR
        }
    }

    /// `bpf_probe_read_user` (or `_kernel`) of `len` bytes at `address` into
    /// the frame buffer at `buffer`.
    pub(crate) fn read_memory(&mut self, buffer: i16, len: u32, address: VReg, user: bool) {
        let helper = if user {
            PROBE_READ_USER
        } else {
            PROBE_READ_KERNEL
        };
        let args = vec![
            Arg::Frame(buffer),
            Arg::Imm(i64::from(len)),
            Arg::Reg(address),
        ];
        self.checked_call_unused(helper, args);
    }

    /// The u64 at `address` in user or kernel memory (0 when unreadable).
    pub(crate) fn read_u64(&mut self, address: VReg, user: bool) -> VReg {
        let buffer = self.alloc(8);
        self.store(Base::Frame, buffer, Src::Imm(0));
        self.read_memory(buffer, 8, address, user);
        self.load(Base::Frame, buffer)
    }

    /// Reports the current thread to user space the first time it takes a
    /// user address; returns `bpf_get_current_pid_tgid()`. A thread found in
    /// its slot of the recent-threads cache costs no hash lookup.
    pub(crate) fn remember_thread(&mut self) -> VReg {
        let pid_tgid = self.call0(GET_CURRENT_PID_TGID);
        let maps = self
            .maps
            .seen_threads
            .expect("the checker asks for the thread maps with user addresses");
        let done = self.label();
        let slot = self.recent_thread_slot(maps.recent, pid_tgid);
        let cached = self.load(Base::Reg(slot), 0);
        self.branch(Cond::Eq, cached, Src::Reg(pid_tgid), done);
        let key = self.alloc(8);
        self.store(Base::Frame, key, Src::Reg(pid_tgid));
        let known = self.call_result(
            MAP_LOOKUP_ELEM,
            vec![Arg::Map(maps.reported), Arg::Frame(key)],
        );
        let reported = self.label();
        self.branch(Cond::Ne, known, Src::Imm(0), reported);
        let one = self.alloc(8);
        self.store(Base::Frame, one, Src::Imm(1));
        self.map_update(maps.reported, key, one);
        let message = self.alloc(16);
        let id = self.thread_message();
        self.comment("report the thread");
        self.store(Base::Frame, message, Src::Imm(id.0 as i32));
        self.store(Base::Frame, message + 8, Src::Reg(pid_tgid));
        self.output(Arg::Frame(message), 16);
        self.emit(Inst::Bind(reported));
        let slot = self.recent_thread_slot(maps.recent, pid_tgid);
        self.store(Base::Reg(slot), 0, Src::Reg(pid_tgid));
        self.emit(Inst::Bind(done));
        pid_tgid
    }

    /// The address of `pid_tgid`'s slot in the recent-threads cache (by its
    /// thread id, the low half).
    fn recent_thread_slot(&mut self, recent: MapId, pid_tgid: VReg) -> VReg {
        let slot = self.vreg();
        self.emit(Inst::MapValueAddr {
            dst: slot,
            map: recent,
            offset: 0,
        });
        let index = self.vreg();
        self.mov(index, pid_tgid);
        self.alu(AluOp::And, index, Src::Imm(RECENT_THREAD_SLOTS as i32 - 1));
        self.alu(AluOp::Lsh, index, Src::Imm(3));
        self.alu(AluOp::Add, slot, Src::Reg(index));
        slot
    }

    /// Sends `size` bytes at `data` (a message) through the ring buffer,
    /// counting it as lost when there is no room. It wakes the reader at
    /// most once a millisecond, and the reader looks again soon after
    /// reading messages (`session::MESSAGE_FOLLOW_UP`) for those that did
    /// not wake it. The kernel's default wakes a reader that keeps up at
    /// every message, an irq_work each (a self-IPI, a VM exit here):
    /// `printf` in a `sched_switch` probe slowed `perf bench sched pipe`
    /// 4.7× with it, 1.17× with this.
    pub(crate) fn output(&mut self, data: Arg, size: u32) {
        let flags = self.vreg();
        let quiet = self.label();
        self.mov_imm(flags, BPF_RB_NO_WAKEUP);
        self.wake_at_most_once_a_millisecond(flags, quiet);
        self.emit(Inst::Bind(quiet));
        let args = vec![
            Arg::Map(self.maps.ringbuf),
            data,
            Arg::Imm(i64::from(size)),
            Arg::Reg(flags),
        ];
        let sent = self.call_result(RINGBUF_OUTPUT, args);
        let done = self.label();
        self.branch(Cond::Eq, sent, Src::Imm(0), done);
        let counter = self.vreg();
        let map = self.maps.globals;
        self.emit(Inst::MapValueAddr {
            dst: counter,
            map,
            offset: 8 * GlobalSlot::LostMessages as u32,
        });
        let one = self.constant(1);
        self.emit(Inst::AtomicAdd {
            base: counter,
            offset: 0,
            src: one,
            size: Size::U64,
        });
        self.emit(Inst::Bind(done));
    }

    /// `join()`: the strings of the array at `array` (user memory in probes
    /// whose pointers are user ones), each in its slot of a message built in
    /// the scratch buffer, up to the first NULL pointer (whose slot is
    /// emptied: the buffer keeps older messages' bytes).
    pub(crate) fn join_strings(
        &mut self,
        message: BuiltinMessage,
        array: &TExpr,
        elements: u32,
        element_bytes: u32,
    ) {
        let user = self.reads_user_memory(array);
        let array = {
            let start = self.int_expr(array);
            let cursor = self.vreg();
            self.mov(cursor, start);
            cursor
        };
        let id = MessageId(self.messages.len() as u32);
        self.messages.push(Message::Builtin(message));
        let map = self
            .maps
            .scratch
            .expect("the checker asks for a scratch buffer");
        let key = self.alloc(8);
        self.store(Base::Frame, key, Src::Imm(0));
        let buffer = self.call_result(MAP_LOOKUP_ELEM, vec![Arg::Map(map), Arg::Frame(key)]);
        let (send, done) = (self.label(), self.label());
        self.branch(Cond::Eq, buffer, Src::Imm(0), done);
        self.comment(format!("message {}", id.0));
        self.store(Base::Reg(buffer), 0, Src::Imm(id.0 as i32));
        let element = self.vreg();
        let helper = if user {
            PROBE_READ_USER_STR
        } else {
            PROBE_READ_KERNEL_STR
        };
        for i in 0..elements {
            let pointer = self.read_u64(array, user);
            let slot = 8 + i * element_bytes;
            let present = self.label();
            self.branch(Cond::Ne, pointer, Src::Imm(0), present);
            self.store_sized(Base::Reg(buffer), slot as i16, Src::Imm(0), Size::U8);
            self.emit(Inst::Jump(send));
            self.emit(Inst::Bind(present));
            self.mov(element, buffer);
            self.alu(AluOp::Add, element, Src::Imm(slot as i32));
            let args = vec![
                Arg::Reg(element),
                Arg::Imm(i64::from(element_bytes)),
                Arg::Reg(pointer),
            ];
            self.checked_call_unused(helper, args);
            self.alu(AluOp::Add, array, Src::Imm(8));
        }
        self.emit(Inst::Bind(send));
        self.output(Arg::Reg(buffer), 8 + elements * element_bytes);
        self.emit(Inst::Bind(done));
    }

    /// `debugf(format, args...)`: `bpf_trace_printk` of the format, kept
    /// NUL-padded on the stack, with the integers and string addresses.
    pub(crate) fn trace_printk(&mut self, format: &str, args: &[TExpr]) {
        let mut helper_args = Vec::new();
        for arg in args {
            helper_args.push(match self.expr(arg) {
                Value::Int(reg) => Arg::Reg(reg),
                Value::Mem(offset) => Arg::Frame(offset),
            });
        }
        let bytes = format.len() as u32 + 1;
        let format = self.string_literal(format.as_bytes(), &Type::Str { len: bytes });
        let size = Type::Str { len: bytes }.size();
        helper_args.splice(0..0, [Arg::Frame(format), Arg::Imm(i64::from(size))]);
        self.emit(Inst::Call {
            helper: TRACE_PRINTK,
            args: helper_args,
            ret: None,
        });
    }

    /// `signal(sig)`: `bpf_send_signal` to the current task.
    pub(crate) fn send_signal(&mut self, sig: &TExpr) {
        let sig = self.int_expr(sig);
        self.checked_call_unused(SEND_SIGNAL, vec![Arg::Reg(sig)]);
    }

    /// `override(rc)`: `bpf_override_return` of the probed kernel function.
    pub(crate) fn override_return(&mut self, rc: &TExpr) {
        let rc = self.int_expr(rc);
        let ctx = self.ctx;
        self.emit(Inst::Call {
            helper: OVERRIDE_RETURN,
            args: vec![Arg::Reg(ctx), Arg::Reg(rc)],
            ret: None,
        });
    }

    /// The id of the program set's thread report message.
    fn thread_message(&mut self) -> MessageId {
        let index = self.messages.iter().position(|m| *m == Message::ThreadSeen);
        let index = index.unwrap_or_else(|| {
            self.messages.push(Message::ThreadSeen);
            self.messages.len() - 1
        });
        MessageId(index as u32)
    }
}

/// Whether `pointer` is marked as user (`uptr()`) or kernel (`kptr()`)
/// memory; `None` when not marked.
fn annotated_space(pointer: &TExpr) -> Option<bool> {
    match &pointer.kind {
        TExprKind::Call(call) => builtins::expression_hooks(call.builtin).user_memory(),
        _ => None,
    }
}
