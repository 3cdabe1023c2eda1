//! When the unwind tables of processes load (`docs/unwinding.md`, "When
//! tables load"): the tables of the `-c` command's program and of the
//! files it maps as it starts are built before it runs, and its mappings
//! are read as soon as its `exec` has mapped them; a process is added
//! when the capture starts with it named (`-p`), and whenever a stack says its tables are
//! missing or stale (`NO_PROCESS`: never added, or exec'd since) or that
//! it ran code mapped since its mappings were read (`UNKNOWN_MAPPING`:
//! `dlopen`, JIT; `KERNEL_VMA`: walked with its file's table all the same,
//! the area noted for naming its frames). Signals are rate-limited per
//! process; processes that are gone are forgotten every second (tables no
//! one maps then stay placed, idle, until their room is needed).
//!
//! Input: signals from the stacks the recorder decodes. Output: writes to
//! the unwinder's maps through the table manager, and the counts of how
//! stacks were walked for the capture's stats.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::capture::model::StackCount;
use crate::capture::walk::{StackEnding, StackWalk, Unwinder};
use crate::runtime::bpf::loader::Loaded;
use crate::unwind::manager::{ManagerStats, ProcessCode, TableManager};
use crate::unwind::maps::found_vma::{self, FoundVma};
use crate::unwind::maps::{UnwindLimits, UnwindMaps, flags};
use crate::unwind::proc_maps::{AddressSpace, address_space, device_name, read_maps};
use crate::unwind::program_files::startup_files;
use crate::unwind::sampler::MapStore;

/// A process is read again at most this often, after its first
/// [`EARLY_READS`].
const READ_INTERVAL: Duration = Duration::from_millis(20);
/// Reads of a process not held back by [`READ_INTERVAL`]: a new program's
/// mappings change most as it starts (its exec, then the loader mapping
/// its libraries, each read when a stack first runs into them).
const EARLY_READS: u32 = 4;
/// Longest a new program is waited for to be mapped (an `exec` takes well
/// under a millisecond).
const NEW_IMAGE_WAIT: Duration = Duration::from_millis(100);
/// How often processes that are gone are forgotten.
const GC_INTERVAL: Duration = Duration::from_secs(1);

pub(super) struct Tables {
    manager: TableManager,
    maps: UnwindMaps,
    /// The unwinder's notes of memory areas it found through the kernel
    /// (`unwind::maps::found_vma`), once connected to the loaded maps.
    found: Option<MapHandle>,
    /// Processes to read at the next update.
    wanted: BTreeSet<u32>,
    /// Per process, when it was last read and how many times.
    last_read: HashMap<u32, (Instant, u32)>,
    last_gc: Instant,
    /// Processes not to forget while gone: stack copies wait for them.
    held: HashSet<u32>,
    /// Processes whose mappings could not be read (gone, or not allowed).
    pub(super) failed_reads: u64,
    /// Process reads (first adds and re-reads).
    pub(super) reads: u64,
    /// The builds started and the build time when the `-c` command was
    /// released: the table work after it is the work inside its run.
    at_release: Option<(usize, Duration)>,
}

impl Tables {
    pub(super) fn new(maps: UnwindMaps) -> Tables {
        Tables {
            manager: TableManager::new(UnwindLimits::default()),
            maps,
            found: None,
            wanted: BTreeSet::new(),
            last_read: HashMap::new(),
            last_gc: Instant::now(),
            held: HashSet::new(),
            failed_reads: 0,
            reads: 0,
            at_release: None,
        }
    }

    /// Reads `pid`'s mappings at the next update, or once
    /// [`READ_INTERVAL`] has passed since the last read (a library mapped
    /// just after a read is read then, not when a later stack asks again).
    /// Kernel threads and the idle task have none.
    pub(super) fn want(&mut self, pid: u32) {
        if pid != 0 {
            self.wanted.insert(pid);
        }
    }

    /// Reads the unwinder's notes of memory areas from `loaded`'s maps.
    pub(super) fn connect(&mut self, loaded: &Loaded) {
        let map = loaded.map(self.maps.vmas).ok();
        self.found = map.and_then(|map| MapHandle::try_from(map).ok());
    }

    /// The memory areas of code the unwinder found in process `pid`
    /// through the kernel (mapped since its mappings were read), each with
    /// the path of its file.
    pub(super) fn found_code(&self, pid: u32) -> Vec<(FoundVma, &str)> {
        let Some(map) = &self.found else {
            return Vec::new();
        };
        (0..found_vma::SLOTS)
            .filter_map(|slot| {
                let key = found_vma::key(pid, slot);
                let value = map.lookup(&key, MapFlags::ANY);
                let vma = found_vma::decode(&value.ok()??)?;
                let path = self.manager.file_path(&device_name(vma.dev), vma.ino)?;
                Some((vma, path))
            })
            .collect()
    }

    /// Whether `pid` was read less than [`READ_INTERVAL`] ago.
    fn read_recently(&self, pid: u32) -> bool {
        (self.last_read.get(&pid))
            .is_some_and(|&(at, reads)| reads >= EARLY_READS && at.elapsed() < READ_INTERVAL)
    }

    /// Reads the wanted processes and forgets those that are gone; returns
    /// the processes whose mappings were read, with the text read (the
    /// module index takes the same).
    pub(super) fn update(&mut self, loaded: &Loaded) -> Vec<(u32, String)> {
        self.place_built(loaded, Duration::ZERO);
        let mut store = MapStore {
            loaded,
            maps: self.maps,
        };
        let (later, due) = (std::mem::take(&mut self.wanted).into_iter())
            .partition(|&pid| self.read_recently(pid));
        self.wanted = later;
        let mut read = Vec::new();
        for pid in due {
            let reads = self.last_read.get(&pid).map_or(0, |&(_, reads)| reads);
            self.last_read
                .insert(pid, (Instant::now(), reads.saturating_add(1)));
            self.reads += 1;
            let added = read_maps(pid).map(|maps| {
                let added = self.manager.add_process_read(&mut store, pid, &maps);
                (added, maps)
            });
            match added {
                Ok((Ok(_), maps)) => read.push((pid, maps)),
                _ => self.failed_reads += 1,
            }
        }
        if self.last_gc.elapsed() >= GC_INTERVAL {
            self.last_gc = Instant::now();
            let gone: Vec<u32> = (self.last_read.keys())
                .copied()
                .filter(|pid| !self.held.contains(pid))
                .filter(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
                .collect();
            for pid in gone {
                self.last_read.remove(&pid);
                // A failed write leaves a stale entry; a new process with
                // this pid has another address space, so it is not used.
                let _ = self.manager.remove_process(&mut store, pid);
            }
        }
        read
    }

    /// Starts building the tables of `program` and of the files it maps as
    /// it starts (`unwind::program_files`), before it runs.
    pub(super) fn prepare(&mut self, program: &Path) {
        for file in startup_files(program) {
            // A file without a table now gets it when the process maps it.
            let _ = self.manager.prepare_file(&file);
        }
    }

    /// Places the tables built so far, waiting up to `wait` for the rest.
    pub(super) fn place_built(&mut self, loaded: &Loaded, wait: Duration) {
        let mut store = MapStore {
            loaded,
            maps: self.maps,
        };
        // A failed write leaves the process on frame pointers until it is read again.
        let _ = self.manager.place_built(&mut store, wait);
    }

    /// Reads the mappings of `pid` as soon as the program it is `exec`ing
    /// is mapped (its address space is no longer `before`, and the kernel
    /// set its end of code, which it does after mapping the program and its
    /// interpreter), so that its first stacks find their tables: the `-c`
    /// command, just released. Waits at most [`NEW_IMAGE_WAIT`].
    /// Returns the processes whose mappings were read, with their text.
    pub(super) fn add_new_image(
        &mut self,
        loaded: &Loaded,
        pid: u32,
        before: AddressSpace,
    ) -> Vec<(u32, String)> {
        let deadline = Instant::now() + NEW_IMAGE_WAIT;
        loop {
            match address_space(pid) {
                Ok(now) if now != before && now.end_code != 0 => break,
                Err(_) => return Vec::new(),
                Ok(_) if Instant::now() >= deadline => return Vec::new(),
                Ok(_) => std::thread::sleep(Duration::from_micros(50)),
            }
        }
        self.wanted.insert(pid);
        self.update(loaded)
    }

    /// Whether tables are being built or processes wait to be read: the
    /// recorder should update soon, not when events next wake it.
    pub(super) fn busy(&self) -> bool {
        self.building() || !self.wanted.is_empty()
    }

    /// Whether tables are being built.
    pub(super) fn building(&self) -> bool {
        self.manager.building() > 0
    }

    /// The capture stopped: tables built from now on are held for stack
    /// copies only (`TableManager::stop`).
    pub(super) fn stop(&mut self) {
        self.manager.stop();
    }

    /// Gives up the builds left (the capture ends), counted.
    pub(super) fn abandon_builds(&mut self) {
        self.manager.abandon_builds();
    }

    /// Keeps the mappings of `pids` while they are gone (until the next
    /// call): stack copies of theirs wait for tables.
    pub(super) fn hold(&mut self, pids: HashSet<u32>) {
        self.held = pids;
    }

    /// The code of `pid` as last read.
    pub(super) fn code(&self, pid: u32) -> Option<ProcessCode<'_>> {
        self.manager.process_code(pid)
    }

    /// Whether `pid`'s mappings were read after `at`.
    pub(super) fn read_since(&self, pid: u32, at: Instant) -> bool {
        (self.last_read.get(&pid)).is_some_and(|&(read, _)| read > at)
    }

    pub(super) fn stats(&self) -> &ManagerStats {
        self.manager.stats()
    }

    /// The `-c` command runs from now on.
    pub(super) fn command_released(&mut self) {
        let stats = self.manager.stats();
        self.at_release = Some((stats.started, stats.build_time));
    }

    /// Table builds started since the command was released, and the time
    /// spent building since (builds started before and finished after
    /// included); `None` when no command was released.
    pub(super) fn after_release(&self) -> Option<(usize, Duration)> {
        let (started, build_time) = self.at_release?;
        let stats = self.manager.stats();
        Some((
            stats.started.saturating_sub(started),
            stats.build_time.saturating_sub(build_time),
        ))
    }
}

/// How a stack with these `unwind::maps::flags` was walked (`None` when
/// there is nothing to say): with `user` frames, the unwinder (a kernel walk
/// before the walk's own flags) and the ending (a truncated walk
/// before the ways a walk that went on would have ended); a kernel stack cut
/// at the depth limit.
pub(super) fn stack_walk(stack_flags: u32, user: bool) -> Option<StackWalk> {
    let unwinder = user.then(|| user_unwinder(stack_flags));
    let ending = [
        (flags::TRUNCATED, StackEnding::Truncated),
        (flags::NO_PROGRESS, StackEnding::NoProgress),
        (flags::READ_FAILED, StackEnding::ReadFailed),
        (flags::OUTERMOST, StackEnding::Outermost),
    ]
    .into_iter()
    .find_map(|(bit, ending)| (user && stack_flags & bit != 0).then_some(ending));
    let walk = StackWalk {
        unwinder,
        ending,
        kernel_truncated: stack_flags & flags::KERNEL_TRUNCATED != 0,
    };
    walk.is_some().then_some(walk)
}

fn user_unwinder(stack_flags: u32) -> Unwinder {
    if stack_flags & flags::SNAPSHOT != 0 {
        Unwinder::Snapshot
    } else if stack_flags & flags::KERNEL_WALK != 0 {
        Unwinder::KernelWalk
    } else if stack_flags & flags::WALK_CACHED != 0 {
        Unwinder::Cached
    } else if stack_flags & flags::TABLE != 0 {
        Unwinder::Table
    } else {
        Unwinder::FramePointer
    }
}

/// How the user stacks of events were walked and how they ended (their
/// `unwind::maps::flags`), and the kernel stacks cut at the depth limit,
/// for the capture's stats.
#[derive(Debug, Default)]
pub(super) struct StackCounts {
    counts: HashMap<StackCount, u64>,
}

impl StackCounts {
    /// Counts one stack with these flags, with or without `user` frames.
    pub(super) fn count(&mut self, stack_flags: u32, user: bool) {
        for (bit, count) in [
            (flags::KERNEL_TRUNCATED, StackCount::KernelTruncated),
            (flags::KERNEL_ORC, StackCount::KernelOrc),
            (flags::KERNEL_ORC_GIVEN_UP, StackCount::KernelOrcGivenUp),
        ] {
            if stack_flags & bit != 0 {
                *self.counts.entry(count).or_default() += 1;
            }
        }
        if !user {
            return;
        }
        let walk = match user_unwinder(stack_flags) {
            Unwinder::Cached => StackCount::Cached,
            Unwinder::Snapshot => StackCount::SnapshotUnwound,
            Unwinder::KernelWalk => StackCount::KernelWalk,
            Unwinder::Table => StackCount::Table,
            Unwinder::FramePointer => StackCount::FramePointer,
        };
        *self.counts.entry(walk).or_default() += 1;
        for (bit, ending) in [
            (flags::OUTERMOST, StackCount::Outermost),
            (flags::TRUNCATED, StackCount::Truncated),
            (flags::READ_FAILED, StackCount::ReadFailed),
            (flags::NO_PROGRESS, StackCount::NoProgress),
        ] {
            if stack_flags & bit != 0 {
                *self.counts.entry(ending).or_default() += 1;
            }
        }
    }

    /// The counts, with the table manager's when tables were used.
    pub(super) fn finish(&self, tables: Option<&ManagerStats>) -> Vec<(StackCount, u64)> {
        let mut all = self.counts.clone();
        if let Some(tables) = tables {
            all.insert(StackCount::TablesBuilt, tables.built as u64);
            all.insert(StackCount::TablesDropped, tables.dropped_tables as u64);
            all.insert(StackCount::TableRows, u64::from(tables.peak_rows));
            all.insert(StackCount::TableTextBytes, tables.peak_text_bytes);
            all.insert(StackCount::TablesAbandoned, tables.abandoned_builds as u64);
        }
        let mut counts: Vec<_> = all.into_iter().collect();
        counts.sort();
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each stack's walk: the unwinder by the same precedence as the
    /// counts, one ending, truncation first; a cut kernel stack with or
    /// without user frames; nothing to say is none.
    #[test]
    fn walks_of_flags() {
        let user = |f| stack_walk(f, true);
        let of = |unwinder, ending| {
            Some(StackWalk {
                unwinder: Some(unwinder),
                ending,
                kernel_truncated: false,
            })
        };
        assert_eq!(
            user(flags::TABLE | flags::FRAME_POINTER | flags::OUTERMOST),
            of(Unwinder::Table, Some(StackEnding::Outermost))
        );
        assert_eq!(user(flags::FRAME_POINTER), of(Unwinder::FramePointer, None));
        assert_eq!(
            user(flags::TABLE | flags::TRUNCATED | flags::READ_FAILED),
            of(Unwinder::Table, Some(StackEnding::Truncated))
        );
        assert_eq!(
            user(flags::KERNEL_WALK | flags::NO_PROCESS),
            of(Unwinder::KernelWalk, None)
        );
        assert_eq!(
            user(flags::WALK_CACHED | flags::TABLE | flags::OUTERMOST),
            of(Unwinder::Cached, Some(StackEnding::Outermost))
        );
        let cut = stack_walk(flags::KERNEL_TRUNCATED | flags::OUTERMOST, false);
        let kernel_only = StackWalk {
            unwinder: None,
            ending: None,
            kernel_truncated: true,
        };
        assert_eq!(cut, Some(kernel_only));
        let both = user(flags::KERNEL_TRUNCATED | flags::TABLE);
        assert!(both.is_some_and(|w| w.kernel_truncated && w.unwinder == Some(Unwinder::Table)));
        assert_eq!(stack_walk(0, false), None);
    }

    /// A user stack counts once by how it was walked (a kernel walk
    /// before the flags of the walk) and once per way it ended; a cut
    /// kernel stack, and how a kernel stack was walked, count with or
    /// without user frames.
    #[test]
    fn counts_walks_and_endings() {
        let mut counts = StackCounts::default();
        counts.count(flags::TABLE | flags::FRAME_POINTER | flags::OUTERMOST, true);
        counts.count(flags::FRAME_POINTER | flags::TRUNCATED, true);
        counts.count(flags::TABLE | flags::OUTERMOST, true);
        counts.count(
            flags::KERNEL_WALK | flags::NO_PROCESS | flags::KERNEL_TRUNCATED,
            true,
        );
        counts.count(flags::KERNEL_TRUNCATED, false);
        counts.count(flags::KERNEL_ORC, false);
        counts.count(flags::KERNEL_ORC | flags::TABLE | flags::OUTERMOST, true);
        counts.count(flags::KERNEL_ORC_GIVEN_UP, false);
        let stats = ManagerStats {
            built: 3,
            peak_rows: 100,
            ..ManagerStats::default()
        };
        assert_eq!(
            counts.finish(Some(&stats)),
            [
                (StackCount::Table, 3),
                (StackCount::FramePointer, 1),
                (StackCount::KernelWalk, 1),
                (StackCount::Outermost, 3),
                (StackCount::Truncated, 1),
                (StackCount::TablesBuilt, 3),
                (StackCount::TablesDropped, 0),
                (StackCount::TableRows, 100),
                (StackCount::TableTextBytes, 0),
                (StackCount::KernelTruncated, 2),
                (StackCount::TablesAbandoned, 0),
                (StackCount::KernelOrc, 2),
                (StackCount::KernelOrcGivenUp, 1),
            ]
        );
    }
}
