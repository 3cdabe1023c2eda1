//! Running a BPF iterator (`iter:task`): reading the iterator fd runs the
//! program once per object. Each object also writes one byte to the fd
//! (`providers::Prologue::Iterator`), so every read of [`BATCH`] bytes covers
//! at most that many objects, and what they printed is drained from the
//! ring buffer between reads. The session ends when the iterator does; a
//! pinned iterator is only pinned.

use std::io::{Read, Write};

use super::receiver::Receiver;
use super::{Ending, RunError};
use crate::runtime::bpf::loader::Loaded;
use crate::vocab::AttachPoint;

/// Objects per read of the iterator.
const BATCH: usize = 128;

/// Runs iterator program `index` to its end (or pins it), printing what it sends.
pub(super) fn iterate(
    loaded: &mut Loaded,
    receiver: &mut Receiver,
    index: usize,
    out: &mut dyn Write,
) -> Result<(), RunError> {
    let Some(mut iterator) = loaded.open_iterator(index)? else {
        let pin = match &receiver.compiled.programs[index].attach {
            AttachPoint::Iter { pin: Some(pin), .. } => pin.display().to_string(),
            _ => String::new(),
        };
        writeln!(out, "Program pinned to {pin}")?;
        return Ok(());
    };
    let stopper = loaded.stopper();
    let mut batch = [0u8; BATCH];
    loop {
        let read = iterator.read(&mut batch).map_err(RunError::Iterate)?;
        drain(loaded, receiver, out)?;
        if read == 0 || receiver.ending != Ending::Running || stopper.is_stopped() {
            break;
        }
    }
    if receiver.ending == Ending::Running {
        receiver.ending = Ending::Stopped;
    }
    Ok(())
}

/// Prints everything in the ring buffer, serving map requests in order.
fn drain(
    loaded: &mut Loaded,
    receiver: &mut Receiver,
    out: &mut dyn Write,
) -> Result<(), RunError> {
    loop {
        let flow = loaded.consume(|bytes| receiver.message(bytes, out))?;
        receiver.run_ops(loaded, out)?;
        if flow.is_continue() || receiver.ending != Ending::Running {
            return Ok(());
        }
    }
}
