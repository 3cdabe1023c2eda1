//! The built-in trackers' records → native Perfetto events:
//!
//! - `switch`: a `compact_sched` switch, the one encoding of the switch's
//!   facts (CPU, the raw `prev_state`, next task and priority; trace
//!   processor derives each thread's states, their CPU, waker and wait from
//!   it with the `compact_sched` wakings). It also ends the on-CPU slice of
//!   the task switched out (annotated only with PMU deltas) and begins one
//!   for `next`, named after its comm, on its thread track (an idle task's
//!   on its CPU's track); preemption starts a flow that ends at the
//!   preempted task's next slice;
//! - `waking`: a `compact_sched` waking, and a flow to the wakee's next
//!   slice. When the wakee is to run on the waker's CPU and the waker's
//!   on-CPU slice is open there (the usual case), the flow leaves that
//!   slice: its END carries it, and nothing else is written (the waking's
//!   time, wakee and target CPU are `compact_sched`'s; should the wakee run
//!   elsewhere before that END, the flow is dropped). Otherwise it leaves
//!   an instant on the waker's track (no annotations, for the same reason);
//! - `wakeup_new`, `fork`: an instant on the current task's track, fields as
//!   annotations, with a flow to the other task's next slice; a
//!   `wakeup_new` is also a `compact_sched` waking;
//! - `hardirq`, `softirq`: slices on the interrupted task's track, so they
//!   nest in its on-CPU slice, with PMU deltas;
//! - `wq`: slices on the worker's `wq` child track (work items may sleep, so
//!   they do not nest in on-CPU slices), named after the work function;
//! - the rest: instants on the current task's track, fields as annotations.
//!
//! Only threads the filter selects get tracks.

use std::cmp::Reverse;

use super::ftrace::{Switch, Waking};
use super::proto;
use super::sched::OnCpu;
use super::tracks::Names;
use super::{Emit, On, RenderError, Renderer};
use crate::capture::model::{Event, RecordSchema, ThreadId};
use crate::render::tracker::{reported_state, softirq_name};
use crate::tracking::records::delta;
use crate::tracking::records::{Field, Kind, TrackerSchema, reading};

/// `next_prio` when a switch lacks it: the default nice 0 priority.
const DEFAULT_PRIO: i64 = 120;

impl Renderer<'_, '_> {
    pub(super) fn tracker_event(
        &mut self,
        event: &Event,
        schema: &RecordSchema,
        t: &TrackerSchema,
    ) -> Result<(), RenderError> {
        match t.kind {
            Kind::Switch => self.switch(event, t),
            Kind::Waking | Kind::WakeupNew | Kind::Fork => self.wake(event, schema, t),
            Kind::HardIrq | Kind::SoftIrq => self.irq(event, schema, t),
            Kind::Wq => self.work(event, schema, t),
            Kind::Free => {
                if let Some(task) = t.other_task(event) {
                    self.sched.forget(self.source.thread(task).tid);
                }
                self.task_instant(event, schema)
            }
            Kind::Task
            | Kind::Exec
            | Kind::Rename
            | Kind::Exit
            | Kind::Timer
            | Kind::PmuSample
            | Kind::OffcpuPending => self.task_instant(event, schema),
        }
    }

    /// The track where task `id` runs on `cpu` (described if new), `None`
    /// when it is not selected.
    fn task_track(&mut self, id: ThreadId, cpu: u32) -> Result<Option<u64>, RenderError> {
        if !self.selected(id) {
            return Ok(None);
        }
        let source = self.source;
        let thread = source.thread(id);
        let track = if thread.tid == 0 {
            self.tracks.idle(cpu)
        } else {
            let names = Names {
                thread: source.string(thread.name),
                process: source.string(thread.process_name),
                record: "",
            };
            self.tracks.thread(id, thread, &names)
        };
        self.write_new_tracks()?;
        Ok(Some(track))
    }

    fn switch(&mut self, event: &Event, t: &TrackerSchema) -> Result<(), RenderError> {
        let source = self.source;
        let Some(next) = t.thread(event, Field::Next) else {
            self.stats.malformed += 1;
            return Ok(());
        };
        let prev_state = t.uint(event, Field::PrevState).unwrap_or(0);
        let preempt = t.uint(event, Field::Preempt) == Some(1);
        let prev_tid = source.thread(event.thread).tid;
        let mut deltas = std::mem::take(&mut self.deltas);
        deltas.clear();
        for field in &t.pmu {
            if let Some(now) = reading(event, field)
                && let Some(d) = self.switch_readings.exchange(event.cpu, field.counter, now)
            {
                deltas.push((field.counter, d));
            }
        }
        if let Some(on) = self.sched.switch_out(event.cpu, &mut self.flows_out) {
            if on.tid == prev_tid {
                let sequence = self.track_sequence(on.track, event.ts_ns)?;
                self.annotate_deltas(&deltas, On::Track(sequence));
            }
            self.end_slice(event.ts_ns, on.track)?;
        }
        self.deltas = deltas;
        self.write_counters(event, &t.pmu, event.ts_ns)?;
        if let Some(track) = self.task_track(next, event.cpu)? {
            let tid = source.thread(next).tid;
            let on = OnCpu { track, tid };
            if let Some(stale) = self.sched.switch_in(event.cpu, on, &mut self.flows_out) {
                self.end_slice(event.ts_ns, stale.track)?;
            }
            if preempt && prev_tid != 0 && self.selected(event.thread) {
                let flow = self.sched.new_flow();
                self.sched.add_flow(prev_tid, flow);
                self.flows_out.push(flow);
            }
            self.begin_on_cpu(event.ts_ns, next, track)?;
        }
        self.compact_switch(event, t, next, reported_state(prev_state, preempt))
    }

    /// The sequence of on-CPU track `track`, started at `ts_ns` if new.
    fn track_sequence(&mut self, track: u64, ts_ns: u64) -> Result<u32, RenderError> {
        let ts_ns = self.start_ns.saturating_add(ts_ns);
        let (id, start) = self.sequences.of(track, ts_ns);
        if let Some(packet) = start {
            self.writer.set_clock(id, ts_ns);
            self.writer.write(&packet)?;
        }
        Ok(id)
    }

    /// Ends the on-CPU slice on `track`.
    fn end_slice(&mut self, ts_ns: u64, track: u64) -> Result<(), RenderError> {
        let sequence = self.track_sequence(track, ts_ns)?;
        self.emit_on(
            On::Track(sequence),
            Emit {
                ts_ns,
                kind: proto::TYPE_SLICE_END,
                track,
                name_iid: None,
                callstack_iid: None,
            },
        )
    }

    /// Begins `next`'s on-CPU slice, ending the flows that wait for it.
    fn begin_on_cpu(&mut self, ts_ns: u64, next: ThreadId, track: u64) -> Result<(), RenderError> {
        let source = self.source;
        let thread = source.thread(next);
        self.sched.take_flows(thread.tid, &mut self.flows_in);
        self.stats.slices += 1;
        let name_iid = self.interner.event_name_of(source, thread.name);
        let sequence = self.track_sequence(track, ts_ns)?;
        (self.sequences).event_name(sequence, name_iid, source.string(thread.name));
        self.emit_on(
            On::Track(sequence),
            Emit {
                ts_ns,
                kind: proto::TYPE_SLICE_BEGIN,
                track,
                name_iid: Some(name_iid),
                callstack_iid: None,
            },
        )
    }

    fn compact_switch(
        &mut self,
        event: &Event,
        t: &TrackerSchema,
        next: ThreadId,
        prev_state: u64,
    ) -> Result<(), RenderError> {
        let thread = self.source.thread(next);
        let switch = Switch {
            ts: self.start_ns.saturating_add(event.ts_ns),
            prev_state,
            next_tid: thread.tid,
            next_prio: t.int(event, Field::NextPrio).unwrap_or(DEFAULT_PRIO) as i32,
            next_comm: thread.name,
        };
        let comm = self.source.string(thread.name);
        match self.compact_sched.switch(event.cpu, &switch, comm) {
            Some(packet) => self.writer.write(&packet),
            None => Ok(()),
        }
    }

    /// `waking`, `wakeup_new` and `fork`: a flow to the other task's next
    /// slice, from an instant on the current task's track; a waking also
    /// goes to `compact_sched`.
    fn wake(
        &mut self,
        event: &Event,
        schema: &RecordSchema,
        t: &TrackerSchema,
    ) -> Result<(), RenderError> {
        let source = self.source;
        let Some(other) = t.other_task(event) else {
            self.stats.malformed += 1;
            return Ok(());
        };
        let wakee = source.thread(other);
        let target_cpu = match t.kind {
            Kind::Fork => event.cpu,
            _ => t.uint(event, Field::TargetCpu).unwrap_or(event.cpu.into()) as u32,
        };
        if let Some(track) = self.task_track(event.thread, event.cpu)? {
            let flow = (wakee.tid != 0 && self.selected(other)).then(|| self.sched.new_flow());
            let waker = source.thread(event.thread).tid;
            let on_waker_slice = t.kind == Kind::Waking
                && target_cpu == event.cpu
                && self
                    .sched
                    .running(event.cpu)
                    .is_some_and(|on| on.tid == waker);
            if on_waker_slice {
                if let Some(flow) = flow {
                    self.sched.add_flow_from(event.cpu, wakee.tid, flow);
                }
            } else {
                if let Some(flow) = flow {
                    self.sched.add_flow(wakee.tid, flow);
                    self.flows_out.push(flow);
                }
                self.stats.instants += 1;
                let name = self.interner.record(source, event.record).name;
                if t.kind == Kind::Waking {
                    self.emit_event(event, (proto::TYPE_INSTANT, track), name)?;
                } else {
                    self.write_event(event, schema, (proto::TYPE_INSTANT, track), name)?;
                }
            }
        }
        if t.kind == Kind::Fork {
            return Ok(());
        }
        let waking = Waking {
            ts: self.start_ns.saturating_add(event.ts_ns),
            tid: wakee.tid,
            target_cpu,
            comm: wakee.name,
        };
        let comm = source.string(wakee.name);
        match self.compact_sched.waking(event.cpu, &waking, comm) {
            Some(packet) => self.writer.write(&packet),
            None => Ok(()),
        }
    }

    /// `hardirq` and `softirq`: a slice on the interrupted task's track.
    fn irq(
        &mut self,
        event: &Event,
        schema: &RecordSchema,
        t: &TrackerSchema,
    ) -> Result<(), RenderError> {
        let Some(track) = self.task_track(event.thread, event.cpu)? else {
            return Ok(());
        };
        let end_ns = event.ts_ns.saturating_add(self.span_duration(event));
        let name = if t.kind == Kind::HardIrq {
            match t.string(event, Field::Action) {
                Some(action) => self.interner.event_name_of(self.source, action),
                None => self.interner.event_name("hardirq"),
            }
        } else {
            let vec = softirq_name(t.uint(event, Field::Vec).unwrap_or(u64::MAX));
            self.interner.event_name(&format!("softirq {vec}"))
        };
        self.field_annotations(event, schema, Some(t));
        let mut deltas = std::mem::take(&mut self.deltas);
        deltas.clear();
        for start in &t.pmu {
            let end = t.pmu_end.iter().find(|end| end.counter == start.counter);
            if let (Some(a), Some(b)) = (reading(event, start), end.and_then(|e| reading(event, e)))
            {
                deltas.push((start.counter, delta(a, b)));
            }
        }
        self.annotate_deltas(&deltas, On::Main);
        self.deltas = deltas;
        self.stats.slices += 1;
        self.emit(Emit {
            ts_ns: event.ts_ns,
            kind: proto::TYPE_SLICE_BEGIN,
            track,
            name_iid: Some(name),
            callstack_iid: None,
        })?;
        self.ends.push(Reverse((end_ns, self.begins, track, None)));
        self.begins += 1;
        self.write_counters(event, &t.pmu, event.ts_ns)?;
        self.write_counters(event, &t.pmu_end, end_ns)
    }

    /// `wq`: a slice named after the work function on the worker's `wq` track.
    fn work(
        &mut self,
        event: &Event,
        schema: &RecordSchema,
        t: &TrackerSchema,
    ) -> Result<(), RenderError> {
        if !self.selected(event.thread) {
            return Ok(());
        }
        let source = self.source;
        let thread = source.thread(event.thread);
        let names = Names {
            thread: source.string(thread.name),
            process: source.string(thread.process_name),
            record: &schema.name,
        };
        let track = self.begin_span(event, thread, &names);
        self.write_new_tracks()?;
        let name = match t.string(event, Field::Func) {
            Some(func) => self.interner.event_name_of(source, func),
            None => self.interner.record(source, event.record).name,
        };
        self.write_event(event, schema, (proto::TYPE_SLICE_BEGIN, track), name)
    }

    /// An instant on the current task's track.
    fn task_instant(&mut self, event: &Event, schema: &RecordSchema) -> Result<(), RenderError> {
        let Some(track) = self.task_track(event.thread, event.cpu)? else {
            return Ok(());
        };
        self.stats.instants += 1;
        let name = self.interner.record(self.source, event.record).name;
        self.write_event(event, schema, (proto::TYPE_INSTANT, track), name)
    }

    /// Ends the slices still open, after everything queued, and writes the
    /// unfinished `compact_sched` batches.
    pub(super) fn finish_sched(&mut self) -> Result<(), RenderError> {
        let last = (self.ends.iter().map(|Reverse(end)| end.0)).fold(self.last_ts_ns, u64::max);
        self.end_slices_until(u64::MAX)?;
        for cpu in self.sched.open_cpus() {
            if let Some(on) = self.sched.switch_out(cpu, &mut self.flows_out) {
                self.end_slice(last, on.track)?;
            }
        }
        for packet in self.compact_sched.finish() {
            self.writer.write(&packet)?;
        }
        Ok(())
    }
}
