//! The traced command (`-c`) and the traced process (`-p`).
//!
//! The command is forked before probes attach, so its pid is known to the
//! probes (`cpid`) and to uprobe filters, but it only `exec`s once released,
//! after every probe is attached. It runs in a process group of its own, so
//! that whatever it starts ends with it.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::thread;
use std::time::{Duration, Instant};

use crate::runtime::bpf::maps_read::Stopper;

/// A forked command waiting for [`TracedCommand::release`] before it runs.
///
/// `std::process::Command` cannot do this: `spawn` waits for the `exec`,
/// which here waits for the probes to attach.
pub struct TracedCommand {
    pid: libc::pid_t,
    /// Write end of the pipe the child blocks on; `None` once released.
    gate: Option<OwnedFd>,
    /// Read end of a close-on-exec pipe: EOF when `exec` succeeded, the errno when it failed.
    exec_status: OwnedFd,
}

/// A released command; its process group is ended and the command reaped
/// by [`RunningCommand::finish`].
pub struct RunningCommand {
    pid: libc::pid_t,
}

/// How long the command's process group has to exit after SIGTERM before it
/// is killed.
const TERM_GRACE: Duration = Duration::from_millis(500);

impl TracedCommand {
    pub fn spawn_paused(argv: &[String]) -> io::Result<TracedCommand> {
        let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
        if argv.is_empty() {
            return Err(invalid("empty command"));
        }
        let args: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_str()).map_err(|_| invalid("NUL byte in command")))
            .collect::<io::Result<_>>()?;
        let mut pointers: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        pointers.push(std::ptr::null());
        // Fail before anything is attached when the program cannot be found.
        crate::runtime::targets::library_search::resolve_binary(&argv[0], None)
            .map_err(|e| io::Error::new(io::ErrorKind::NotFound, e.to_string()))?;
        let (read_end, write_end) = pipe()?;
        let (status_read, status_write) = pipe()?;
        // SAFETY: the child only calls async-signal-safe functions (close,
        // read, write, execvp, _exit) on memory prepared before the fork.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => unsafe {
                libc::setpgid(0, 0);
                libc::close(write_end.as_raw_fd());
                libc::close(status_read.as_raw_fd());
                let mut byte = 0u8;
                libc::read(read_end.as_raw_fd(), (&raw mut byte).cast(), 1);
                libc::execvp(pointers[0], pointers.as_ptr());
                let errno = *libc::__errno_location();
                libc::write(status_write.as_raw_fd(), (&raw const errno).cast(), 4);
                libc::_exit(127)
            },
            pid => {
                // Also set here: the command must not start a process before
                // its group exists (whichever of the two runs first wins).
                // SAFETY: setpgid on our own child, which has not exec'd yet.
                unsafe { libc::setpgid(pid, pid) };
                Ok(TracedCommand {
                    pid,
                    gate: Some(write_end),
                    exec_status: status_read,
                })
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Let the command `exec`, run `at_exec` (if any) once its program is
    /// mapped, and stop the session when it exits. The command is held at
    /// the end of its `exec` while `at_exec` runs (its program and
    /// interpreter mapped, not one instruction of them run), so the unwind
    /// tables of its first stacks can be in place; where `ptrace` is
    /// refused it runs meanwhile. Without `at_exec` it is not held.
    pub fn release(
        mut self,
        stopper: Stopper,
        at_exec: Option<impl FnOnce()>,
    ) -> io::Result<RunningCommand> {
        let held = at_exec.is_some() && seize_for_exec(self.pid);
        drop(self.gate.take());
        let running = RunningCommand { pid: self.pid };
        let mut errno = [0u8; 4];
        // SAFETY: reads at most 4 bytes into our buffer.
        let got = unsafe { libc::read(self.exec_status.as_raw_fd(), errno.as_mut_ptr().cast(), 4) };
        if got == 4 {
            running.finish();
            return Err(io::Error::from_raw_os_error(i32::from_ne_bytes(errno)));
        }
        let stopped = held && wait_for_exec_stop(self.pid);
        if let Some(at_exec) = at_exec {
            at_exec();
        }
        if stopped {
            // SAFETY: detaching our own stopped tracee lets it run on.
            unsafe { libc::ptrace(libc::PTRACE_DETACH, self.pid, 0, 0) };
        }
        watch_process(self.pid, stopper)?;
        Ok(running)
    }
}

/// Traces the paused child so that its `exec` stops it (`PTRACE_SEIZE`
/// with `PTRACE_O_TRACEEXEC`: no other stop, no signal of its own);
/// false when refused (a `ptrace` policy).
fn seize_for_exec(pid: libc::pid_t) -> bool {
    let options = libc::PTRACE_O_TRACEEXEC as usize as *mut libc::c_void;
    // SAFETY: ptrace on our own child, blocked on its gate.
    unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0, options) == 0 }
}

/// Waits until the seized child stops at the end of its `exec`, passing
/// on the signals that stop it before; false when it is gone or cannot be
/// waited for (then it is not stopped).
fn wait_for_exec_stop(pid: libc::pid_t) -> bool {
    let exec_stop = libc::SIGTRAP | (libc::PTRACE_EVENT_EXEC << 8);
    loop {
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is ours.
        if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        if !libc::WIFSTOPPED(status) {
            return false;
        }
        if status >> 8 == exec_stop {
            return true;
        }
        // A signal stopped it before the exec: deliver it and go on.
        let signal = libc::WSTOPSIG(status) as usize as *mut libc::c_void;
        // SAFETY: resumes our own stopped tracee with its own signal.
        unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0, signal) };
    }
}

/// A command never released (the session failed or was interrupted before
/// recording) is killed before it can run: closing the gate would start it.
impl Drop for TracedCommand {
    fn drop(&mut self) {
        if self.gate.is_some() {
            let mut status = 0;
            // SAFETY: plain syscalls on our own child, blocked before its exec.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, &mut status, 0);
            }
        }
    }
}

impl RunningCommand {
    /// End the command's whole process group (the command and whatever it
    /// started that is still running): SIGTERM, then SIGKILL for what is left
    /// after [`TERM_GRACE`]; reap the command.
    pub fn finish(self) {
        let group = -self.pid;
        let mut status = 0;
        // SAFETY: plain syscalls on our own child and its process group; the
        // group id stays reserved while the unreaped child or any member lives.
        unsafe {
            libc::kill(group, libc::SIGTERM);
            libc::waitpid(self.pid, &mut status, 0);
        }
        let deadline = Instant::now() + TERM_GRACE;
        // SAFETY: signal 0 only asks whether any process of the group is left.
        while unsafe { libc::kill(group, 0) } == 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: as above; fails harmlessly when the group is gone.
        unsafe { libc::kill(group, libc::SIGKILL) };
    }
}

pub(super) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Stop the session when process `pid` exits (without reaping it); an
/// error when there is no such process.
pub fn watch_process(pid: i32, stopper: Stopper) -> io::Result<()> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a new descriptor we own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd) };
    thread::spawn(move || {
        let mut poll = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; a pidfd becomes readable when the process exits.
        while unsafe { libc::poll(&mut poll, 1, -1) } < 0 {}
        stopper.stop();
    });
    Ok(())
}
