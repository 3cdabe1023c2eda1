//! Where unwind tables are built: on a worker thread, so that reading a big
//! binary's CFI (rustc's driver: seconds in a debug build) never holds up
//! the recorder, or in place for callers that want the table at once (tests,
//! the sampler). The worker builds the smallest image queued first, at the
//! lowest priority (a busy traced workload wins the CPU), and what is left
//! when the capture ends is abandoned, never waited for. Input: an ELF image
//! (a file mapped into memory, or the vDSO's bytes) and the table's key.
//! Output: [`Built`] tables, collected by the manager.

use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::table::UnwindTable;

/// An ELF image to build a table from.
pub enum Image {
    /// A file mapped read-only (only the pages the CFI is on are read).
    Mapped(memmap2::Mmap),
    Bytes(&'static [u8]),
}

impl Image {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Image::Mapped(map) => map,
            Image::Bytes(bytes) => bytes,
        }
    }
}

/// A finished build.
pub struct Built<K> {
    pub key: K,
    pub table: Result<UnwindTable, String>,
    pub time: Duration,
}

/// Builds tables in place or on a worker thread.
pub enum Builder<K> {
    InPlace(Vec<Built<K>>),
    Worker {
        queue: Arc<Queue<K>>,
        results: Receiver<Built<K>>,
        pending: usize,
    },
}

/// The images waiting for the worker. It takes the smallest first: the
/// C library and ordinary programs are built in milliseconds, while one
/// large binary (rustc's driver, a test binary with debug info) takes
/// seconds, and the processes mapping the small ones should not wait for it.
pub struct Queue<K> {
    state: Mutex<QueueState<K>>,
    ready: Condvar,
}

struct QueueState<K> {
    images: Vec<(K, Image)>,
    /// Set when the builder is dropped: the builds still queued are not done.
    closed: bool,
}

impl<K> Queue<K> {
    fn push(&self, key: K, image: Image) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.images.push((key, image));
        self.ready.notify_one();
    }

    /// The smallest image queued, waiting for one; `None` once closed.
    fn next(&self) -> Option<(K, Image)> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if state.closed {
                return None;
            }
            let smallest = (state.images.iter().enumerate())
                .min_by_key(|(_, (_, image))| image.bytes().len())
                .map(|(index, _)| index);
            if let Some(index) = smallest {
                return Some(state.images.swap_remove(index));
            }
            state = self.ready.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn close(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).closed = true;
        self.ready.notify_all();
    }
}

impl<K: Send + 'static> Builder<K> {
    pub fn in_place() -> Self {
        Builder::InPlace(Vec::new())
    }

    /// A builder thread; without one (the system refused), builds in place.
    pub fn worker() -> Self {
        let (done, results) = channel();
        let queue = Arc::new(Queue {
            state: Mutex::new(QueueState {
                images: Vec::new(),
                closed: false,
            }),
            ready: Condvar::new(),
        });
        let work = Arc::clone(&queue);
        let spawned = std::thread::Builder::new()
            .name("wprof-unwind".into())
            .spawn(move || {
                lower_priority();
                while let Some((key, image)) = work.next() {
                    if done.send(build(key, &image)).is_err() {
                        return;
                    }
                }
            });
        match spawned {
            // Detached: it is never waited for, as a large image takes
            // seconds to finish.
            Ok(_) => Builder::Worker {
                queue,
                results,
                pending: 0,
            },
            Err(_) => Builder::in_place(),
        }
    }

    /// Starts building the table of `image`.
    pub fn start(&mut self, key: K, image: Image) {
        match self {
            Builder::InPlace(done) => done.push(build(key, &image)),
            Builder::Worker { queue, pending, .. } => {
                queue.push(key, image);
                *pending += 1;
            }
        }
    }

    /// Builds finished since the last call, waiting up to `wait` in all
    /// for those still running (`Duration::MAX`: every build started).
    pub fn finished(&mut self, wait: Duration) -> Vec<Built<K>> {
        match self {
            Builder::InPlace(done) => std::mem::take(done),
            Builder::Worker {
                results, pending, ..
            } => {
                let mut done = Vec::new();
                // No deadline (too far to represent): wait for every build.
                let deadline = Instant::now().checked_add(wait);
                while *pending > 0 {
                    let left =
                        deadline.map_or(wait, |d| d.saturating_duration_since(Instant::now()));
                    let next = if left.is_zero() {
                        results.try_recv().ok()
                    } else {
                        results.recv_timeout(left).ok()
                    };
                    let Some(built) = next else { break };
                    *pending -= 1;
                    done.push(built);
                }
                done
            }
        }
    }

    /// Gives up the builds not collected yet (the worker ends after the
    /// build at hand, unwaited); returns how many.
    pub fn abandon(&mut self) -> usize {
        match self {
            Builder::InPlace(done) => std::mem::take(done).len(),
            Builder::Worker { queue, pending, .. } => {
                queue.close();
                std::mem::take(pending)
            }
        }
    }

    /// Builds started and not collected yet.
    pub fn pending(&self) -> usize {
        match self {
            Builder::InPlace(done) => done.len(),
            Builder::Worker { pending, .. } => *pending,
        }
    }
}

impl<K> Drop for Builder<K> {
    fn drop(&mut self) {
        if let Builder::Worker { queue, .. } = self {
            // The worker ends after the build at hand, leaving the queue;
            // it is not waited for (its result has no one to go to).
            queue.close();
        }
    }
}

/// The worker's nice value. At 19 (a 1.5% share against one busy task) its
/// tables did not come within the 1 s stack copies wait for them on a
/// loaded machine (load 14: 207 of 238 stacks left to the kernel's walk in
/// `suite::unwind::snapshots`, against 6 of 239 at 0).
const WORKER_NICE: libc::c_int = 5;

/// Lowers the calling thread's (the worker's) priority: batch scheduling
/// (it does not preempt the task it wakes beside) at [`WORKER_NICE`], so
/// that a traced workload competing for the CPU mostly runs first. Refused
/// changes leave it as it was.
fn lower_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain system calls on the calling thread (0 and its tid),
    // with a valid parameter struct.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_BATCH, &param);
        libc::setpriority(
            libc::PRIO_PROCESS,
            libc::gettid() as libc::id_t,
            WORKER_NICE,
        );
    }
}

fn build<K>(key: K, image: &Image) -> Built<K> {
    let started = Instant::now();
    let table = UnwindTable::build(image.bytes()).map_err(|e| format!("no unwind table: {e}"));
    Built {
        key,
        table,
        time: started.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own_image() -> Image {
        let file = std::fs::File::open("/proc/self/exe").expect("own executable");
        // SAFETY: the test binary is not modified while it runs.
        Image::Mapped(unsafe { memmap2::Mmap::map(&file) }.expect("map"))
    }

    /// The worker builds what it is given; waiting collects every build.
    #[test]
    fn worker_builds_tables() {
        let mut builder = Builder::worker();
        builder.start(1u32, own_image());
        builder.start(2u32, Image::Bytes(b"not an ELF file"));
        assert_eq!(builder.pending(), 2);
        let mut done = builder.finished(Duration::MAX);
        done.sort_by_key(|b| b.key);
        assert_eq!(done.len(), 2);
        assert!(done[0].table.as_ref().is_ok_and(|t| !t.rows.is_empty()));
        assert!(done[1].table.is_err());
        assert_eq!(builder.pending(), 0);
    }

    /// A bounded wait returns as soon as every build is in, not at its end.
    #[test]
    fn bounded_wait_ends_with_the_builds() {
        let mut builder = Builder::worker();
        builder.start(1u32, Image::Bytes(b"not an ELF file"));
        let started = Instant::now();
        let done = builder.finished(Duration::from_secs(30));
        assert_eq!(done.len(), 1);
        assert_eq!(builder.pending(), 0);
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    /// The worker's queue gives the smallest image first, and nothing once
    /// closed.
    #[test]
    fn queue_takes_the_smallest_first() {
        let queue = Queue {
            state: Mutex::new(QueueState {
                images: Vec::new(),
                closed: false,
            }),
            ready: Condvar::new(),
        };
        queue.push("large", Image::Bytes(&[0; 64]));
        queue.push("small", Image::Bytes(&[0; 8]));
        queue.push("medium", Image::Bytes(&[0; 16]));
        let order: Vec<&str> = (0..3)
            .filter_map(|_| queue.next())
            .map(|(k, _)| k)
            .collect();
        assert_eq!(order, ["small", "medium", "large"]);
        queue.push("late", Image::Bytes(&[0; 8]));
        queue.close();
        assert!(queue.next().is_none());
    }

    /// Abandoning gives up every build not collected, at once, whatever
    /// the worker is building; nothing is pending after it.
    #[test]
    fn abandon_gives_up_what_is_pending() {
        let mut builder = Builder::worker();
        builder.start(1u32, own_image());
        builder.start(2u32, own_image());
        let started = Instant::now();
        assert_eq!(builder.abandon(), 2);
        assert!(started.elapsed() < Duration::from_millis(100));
        assert_eq!(builder.pending(), 0);
        assert!(builder.finished(Duration::from_millis(10)).is_empty());
    }

    /// The worker's thread runs batch-scheduled at its nice value.
    #[test]
    fn worker_priority_is_lowest() {
        let (policy, nice) = std::thread::spawn(|| {
            lower_priority();
            // SAFETY: plain system calls on the calling thread.
            unsafe {
                let tid = libc::gettid() as libc::id_t;
                (
                    libc::sched_getscheduler(0),
                    libc::getpriority(libc::PRIO_PROCESS, tid),
                )
            }
        })
        .join()
        .expect("thread");
        assert_eq!((policy, nice), (libc::SCHED_BATCH, WORKER_NICE));
    }

    /// In place, a build is done when it is started.
    #[test]
    fn builds_in_place() {
        let mut builder = Builder::in_place();
        builder.start("own", own_image());
        assert_eq!(builder.pending(), 1);
        let done = builder.finished(Duration::ZERO);
        assert_eq!(done.len(), 1);
        assert!(done[0].table.is_ok());
    }
}
