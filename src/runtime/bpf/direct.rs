//! Loading `tp_btf` programs with one `BPF_PROG_LOAD` each, when the BTF id
//! of their tracepoint (`btf_trace_NAME`) is already known: from the compile
//! cache, or from the kernel BTF the compiler parsed. libbpf's object loader
//! would parse the kernel's BTF again to find it (~megabytes, milliseconds).
//! Input: a program's patched instructions and that id; output: the
//! program's fd, then its raw tracepoint link's fd.
//!
//! Any failure here is not reported: the loader loads the program through
//! libbpf instead, which says what is wrong (verifier log included).

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use libbpf_rs::libbpf_sys;

/// Loads a `tp_btf` program whose tracepoint typedef has BTF id `btf_id`.
pub fn load_tp_btf(name: &str, insns: &[u64], btf_id: u32) -> Option<OwnedFd> {
    let name = CString::new(name).ok()?;
    let license = c"GPL";
    let mut opts = libbpf_sys::bpf_prog_load_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_prog_load_opts>() as _,
        expected_attach_type: libbpf_sys::BPF_TRACE_RAW_TP,
        attach_btf_id: btf_id,
        ..Default::default()
    };
    // SAFETY: a `bpf_insn` is the 8-byte instruction slot `insns` holds;
    // every pointer outlives the call, which copies what it needs.
    let fd = unsafe {
        libbpf_sys::bpf_prog_load(
            libbpf_sys::BPF_PROG_TYPE_TRACING,
            name.as_ptr(),
            license.as_ptr(),
            insns.as_ptr().cast::<libbpf_sys::bpf_insn>(),
            insns.len() as _,
            &mut opts,
        )
    };
    // SAFETY: a non-negative return is a new fd that nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Attaches a loaded `tp_btf` program; the link's fd keeps it attached.
pub fn attach_tp_btf(program: BorrowedFd<'_>) -> Result<OwnedFd, String> {
    // SAFETY: a null name is how a BTF-typed program is attached to the
    // tracepoint it was loaded for.
    let fd = unsafe { libbpf_sys::bpf_raw_tracepoint_open(std::ptr::null(), program.as_raw_fd()) };
    if fd < 0 {
        return Err(std::io::Error::from_raw_os_error(-fd).to_string());
    }
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::targets::kernel_btf::KernelBtf;

    /// `r0 = 0; exit`.
    const RETURN_0: [u64; 2] = [0xb7, 0x95];

    /// A program loads and attaches to `sched_switch` by its BTF id; a
    /// wrong id is refused (the loader then falls back to libbpf).
    #[test]
    fn loads_and_attaches_by_btf_id() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            println!("SKIPPED: needs root to load BPF programs");
            return;
        }
        let btf = KernelBtf::load().expect("kernel BTF");
        let id = btf
            .tracepoint_typedef("sched_switch")
            .expect("btf_trace_sched_switch");
        let program = load_tp_btf("wprof_direct", &RETURN_0, id).expect("load");
        attach_tp_btf(std::os::fd::AsFd::as_fd(&program)).expect("attach");
        assert!(load_tp_btf("wprof_direct", &RETURN_0, 1).is_none());
    }
}
