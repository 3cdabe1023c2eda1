//! Where programs attach: the attach point each probe resolves to and the
//! perf events `profile`, `interval`, `software` and `hardware` probes (and
//! `--pmu` counters) open. Made by the probe providers, carried through the
//! checked program into each compiled program, used by the loader to attach.

use std::path::PathBuf;

/// Where and how a program attaches.
#[derive(Clone, Debug, PartialEq)]
pub enum AttachPoint {
    /// Run once through `BPF_PROG_TEST_RUN` before any other probe is attached.
    Begin,
    /// Run once through `BPF_PROG_TEST_RUN` after all probes are detached.
    End,
    Tracepoint {
        category: String,
        name: String,
    },
    RawTracepoint {
        name: String,
    },
    /// A BTF-typed raw tracepoint (`BPF_PROG_TYPE_TRACING`, `BPF_TRACE_RAW_TP`).
    TpBtf {
        name: String,
    },
    Uprobe {
        /// The resolved ELF file.
        binary: PathBuf,
        /// Symbol name (for messages) and the file offset to attach to.
        symbol: String,
        offset: u64,
        retprobe: bool,
    },
    Usdt {
        binary: PathBuf,
        provider: String,
        name: String,
        offset: u64,
        semaphore_offset: u64,
    },
    Kprobe {
        function: String,
        /// The module the function is in (`MODULE:FUNCTION`); `None` for the kernel.
        module: Option<String>,
        offset: u64,
        retprobe: bool,
    },
    Fentry {
        function: String,
        exit: bool,
    },
    PerfEvent {
        event: PerfEvent,
        sample: PerfSample,
        /// All online CPUs, or only the first (for `interval`).
        all_cpus: bool,
    },
}

/// A perf event as `perf_event_open` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerfEvent {
    /// [`PERF_TYPE_HARDWARE`], [`PERF_TYPE_SOFTWARE`] or [`PERF_TYPE_RAW`].
    pub type_: u32,
    pub config: u64,
}

/// `PERF_TYPE_*` of `perf_event_attr.type`.
pub const PERF_TYPE_HARDWARE: u32 = 0;
pub const PERF_TYPE_SOFTWARE: u32 = 1;
pub const PERF_TYPE_RAW: u32 = 4;

impl PerfEvent {
    /// `rHEX`: a raw, CPU-specific event code.
    pub fn raw(name: &str) -> Option<PerfEvent> {
        let hex = name.strip_prefix('r').filter(|h| !h.is_empty())?;
        let config = u64::from_str_radix(hex, 16).ok()?;
        Some(PerfEvent {
            type_: PERF_TYPE_RAW,
            config,
        })
    }

    /// Whether counting it needs a hardware PMU.
    pub fn needs_pmu(&self) -> bool {
        matches!(self.type_, PERF_TYPE_HARDWARE | PERF_TYPE_RAW)
    }
}

/// A kernel facility some probes cannot run without; the runtime detects
/// which ones this kernel has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelFeature {
    Tracepoints,
    Kprobes,
    Uprobes,
    /// Kernel BTF (`/sys/kernel/btf/vmlinux`).
    Btf,
    /// BPF trampolines (fentry/fexit).
    Fentry,
    HardwarePmu,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerfSample {
    FrequencyHz(u64),
    Period(u64),
}
