//! Watchpoints on function arguments, set while tracing: the function's
//! uprobe sent the address (and, for `watchpoint`, stopped the tracee with
//! SIGSTOP); this sets program's breakpoint on it in the tracee, once per
//! program and address, and lets the tracee continue. `unwatch(addr)`
//! removes every breakpoint on an address. Failures (such as running out of
//! debug registers) are reported and tracing goes on, as in bpftrace.

use std::collections::HashSet;

use crate::codegen::program::Compiled;
use crate::runtime::bpf::loader::Loaded;
use crate::vocab::AttachPoint;

pub(super) struct Watches {
    /// The traced process (`-p` or `-c`).
    tracee: Option<i32>,
    /// (program, address) pairs set.
    set: HashSet<(u32, u64)>,
}

impl Watches {
    pub(super) fn new(tracee: Option<i32>) -> Watches {
        Watches {
            tracee,
            set: HashSet::new(),
        }
    }

    /// Sets watchpoint program `program` on `address`, then resumes the
    /// tracee if the program's uprobe stopped it.
    pub(super) fn watch(
        &mut self,
        loaded: &mut Loaded,
        compiled: &Compiled,
        program: u32,
        address: u64,
    ) {
        let Some(tracee) = self.tracee else {
            eprintln!("wprof: a watchpoint fired without a traced process (-p or -c)");
            return;
        };
        if self.set.insert((program, address))
            && let Err(error) = loaded.attach_watchpoint(program as usize, address, tracee)
        {
            let (probe, reason) = (error.probe, error.reason);
            eprintln!("wprof: cannot attach `{probe}` at {address:#x}: {reason}");
        }
        let stopped = compiled
            .programs
            .get(program as usize)
            .is_some_and(|p| matches!(p.attach, AttachPoint::Watchpoint { sync: true, .. }));
        // SAFETY: kill only sends a signal to the process we trace.
        if stopped && unsafe { libc::kill(tracee, libc::SIGCONT) } != 0 {
            let error = std::io::Error::last_os_error();
            eprintln!("wprof: cannot resume process {tracee} after setting a watchpoint: {error}");
        }
    }

    /// Removes every watchpoint on `address` (none is not an error).
    pub(super) fn unwatch(&mut self, loaded: &mut Loaded, address: u64) {
        loaded.unwatch(address);
        self.set.retain(|(_, watched)| *watched != address);
    }
}
