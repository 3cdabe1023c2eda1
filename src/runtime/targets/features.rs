//! Runtime, kernel description: what this kernel and machine can trace. Input: the
//! running system (sysfs, tracefs, a few cheap syscalls); output: [`KernelFeatures`],
//! which the driver turns into diagnostics ("kprobes unavailable: ...") on the
//! probes that need them (`providers::Provider::feature`) before any program is
//! loaded, and the online CPUs perf events open on.
//!
//! Detection is cheap: file checks and one `perf_event_open`. Program
//! loads (fentry, iterators: `probe_load`) run lazily on first use.

use std::fs;
use std::path::Path;
use std::sync::OnceLock;

use super::probe_load::{self, errno_text};
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

    pub(super) fn unavailable(reason: impl Into<String>) -> Availability {
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
    /// Filled by the first call to [`KernelFeatures::task_iterators`].
    task_iterators: OnceLock<Availability>,
}

impl KernelFeatures {
    /// Everything available, for tests of code that consumes features.
    #[cfg(test)]
    pub fn all_available() -> KernelFeatures {
        let fentry = OnceLock::new();
        let _ = fentry.set(Availability::Available);
        let task_iterators = OnceLock::new();
        let _ = task_iterators.set(Availability::Available);
        KernelFeatures {
            tracepoints: Availability::Available,
            kprobes: Availability::Available,
            uprobes: Availability::Available,
            btf: Availability::Available,
            hardware_pmu: Availability::Available,
            breakpoints: Availability::Available,
            fentry,
            task_iterators,
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
            KernelFeature::TaskIterators => self.task_iterators(),
        }
    }

    /// fentry / fexit: loads a minimal program the first time it is asked.
    pub fn fentry(&self) -> &Availability {
        self.fentry.get_or_init(probe_load::probe_fentry)
    }

    /// `iter:task` / `iter:task_file`: loads a minimal iterator program of
    /// each the first time it is asked.
    pub fn task_iterators(&self) -> &Availability {
        self.task_iterators
            .get_or_init(probe_load::probe_task_iterators)
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
        task_iterators: OnceLock::new(),
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
    match probe_load::open_cycles_counter() {
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

    /// Task iterators load here (bpftrace 0.17 wrongly says they do not).
    #[test]
    fn task_iterators_load() {
        let features = detect();
        assert_eq!(features.task_iterators().reason(), None);
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
