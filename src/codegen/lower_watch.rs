//! Lowering of a watchpoint's setup program: for `watchpoint:F+argN:LEN:MODE`
//! a uprobe on `F` that sends user space the address argument N holds
//! ([`Message::Watch`]), then, for a synchronous `watchpoint`, stops the
//! calling process with SIGSTOP until user space has set the breakpoint and
//! sent SIGCONT (so the access right after the call is not missed).

use super::helpers::RINGBUF_OUTPUT;
use super::ir::{Arg, Base, Function, Inst, Size, Src};
use super::lower::Lowerer;
use crate::vocab::{Message, x86_64};

/// `bpf_send_signal(sig)`: signals the current process.
const SEND_SIGNAL: u32 = 109;

impl Lowerer<'_> {
    /// The setup program of the watchpoint program `self.probe_index`,
    /// reading argument `arg`.
    pub(super) fn lower_watch_setup(mut self, arg: u8, sync: bool) -> Function {
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
        self.messages.push(Message::Watch {
            program: self.probe_index as u32,
        });
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
