//! Scheduling state for on-CPU slices: what runs on each CPU (its slice's
//! track), and for each task that is not running yet the flows that end at
//! its next slice. Memory is per CPU and per live task.

use std::collections::HashMap;

/// Flows waiting for a task's next slice beyond this many are dropped,
/// oldest first (a task woken again and again without running).
const MAX_PENDING_FLOWS: usize = 4;

/// The slice open on a CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnCpu {
    pub track: u64,
    pub tid: u32,
}

#[derive(Debug, Default)]
struct Task {
    flows: Vec<u64>,
    /// The CPU whose slice is this task's, if one is open.
    on_cpu: Option<u32>,
}

#[derive(Debug, Default)]
pub struct Sched {
    cpus: Vec<Option<OnCpu>>,
    /// By tid; the idle tasks (tid 0) are not tracked.
    tasks: HashMap<u32, Task>,
    next_flow: u64,
}

impl Sched {
    /// A new flow id (unique in the trace).
    pub fn new_flow(&mut self) -> u64 {
        self.next_flow += 1;
        self.next_flow
    }

    /// Ends what runs on `cpu`, returning its slice.
    pub fn switch_out(&mut self, cpu: u32) -> Option<OnCpu> {
        let on = self.cpus.get_mut(cpu as usize)?.take()?;
        if let Some(task) = self.tasks.get_mut(&on.tid) {
            task.on_cpu = None;
        }
        Some(on)
    }

    /// Starts `on` on `cpu`. Returns the task's slice still open on another
    /// CPU (its switch-out was lost), which the caller ends now.
    pub fn switch_in(&mut self, cpu: u32, on: OnCpu) -> Option<OnCpu> {
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
            Some(other) if other != cpu => self.cpus[other as usize].take(),
            _ => None,
        }
    }

    /// The slices still open, by CPU.
    pub fn open(&self) -> impl Iterator<Item = OnCpu> + '_ {
        self.cpus.iter().flatten().copied()
    }

    /// Adds a flow that ends at `tid`'s next slice.
    pub fn add_flow(&mut self, tid: u32, flow: u64) {
        let flows = &mut self.tasks.entry(tid).or_default().flows;
        if flows.len() == MAX_PENDING_FLOWS {
            flows.remove(0);
        }
        flows.push(flow);
    }

    /// Moves the flows ending at the slice `tid` starts now into `flows`.
    pub fn take_flows(&mut self, tid: u32, flows: &mut Vec<u64>) {
        if let Some(task) = self.tasks.get_mut(&tid) {
            flows.append(&mut task.flows);
        }
    }

    /// Forgets a freed task.
    pub fn forget(&mut self, tid: u32) {
        if self.tasks.get(&tid).is_some_and(|t| t.on_cpu.is_none()) {
            self.tasks.remove(&tid);
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
        let a = OnCpu { track: 1, tid: 7 };
        assert_eq!(sched.switch_in(0, a), None);
        assert_eq!(sched.switch_in(1, OnCpu { track: 1, tid: 7 }), Some(a));
        assert_eq!(sched.switch_out(0), None);
        assert_eq!(sched.switch_out(1), Some(a));
        for _ in 0..6 {
            let flow = sched.new_flow();
            sched.add_flow(7, flow);
        }
        let mut flows = Vec::new();
        sched.take_flows(7, &mut flows);
        assert_eq!(flows, [3, 4, 5, 6]);
        sched.take_flows(7, &mut flows);
        assert_eq!(flows, [3, 4, 5, 6]);
        sched.forget(7);
        assert!(sched.tasks.is_empty());
    }
}
