//! The native CPU scheduling view: `switch` and `waking` records → one
//! `FtraceEventBundle` with `compact_sched` per CPU and batch, from which
//! Perfetto builds its CPU tracks and thread states. Each CPU buffers at most
//! [`BATCH`] events; a full batch is written at once, the rest at the end.

use ahash::AHashMap as HashMap;

use super::SEQUENCE_ID;
use super::proto::{CompactSched, FtraceEventBundle, TracePacket};
use crate::capture::model::StringId;

/// Events per bundle: large enough that a bundle's comm table pays off,
/// small enough to bound memory per CPU.
pub const BATCH: usize = 1024;

/// `sched_switch` as the compact form holds it.
pub struct Switch {
    /// Absolute trace time.
    pub ts: u64,
    /// In the tracepoint's reported form (see `tracker::reported_state`).
    pub prev_state: u64,
    pub next_tid: u32,
    pub next_prio: i32,
    pub next_comm: StringId,
}

/// `sched_waking` as the compact form holds it.
pub struct Waking {
    pub ts: u64,
    pub tid: u32,
    pub target_cpu: u32,
    pub comm: StringId,
}

/// What `sched_waking` would say of a task's priority: we do not record it.
const DEFAULT_PRIO: i32 = 120;

#[derive(Default)]
struct Batch {
    sched: CompactSched,
    comms: HashMap<StringId, u32>,
    last_switch_ts: u64,
    last_waking_ts: u64,
    events: usize,
}

impl Batch {
    fn comm(&mut self, id: StringId, text: &str) -> u32 {
        let table = &mut self.sched.intern_table;
        *self.comms.entry(id).or_insert_with(|| {
            table.push(text.to_owned());
            table.len() as u32 - 1
        })
    }
}

/// Per-CPU batches of compact scheduling events.
#[derive(Default)]
pub struct CompactSchedWriter {
    cpus: Vec<Batch>,
}

impl CompactSchedWriter {
    /// Adds a switch on `cpu`; returns the bundle to write if the batch is full.
    pub fn switch(&mut self, cpu: u32, s: &Switch, comm: &str) -> Option<TracePacket> {
        let batch = self.batch(cpu);
        let index = batch.comm(s.next_comm, comm);
        let sched = &mut batch.sched;
        sched.switch_timestamp.push(s.ts - batch.last_switch_ts);
        batch.last_switch_ts = s.ts;
        sched.switch_prev_state.push(s.prev_state as i64);
        sched.switch_next_pid.push(s.next_tid as i32);
        sched.switch_next_prio.push(s.next_prio);
        sched.switch_next_comm_index.push(index);
        self.full(cpu)
    }

    /// Adds a waking seen on `cpu`; returns the bundle to write if the batch is full.
    pub fn waking(&mut self, cpu: u32, w: &Waking, comm: &str) -> Option<TracePacket> {
        let batch = self.batch(cpu);
        let index = batch.comm(w.comm, comm);
        let sched = &mut batch.sched;
        sched.waking_timestamp.push(w.ts - batch.last_waking_ts);
        batch.last_waking_ts = w.ts;
        sched.waking_pid.push(w.tid as i32);
        sched.waking_target_cpu.push(w.target_cpu as i32);
        sched.waking_prio.push(DEFAULT_PRIO);
        sched.waking_comm_index.push(index);
        self.full(cpu)
    }

    /// The bundles of every CPU's unfinished batch, by CPU.
    pub fn finish(&mut self) -> Vec<TracePacket> {
        (0..self.cpus.len() as u32)
            .filter_map(|cpu| self.take(cpu))
            .collect()
    }

    fn batch(&mut self, cpu: u32) -> &mut Batch {
        let cpu = cpu as usize;
        if self.cpus.len() <= cpu {
            self.cpus.resize_with(cpu + 1, Batch::default);
        }
        let batch = &mut self.cpus[cpu];
        batch.events += 1;
        batch
    }

    fn full(&mut self, cpu: u32) -> Option<TracePacket> {
        (self.cpus[cpu as usize].events >= BATCH)
            .then(|| self.take(cpu))
            .flatten()
    }

    fn take(&mut self, cpu: u32) -> Option<TracePacket> {
        let batch = std::mem::take(&mut self.cpus[cpu as usize]);
        (batch.events > 0).then(|| TracePacket {
            trusted_packet_sequence_id: Some(SEQUENCE_ID),
            ftrace_events: Some(FtraceEventBundle {
                cpu: Some(cpu),
                compact_sched: Some(batch.sched),
            }),
            ..TracePacket::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Timestamps are deltas within a bundle, comms are interned per bundle,
    /// and a full batch comes out at once.
    #[test]
    fn batches_per_cpu() {
        let mut writer = CompactSchedWriter::default();
        let switch = |ts, comm| Switch {
            ts,
            prev_state: 1,
            next_tid: 7,
            next_prio: 120,
            next_comm: StringId(comm),
        };
        assert!(writer.switch(1, &switch(1000, 0), "a").is_none());
        assert!(writer.switch(1, &switch(1500, 0), "a").is_none());
        let waking = Waking {
            ts: 1200,
            tid: 7,
            target_cpu: 1,
            comm: StringId(1),
        };
        assert!(writer.waking(1, &waking, "b").is_none());
        let packets = writer.finish();
        assert_eq!(packets.len(), 1, "CPU 0 had nothing");
        let bundle = packets[0].ftrace_events.as_ref().expect("bundle");
        let sched = bundle.compact_sched.as_ref().expect("compact");
        assert_eq!(bundle.cpu, Some(1));
        assert_eq!(sched.switch_timestamp, [1000, 500]);
        assert_eq!(sched.switch_next_comm_index, [0, 0]);
        assert_eq!(sched.waking_comm_index, [1]);
        assert_eq!(sched.intern_table, ["a", "b"]);
        for i in 0..BATCH as u64 - 1 {
            assert!(writer.switch(0, &switch(i, 0), "a").is_none());
        }
        let full = writer.switch(0, &switch(BATCH as u64, 0), "a");
        assert!(full.is_some());
        assert!(writer.finish().is_empty());
    }
}
