//! The globals map: u64 slots user space writes and every program reads
//! (start time, child pid, whether tracing is active, wprof's own pid).

/// Slots of the globals map (each a u64), in index order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GlobalSlot {
    /// `bpf_ktime_get_ns()` at start, the origin of `elapsed`.
    StartNs = 0,
    /// pid of the `-c` child (`cpid`), 0 without `-c`.
    ChildPid = 1,
    /// A [`ProbeState`]: probes other than BEGIN/END return at once unless
    /// it is `Active`, so nothing is recorded before activation, and maps
    /// hold still while they print after stopping (detaching takes longer).
    State = 2,
    /// wprof's own pid: probes ignore wprof, which would otherwise trace
    /// itself (a system-wide `malloc` probe fires on every event it handles).
    SelfPid = 3,
    /// The kernel stack frames of a raw tracepoint program (`tp_btf`,
    /// `rawtracepoint`) that belong to the tracer, above the traced event:
    /// the program and the tracepoint glue (`bpf_trace_runN`...). Measured
    /// at start-up (`runtime::bpf::stack_skip`) and passed to
    /// `bpf_get_stack` as its skip count.
    RawTracepointStackSkip = 4,
    /// Messages the ring buffer had no room for (printed as `Lost N events`).
    LostMessages = 5,
    /// `bpf_ktime_get_ns()` when a record last woke the capture's reader
    /// (its ring more than a quarter full): it is woken at most once a
    /// millisecond.
    ReaderWokenNs = 6,
}

pub const GLOBAL_SLOTS: u32 = 7;

/// The values of [`GlobalSlot::State`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeState {
    /// Loaded (maybe attached), not yet activated.
    Inactive = 0,
    Active = 1,
    Stopped = 2,
}
