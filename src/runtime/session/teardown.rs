//! Leaving quickly. Closing the last reference to a perf event attached to a
//! tracepoint waits for an RCU grace period (about 80 ms per event on the
//! test machines), which would dominate the time from `exit()` to process
//! exit. A small forked process takes over those last references and closes
//! them after wprof has exited.

use std::os::fd::{AsRawFd, OwnedFd};

use super::child::pipe;

/// Fork a keeper that holds a copy of every descriptor until this process
/// exits. Call it once tracing has stopped, before detaching.
pub fn hand_off_descriptors() {
    let Ok((read_end, write_end)) = pipe() else {
        return;
    };
    // SAFETY: the child only calls async-signal-safe functions (close, read,
    // _exit) before exiting; it touches no memory shared with other threads.
    match unsafe { libc::fork() } {
        0 => unsafe {
            // Not the terminal's or the reader's: they must see EOF when wprof exits.
            for fd in [0, 1, 2, write_end.as_raw_fd()] {
                libc::close(fd);
            }
            let mut byte = 0u8;
            // Returns (EOF) when wprof's write end closes, i.e. when it exits.
            libc::read(read_end.as_raw_fd(), (&raw mut byte).cast(), 1);
            libc::_exit(0)
        },
        -1 => {}
        _ => {
            drop(read_end);
            // Held until this process exits, which is the keeper's signal.
            std::mem::forget::<OwnedFd>(write_end);
        }
    }
}
