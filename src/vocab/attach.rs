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

impl AttachPoint {
    /// libbpf section name, which selects the program type.
    pub fn section(&self) -> String {
        match self {
            AttachPoint::Begin | AttachPoint::End => "raw_tp".into(),
            AttachPoint::Tracepoint { category, name } => format!("tracepoint/{category}/{name}"),
            AttachPoint::RawTracepoint { name } => format!("raw_tp/{name}"),
            AttachPoint::TpBtf { name } => format!("tp_btf/{name}"),
            AttachPoint::Uprobe { retprobe, .. } => {
                if *retprobe { "uretprobe" } else { "uprobe" }.into()
            }
            AttachPoint::Usdt { .. } => "uprobe".into(),
            AttachPoint::Kprobe { retprobe, .. } => {
                if *retprobe { "kretprobe" } else { "kprobe" }.into()
            }
            AttachPoint::Fentry { function, exit } => {
                format!("{}/{function}", if *exit { "fexit" } else { "fentry" })
            }
            AttachPoint::PerfEvent { .. } => "perf_event".into(),
        }
    }
}

/// A perf event as `perf_event_open` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerfEvent {
    /// `PERF_TYPE_HARDWARE` (0), `PERF_TYPE_SOFTWARE` (1) or `PERF_TYPE_RAW` (4).
    pub type_: u32,
    pub config: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerfSample {
    FrequencyHz(u64),
    Period(u64),
}
