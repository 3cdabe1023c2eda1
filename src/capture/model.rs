//! What a capture holds, independent of how it is stored: the capture's
//! description, record schemas, interned strings, threads, stacks and symbols,
//! and events. `CaptureWriter` stores these, `CaptureReader` gives them back,
//! and renderers (Perfetto, NDJSON, summary) see nothing else.

use super::walk::StackWalk;

/// Index into the capture's string table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StringId(pub u32);

/// Index into the capture's thread table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadId(pub u32);

/// Index into the capture's stack table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackId(pub u32);

/// Index into the capture's frame table (a unique code address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameId(pub u32);

/// Index into the capture's record schemas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordId(pub u32);

/// Facts about the capture as a whole, written first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CaptureInfo {
    /// The command line that made the capture.
    pub command_line: Vec<String>,
    /// The probe script's text and name (`<script>` for `-e`).
    pub script: String,
    pub script_name: String,
    pub hostname: String,
    pub kernel_release: String,
    pub cpus: u32,
    /// `CLOCK_MONOTONIC` (the clock of `bpf_ktime_get_ns`) at capture start:
    /// event timestamps are relative to this.
    pub start_monotonic_ns: u64,
    /// Wall clock (ns since the Unix epoch) at the same instant.
    pub start_realtime_ns: u64,
    /// The wprof version that wrote the capture.
    pub wprof_version: String,
    /// What was asked for: features, stacks, counters, filters, activation.
    pub settings: CaptureSettings,
    /// The process of the command wprof ran (`-c` or after `--`): with its
    /// descendants, what `--only-command` selects. Stored in the `command`
    /// chunk (format 2.3); `None` in older captures and without a command.
    pub command_pid: Option<u32>,
}

/// The capture's system-tracking settings as the user gave them (canonical
/// command-line spellings), so replay and `-I` can show and re-apply them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaptureSettings {
    /// Enabled features: `sched`, `wakeup`, `task-life`, `hardirq`, `softirq`, `wq`.
    pub features: Vec<String>,
    /// Stack kinds: `timer=100hz`, `offcpu`, `waker`, `probe`, `pmu=EVENT@RATE`.
    pub stacks: Vec<String>,
    /// PMU counters read at context switches and IRQ boundaries, as given to `--pmu`.
    pub pmu: Vec<String>,
    /// Task filters as command-line arguments, e.g. `-p 42`, `-N kworker*`, `--no-idle`.
    pub filters: Vec<String>,
    /// `--prepare` / `--activate` specs as given.
    pub prepare: Option<String>,
    pub activate: Option<String>,
}

/// How one kind of event is laid out: made from a record block (`< ... >`) or a span.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RecordSchema {
    /// The probe (or span) as written, e.g. `uprobe:/usr/lib/x86_64-linux-gnu/libc.so.6:malloc`.
    pub probe: String,
    /// A short name for tracks and event names, e.g. `malloc`.
    pub name: String,
    pub kind: RecordKind,
    pub fields: Vec<FieldSchema>,
    /// Whether events carry a stack.
    pub has_stack: bool,
    pub origin: RecordOrigin,
}

/// Who defined a record: the user's script, or one of wprof's built-in
/// trackers (`probes/*.wp`), whose records renderers understand by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RecordOrigin {
    #[default]
    Script,
    Tracker,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RecordKind {
    /// One point in time.
    Instant,
    /// A start and a duration (a span pairing two probes).
    Span,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FieldSchema {
    pub name: String,
    pub ty: FieldType,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FieldType {
    Int,
    UInt,
    Str,
    /// A task, recorded as its tid and stored as the thread it was then.
    Thread,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldValue {
    Int(i64),
    UInt(u64),
    Str(StringId),
    Thread(ThreadId),
}

/// A thread as first seen (or renamed).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Thread {
    pub tid: u32,
    pub pid: u32,
    /// The thread's name (`comm`).
    pub name: StringId,
    /// The process's name (its main thread's `comm`).
    pub process_name: StringId,
    /// The parent process's pid, 0 when unknown.
    pub ppid: u32,
    /// A kernel thread (no user address space).
    pub kthread: bool,
}

/// A thread's identity as the writer takes it, before its names are interned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadInfo<'a> {
    pub tid: u32,
    pub pid: u32,
    pub ppid: u32,
    pub kthread: bool,
    pub name: &'a str,
    pub process_name: &'a str,
}

/// A call stack, innermost frame first.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stack {
    pub frames: Vec<FrameId>,
}

/// A code address, normalized so that it can be symbolized after the
/// process is gone: kernel addresses as they are, user addresses as an offset
/// into a file identified by path and build id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FrameAddr {
    Kernel {
        addr: u64,
    },
    User {
        module: StringId,
        build_id: Option<Vec<u8>>,
        file_offset: u64,
    },
    /// A user address that could not be tied to a file (JIT code, exited process).
    UnknownUser {
        addr: u64,
    },
}

/// What a frame's address resolved to, stored at the end of the capture.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Symbol {
    /// The function, or `None` when the address did not resolve.
    pub function: Option<StringId>,
    /// Offset of the address from the function's start.
    pub offset: u64,
    pub file: Option<StringId>,
    pub line: Option<u32>,
    /// Functions inlined at this address, outermost first.
    pub inlined: Vec<StringId>,
}

/// One event, timestamps relative to `CaptureInfo::start_monotonic_ns`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Event {
    pub ts_ns: u64,
    pub cpu: u32,
    pub thread: ThreadId,
    pub record: RecordId,
    /// Spans only.
    pub duration_ns: Option<u64>,
    /// In `RecordSchema::fields` order.
    pub values: Vec<FieldValue>,
    pub stack: Option<StackId>,
    /// How the stack's user part was walked (format 2.3; `None` without a
    /// user part, or in older captures).
    pub walk: Option<StackWalk>,
}

/// Why events were lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// The ring buffer was full.
    RingBufferFull,
    /// A record with a stack found no free scratch buffer on its CPU (the
    /// probe fired inside more nested probes than there are buffers), or
    /// under `-S offcpu=DUR` the task work that takes a long block's user
    /// stack could not be scheduled.
    StackLost,
    /// A span ended without a matching start (started before the capture, or evicted).
    UnmatchedSpanEnd,
}

impl DropReason {
    /// Every reason, in code order: the kernel counts them at
    /// `record × ALL.len() + code`.
    pub const ALL: [DropReason; 3] = [
        DropReason::RingBufferFull,
        DropReason::StackLost,
        DropReason::UnmatchedSpanEnd,
    ];

    /// Its code in the kernel's counters and the capture's end chunk.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The reason with `code`, if this version knows it.
    pub fn from_code(code: u8) -> Option<DropReason> {
        DropReason::ALL.into_iter().find(|r| r.code() == code)
    }

    /// How summaries and warnings say it.
    pub fn label(self) -> &'static str {
        match self {
            DropReason::RingBufferFull => "ring buffer full",
            DropReason::StackLost => "stack lost",
            DropReason::UnmatchedSpanEnd => "span end without a start",
        }
    }
}

/// Events of one record kind lost for one reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordDrops {
    pub record: RecordId,
    pub reason: DropReason,
    pub count: u64,
}

/// Counts kept during the capture and written at its end.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CaptureStats {
    pub events: u64,
    /// Lost events by reason, over every record kind.
    pub drops: Vec<(DropReason, u64)>,
    /// Lost events by record kind and reason, non-zero counts only (format
    /// 2.3; empty in older captures, which counted only by reason).
    pub record_drops: Vec<RecordDrops>,
    /// Length of the captured window.
    pub duration_ns: u64,
    /// How stacks were taken and the unwind tables behind them (format
    /// 2.2; empty in older captures).
    pub stacks: Vec<(StackCount, u64)>,
}

impl CaptureStats {
    /// Stats whose global drops are the sums of `record_drops`.
    pub fn with_record_drops(record_drops: Vec<RecordDrops>) -> CaptureStats {
        let drops = DropReason::ALL
            .into_iter()
            .map(|reason| {
                let of_reason = record_drops.iter().filter(|d| d.reason == reason);
                (reason, of_reason.map(|d| d.count).sum())
            })
            .filter(|&(_, n): &(DropReason, u64)| n > 0)
            .collect();
        CaptureStats {
            drops,
            record_drops,
            ..CaptureStats::default()
        }
    }

    /// Whether drops were counted per record kind: always from format 2.3
    /// on; before it only a capture that lost nothing tells (none of any).
    pub fn counts_per_record(&self) -> bool {
        !self.record_drops.is_empty() || self.drops.is_empty()
    }

    /// The drops of `record`, by reason.
    pub fn drops_of(&self, record: RecordId) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        (self.record_drops.iter())
            .filter(move |d| d.record == record)
            .map(|d| (d.reason, d.count))
    }
}

/// What [`CaptureStats::stacks`] counts: events whose user stack was walked
/// a given way or ended a given way, kernel stacks cut at the depth limit,
/// and the unwind tables at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StackCount {
    /// Some frame came from an `.eh_frame` table.
    Table,
    /// Frame pointers only (no table covered the code).
    FramePointer,
    /// The kernel's frame-pointer walk: the process had no tables yet.
    KernelWalk,
    /// An off-CPU stack reused from the task's last walk (legacy: captures
    /// of wprof's removed per-task cache still read; nothing counts it now).
    Cached,
    /// Ended at the outermost frame (`_start`, a thread's entry).
    Outermost,
    /// Cut at 127 frames.
    Truncated,
    /// Ended at an unreadable address.
    ReadFailed,
    /// Ended where a frame did not move up the stack.
    NoProgress,
    /// Unwind tables built, and those that did not fit the table memory.
    TablesBuilt,
    TablesDropped,
    /// Peak rows of table memory (8 bytes each) and the code bytes they
    /// covered.
    TableRows,
    TableTextBytes,
    /// Kernel stacks cut at the depth limit (127 frames).
    KernelTruncated,
    /// Under `-S offcpu=DUR`: long blocks in a system call whose user stack
    /// was joined from the call's return, and those whose return never
    /// sent it (the task exited, or the record was lost), kept with their
    /// kernel stack only.
    PendingJoined,
    PendingLost,
    /// Long blocks in an `execve` that replaced the program: the call
    /// returned into the new one, whose stack is not theirs; kept with
    /// their kernel stack only.
    PendingExec,
    /// Long blocks given up before their system call returned: the events
    /// after them filled the recorder's reorder window (its memory is
    /// bounded); kept with their kernel stack only.
    PendingEvicted,
    /// User stacks copied where no table was loaded, walked in user space
    /// once their tables were (counted with the unwinder `Snapshot`), and
    /// those whose tables did not come in time (their process exited
    /// unread, exec'd, or the wait passed its bound), kept as the BPF walk
    /// found them.
    SnapshotUnwound,
    SnapshotGivenUp,
    /// Unwind table builds given up when the capture ended (the end waits
    /// for none; their processes' stacks were walked without them).
    TablesAbandoned,
    /// Kernel stacks at context switches walked by wprof with the kernel's
    /// ORC tables, and those its walk gave up to the kernel's.
    KernelOrc,
    KernelOrcGivenUp,
}

impl StackCount {
    pub const ALL: [StackCount; 22] = [
        StackCount::Table,
        StackCount::FramePointer,
        StackCount::KernelWalk,
        StackCount::Cached,
        StackCount::Outermost,
        StackCount::Truncated,
        StackCount::ReadFailed,
        StackCount::NoProgress,
        StackCount::TablesBuilt,
        StackCount::TablesDropped,
        StackCount::TableRows,
        StackCount::TableTextBytes,
        StackCount::KernelTruncated,
        StackCount::PendingJoined,
        StackCount::PendingLost,
        StackCount::PendingExec,
        StackCount::PendingEvicted,
        StackCount::SnapshotUnwound,
        StackCount::SnapshotGivenUp,
        StackCount::TablesAbandoned,
        StackCount::KernelOrc,
        StackCount::KernelOrcGivenUp,
    ];

    /// Its code in the capture's end chunk, and its label in summaries.
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn label(self) -> &'static str {
        match self {
            StackCount::Table => "unwound with tables",
            StackCount::FramePointer => "frame pointers only",
            StackCount::KernelWalk => "kernel walk (no tables yet)",
            StackCount::Cached => "cached off-CPU stacks",
            StackCount::Outermost => "reached the outermost frame",
            StackCount::Truncated => "truncated at 127 frames",
            StackCount::ReadFailed => "ended at an unreadable address",
            StackCount::NoProgress => "ended without progress",
            StackCount::TablesBuilt => "unwind tables built",
            StackCount::TablesDropped => "unwind tables dropped",
            StackCount::TableRows => "unwind table rows (peak)",
            StackCount::TableTextBytes => "code bytes covered (at the peak)",
            StackCount::KernelTruncated => "kernel stacks truncated at 127 frames",
            StackCount::PendingJoined => "off-CPU user stacks joined at syscall return",
            StackCount::PendingLost => "off-CPU user stacks lost (no syscall return)",
            StackCount::PendingExec => "off-CPU user stacks dropped (exec in the call)",
            StackCount::PendingEvicted => "off-CPU user stacks dropped (reorder window full)",
            StackCount::SnapshotUnwound => "walked from a stack copy",
            StackCount::SnapshotGivenUp => "stack copies given up",
            StackCount::TablesAbandoned => "unwind table builds abandoned",
            StackCount::KernelOrc => "kernel stacks walked with ORC",
            StackCount::KernelOrcGivenUp => "kernel stacks the ORC walk left to the kernel",
        }
    }
}
