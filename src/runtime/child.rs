//! The traced command (`-c`) and the traced process (`-p`).
//!
//! The command is forked before probes attach, so its pid is known to the
//! probes (`cpid`) and to uprobe filters, but it only `exec`s once released,
//! after every probe is attached.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::thread;

use crate::runtime::maps_read::Stopper;

/// A forked command waiting for [`TracedCommand::release`] before it runs.
pub struct TracedCommand {
    child: Child,
    /// Write end of the pipe the child blocks on.
    gate: OwnedFd,
}

impl TracedCommand {
    pub fn spawn_paused(argv: &[String]) -> io::Result<TracedCommand> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
        let (read_end, write_end) = pipe()?;
        let (read_fd, write_fd) = (read_end.as_raw_fd(), write_end.as_raw_fd());
        let mut command = Command::new(program);
        command.args(args);
        // SAFETY: between fork and exec the closure only calls read(2) and
        // close(2), which are async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                // The child's copy of the write end would keep the pipe open forever.
                libc::close(write_fd);
                let mut byte = 0u8;
                libc::read(read_fd, (&raw mut byte).cast(), 1);
                libc::close(read_fd);
                Ok(())
            });
        }
        let child = command.spawn()?;
        drop(read_end);
        Ok(TracedCommand { child, gate: write_end })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Let the command `exec`, and stop the session when it exits.
    pub fn release(self, stopper: Stopper) -> Child {
        drop(self.gate);
        stop_when_process_exits(self.child.id() as i32, stopper);
        self.child
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Stop the session when process `pid` exits, without reaping it.
pub fn stop_when_process_exits(pid: i32, stopper: Stopper) {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        return;
    }
    // SAFETY: fd is a new descriptor we own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd) };
    thread::spawn(move || {
        let mut poll = libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd; a pidfd becomes readable when the process exits.
        while unsafe { libc::poll(&mut poll, 1, -1) } < 0 {}
        stopper.stop();
    });
}
