//! Scheduling state for on-CPU slices: what runs on each CPU (its slice's
//! track), and for each task that is not running yet the flows that end at
//! its next slice. Memory is per CPU and per live task.
//!
//! A flow starts either on a packet already written (an instant, a BEGIN)
//! or at the END of the slice open on a CPU (a waking: the END carries it);
//! the latter is written only if that END comes before the wakee's next
//! BEGIN, else the flow is dropped unwritten. Flow ids are reused once the
//! flow they named has ended (trace processor then forgets the id), so they
//! stay small varints.

use ahash::AHashMap as HashMap;

/// Flows waiting for a task's next slice beyond this many are dropped,
/// oldest first (a task woken again and again without running).
const MAX_PENDING_FLOWS: usize = 4;

/// The slice open on a CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnCpu {
    pub track: u64,
    pub tid: u32,
}

/// A flow waiting for its end: its id, and the CPU whose slice END is to
/// start it (`None`: its start is written already).
#[derive(Clone, Copy, Debug)]
struct Pending {
    id: u64,
    from_cpu: Option<u32>,
}

#[derive(Debug, Default)]
struct Task {
    flows: Vec<Pending>,
    /// The CPU whose slice is this task's, if one is open.
    on_cpu: Option<u32>,
}

#[derive(Debug, Default)]
pub struct Sched {
    cpus: Vec<Option<OnCpu>>,
    /// By CPU: the flows starting at the END of its open slice.
    flows_at_end: Vec<Vec<u64>>,
    /// By tid; the idle tasks (tid 0) are not tracked.
    tasks: HashMap<u32, Task>,
    next_flow: u64,
    /// Ids of flows that ended, or were never written: free for new flows.
    free_flows: Vec<u64>,
}

impl Sched {
    /// A flow id no open flow has.
    pub fn new_flow(&mut self) -> u64 {
        self.free_flows.pop().unwrap_or_else(|| {
            self.next_flow += 1;
            self.next_flow
        })
    }

    /// What runs on `cpu`.
    pub fn running(&self, cpu: u32) -> Option<OnCpu> {
        self.cpus.get(cpu as usize).copied().flatten()
    }

    /// Ends what runs on `cpu`, returning its slice; the flows starting at
    /// its END are appended to `flows_out`.
    pub fn switch_out(&mut self, cpu: u32, flows_out: &mut Vec<u64>) -> Option<OnCpu> {
        let on = self.cpus.get_mut(cpu as usize)?.take()?;
        if let Some(task) = self.tasks.get_mut(&on.tid) {
            task.on_cpu = None;
        }
        if let Some(flows) = self.flows_at_end.get_mut(cpu as usize) {
            flows_out.append(flows);
        }
        Some(on)
    }

    /// Starts `on` on `cpu`. Returns the task's slice still open on another
    /// CPU (its switch-out was lost), which the caller ends now with the
    /// flows appended to `flows_out`.
    pub fn switch_in(&mut self, cpu: u32, on: OnCpu, flows_out: &mut Vec<u64>) -> Option<OnCpu> {
        let index = cpu as usize;
        if self.cpus.len() <= index {
            self.cpus.resize(index + 1, None);
        }
        self.cpus[index] = Some(on);
        if on.tid == 0 {
            return None;
        }
        let task = self.tasks.entry(on.tid).or_default();
        match task.on_cpu.replace(cpu) {
            Some(other) if other != cpu => {
                if let Some(flows) = self.flows_at_end.get_mut(other as usize) {
                    flows_out.append(flows);
                }
                self.cpus[other as usize].take()
            }
            _ => None,
        }
    }

    /// The CPUs with a slice open.
    pub fn open_cpus(&self) -> Vec<u32> {
        (self.cpus.iter().enumerate())
            .filter(|(_, on)| on.is_some())
            .map(|(cpu, _)| cpu as u32)
            .collect()
    }

    /// Adds a flow, already started, that ends at `tid`'s next slice.
    pub fn add_flow(&mut self, tid: u32, flow: u64) {
        self.add_pending(
            tid,
            Pending {
                id: flow,
                from_cpu: None,
            },
        );
    }

    /// Adds a flow that starts at the END of the slice open on `cpu` and
    /// ends at `tid`'s next slice.
    pub fn add_flow_from(&mut self, cpu: u32, tid: u32, flow: u64) {
        let index = cpu as usize;
        if self.flows_at_end.len() <= index {
            self.flows_at_end.resize_with(index + 1, Vec::new);
        }
        self.flows_at_end[index].push(flow);
        self.add_pending(
            tid,
            Pending {
                id: flow,
                from_cpu: Some(cpu),
            },
        );
    }

    fn add_pending(&mut self, tid: u32, flow: Pending) {
        let flows = &mut self.tasks.entry(tid).or_default().flows;
        let dropped = (flows.len() == MAX_PENDING_FLOWS).then(|| flows.remove(0));
        flows.push(flow);
        if let Some(dropped) = dropped {
            // A started flow that never ends keeps its id in trace
            // processor: only an unwritten one is reused.
            self.unwrite(dropped);
        }
    }

    /// Takes `flow` back from its CPU's END if it is not written yet,
    /// freeing its id; whether it was unwritten.
    fn unwrite(&mut self, flow: Pending) -> bool {
        let Some(cpu) = flow.from_cpu else {
            return false;
        };
        let flows = &mut self.flows_at_end[cpu as usize];
        let Some(i) = flows.iter().position(|&id| id == flow.id) else {
            return false;
        };
        flows.swap_remove(i);
        self.free_flows.push(flow.id);
        true
    }

    /// Moves the flows ending at the slice `tid` starts now into `flows`:
    /// those started already (a flow whose start is still to come, its
    /// waker's slice still open, is dropped).
    pub fn take_flows(&mut self, tid: u32, flows: &mut Vec<u64>) {
        let Some(task) = self.tasks.get_mut(&tid).filter(|t| !t.flows.is_empty()) else {
            return;
        };
        let mut pending = std::mem::take(&mut task.flows);
        for flow in pending.drain(..) {
            if !self.unwrite(flow) {
                flows.push(flow.id);
            }
        }
        if let Some(task) = self.tasks.get_mut(&tid) {
            task.flows = pending;
        }
    }

    /// Frees the ids of flows that have ended (written as terminating).
    pub fn ended(&mut self, flows: &[u64]) {
        self.free_flows.extend_from_slice(flows);
    }

    /// Forgets a freed task.
    pub fn forget(&mut self, tid: u32) {
        if self.tasks.get(&tid).is_some_and(|t| t.on_cpu.is_none())
            && let Some(task) = self.tasks.remove(&tid)
        {
            for flow in task.flows {
                self.unwrite(flow);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task seen on a second CPU ends its slice on the first; pending
    /// flows are handed to the next slice once, the newest four kept.
    #[test]
    fn tracks_cpus_and_wakings() {
        let mut sched = Sched::default();
        let mut out = Vec::new();
        let a = OnCpu { track: 1, tid: 7 };
        assert_eq!(sched.switch_in(0, a, &mut out), None);
        assert_eq!(
            sched.switch_in(1, OnCpu { track: 1, tid: 7 }, &mut out),
            Some(a)
        );
        assert_eq!(sched.switch_out(0, &mut out), None);
        assert_eq!(sched.switch_out(1, &mut out), Some(a));
        for _ in 0..6 {
            let flow = sched.new_flow();
            sched.add_flow(7, flow);
        }
        let mut flows = Vec::new();
        sched.take_flows(7, &mut flows);
        assert_eq!(flows, [3, 4, 5, 6]);
        sched.take_flows(7, &mut flows);
        assert_eq!(flows, [3, 4, 5, 6]);
        assert!(out.is_empty());
        sched.forget(7);
        assert!(sched.tasks.is_empty());
    }

    /// A flow from a CPU's slice is written at that slice's END when the
    /// END comes first, dropped when the wakee runs first; ended and
    /// dropped ids are reused, dropped started ones are not.
    #[test]
    fn flows_from_slice_ends() {
        let mut sched = Sched::default();
        let (mut out, mut ends) = (Vec::new(), Vec::new());
        sched.switch_in(0, OnCpu { track: 1, tid: 7 }, &mut out);
        let first = sched.new_flow();
        sched.add_flow_from(0, 8, first);
        assert_eq!(sched.running(0), Some(OnCpu { track: 1, tid: 7 }));
        sched.switch_out(0, &mut out);
        assert_eq!(out, [first]);
        sched.take_flows(8, &mut ends);
        assert_eq!(ends, [first]);
        sched.ended(&ends);
        assert_eq!(sched.new_flow(), first, "an ended id is reused");
        // The wakee runs before the waker's slice ends: the flow is dropped.
        sched.switch_in(0, OnCpu { track: 1, tid: 7 }, &mut out);
        sched.add_flow_from(0, 8, first);
        ends.clear();
        sched.take_flows(8, &mut ends);
        assert!(ends.is_empty());
        out.clear();
        sched.switch_out(0, &mut out);
        assert!(out.is_empty());
        assert_eq!(sched.new_flow(), first, "an unwritten id is reused");
        // Too many pending: a started one is lost for good, not reused.
        for _ in 0..5 {
            let flow = sched.new_flow();
            sched.add_flow(9, flow);
        }
        assert_eq!(sched.new_flow(), 7, "the dropped id 2 is not reused");
    }
}
