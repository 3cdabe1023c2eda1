//! Track layout for the Perfetto renderer: process track → thread track →
//! one child track per record schema, described lazily on first use.
//! Kernel threads are grouped under the pseudo-process "kernel threads", and
//! each CPU's idle task (tid 0 everywhere) gets its own track under the
//! pseudo-process "idle". PMU counters get one counter track per CPU.
//!
//! Uuids are small where it matters: the tracks events name (thread, child,
//! idle and counter tracks) get 1, 2, 3, … in first-use order (one or two
//! varint bytes per event instead of nine); process tracks, which no event
//! names, are `PROCESS_UUID | pid` (Linux pids stay below 2^22, far below it).
//!
//! Spans need strictly nested slices per track, because a slice END closes
//! the innermost open slice. A span that would overlap without nesting goes to
//! a sibling "lane" track of the same record (`name #2`, `name #3`, …): the
//! first lane whose open spans all enclose it, or a new lane.

use ahash::{AHashMap as HashMap, AHashSet as HashSet};

use super::proto::{self, CounterDescriptor, ProcessDescriptor, ThreadDescriptor, TrackDescriptor};
use crate::capture::model::{RecordId, Thread, ThreadId};
use crate::render::source::CaptureSource;

const PROCESS_UUID: u64 = 1 << 62;

/// Pids of the pseudo-processes, above Linux's `PID_MAX_LIMIT` (2^22).
pub const IDLE_PID: u32 = (1 << 22) + 1;
pub const KTHREADS_PID: u32 = (1 << 22) + 2;

/// The process a thread's track is grouped under: its own, or "kernel threads".
pub fn group_pid(thread: &Thread) -> u32 {
    if thread.kthread {
        KTHREADS_PID
    } else {
        thread.pid
    }
}

/// A span's track and end, for the slice END queue.
#[derive(Debug)]
struct Lane {
    uuid: u64,
    /// End times of the spans open on this lane, outermost first.
    open_ends: Vec<u64>,
}

impl Lane {
    /// Whether a span `[start, end]` nests in this lane's open spans, after
    /// closing those that ended by `start` (their END is emitted before a
    /// BEGIN at the same time).
    fn fits(&mut self, start: u64, end: u64) -> bool {
        while self.open_ends.last().is_some_and(|&e| e <= start) {
            self.open_ends.pop();
        }
        self.open_ends.last().is_none_or(|&outer| end <= outer)
    }
}

/// One thread's child tracks, by record.
#[derive(Debug, Default)]
struct ThreadTracks {
    uuid: u64,
    records: Vec<Vec<Lane>>,
}

/// What a thread and its process are called, for descriptors.
pub struct Names<'a> {
    pub thread: &'a str,
    pub process: &'a str,
    pub record: &'a str,
}

#[derive(Debug, Default)]
pub struct Tracks {
    /// By `ThreadId`: index into `threads` plus one (0: not seen yet).
    by_thread_id: Vec<u32>,
    /// Thread tracks by (pid, tid): renames of a thread share its tracks.
    by_pid_tid: HashMap<(u32, u32), u32>,
    /// By (pid, tid): the thread's latest names in the capture, which its
    /// track is described with (a command started from a shell is shown by
    /// the name it exec'd into, not as the shell).
    latest: HashMap<(u32, u32), (String, String)>,
    threads: Vec<ThreadTracks>,
    processes: HashSet<u32>,
    /// By CPU: the idle task's track (0: not described yet).
    idle: Vec<u64>,
    /// By CPU, then counter: the counter's track (0: not described yet).
    counters: Vec<Vec<u64>>,
    next_uuid: u64,
    /// Descriptors of tracks created since the last `take_new`.
    new: Vec<TrackDescriptor>,
}

impl Tracks {
    /// Tracks for `source`, whose thread table lists threads in the order
    /// they were first seen; an exec or rename adds an entry after, so the
    /// last entry of a (pid, tid) holds its latest names.
    pub fn new(source: &dyn CaptureSource) -> Self {
        let latest = (source.threads().iter())
            .map(|t| {
                let names = (source.string(t.name), source.string(t.process_name));
                ((t.pid, t.tid), (names.0.to_owned(), names.1.to_owned()))
            })
            .collect();
        Tracks {
            next_uuid: 1,
            latest,
            ..Tracks::default()
        }
    }

    /// Whether tracks were created since the last `take_new`.
    pub fn has_new(&self) -> bool {
        !self.new.is_empty()
    }

    /// Descriptors to write before the event that needed them.
    pub fn take_new(&mut self) -> impl Iterator<Item = TrackDescriptor> + '_ {
        self.new.drain(..)
    }

    /// The track for an instant of `record` on the thread `id`, if it exists
    /// already (the fast path: no names needed).
    pub fn known_instant(&self, id: ThreadId, record: RecordId) -> Option<u64> {
        let index = *self.by_thread_id.get(id.0 as usize)?;
        let thread = self.threads.get((index as usize).checked_sub(1)?)?;
        Some(thread.records.get(record.0 as usize)?.first()?.uuid)
    }

    /// The track for an instant of `record` on `thread`.
    pub fn instant(
        &mut self,
        id: ThreadId,
        thread: &Thread,
        record: RecordId,
        names: &Names,
    ) -> u64 {
        let lanes = self.lanes(id, thread, record, names);
        if let Some(lane) = lanes.first() {
            return lane.uuid;
        }
        self.add_lane(id, record, names).uuid
    }

    /// The track for a span `[start, end]` of `record` on `thread`, which
    /// from now on counts as open there until `end`.
    pub fn span(
        &mut self,
        id: ThreadId,
        thread: &Thread,
        record: RecordId,
        (start, end): (u64, u64),
        names: &Names,
    ) -> u64 {
        let lanes = self.lanes(id, thread, record, names);
        let lane = match lanes.iter_mut().position(|lane| lane.fits(start, end)) {
            Some(i) => i,
            None => {
                self.add_lane(id, record, names);
                self.lanes(id, thread, record, names).len() - 1
            }
        };
        let lane = &mut self.lanes(id, thread, record, names)[lane];
        lane.open_ends.push(end);
        lane.uuid
    }

    fn lanes(
        &mut self,
        id: ThreadId,
        thread: &Thread,
        record: RecordId,
        names: &Names,
    ) -> &mut Vec<Lane> {
        let index = self.thread_index(id, thread, names);
        let records = &mut self.threads[index].records;
        let r = record.0 as usize;
        if records.len() <= r {
            records.resize_with(r + 1, Vec::new);
        }
        &mut records[r]
    }

    fn add_lane(&mut self, id: ThreadId, record: RecordId, names: &Names) -> &mut Lane {
        let index = self.by_thread_id[id.0 as usize] as usize - 1;
        let uuid = self.next_uuid;
        self.next_uuid += 1;
        let thread = &mut self.threads[index];
        let lanes = &mut thread.records[record.0 as usize];
        let name = match lanes.len() {
            0 => names.record.to_owned(),
            n => format!("{} #{}", names.record, n + 1),
        };
        self.new.push(TrackDescriptor {
            uuid: Some(uuid),
            name: Some(name),
            parent_uuid: Some(thread.uuid),
            ..TrackDescriptor::default()
        });
        lanes.push(Lane {
            uuid,
            open_ends: Vec::new(),
        });
        lanes.last_mut().expect("pushed just above")
    }

    /// The track of thread `id` itself (on-CPU slices, instants).
    pub fn thread(&mut self, id: ThreadId, thread: &Thread, names: &Names) -> u64 {
        let index = self.thread_index(id, thread, names);
        self.threads[index].uuid
    }

    /// The track of `cpu`'s idle task.
    pub fn idle(&mut self, cpu: u32) -> u64 {
        let known = *grow(&mut self.idle, cpu as usize);
        if known != 0 {
            return known;
        }
        let uuid = self.next_uuid;
        self.next_uuid += 1;
        self.idle[cpu as usize] = uuid;
        let parent = self.process(IDLE_PID, "idle");
        self.new.push(TrackDescriptor {
            uuid: Some(uuid),
            name: Some(format!("swapper/{cpu}")),
            parent_uuid: Some(parent),
            ..TrackDescriptor::default()
        });
        uuid
    }

    /// The counter track of PMU counter number `counter`, `name`d, on `cpu`.
    pub fn counter(&mut self, cpu: u32, counter: usize, name: &str) -> u64 {
        let per_cpu = grow(&mut self.counters, cpu as usize);
        let slot = grow(per_cpu, counter);
        if *slot == 0 {
            *slot = self.next_uuid;
            self.next_uuid += 1;
            self.new.push(TrackDescriptor {
                uuid: Some(*slot),
                name: Some(format!("CPU {cpu} {name}")),
                counter: Some(CounterDescriptor {
                    unit: Some(proto::UNIT_COUNT),
                }),
                ..TrackDescriptor::default()
            });
        }
        *slot
    }

    /// The process track of `pid`, described on first use.
    fn process(&mut self, pid: u32, name: &str) -> u64 {
        let uuid = PROCESS_UUID | u64::from(pid);
        if self.processes.insert(pid) {
            self.new.push(TrackDescriptor {
                uuid: Some(uuid),
                process: Some(ProcessDescriptor {
                    pid: Some(pid as i32),
                    process_name: Some(name.to_owned()),
                }),
                ..TrackDescriptor::default()
            });
        }
        uuid
    }

    /// The thread track's index, describing it (and its process) on first use.
    fn thread_index(&mut self, id: ThreadId, thread: &Thread, names: &Names) -> usize {
        let i = id.0 as usize;
        if let Some(&index) = self.by_thread_id.get(i).filter(|&&index| index != 0) {
            return index as usize - 1;
        }
        if self.by_thread_id.len() <= i {
            self.by_thread_id.resize(i + 1, 0);
        }
        let index = match self.by_pid_tid.get(&(thread.pid, thread.tid)) {
            Some(&index) => index,
            None => self.add_thread(thread, names),
        };
        self.by_thread_id[i] = index + 1;
        index as usize
    }

    fn add_thread(&mut self, thread: &Thread, names: &Names) -> u32 {
        let pid = group_pid(thread);
        let (thread_name, process_name) = match self.latest.remove(&(thread.pid, thread.tid)) {
            Some(latest) => latest,
            None => (names.thread.to_owned(), names.process.to_owned()),
        };
        let process_name = match thread.kthread {
            true => "kernel threads",
            false => &process_name,
        };
        let process_uuid = self.process(pid, process_name);
        let uuid = self.next_uuid;
        self.next_uuid += 1;
        self.new.push(TrackDescriptor {
            uuid: Some(uuid),
            parent_uuid: Some(process_uuid),
            thread: Some(ThreadDescriptor {
                pid: Some(pid as i32),
                tid: Some(i64::from(thread.tid)),
                thread_name: Some(thread_name),
            }),
            ..TrackDescriptor::default()
        });
        let index = self.threads.len() as u32;
        self.threads.push(ThreadTracks {
            uuid,
            records: Vec::new(),
        });
        self.by_pid_tid.insert((thread.pid, thread.tid), index);
        index
    }

    /// Number of tracks described so far.
    pub fn count(&self) -> usize {
        self.processes.len() + (self.next_uuid - 1) as usize
    }
}

/// `items[index]`, growing `items` with defaults to reach it.
fn grow<T: Default>(items: &mut Vec<T>, index: usize) -> &mut T {
    if items.len() <= index {
        items.resize_with(index + 1, T::default);
    }
    &mut items[index]
}
