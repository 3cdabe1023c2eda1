//! Sleepable `BPF_PROG_TYPE_SYSCALL` programs assembled at run time, loaded
//! without libbpf and run once by `BPF_PROG_TEST_RUN`: they ask the kernel
//! what only a BPF program can (its symbol table, its read-only data).
//! Input: the program's instructions and the one map they use. Output: the
//! loaded program; a run's return value and context.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use libbpf_rs::libbpf_sys;

/// `ld_imm64`'s opcode, and its source values that name a map.
const LD_IMM64: u64 = 0x18;
const PSEUDO_MAP_FD: u64 = 1;
const PSEUDO_MAP_VALUE: u64 = 2;

/// Loads `insns` (8-byte slots) as a sleepable syscall program named
/// `name`; every map reference in them (an `ld_imm64` of a map or of a
/// map value) becomes `map`.
pub fn load(insns: &[u64], map: BorrowedFd, name: &CStr) -> io::Result<OwnedFd> {
    let fd = u64::from(map.as_raw_fd() as u32);
    let insns: Vec<u64> = (insns.iter())
        .map(|&slot| {
            let source = (slot >> 12) & 0xf;
            let names_map = source == PSEUDO_MAP_FD || source == PSEUDO_MAP_VALUE;
            match slot & 0xff == LD_IMM64 && names_map {
                true => (slot & 0xffff_ffff) | (fd << 32),
                false => slot,
            }
        })
        .collect();
    let mut opts = libbpf_sys::bpf_prog_load_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_prog_load_opts>() as _,
        prog_flags: libbpf_sys::BPF_F_SLEEPABLE,
        ..Default::default()
    };
    // SAFETY: a `bpf_insn` is the 8-byte slot `insns` holds; the name and
    // license are NUL-terminated; everything outlives the call.
    let fd = unsafe {
        libbpf_sys::bpf_prog_load(
            libbpf_sys::BPF_PROG_TYPE_SYSCALL,
            name.as_ptr(),
            c"GPL".as_ptr(),
            insns.as_ptr().cast::<libbpf_sys::bpf_insn>(),
            insns.len() as _,
            &mut opts,
        )
    };
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(-fd));
    }
    // SAFETY: a non-negative return is a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Runs `program` once with `context`, which the kernel copies in and, for
/// a syscall program, back out; returns the program's return value.
pub fn run(program: &OwnedFd, context: &mut [u8]) -> io::Result<u32> {
    let mut opts = libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _,
        ctx_in: context.as_mut_ptr().cast(),
        ctx_size_in: context.len() as u32,
        ..Default::default()
    };
    // SAFETY: `ctx_in` points at `ctx_size_in` bytes that outlive the call.
    let ret = unsafe { libbpf_sys::bpf_prog_test_run_opts(program.as_raw_fd(), &mut opts) };
    if ret < 0 {
        return Err(io::Error::from_raw_os_error(-ret));
    }
    Ok(opts.retval)
}
