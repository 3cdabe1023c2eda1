//! Command-line settings that shape how scripts compile: which `stack(KIND)`
//! items capture, which counters `pmu` reads, and which tasks `selected()`
//! accepts. Built-in trackers and user scripts see the same options.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::vocab::PerfEvent;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompileOptions {
    /// Stack kinds turned on with `-S` (`timer`, `offcpu`, `waker`, `probe`,
    /// `pmu`): a `stack(KIND)` record item captures only when its kind is here.
    pub stacks: BTreeSet<String>,
    /// Counters the `pmu` record item reads, in `--pmu` order.
    pub pmu: Vec<PmuCounter>,
    /// The tasks `selected(task)` accepts.
    pub filter: TaskFilter,
    /// `-S offcpu=DUR`: `stack(offcpu, NEXT)` keeps the off-CPU stack of a
    /// block only when it lasted at least this long (ns); `None`: every block.
    pub offcpu_min_block_ns: Option<u64>,
    /// With `offcpu_min_block_ns`: take the deferred user stacks at
    /// `sys_exit` even where the kernel has the task-work kfunc
    /// (`WPROF_OFFCPU_SYS_EXIT`, a diagnostic switch).
    pub offcpu_sys_exit: bool,
    /// `-S unwind=fp`: no unwind tables are built, so a user stack without
    /// one is not copied for the recorder to walk (`stack_layout::snapshot`).
    pub frame_pointers_only: bool,
    /// Where the user's script finds `#include`d headers.
    pub includes: Includes,
    /// `BPFTRACE_MAP_KEYS_MAX`: entries a script map holds (`None`: 4096).
    pub map_keys_max: Option<u32>,
    /// `BPFTRACE_PERF_RB_PAGES`: output buffer pages per CPU (`None`: a 1 MiB ring).
    pub output_pages_per_cpu: Option<u32>,
    /// `--unsafe`: allow built-ins that act on the system (`system()`,
    /// `signal()`, `override()`), as bpftrace does.
    pub unsafe_builtins: bool,
    /// `-k`/`-kk`: which failed helper calls programs report.
    pub helper_checks: HelperChecks,
    /// `BPFTRACE_STRLEN`: bytes `str()` reads (`None`: 64).
    pub string_len: Option<u32>,
}

impl CompileOptions {
    /// Bytes `str()`, `buf()` and `path()` hold at most.
    pub fn string_len(&self) -> u32 {
        self.string_len
            .unwrap_or(crate::frontend::types::STRING_LEN)
    }
}

/// bpftrace's `-k` levels: which failing helper calls are reported at run time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum HelperChecks {
    /// None (the default).
    #[default]
    Off,
    /// `-k`: helpers whose failure leaves no trace in the result (map
    /// updates and deletes, `get_stackid`, `get_current_comm`, `send_signal`);
    /// failed reads and lookups already yield zeros the script can test.
    Silent,
    /// `-kk`: every checked helper, reads and map lookups too.
    All,
}

/// `--include-dir DIR` and `--include FILE`, as bpftrace's `-I` and `--include`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Includes {
    /// Searched before the system directories.
    pub dirs: Vec<PathBuf>,
    /// Read before the script, as `#include "FILE"`.
    pub files: Vec<PathBuf>,
}

/// The kinds `-S` and `stack(KIND)` know.
pub const STACK_KINDS: [&str; 5] = ["timer", "offcpu", "waker", "probe", "pmu"];

/// One `--pmu` counter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmuCounter {
    /// The name as given (`sw:page-faults`, `cpu-cycles`, `r003c`): field
    /// names derive from it.
    pub name: String,
    pub event: PerfEvent,
}

/// Task filters; see docs/system-tracking.md for how they combine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskFilter {
    /// `-p` / `-P`: process ids.
    pub pids: Vec<u32>,
    pub no_pids: Vec<u32>,
    /// `--tid` / `--no-tid`: thread ids.
    pub tids: Vec<u32>,
    pub no_tids: Vec<u32>,
    /// `-n` / `-N`: globs (`*`, `?`) matched against the thread name or the
    /// process name.
    pub names: Vec<String>,
    pub no_names: Vec<String>,
    /// `--idle` (Some(true)) / `--no-idle` (Some(false)).
    pub idle: Option<bool>,
    /// `--kthread` / `--no-kthread`.
    pub kthread: Option<bool>,
    /// `--only-command` with a command to run: only the command's process
    /// and its descendants, whose tgids the `command-tree` tracker keeps in
    /// [`COMMAND_TREE_MAP`]; required on top of the other filters.
    pub command: bool,
}

/// The map of the processes of the command wprof runs, keyed by tgid
/// (`probes/command-tree.wp`); wprof puts the command's pid in it before
/// the command starts.
pub const COMMAND_TREE_MAP: &str = "@command_tree";

impl TaskFilter {
    /// Whether no filter is given: every task is selected.
    pub fn is_empty(&self) -> bool {
        *self == TaskFilter::default()
    }
}
