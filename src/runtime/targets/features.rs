//! Runtime, kernel description: what this kernel and machine can trace. Input: the
//! running system (sysfs, tracefs, a few cheap syscalls); output: [`KernelFeatures`],
//! which the driver turns into diagnostics ("kprobes unavailable: ...") on the
//! probes that need them (`providers::Provider::feature`) before any program is
//! loaded, and the online CPUs perf events open on.
//!
//! Detection is cheap: file checks and one `perf_event_open`.
//! The only program load, for fentry, runs lazily on first use of
//! [`KernelFeatures::fentry`] (or [`probe_fentry`]).

use std::fs;
use std::path::Path;
use std::sync::OnceLock;

use super::tracefs;
use crate::vocab::KernelFeature;

/// Whether a feature works here, and if not, a sentence saying why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    /// The feature works here.
    Available,
    /// `reason` is a complete sentence fit for a diagnostic.
    Unavailable { reason: String },
}

impl Availability {
    /// Whether the feature works here.
    #[cfg(test)]
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }

    /// Why the feature is missing; `None` when it is available.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Availability::Available => None,
            Availability::Unavailable { reason } => Some(reason),
        }
    }

    fn unavailable(reason: impl Into<String>) -> Availability {
        Availability::Unavailable {
            reason: reason.into(),
        }
    }

    fn when(available: bool, reason: impl FnOnce() -> String) -> Availability {
        match available {
            true => Availability::Available,
            false => Availability::unavailable(reason()),
        }
    }
}

/// The tracing features of the running kernel and machine.
#[derive(Clone, Debug)]
pub struct KernelFeatures {
    /// Classic tracepoints: tracefs is mounted.
    pub tracepoints: Availability,
    /// `kprobe:` / `kretprobe:` (CONFIG_KPROBES).
    pub kprobes: Availability,
    /// `uprobe:` / `uretprobe:` / `usdt:` (CONFIG_UPROBE_EVENTS).
    pub uprobes: Availability,
    /// Kernel BTF at `/sys/kernel/btf/vmlinux`: needed by `tp_btf` and fentry.
    pub btf: Availability,
    /// `hardware:` probes (cycles, instructions, ...): a usable PMU.
    pub hardware_pmu: Availability,
    /// `watchpoint:` probes: perf's `breakpoint` PMU.
    pub breakpoints: Availability,
    /// Filled by the first call to [`KernelFeatures::fentry`].
    fentry: OnceLock<Availability>,
}

impl KernelFeatures {
    /// Everything available, for tests of code that consumes features.
    #[cfg(test)]
    pub fn all_available() -> KernelFeatures {
        let fentry = OnceLock::new();
        let _ = fentry.set(Availability::Available);
        KernelFeatures {
            tracepoints: Availability::Available,
            kprobes: Availability::Available,
            uprobes: Availability::Available,
            btf: Availability::Available,
            hardware_pmu: Availability::Available,
            breakpoints: Availability::Available,
            fentry,
        }
    }

    /// Whether `feature` works here (fentry is probed on first use).
    pub fn get(&self, feature: KernelFeature) -> &Availability {
        match feature {
            KernelFeature::Tracepoints => &self.tracepoints,
            KernelFeature::Kprobes => &self.kprobes,
            KernelFeature::Uprobes => &self.uprobes,
            KernelFeature::Btf => &self.btf,
            KernelFeature::Fentry => self.fentry(),
            KernelFeature::HardwarePmu => &self.hardware_pmu,
            KernelFeature::Breakpoints => &self.breakpoints,
        }
    }

    /// fentry / fexit: loads a minimal program the first time it is asked.
    pub fn fentry(&self) -> &Availability {
        self.fentry.get_or_init(probe_fentry)
    }

    /// Replaces the fentry result, for tests (or a caller that already knows).
    #[cfg(test)]
    pub fn set_fentry(&mut self, availability: Availability) {
        self.fentry = OnceLock::new();
        let _ = self.fentry.set(availability);
    }
}

/// Probes the running system cheaply: no BPF program is loaded.
pub fn detect() -> KernelFeatures {
    KernelFeatures {
        tracepoints: match tracefs::tracefs_root() {
            Ok(_) => Availability::Available,
            Err(e) => Availability::unavailable(format!("tracepoints are unavailable: {e}")),
        },
        kprobes: detect_kprobes(),
        uprobes: detect_uprobes(),
        btf: Availability::when(Path::new(VMLINUX_BTF).exists(), || {
            format!(
                "this kernel has no BTF ({VMLINUX_BTF} is missing; CONFIG_DEBUG_INFO_BTF is off)"
            )
        }),
        hardware_pmu: detect_hardware_pmu(),
        breakpoints: Availability::when(Path::new(BREAKPOINT_PMU).exists(), || {
            format!(
                "this kernel has no hardware breakpoints ({BREAKPOINT_PMU} is missing; \
                 CONFIG_HAVE_HW_BREAKPOINT is off)"
            )
        }),
        fentry: OnceLock::new(),
    }
}

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";
const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe";
const UPROBE_PMU: &str = "/sys/bus/event_source/devices/uprobe";
const BREAKPOINT_PMU: &str = "/sys/bus/event_source/devices/breakpoint";

/// kprobes exist when tracefs has `kprobe_events` or perf has a `kprobe` PMU.
fn detect_kprobes() -> Availability {
    let events = tracefs::tracefs_root().map(|root| root.join("kprobe_events"));
    let in_tracefs = events.as_ref().is_ok_and(|p| p.exists());
    Availability::when(in_tracefs || Path::new(KPROBE_PMU).exists(), || {
        let events = match &events {
            Ok(path) => path.display().to_string(),
            Err(_) => "tracefs (not mounted)".into(),
        };
        format!(
            "this kernel has no kprobe support (CONFIG_KPROBES is off: {events} and {KPROBE_PMU} are missing)"
        )
    })
}

/// uprobes exist when perf has an `uprobe` PMU (what libbpf attaches through).
fn detect_uprobes() -> Availability {
    Availability::when(Path::new(UPROBE_PMU).exists(), || {
        format!(
            "this kernel has no uprobe support (CONFIG_UPROBE_EVENTS is off: {UPROBE_PMU} is missing)"
        )
    })
}

/// Opens (and closes) a disabled CPU-cycles counter on the current thread.
fn detect_hardware_pmu() -> Availability {
    match sys::open_cycles_counter() {
        Ok(()) => Availability::Available,
        Err(errno) if errno == libc::ENOENT || errno == libc::EOPNOTSUPP => {
            Availability::unavailable(format!(
                "this machine has no hardware PMU (perf_event_open of CPU cycles failed with {}; \
                 virtual machines often hide it); use software events such as cpu-clock",
                errno_text(errno)
            ))
        }
        Err(errno) => Availability::unavailable(format!(
            "hardware perf events cannot be opened here (perf_event_open of CPU cycles failed with {})",
            errno_text(errno)
        )),
    }
}

/// Kernel functions to aim the fentry probe at; the first one BTF knows is used.
const FENTRY_TARGETS: [&str; 3] = ["bpf_fentry_test1", "do_nanosleep", "vfs_read"];

/// Loads a minimal `fentry` program (`r0 = 0; exit`) and reports why it failed.
pub fn probe_fentry() -> Availability {
    let btf = match libbpf_rs::Btf::from_vmlinux() {
        Ok(btf) => btf,
        Err(e) => {
            return Availability::unavailable(format!(
                "fentry/fexit need kernel BTF, which cannot be loaded: {e}"
            ));
        }
    };
    let target = FENTRY_TARGETS.iter().find_map(|name| {
        let func = btf.type_by_name::<libbpf_rs::btf::types::Func<'_>>(name)?;
        Some((*name, u32::from(func.type_id())))
    });
    let Some((function, btf_id)) = target else {
        return Availability::unavailable(format!(
            "fentry/fexit cannot be probed: none of {FENTRY_TARGETS:?} is in {VMLINUX_BTF}"
        ));
    };
    match sys::load_fentry(btf_id) {
        Ok(()) => Availability::Available,
        Err(errno) => Availability::unavailable(format!(
            "this kernel refuses fentry/fexit programs (loading one on {function} failed with {})",
            errno_text(errno)
        )),
    }
}

/// `EPERM (Operation not permitted)`.
fn errno_text(errno: i32) -> String {
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

/// The online CPUs (`/sys/devices/system/cpu/online`); every CPU the process
/// can see when that file is unreadable.
pub fn online_cpus() -> Vec<u32> {
    fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|text| parse_cpu_list(&text))
        .unwrap_or_else(|| {
            let count = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..count as u32).collect()
        })
}

/// Parses a kernel CPU list such as `0-3,8,10-11`; `None` if malformed.
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    // Lists name at most a few thousand CPUs; a larger range means a corrupt file.
    const MAX_CPUS: u32 = 1 << 16;
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let cpu: u32 = part.trim().parse().ok()?;
                (cpu, cpu)
            }
        };
        if first > last || last >= MAX_CPUS {
            return None;
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// The syscalls behind detection; each returns a positive errno on failure.
mod sys {
    use libbpf_rs::libbpf_sys;

    use crate::codegen::asm::{Assembler, Reg};

    /// Opens a disabled `PERF_COUNT_HW_CPU_CYCLES` counter on this thread, then closes it.
    pub(super) fn open_cycles_counter() -> Result<(), i32> {
        let mut attr = libbpf_sys::perf_event_attr {
            type_: libbpf_sys::PERF_TYPE_HARDWARE,
            size: std::mem::size_of::<libbpf_sys::perf_event_attr>() as u32,
            config: u64::from(libbpf_sys::PERF_COUNT_HW_CPU_CYCLES),
            ..Default::default()
        };
        attr.set_disabled(1);
        attr.set_exclude_hv(1);
        // SAFETY: `attr` is a fully initialised perf_event_attr whose `size` field
        // matches its type; pid 0 / cpu -1 means "this thread, any CPU".
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const libbpf_sys::perf_event_attr,
                0,
                -1,
                -1,
                libc::c_ulong::from(libbpf_sys::PERF_FLAG_FD_CLOEXEC),
            )
        };
        close_or_errno(fd)
    }

    /// Loads `r0 = 0; exit` as an fentry program on BTF function `btf_id`, then closes it.
    pub(super) fn load_fentry(btf_id: u32) -> Result<(), i32> {
        let mut asm = Assembler::new();
        asm.mov64_imm(Reg::R0, 0);
        asm.exit();
        let insns = asm.finish().map_err(|_| libc::EINVAL)?.insns;
        let mut opts = libbpf_sys::bpf_prog_load_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_prog_load_opts>() as _,
            expected_attach_type: libbpf_sys::BPF_TRACE_FENTRY,
            attach_btf_id: btf_id,
            ..Default::default()
        };
        // SAFETY: the name and license are NUL-terminated; `insns` holds two 8-byte
        // instructions laid out as `struct bpf_insn`; `opts.sz` is its own size.
        let fd = unsafe {
            libbpf_sys::bpf_prog_load(
                libbpf_sys::BPF_PROG_TYPE_TRACING,
                c"wprof_fentry".as_ptr(),
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This VM has no kprobes, and the reason names CONFIG_KPROBES and the missing file.
    #[test]
    fn kprobes_unavailable_with_reason() {
        let features = detect();
        let reason = features
            .kprobes
            .reason()
            .expect("kprobes are off on this machine");
        assert!(
            reason.contains("CONFIG_KPROBES") && reason.contains("kprobe_events"),
            "{reason}"
        );
        assert!(features.uprobes.is_available() && features.tracepoints.is_available());
        assert!(features.btf.is_available() && features.breakpoints.is_available());
    }

    /// This VM has no hardware PMU; the reason says so and suggests software events.
    #[test]
    fn hardware_pmu_unavailable_with_reason() {
        let reason = detect()
            .hardware_pmu
            .reason()
            .map(str::to_owned)
            .expect("no PMU here");
        assert!(
            reason.contains("hardware PMU") && reason.contains("cpu-clock"),
            "{reason}"
        );
    }

    /// Loading an fentry program fails here with EPERM, reported lazily through `fentry()`.
    #[test]
    fn fentry_unavailable_with_eperm() {
        let features = detect();
        let reason = features
            .fentry()
            .reason()
            .expect("fentry is refused on this machine");
        assert!(
            reason.contains("EPERM") && reason.contains("fentry"),
            "{reason}"
        );
        let mut assumed = KernelFeatures::all_available();
        assert!(assumed.fentry().is_available());
        assumed.set_fentry(Availability::unavailable("no"));
        assert_eq!(assumed.fentry().reason(), Some("no"));
    }

    /// CPU lists parse, including ranges and malformed input.
    #[test]
    fn parses_cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-3,8"), Some(vec![0, 2, 3, 8]));
        for bad in ["", "a", "3-1", "0-4294967295", "1,,2"] {
            assert_eq!(parse_cpu_list(bad), None, "{bad}");
        }
        let online = online_cpus();
        assert!(
            !online.is_empty()
                && online
                    .iter()
                    .all(|&c| (c as usize) < libbpf_rs::num_possible_cpus().expect("cpus"))
        );
    }
}
