//! SIGUSR1 asks a running session to print every map now, as bpftrace does
//! (`kill -USR1 PID`). The handler only sets a flag; the trace loop, woken
//! from its poll by the signal (or at its next status tick when another
//! thread took it), prints the maps.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_usr1(_signal: libc::c_int) {
    REQUESTED.store(true, Ordering::Relaxed);
}

/// Installs the handler (once the session can serve it: before, SIGUSR1
/// would end wprof).
pub(super) fn install() -> io::Result<()> {
    REQUESTED.store(false, Ordering::Relaxed);
    // SAFETY: the handler only stores to an atomic, which is
    // async-signal-safe; the sigaction struct is fully initialised.
    let result = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_usr1 as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut())
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether SIGUSR1 came since the last call.
pub(super) fn take_request() -> bool {
    REQUESTED.swap(false, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SIGUSR1 sent to the process is seen once.
    #[test]
    fn signal_sets_the_request_once() {
        install().unwrap();
        // SAFETY: raising a signal whose handler is installed above.
        assert_eq!(unsafe { libc::raise(libc::SIGUSR1) }, 0);
        assert!(take_request());
        assert!(!take_request());
    }
}
