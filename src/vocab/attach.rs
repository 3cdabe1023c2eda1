//! Where programs attach: the attach point each probe resolves to and the
//! perf events `profile`, `interval`, `software` and `hardware` probes (and
//! `--pmu` counters) open. Made by the probe providers, carried through the
//! checked program into each compiled program, used by the loader to attach.

use std::path::PathBuf;

/// Where and how a program attaches.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
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
    /// A BPF iterator, read once to its end (or pinned at `pin`).
    Iter {
        target: IterTarget,
        pin: Option<PathBuf>,
    },
    /// A hardware breakpoint (`PERF_TYPE_BREAKPOINT`) on `len` bytes.
    Watchpoint {
        target: WatchTarget,
        len: u8,
        mode: WatchMode,
        /// `watchpoint`: the tracee is stopped from the call of the function
        /// until the breakpoint is set; `asyncwatchpoint`: it runs on.
        sync: bool,
    },
}

/// What a BPF iterator walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum IterTarget {
    /// Every task (thread).
    Task,
    /// Every open file of every task.
    TaskFile,
}

impl IterTarget {
    /// The kernel's name of the iterator (`bpf_iter_NAME`).
    pub fn name(self) -> &'static str {
        match self {
            IterTarget::Task => "task",
            IterTarget::TaskFile => "task_file",
        }
    }
}

/// What a watchpoint watches.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum WatchTarget {
    /// A fixed address: in the traced process (`-p`/`-c`), else in the kernel.
    Address(u64),
    /// The address argument `arg` of `function` holds each time it is called;
    /// a uprobe at `file_offset` of `binary` sends it to user space, which
    /// then sets the breakpoint.
    FunctionArg {
        binary: PathBuf,
        function: String,
        file_offset: u64,
        arg: u8,
    },
}

/// Which accesses a watchpoint fires on: `HW_BREAKPOINT_R` (1), `_W` (2),
/// `_X` (4) of `perf_event_attr.bp_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WatchMode(pub u32);

impl WatchMode {
    pub const READ: u32 = 1;
    pub const WRITE: u32 = 2;
    pub const EXECUTE: u32 = 4;
}

/// A perf event as `perf_event_open` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// Hardware breakpoints (`PERF_TYPE_BREAKPOINT`).
    Breakpoints,
    /// BPF iterators over tasks and their files.
    TaskIterators,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PerfSample {
    FrequencyHz(u64),
    Period(u64),
}
