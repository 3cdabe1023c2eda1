//! Small audited wrappers around raw syscalls that several parts of the
//! runtime need and that neither `libc`'s safe surface nor libbpf-rs offer:
//! `perf_event_open`, `eventfd`, `poll`, `BPF_BTF_LOAD`, kprobes at an offset. An unsafe call with
//! a single user stays next to that user with its `SAFETY` comment (process
//! control in `runtime::session`, feature probes, mounting tracefs, the clock,
//! `strftime`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// `BPF_BTF_LOAD` of a raw BTF blob (header, types, strings).
pub fn btf_load(blob: &[u8]) -> io::Result<OwnedFd> {
    let size = u32::try_from(blob.len()).map_err(|_| io::Error::other("BTF blob too large"))?;
    // SAFETY: `blob` is valid for `size` bytes during the call (the kernel
    // copies it); null options ask for no log.
    let fd = unsafe {
        libbpf_rs::libbpf_sys::bpf_btf_load(blob.as_ptr().cast(), size.into(), std::ptr::null_mut())
    };
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(-fd));
    }
    // SAFETY: a non-negative return is a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Attaches `prog` as a k(ret)probe on `symbol` plus `offset` bytes
/// (libbpf-rs's own call has no offset).
pub fn attach_kprobe(
    prog: &libbpf_rs::ProgramMut<'_>,
    retprobe: bool,
    symbol: &str,
    offset: u64,
) -> libbpf_rs::Result<libbpf_rs::Link> {
    use libbpf_rs::AsRawLibbpf;
    if offset == 0 {
        return prog.attach_kprobe(retprobe, symbol);
    }
    let name = std::ffi::CString::new(symbol)
        .map_err(|_| libbpf_rs::Error::from(io::Error::other("NUL in a function name")))?;
    let opts = libbpf_rs::libbpf_sys::bpf_kprobe_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_kprobe_opts>() as _,
        offset: usize::try_from(offset).map_err(|_| io::Error::other("offset too large"))? as _,
        retprobe,
        ..Default::default()
    };
    // SAFETY: the program pointer is live for the borrow of `prog`; `name`
    // and `opts` outlive the call, which copies what it keeps.
    let link = unsafe {
        libbpf_rs::libbpf_sys::bpf_program__attach_kprobe_opts(
            prog.as_libbpf_object().as_ptr(),
            name.as_ptr(),
            &opts,
        )
    };
    match std::ptr::NonNull::new(link) {
        // SAFETY: a non-null return is a new link that nothing else owns.
        Some(link) => Ok(unsafe { libbpf_rs::Link::from_ptr(link) }),
        None => Err(io::Error::last_os_error().into()),
    }
}

/// `perf_event_open(attr, pid, cpu, group_fd = -1, PERF_FLAG_FD_CLOEXEC)`.
pub fn perf_event_open(
    attr: &libbpf_rs::libbpf_sys::perf_event_attr,
    pid: i32,
    cpu: i32,
) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid, initialised `perf_event_attr` that outlives
    // the call (the kernel only reads it); the other arguments are plain ints.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const libbpf_rs::libbpf_sys::perf_event_attr,
            pid,
            cpu,
            -1i32,
            libc::c_ulong::from(libbpf_rs::libbpf_sys::PERF_FLAG_FD_CLOEXEC),
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(ret).map_err(|_| io::Error::other("fd out of range"))?;
    // SAFETY: a non-negative return of perf_event_open is a new fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A non-blocking, close-on-exec `eventfd` starting at 0.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a non-negative return of eventfd is a new fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds 1 to an eventfd's counter, making it readable.
pub fn eventfd_signal(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live local to a valid fd.
    let ret = unsafe { libc::write(fd.as_raw_fd(), (&raw const one).cast(), 8) };
    // EAGAIN means the counter is saturated: it is readable already.
    if ret < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether an eventfd's counter is non-zero (without resetting it).
pub fn eventfd_is_set(fd: BorrowedFd<'_>) -> io::Result<bool> {
    Ok(poll_readable(&[fd.as_raw_fd()], Some(Duration::ZERO))?[0])
}

/// `poll(2)` for readability; `None` waits forever. Returns one flag per fd.
/// `EINTR` counts as "nothing ready". Raw fds are fine here: a closed fd
/// only reports `POLLNVAL`, which counts as ready so callers look at it.
pub fn poll_readable(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let timeout_ms = match timeout {
        None => -1,
        // Round up so a 0.5 ms timeout does not become a busy loop.
        Some(t) => i32::try_from(t.as_micros().div_ceil(1000)).unwrap_or(i32::MAX),
    };
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structs.
    let ret = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
    if ret < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![false; fds.len()]);
        }
        return Err(err);
    }
    Ok(pfds.iter().map(|p| p.revents != 0).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// An eventfd becomes readable once signalled.
    #[test]
    fn eventfd_signals() {
        let fd = eventfd().expect("eventfd");
        assert!(!eventfd_is_set(fd.as_fd()).expect("poll"));
        eventfd_signal(fd.as_fd()).expect("signal");
        assert!(eventfd_is_set(fd.as_fd()).expect("poll"));
    }
}
