//! The session's message router: capture records go to the recorder,
//! watchpoint requests and map operations are queued for the session (they
//! need the loaded maps and programs, which the ring buffer reader borrows
//! while it delivers), the rest go to the printer.

use std::io::{self, Write};
use std::ops::ControlFlow;

use super::watch::Watches;
use super::{Ending, RunError};
use crate::codegen::program::Compiled;
use crate::output::printer::{MapOp, Printed, Printer};
use crate::runtime::bpf::loader::Loaded;
use crate::runtime::recording::Recorder;
use crate::runtime::values::SystemValues;
use crate::vocab::Message;

/// What a message asks of the session once the ring buffer is released.
#[derive(Clone, Copy, Debug, PartialEq)]
enum SessionOp {
    Map(MapOp),
    /// Set watchpoint program `program` on `address`.
    Watch {
        program: u32,
        address: u64,
    },
    /// `unwatch(address)`.
    Unwatch(u64),
}

pub(super) struct Receiver<'a> {
    pub(super) compiled: &'a Compiled,
    /// Told about threads that take user addresses.
    values: &'a SystemValues,
    pub(super) printer: Printer<'a>,
    ops: Vec<SessionOp>,
    paused: bool,
    pub(super) ending: Ending,
    /// Capture events go here.
    pub(super) recorder: Option<Recorder>,
    /// Drop printed output (its reader is gone), keep recorded events.
    pub(super) quiet: bool,
    /// An `exit()` was read: as in bpftrace, what probes sent after it is
    /// not printed (recorded events are kept); END's output is.
    pub(super) exited: bool,
    /// A message sent by `output()` (printing, a helper error, a thread
    /// report) was read since the session last looked.
    pub(super) read_messages: bool,
    watches: Watches,
}

impl<'a> Receiver<'a> {
    /// `tracee` is the process function watchpoints watch (`-p` or `-c`).
    pub(super) fn new(
        compiled: &'a Compiled,
        values: &'a SystemValues,
        printer: Printer<'a>,
        recorder: Option<Recorder>,
        tracee: Option<i32>,
    ) -> Self {
        Receiver {
            compiled,
            values,
            printer,
            ops: Vec::new(),
            paused: false,
            ending: Ending::Running,
            recorder,
            quiet: false,
            exited: false,
            read_messages: false,
            watches: Watches::new(tracee),
        }
    }

    /// Resolve the stacks of new events and write them out.
    pub(super) fn record(&mut self, loaded: &Loaded) -> Result<(), RunError> {
        if let Some(recorder) = &mut self.recorder {
            recorder.process(loaded)?;
        }
        Ok(())
    }

    pub(super) fn message(&mut self, bytes: &[u8], out: &mut dyn Write) -> ControlFlow<()> {
        match self.dispatch(bytes, out) {
            Ok(()) => {}
            // Whoever read the output is gone (`wprof ... | head`): stop.
            Err(error) if error.kind() == io::ErrorKind::BrokenPipe => {
                self.ending = Ending::Stopped;
                self.quiet = true;
            }
            Err(error) => eprintln!("wprof: {error}"),
        }
        // Queued operations need the maps, which the ring buffer reader
        // borrows: stop delivering until the caller has served them.
        if self.ending == Ending::Running && !std::mem::take(&mut self.paused) {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        }
    }

    fn dispatch(&mut self, bytes: &[u8], out: &mut dyn Write) -> io::Result<()> {
        let id = bytes
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        let Some(message) = id.and_then(|id| self.compiled.messages.get(id as usize)) else {
            return Err(io::Error::other(format!(
                "malformed message of {} bytes from BPF",
                bytes.len()
            )));
        };
        let index = id.unwrap_or_default() as usize;
        self.read_messages |= !matches!(message, Message::Record { .. } | Message::Watch { .. });
        match message {
            Message::Record { record, .. } => {
                return match &mut self.recorder {
                    Some(recorder) => recorder
                        .push(index, *record, bytes)
                        .map_err(io::Error::other),
                    None => Ok(()),
                };
            }
            // Served even after exit(): a stopped tracee waits for it.
            Message::Watch { program } => {
                let address = bytes
                    .get(8..16)
                    .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
                    .ok_or_else(|| io::Error::other("watchpoint request without an address"))?;
                self.queue(SessionOp::Watch {
                    program: *program,
                    address,
                });
                return Ok(());
            }
            Message::ThreadSeen => {
                let pid_tgid = bytes.get(8..16).ok_or_else(|| {
                    io::Error::other(format!("thread report of {} bytes", bytes.len()))
                })?;
                let pid_tgid = u64::from_le_bytes(pid_tgid.try_into().expect("8 bytes"));
                self.values
                    .remember_thread(pid_tgid as u32, (pid_tgid >> 32) as u32);
                return Ok(());
            }
            Message::Builtin(_) | Message::HelperError(_) => {}
        }
        if self.quiet || self.exited {
            return Ok(());
        }
        match self.printer.print(index, bytes, out)? {
            Printed::Done => {}
            Printed::Exit => {
                self.ending = Ending::ExitCalled;
                self.exited = true;
            }
            Printed::Map(op) => self.queue(SessionOp::Map(op)),
            Printed::Unwatch(address) => self.queue(SessionOp::Unwatch(address)),
        }
        Ok(())
    }

    fn queue(&mut self, op: SessionOp) {
        self.ops.push(op);
        self.paused = true;
    }

    /// Serves the queued operations, in the order their messages came.
    pub(super) fn run_ops(
        &mut self,
        loaded: &mut Loaded,
        out: &mut dyn Write,
    ) -> Result<(), RunError> {
        for op in std::mem::take(&mut self.ops) {
            match op {
                SessionOp::Map(MapOp::Print { map, options }) => {
                    let raw = loaded.map_entries(map)?;
                    self.printer.print_map(map, &raw, options, out)?;
                }
                SessionOp::Map(MapOp::Clear(map)) => loaded.clear(map)?,
                SessionOp::Map(MapOp::Zero(map)) => loaded.zero(map)?,
                SessionOp::Watch { program, address } => {
                    self.watches.watch(loaded, self.compiled, program, address)
                }
                SessionOp::Unwatch(address) => self.watches.unwatch(loaded, address),
            }
        }
        out.flush()?;
        Ok(())
    }
}
