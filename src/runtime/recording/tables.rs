//! When the unwind tables of processes load (`docs/unwinding.md`, "When
//! tables load"): a process is added when the capture starts with it named
//! (`-p`, the `-c` command), and whenever a stack says its tables are
//! missing or stale (`NO_PROCESS`: never added, or exec'd since) or that
//! it ran code mapped since its mappings were read (`UNKNOWN_MAPPING`:
//! `dlopen`, JIT). Signals are rate-limited per process; processes that
//! are gone are forgotten every second, freeing tables no one maps.
//!
//! Input: signals from the stacks the recorder decodes. Output: writes to
//! the unwinder's maps through the table manager.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::runtime::bpf::loader::Loaded;
use crate::unwind::manager::{ManagerStats, TableManager};
use crate::unwind::maps::{UnwindLimits, UnwindMaps};
use crate::unwind::sampler::MapStore;

/// A process is read again at most this often.
const READ_INTERVAL: Duration = Duration::from_millis(20);
/// How often processes that are gone are forgotten.
const GC_INTERVAL: Duration = Duration::from_secs(1);

pub(super) struct Tables {
    manager: TableManager,
    maps: UnwindMaps,
    /// Processes to read at the next update.
    wanted: BTreeSet<u32>,
    last_read: HashMap<u32, Instant>,
    last_gc: Instant,
    /// Processes whose mappings could not be read (gone, or not allowed).
    pub(super) failed_reads: u64,
    /// Process reads (first adds and re-reads).
    pub(super) reads: u64,
}

impl Tables {
    pub(super) fn new(maps: UnwindMaps) -> Tables {
        Tables {
            manager: TableManager::new(UnwindLimits::default()),
            maps,
            wanted: BTreeSet::new(),
            last_read: HashMap::new(),
            last_gc: Instant::now(),
            failed_reads: 0,
            reads: 0,
        }
    }

    /// Reads `pid`'s mappings at the next update, unless it was read
    /// moments ago. Kernel threads and the idle task have none.
    pub(super) fn want(&mut self, pid: u32) {
        if pid == 0 {
            return;
        }
        let recent = (self.last_read.get(&pid)).is_some_and(|at| at.elapsed() < READ_INTERVAL);
        if !recent {
            self.wanted.insert(pid);
        }
    }

    /// Reads the wanted processes and forgets those that are gone.
    pub(super) fn update(&mut self, loaded: &Loaded) {
        let mut store = MapStore {
            loaded,
            maps: self.maps,
        };
        // A failed write leaves the process on frame pointers until it is read again.
        let _ = self.manager.place_built(&mut store, false);
        for pid in std::mem::take(&mut self.wanted) {
            self.last_read.insert(pid, Instant::now());
            self.reads += 1;
            if self.manager.add_process(&mut store, pid).is_err() {
                self.failed_reads += 1;
            }
        }
        if self.last_gc.elapsed() >= GC_INTERVAL {
            self.last_gc = Instant::now();
            let gone: Vec<u32> = (self.last_read.keys())
                .copied()
                .filter(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
                .collect();
            for pid in gone {
                self.last_read.remove(&pid);
                // A failed write leaves a stale entry; a new process with
                // this pid has another address space, so it is not used.
                let _ = self.manager.remove_process(&mut store, pid);
            }
        }
    }

    pub(super) fn stats(&self) -> &ManagerStats {
        self.manager.stats()
    }
}
