//! Runtime stage, reading side: delivers ring buffer messages and reads,
//! clears, zeroes and writes the maps of a [`Loaded`] program set. Input: map
//! ids from `Compiled`; output: raw bytes, decoded later by the caller
//! through the message and map layouts.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use libbpf_rs::{MapCore, MapFlags, MapHandle, RingBuffer, RingBufferBuilder};

use super::loader::Loaded;
use crate::sys;
use crate::vocab::{GLOBAL_SLOTS, GlobalSlot, MapId, ProbeState};

/// Why a map or the ring buffer could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    /// The id is not in `Compiled::maps`.
    #[error("map #{map} does not exist")]
    NoSuchMap {
        /// The `MapId` value.
        map: u32,
    },
    /// `Compiled::ringbuf` was `None`.
    #[error("the program set has no ring buffer")]
    NoRingBuffer,
    /// The globals map is too small for the slot.
    #[error("the program set has no globals map")]
    NoGlobals,
    /// A map syscall failed.
    #[error("{op} on map `{name}` failed: {reason}")]
    Access {
        /// Kernel name of the map.
        name: String,
        /// What was attempted.
        op: &'static str,
        /// errno text.
        reason: String,
    },
}

fn access<'m>(map: &'m MapHandle, op: &'static str) -> impl Fn(libbpf_rs::Error) -> MapError + 'm {
    move |e| MapError::Access {
        name: map.name().to_string_lossy().into_owned(),
        op,
        reason: format!("{e:#}"),
    }
}

/// Records taken from the kernel ring but not yet given to the caller
/// (the callback asked to stop before them), and the buffers of records
/// already given, reused for the next ones: an allocation per record cost
/// the recorder as much as decoding it.
#[derive(Default)]
struct Staged {
    records: VecDeque<Vec<u8>>,
    spare: Vec<Vec<u8>>,
}

impl Staged {
    /// Keeps `record`'s buffer for reuse unless it is large (a stack) or
    /// enough are kept: at most [`BATCH`] × [`SPARE_BYTES`].
    fn recycle(&mut self, record: Vec<u8>) {
        if record.capacity() <= SPARE_BYTES && self.spare.len() < BATCH {
            self.spare.push(record);
        }
    }
}

/// Largest record buffer kept for reuse.
const SPARE_BYTES: usize = 512;

type Pending = Rc<RefCell<Staged>>;

/// Most records copied out of the ring per step: bounds the staging memory
/// and how long a stop request can wait.
const BATCH: usize = 1024;
/// Records one poll delivers at most before returning to its caller, who
/// then orders and writes them: this bounds the recorder's pending events
/// (64 Ki of them made its memory follow the event rate).
const MAX_DRAIN: usize = 8 * 1024;

/// The ring buffer reader. libbpf calls back with records still in the ring;
/// they are copied out so the caller's callback can be any `FnMut` and can
/// stop at any record without losing the rest.
pub(super) struct Ring {
    rb: RingBuffer<'static>,
    pending: Pending,
}

impl Ring {
    pub(super) fn new(map: &MapHandle) -> Result<Self, MapError> {
        let pending: Pending = Rc::default();
        let sink = Rc::clone(&pending);
        let mut builder = RingBufferBuilder::new();
        builder
            .add(map, move |data: &[u8]| {
                let mut staged = sink.borrow_mut();
                let mut record = staged.spare.pop().unwrap_or_default();
                record.clear();
                record.extend_from_slice(data);
                staged.records.push_back(record);
                0
            })
            .map_err(access(map, "ring buffer setup"))?;
        let rb = builder.build().map_err(access(map, "ring buffer setup"))?;
        Ok(Ring { rb, pending })
    }

    /// Gives pending records to `callback`, then takes batches from the
    /// kernel until it is empty or the callback stops.
    /// Returns whether the callback broke, and how many records it saw.
    fn drain(
        &mut self,
        callback: &mut dyn FnMut(&[u8]) -> ControlFlow<()>,
    ) -> Result<(ControlFlow<()>, usize), MapError> {
        let mut delivered = 0;
        loop {
            loop {
                let Some(record) = self.pending.borrow_mut().records.pop_front() else {
                    break;
                };
                delivered += 1;
                let flow = callback(&record);
                self.pending.borrow_mut().recycle(record);
                if flow.is_break() {
                    return Ok((ControlFlow::Break(()), delivered));
                }
            }
            let n = self.rb.consume_raw_n(BATCH);
            if n < 0 {
                return Err(MapError::Access {
                    name: "ring buffer".into(),
                    op: "consume",
                    reason: std::io::Error::from_raw_os_error(-n).to_string(),
                });
            }
            // Bounded, so a flood of events cannot keep the caller from
            // checking its deadline and stop conditions.
            if n == 0 || delivered >= MAX_DRAIN {
                return Ok((ControlFlow::Continue(()), delivered));
            }
        }
    }

    /// The epoll fd that is readable when the ring has data.
    fn wait_fd(&self) -> RawFd {
        self.rb.epoll_fd()
    }
}

/// Makes [`Loaded::poll`] return `Break` promptly, from any thread.
#[derive(Clone, Debug)]
pub struct Stopper(Arc<OwnedFd>);

impl Stopper {
    pub(super) fn new() -> std::io::Result<Self> {
        Ok(Stopper(Arc::new(sys::eventfd()?)))
    }

    /// Asks the poller to stop; idempotent.
    pub fn stop(&self) {
        // A failed write leaves the poller running until its timeout, the
        // same as not calling stop at all: nothing better to do with it.
        let _ = sys::eventfd_signal(self.0.as_fd());
    }

    /// Whether `stop` was called.
    pub fn is_stopped(&self) -> bool {
        sys::eventfd_is_set(self.0.as_fd()).unwrap_or(false)
    }
}

impl Loaded {
    /// Gives waiting messages to `callback`, or waits up to `timeout` for
    /// some when there are none.
    /// Returns `Break` when the callback breaks or the [`Stopper`] fired;
    /// records after a `Break` are kept for the next call.
    pub fn poll(
        &mut self,
        timeout: Duration,
        mut callback: impl FnMut(&[u8]) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, MapError> {
        let (ring, stopper) = self.ring_mut();
        let ring = ring.ok_or(MapError::NoRingBuffer)?;
        // Records already there: deliver them and return without waiting.
        let (flow, delivered) = ring.drain(&mut callback)?;
        if flow.is_break() || delivered > 0 {
            return Ok(flow);
        }
        let ready = sys::poll_readable(&[ring.wait_fd(), stopper.0.as_raw_fd()], Some(timeout))
            .map_err(|e| MapError::Access {
                name: "ring buffer".into(),
                op: "poll",
                reason: e.to_string(),
            })?;
        if ready[1] {
            return Ok(ControlFlow::Break(()));
        }
        Ok(ring.drain(&mut callback)?.0)
    }

    /// Gives every record still in the ring buffer to `callback` without
    /// waiting (after detaching, before printing the final maps).
    pub fn consume(
        &mut self,
        mut callback: impl FnMut(&[u8]) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, MapError> {
        let (ring, _) = self.ring_mut();
        let ring = ring.ok_or(MapError::NoRingBuffer)?;
        // `drain` stops after a bounded batch; keep going until the ring is empty.
        loop {
            match ring.drain(&mut callback)? {
                (ControlFlow::Break(()), _) => return Ok(ControlFlow::Break(())),
                (ControlFlow::Continue(()), 0) => return Ok(ControlFlow::Continue(())),
                (ControlFlow::Continue(()), _) => {}
            }
        }
    }

    /// Every entry of `map`: the key and one value per possible CPU for
    /// per-CPU maps, else a single value. Unordered.
    #[allow(clippy::type_complexity)]
    pub fn map_entries(&self, map: MapId) -> Result<Vec<(Vec<u8>, Vec<Vec<u8>>)>, MapError> {
        let handle = self.map(map)?;
        let percpu = handle.map_type().is_percpu();
        let mut entries = Vec::new();
        for key in handle.keys() {
            let values = if percpu {
                handle.lookup_percpu(&key, MapFlags::ANY)
            } else {
                handle
                    .lookup(&key, MapFlags::ANY)
                    .map(|v| v.map(|v| vec![v]))
            }
            .map_err(access(handle, "lookup"))?;
            // A key deleted by a probe between listing and lookup is skipped.
            if let Some(values) = values {
                entries.push((key, values));
            }
        }
        Ok(entries)
    }

    /// Deletes every entry (`clear(@m)`); arrays cannot lose entries and are
    /// zeroed instead.
    pub fn clear(&self, map: MapId) -> Result<(), MapError> {
        let handle = self.map(map)?;
        if !handle.map_type().is_hash_map() {
            return self.zero(map);
        }
        let keys: Vec<Vec<u8>> = handle.keys().collect();
        for key in keys {
            match handle.delete(&key) {
                Ok(()) => {}
                Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => {}
                Err(e) => return Err(access(handle, "delete")(e)),
            }
        }
        Ok(())
    }

    /// Sets every value to zero, keeping the keys (`zero(@m)`).
    pub fn zero(&self, map: MapId) -> Result<(), MapError> {
        let handle = self.map(map)?;
        let size = handle.value_size() as usize;
        let keys: Vec<Vec<u8>> = handle.keys().collect();
        if handle.map_type().is_percpu() {
            let ncpu = libbpf_rs::num_possible_cpus().map_err(access(handle, "zero"))?;
            let zeros = vec![vec![0u8; size]; ncpu];
            for key in keys {
                handle
                    .update_percpu(&key, &zeros, MapFlags::EXIST)
                    .or_else(ignore_not_found)
                    .map_err(access(handle, "zero"))?;
            }
        } else {
            let zeros = vec![0u8; size];
            for key in keys {
                handle
                    .update(&key, &zeros, MapFlags::EXIST)
                    .or_else(ignore_not_found)
                    .map_err(access(handle, "zero"))?;
            }
        }
        Ok(())
    }

    /// Writes one entry (one value for all CPUs of a per-CPU map).
    pub fn update(&self, map: MapId, key: &[u8], value: &[u8]) -> Result<(), MapError> {
        let handle = self.map(map)?;
        if handle.map_type().is_percpu() {
            let ncpu = libbpf_rs::num_possible_cpus().map_err(access(handle, "update"))?;
            handle.update_percpu(key, &vec![value.to_vec(); ncpu], MapFlags::ANY)
        } else {
            handle.update(key, value, MapFlags::ANY)
        }
        .map_err(access(handle, "update"))
    }

    /// Sets one slot of the globals map (`globals` is the map id from
    /// `Compiled::globals`).
    pub fn set_global(&self, globals: MapId, slot: GlobalSlot, value: u64) -> Result<(), MapError> {
        let handle = self.map(globals)?;
        let key = 0u32.to_ne_bytes();
        let mut current = handle
            .lookup(&key, MapFlags::ANY)
            .map_err(access(handle, "lookup"))?
            .unwrap_or_else(|| vec![0; GLOBAL_SLOTS as usize * 8]);
        let at = slot as usize * 8;
        let Some(cell) = current.get_mut(at..at + 8) else {
            return Err(MapError::NoGlobals);
        };
        cell.copy_from_slice(&value.to_ne_bytes());
        handle
            .update(&key, &current, MapFlags::ANY)
            .map_err(access(handle, "update"))
    }

    /// Sets [`GlobalSlot::State`]: probes other than BEGIN/END run only
    /// while it is [`ProbeState::Active`].
    pub fn set_state(&self, globals: MapId, state: ProbeState) -> Result<(), MapError> {
        self.set_global(globals, GlobalSlot::State, state as u64)
    }
}

fn ignore_not_found(e: libbpf_rs::Error) -> Result<(), libbpf_rs::Error> {
    if e.kind() == libbpf_rs::ErrorKind::NotFound {
        Ok(())
    } else {
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::bpf::loader::{AttachOptions, load};
    use crate::runtime::bpf::test_support::*;
    use crate::vocab::{AttachPoint, MapKind};
    use std::time::Instant;

    const RING: MapId = MapId(0);
    const COUNTS: MapId = MapId(1);

    /// A BEGIN program that sends `value` once per run.
    fn sender(value: i32) -> Loaded {
        let mut asm = Assembler::new();
        asm.set_r6(value).send_r6(RING).ret0();
        let prog = asm.program("send", "BEGIN", AttachPoint::Begin);
        load(&with_ring(vec![], vec![prog])).expect("load")
    }

    /// Records after a Break stay queued and `consume` delivers them.
    #[test]
    fn break_keeps_remaining_records() {
        let mut loaded = sender(7);
        for _ in 0..3 {
            loaded.run_once(0).expect("run");
        }
        let mut first = 0;
        let flow = loaded
            .poll(Duration::from_millis(100), |_| {
                first += 1;
                ControlFlow::Break(())
            })
            .expect("poll");
        assert_eq!((flow, first), (ControlFlow::Break(()), 1));
        let mut rest = Vec::new();
        let _ = loaded
            .consume(|r| {
                rest.push(r.to_vec());
                ControlFlow::Continue(())
            })
            .expect("consume");
        assert_eq!(rest, vec![7u64.to_ne_bytes().to_vec(); 2]);
    }

    /// A Stopper fired from another thread ends a long poll within milliseconds.
    #[test]
    fn stopper_interrupts_poll() {
        let mut loaded = sender(1);
        let stopper = loaded.stopper();
        let t = Instant::now();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            stopper.stop();
        });
        let flow = loaded
            .poll(Duration::from_secs(10), |_| ControlFlow::Continue(()))
            .expect("poll");
        let waited = t.elapsed();
        thread.join().expect("stopper thread");
        assert_eq!(flow, ControlFlow::Break(()));
        assert!(loaded.stopper().is_stopped());
        assert!(waited < Duration::from_millis(500), "waited {waited:?}");
    }

    /// A record sent while poll waits wakes it at once, not at the timeout.
    #[test]
    fn record_wakes_poll() {
        let mut loaded = sender(3);
        loaded.run_once(0).expect("run");
        let t = Instant::now();
        let mut got = 0;
        let _ = loaded
            .poll(Duration::from_secs(5), |_| {
                got += 1;
                ControlFlow::Continue(())
            })
            .expect("poll");
        assert_eq!(got, 1);
        assert!(t.elapsed() < Duration::from_millis(100));
    }

    /// A record produced while poll waits wakes it promptly (the `exit()` path).
    #[test]
    fn record_during_wait_wakes_poll() {
        use std::sync::mpsc;
        let (tid_tx, tid_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let (when_tx, when_rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            tid_tx.send(tid()).expect("send tid");
            go_rx.recv().expect("go");
            std::thread::sleep(Duration::from_millis(50));
            when_tx.send(Instant::now()).expect("send time");
            let _ = std::os::unix::process::parent_id();
        });
        let mut asm = Assembler::new();
        asm.only_thread(tid_rx.recv().expect("tid"), |body| {
            body.send_r6(RING);
        })
        .ret0();
        let attach = AttachPoint::Tracepoint {
            category: "syscalls".into(),
            name: "sys_enter_getppid".into(),
        };
        let prog = asm.program("tp", "tracepoint:syscalls:sys_enter_getppid", attach);
        let mut loaded = load(&with_ring(vec![], vec![prog])).expect("load");
        loaded.attach_all(Default::default()).expect("attach");
        go_tx.send(()).expect("go");
        let flow = loaded
            .poll(Duration::from_secs(5), |_| ControlFlow::Break(()))
            .expect("poll");
        let woke = Instant::now();
        thread.join().expect("thread");
        let latency = woke - when_rx.recv().expect("time");
        println!("ring wake-up latency {latency:?}");
        assert_eq!(flow, ControlFlow::Break(()));
        assert!(latency < Duration::from_millis(20), "latency {latency:?}");
    }

    /// Hash maps can be written, listed, zeroed and cleared from user space.
    #[test]
    fn hash_update_list_zero_clear() {
        let maps = vec![
            map("h", MapKind::Hash, 8, 8, 16),
            map("pch", MapKind::PerCpuHash, 8, 8, 16),
        ];
        let prog = empty_program("b", "BEGIN", AttachPoint::Begin);
        let loaded = load(&with_ring(maps, vec![prog])).expect("load");
        let (h, pch) = (MapId(1), MapId(2));
        for k in 1u64..=2 {
            loaded
                .update(h, &k.to_ne_bytes(), &(k * 10).to_ne_bytes())
                .expect("update");
            loaded
                .update(pch, &k.to_ne_bytes(), &k.to_ne_bytes())
                .expect("update");
        }
        let entries = loaded.map_entries(h).expect("entries");
        assert_eq!((entries.len(), sum_u64(&entries)), (2, 30));
        let ncpu = libbpf_rs::num_possible_cpus().expect("cpus") as u64;
        let entries = loaded.map_entries(pch).expect("entries");
        assert_eq!(sum_u64(&entries), 3 * ncpu);
        loaded.zero(pch).expect("zero");
        let entries = loaded.map_entries(pch).expect("entries");
        assert_eq!((entries.len(), sum_u64(&entries)), (2, 0));
        loaded.clear(h).expect("clear");
        assert!(loaded.map_entries(h).expect("entries").is_empty());
    }

    /// Globals slots are written in place.
    #[test]
    fn globals_are_written_in_place() {
        let maps = vec![map("globals", MapKind::Array, 4, 16, 1)];
        let prog = empty_program("b", "BEGIN", AttachPoint::Begin);
        let loaded = load(&with_ring(maps, vec![prog])).expect("load");
        let globals = MapId(1);
        loaded
            .set_global(globals, GlobalSlot::ChildPid, 99)
            .expect("set");
        loaded
            .set_global(globals, GlobalSlot::StartNs, 5)
            .expect("set");
        let entries = loaded.map_entries(globals).expect("entries");
        let value = &entries[0].1[0];
        assert_eq!(value[..8], 5u64.to_ne_bytes());
        assert_eq!(value[8..], 99u64.to_ne_bytes());
    }

    /// A per-CPU array counter bumped by a tracepoint sums to the call count.
    #[test]
    fn percpu_counter_sums() {
        let mut asm = Assembler::new();
        asm.only_thread(tid(), |body| {
            body.count(COUNTS);
        })
        .ret0();
        let prog = asm.program(
            "cnt",
            "tracepoint:syscalls:sys_enter_getppid",
            AttachPoint::Tracepoint {
                category: "syscalls".into(),
                name: "sys_enter_getppid".into(),
            },
        );
        let counts = map("counts", MapKind::PerCpuArray, 4, 8, 1);
        let mut loaded = load(&with_ring(vec![counts], vec![prog])).expect("load");
        loaded.attach_all(AttachOptions::default()).expect("attach");
        for _ in 0..5 {
            let _ = std::os::unix::process::parent_id();
        }
        let entries = loaded.map_entries(COUNTS).expect("entries");
        assert_eq!(entries.len(), 1);
        assert_eq!(
            entries[0].1.len(),
            libbpf_rs::num_possible_cpus().expect("cpus")
        );
        assert_eq!(sum_u64(&entries), 5);
    }
}
