//! Where unwind tables are built: on a worker thread, so that reading a big
//! binary's CFI (rustc's driver: seconds in a debug build) never holds up
//! the recorder, or in place for callers that want the table at once (tests,
//! the sampler). Input: an ELF image (a file mapped into memory, or the
//! vDSO's bytes) and the table's key. Output: [`Built`] tables, collected
//! by the manager.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
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
        requests: Option<Sender<(K, Image)>>,
        results: Receiver<Built<K>>,
        thread: Option<JoinHandle<()>>,
        pending: usize,
        /// Set when the builder is dropped: the builds still queued are not done.
        stop: Arc<AtomicBool>,
    },
}

impl<K: Send + 'static> Builder<K> {
    pub fn in_place() -> Self {
        Builder::InPlace(Vec::new())
    }

    /// A builder thread; without one (the system refused), builds in place.
    pub fn worker() -> Self {
        let (requests, work) = channel::<(K, Image)>();
        let (done, results) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let spawned = std::thread::Builder::new()
            .name("wprof-unwind".into())
            .spawn(move || {
                for (key, image) in work {
                    if stopped.load(Ordering::Relaxed) || done.send(build(key, &image)).is_err() {
                        return;
                    }
                }
            });
        match spawned {
            Ok(thread) => Builder::Worker {
                requests: Some(requests),
                results,
                thread: Some(thread),
                pending: 0,
                stop,
            },
            Err(_) => Builder::in_place(),
        }
    }

    /// Starts building the table of `image`.
    pub fn start(&mut self, key: K, image: Image) {
        match self {
            Builder::InPlace(done) => done.push(build(key, &image)),
            Builder::Worker {
                requests, pending, ..
            } => {
                let sent = requests.as_ref().map(|r| r.send((key, image)));
                if matches!(sent, Some(Ok(()))) {
                    *pending += 1;
                }
            }
        }
    }

    /// Builds finished since the last call; with `wait`, every build started.
    pub fn finished(&mut self, wait: bool) -> Vec<Built<K>> {
        match self {
            Builder::InPlace(done) => std::mem::take(done),
            Builder::Worker {
                results, pending, ..
            } => {
                let mut done = Vec::new();
                while *pending > 0 {
                    let next = if wait {
                        results.recv().ok()
                    } else {
                        results.try_recv().ok()
                    };
                    let Some(built) = next else { break };
                    *pending -= 1;
                    done.push(built);
                }
                done
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
        if let Builder::Worker {
            requests,
            thread,
            stop,
            ..
        } = self
        {
            // The worker ends after the build at hand, leaving the queue.
            stop.store(true, Ordering::Relaxed);
            drop(requests.take());
            if let Some(thread) = thread.take() {
                let _ = thread.join();
            }
        }
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
        let mut done = builder.finished(true);
        done.sort_by_key(|b| b.key);
        assert_eq!(done.len(), 2);
        assert!(done[0].table.as_ref().is_ok_and(|t| !t.rows.is_empty()));
        assert!(done[1].table.is_err());
        assert_eq!(builder.pending(), 0);
    }

    /// In place, a build is done when it is started.
    #[test]
    fn builds_in_place() {
        let mut builder = Builder::in_place();
        builder.start("own", own_image());
        assert_eq!(builder.pending(), 1);
        let done = builder.finished(false);
        assert_eq!(done.len(), 1);
        assert!(done[0].table.is_ok());
    }
}
