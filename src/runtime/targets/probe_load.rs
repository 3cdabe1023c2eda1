//! Runtime, kernel description by trial: loads tiny programs (and opens a
//! perf counter) to learn what this kernel accepts, for
//! [`super::features`] and `--info`. Input: a program type, attach type,
//! BTF target and helper; output: `Ok` or the errno the kernel returned,
//! turned into an [`Availability`] with a sentence saying why.

use libbpf_rs::libbpf_sys;

use super::features::Availability;
use crate::codegen::asm::{Assembler, Reg};

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Kernel functions to aim the fentry probe at; the first one BTF knows is used.
const FENTRY_TARGETS: [&str; 3] = ["bpf_fentry_test1", "do_nanosleep", "vfs_read"];

/// `bpf_attach_type` values the kernel defines (`include/uapi/linux/bpf.h`).
const BPF_TRACE_FENTRY: u32 = 24;
const BPF_TRACE_ITER: u32 = 28;

/// What to load: a program type, its expected attach type and BTF target.
#[derive(Clone, Copy, Debug)]
pub struct Trial {
    pub prog_type: u32,
    pub attach_type: u32,
    pub attach_btf_id: u32,
}

impl Trial {
    /// A program of `prog_type` with no attach type or target.
    pub fn of_type(prog_type: u32) -> Trial {
        Trial {
            prog_type,
            attach_type: 0,
            attach_btf_id: 0,
        }
    }
}

/// Loads `r0 = 0; exit` (after a call of `helper`, when given) as `trial`
/// describes, then closes it; the errno when the kernel refuses.
pub fn try_load(trial: Trial, helper: Option<u32>) -> Result<(), i32> {
    let mut asm = Assembler::new();
    if let Some(helper) = helper {
        // Helpers probed here take no pointer arguments the verifier checks.
        for reg in [Reg::R1, Reg::R2, Reg::R3] {
            asm.mov64_imm(reg, 0);
        }
        asm.call_helper(helper);
    }
    asm.mov64_imm(Reg::R0, 0);
    asm.exit();
    let insns = asm.finish().map_err(|_| libc::EINVAL)?.insns;
    let mut opts = libbpf_sys::bpf_prog_load_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_prog_load_opts>() as _,
        expected_attach_type: trial.attach_type,
        attach_btf_id: trial.attach_btf_id,
        ..Default::default()
    };
    // SAFETY: the name and license are NUL-terminated; `insns` holds the
    // instructions laid out as `struct bpf_insn`; `opts.sz` is its own size.
    let fd = unsafe {
        libbpf_sys::bpf_prog_load(
            trial.prog_type,
            c"wprof_probe".as_ptr(),
            c"GPL".as_ptr(),
            insns.as_ptr().cast(),
            insns.len() as _,
            &mut opts,
        )
    };
    // libbpf 1.x returns -errno directly.
    match fd {
        fd if fd >= 0 => close_or_errno(fd.into()),
        err => Err(-err),
    }
}

/// The BTF id of kernel function `name` (a struct may share its name, as
/// `struct bpf_iter_task` does, so functions are searched by kind).
fn btf_function(btf: &libbpf_rs::Btf<'_>, name: &str) -> Option<u32> {
    let wanted = Some(std::ffi::OsStr::new(name));
    btf.type_by_kind::<libbpf_rs::btf::types::Func<'_>>()
        .find(|func| func.name() == wanted)
        .map(|func| u32::from(func.type_id()))
}

fn vmlinux_btf(needed_by: &str) -> Result<libbpf_rs::Btf<'static>, Availability> {
    libbpf_rs::Btf::from_vmlinux().map_err(|e| {
        Availability::unavailable(format!(
            "{needed_by} need kernel BTF, which cannot be loaded: {e}"
        ))
    })
}

/// Loads a minimal `fentry` program and reports why it failed.
pub fn probe_fentry() -> Availability {
    let btf = match vmlinux_btf("fentry/fexit") {
        Ok(btf) => btf,
        Err(missing) => return missing,
    };
    let target = FENTRY_TARGETS
        .iter()
        .find_map(|name| Some((*name, btf_function(&btf, name)?)));
    let Some((function, btf_id)) = target else {
        return Availability::unavailable(format!(
            "fentry/fexit cannot be probed: none of {FENTRY_TARGETS:?} is in {VMLINUX_BTF}"
        ));
    };
    let trial = Trial {
        prog_type: libbpf_sys::BPF_PROG_TYPE_TRACING,
        attach_type: BPF_TRACE_FENTRY,
        attach_btf_id: btf_id,
    };
    match try_load(trial, None) {
        Ok(()) => Availability::Available,
        Err(errno) => Availability::unavailable(format!(
            "this kernel refuses fentry/fexit programs (loading one on {function} failed with {})",
            errno_text(errno)
        )),
    }
}

/// Loads a minimal `iter/task` and `iter/task_file` program.
pub fn probe_task_iterators() -> Availability {
    let btf = match vmlinux_btf("task iterators") {
        Ok(btf) => btf,
        Err(missing) => return missing,
    };
    for target in ["bpf_iter_task", "bpf_iter_task_file"] {
        let Some(btf_id) = btf_function(&btf, target) else {
            return Availability::unavailable(format!(
                "this kernel has no task iterators ({target} is not in {VMLINUX_BTF}; Linux 5.8+)"
            ));
        };
        let trial = Trial {
            prog_type: libbpf_sys::BPF_PROG_TYPE_TRACING,
            attach_type: BPF_TRACE_ITER,
            attach_btf_id: btf_id,
        };
        if let Err(errno) = try_load(trial, None) {
            return Availability::unavailable(format!(
                "this kernel refuses BPF iterators (loading one on {target} failed with {})",
                errno_text(errno)
            ));
        }
    }
    Availability::Available
}

/// Opens (and closes) a disabled CPU-cycles counter on the current thread.
pub fn open_cycles_counter() -> Result<(), i32> {
    let mut attr = libbpf_sys::perf_event_attr {
        type_: libbpf_sys::PERF_TYPE_HARDWARE,
        size: std::mem::size_of::<libbpf_sys::perf_event_attr>() as u32,
        config: u64::from(libbpf_sys::PERF_COUNT_HW_CPU_CYCLES),
        ..Default::default()
    };
    attr.set_disabled(1);
    attr.set_exclude_hv(1);
    match crate::sys::perf_event_open(&attr, 0, -1) {
        Ok(_fd) => Ok(()),
        Err(error) => Err(error.raw_os_error().unwrap_or(libc::EINVAL)),
    }
}

fn close_or_errno(fd: libc::c_long) -> Result<(), i32> {
    if fd < 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL));
    }
    // SAFETY: `fd` was just returned to us by the kernel and is closed once.
    unsafe { libc::close(fd as libc::c_int) };
    Ok(())
}

/// `EPERM (Operation not permitted)`.
pub fn errno_text(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EACCES => "EACCES",
        libc::EINVAL => "EINVAL",
        libc::E2BIG => "E2BIG",
        libc::ENODEV => "ENODEV",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        524 => "ENOTSUPP",
        _ => "errno",
    };
    let message = match errno {
        // The kernel-internal ENOTSUPP has no libc message.
        524 => "operation not supported by the kernel".to_string(),
        _ => {
            let text = std::io::Error::from_raw_os_error(errno).to_string();
            let suffix = format!(" (os error {errno})");
            text.strip_suffix(&suffix).unwrap_or(&text).to_string()
        }
    };
    format!("{name} ({message})")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain kprobe program loads (kprobes only cannot attach here); a
    /// helper a program type may not call makes the load fail.
    #[test]
    fn loads_by_type_and_helper() {
        let kprobe = Trial::of_type(libbpf_sys::BPF_PROG_TYPE_KPROBE);
        assert_eq!(try_load(kprobe, None), Ok(()));
        // bpf_get_current_pid_tgid (14) is fine in a kprobe program...
        assert_eq!(try_load(kprobe, Some(14)), Ok(()));
        // ...and helper 100000 exists nowhere.
        assert!(try_load(kprobe, Some(100_000)).is_err());
    }

    /// errno texts name the constant and its message.
    #[test]
    fn names_errnos() {
        assert_eq!(errno_text(libc::EPERM), "EPERM (Operation not permitted)");
        assert_eq!(
            errno_text(524),
            "ENOTSUPP (operation not supported by the kernel)"
        );
    }
}
