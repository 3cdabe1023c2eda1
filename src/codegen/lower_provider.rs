//! Lowering of the code probe providers ask for besides the script's:
//! prologues ([`Prologue`]) and a watchpoint's setup program — for
//! `watchpoint:F+argN:LEN:MODE` a uprobe on `F` that sends user space the
//! address argument N holds ([`Message::Watch`]), then, for a synchronous
//! `watchpoint`, stops the calling process with SIGSTOP until user space has
//! set the breakpoint and sent SIGCONT (so the access right after the call
//! is not missed).

use super::helpers::RINGBUF_OUTPUT;
use super::ir::{Arg, Base, Cond, Function, Inst, Size, Src};
use super::lower::Lowerer;
use crate::providers::{self, Prologue};
use crate::vocab::{Message, x86_64};

/// `bpf_send_signal(sig)`: signals the current process.
const SEND_SIGNAL: u32 = 109;
/// `bpf_seq_write(seq, data, len)`: iterator output.
const SEQ_WRITE: u32 = 127;

impl Lowerer<'_> {
    /// The prologue the probe's provider asks for.
    pub(super) fn provider_prologue(&mut self) {
        match providers::of(&self.probe.attach).prologue(&self.probe.attach) {
            Prologue::None => {}
            Prologue::Iterator { object } => self.iterator_prologue(object),
        }
    }

    /// Skip the iterator's last call (no object), then write one byte to
    /// its seq file (`ctx->meta->seq`).
    fn iterator_prologue(&mut self, object: u16) {
        let (ctx, exit) = (self.ctx, self.exit_label());
        let load = |dst, base, offset| Inst::Load {
            dst,
            base: Base::Reg(base),
            offset,
            size: Size::U64,
        };
        self.comment("return after the last object");
        let current = self.vreg();
        self.emit(load(current, ctx, object as i16));
        self.branch(Cond::Eq, current, Src::Imm(0), exit);
        self.comment("one byte per object to the iterator's reader");
        let seq = self.vreg();
        self.emit(load(seq, ctx, 0));
        self.emit(load(seq, seq, 0));
        let byte = self.alloc(8);
        self.emit(Inst::Store {
            base: Base::Frame,
            offset: byte,
            src: Src::Imm(i32::from(b'.')),
            size: Size::U64,
        });
        self.emit(Inst::Call {
            helper: SEQ_WRITE,
            args: vec![Arg::Reg(seq), Arg::Frame(byte), Arg::Imm(1)],
            ret: None,
        });
    }

    /// The setup program of the watchpoint program `watching`, reading
    /// argument `arg`.
    pub(super) fn lower_watch_setup(mut self, watching: u32, arg: u8, sync: bool) -> Function {
        let ctx = self.ctx;
        self.emit(Inst::Ctx { dst: ctx });
        self.gate();
        let address = self.vreg();
        self.comment(format!("arg{arg}: the address to watch"));
        self.emit(Inst::Load {
            dst: address,
            base: Base::Reg(ctx),
            offset: x86_64::ARGUMENTS[usize::from(arg)] as i16,
            size: Size::U64,
        });
        let id = self.messages.len();
        self.messages.push(Message::Watch { program: watching });
        let buffer = self.alloc(16);
        self.comment(format!("message {id}: watch it"));
        self.emit(Inst::Store {
            base: Base::Frame,
            offset: buffer,
            src: Src::Imm(id as i32),
            size: Size::U64,
        });
        self.emit(Inst::Store {
            base: Base::Frame,
            offset: buffer + 8,
            src: Src::Reg(address),
            size: Size::U64,
        });
        let ring = self.maps.ringbuf;
        self.emit(Inst::Call {
            helper: RINGBUF_OUTPUT,
            args: vec![
                Arg::Map(ring),
                Arg::Frame(buffer),
                Arg::Imm(16),
                Arg::Imm(0),
            ],
            ret: None,
        });
        if sync {
            self.comment("stop until the breakpoint is set");
            self.emit(Inst::Call {
                helper: SEND_SIGNAL,
                args: vec![Arg::Imm(i64::from(libc::SIGSTOP))],
                ret: None,
            });
        }
        self.finish().0
    }
}
