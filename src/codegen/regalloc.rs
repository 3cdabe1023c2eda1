//! Register allocation: liveness over the IR's control flow, then linear scan.
//!
//! Every virtual register gets one of the callee-saved registers r6–r9, which
//! helper calls preserve, or a stack slot when more than four values are live.
//! r0–r5 are never allocated: `emit` uses them for helper arguments and as
//! scratch inside one IR instruction, so nothing is live in them between
//! instructions.

use std::collections::HashMap;

use crate::codegen::ir::{Function, Inst, Label, VReg};

/// Registers handed out by the allocator.
pub const ALLOCATABLE: [u8; 4] = [6, 7, 8, 9];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    Reg(u8),
    /// r10 + offset (negative, 8-byte aligned).
    Spill(i16),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Allocation {
    pub locations: HashMap<VReg, Location>,
    /// Frame bytes used by buffers and spill slots together.
    pub frame_bytes: u32,
}

/// Live range of a register as the first and last instruction index where it is live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Interval {
    vreg: VReg,
    start: usize,
    end: usize,
}

pub fn allocate(function: &Function) -> Allocation {
    let intervals = live_intervals(function);
    let mut locations = HashMap::new();
    let mut active: Vec<(Interval, u8)> = Vec::new();
    let mut free: Vec<u8> = ALLOCATABLE.iter().rev().copied().collect();
    let mut spills = SpillSlots::below(function.frame_bytes);

    for interval in intervals {
        active.retain(|(live, reg)| {
            let expired = live.end < interval.start;
            if expired {
                free.push(*reg);
            }
            !expired
        });
        if let Some(reg) = free.pop() {
            locations.insert(interval.vreg, Location::Reg(reg));
            active.push((interval, reg));
            continue;
        }
        // Spill whichever live value ends last: it blocks a register longest.
        let (victim_index, _) = active
            .iter()
            .enumerate()
            .max_by_key(|(_, (live, _))| live.end)
            .expect("no free register means four live intervals");
        if active[victim_index].0.end > interval.end {
            let (victim, reg) = active.swap_remove(victim_index);
            locations.insert(victim.vreg, spills.assign(victim));
            locations.insert(interval.vreg, Location::Reg(reg));
            active.push((interval, reg));
        } else {
            locations.insert(interval.vreg, spills.assign(interval));
        }
    }
    Allocation {
        locations,
        frame_bytes: function.frame_bytes + spills.bytes(),
    }
}

/// Stack slots of spilled values, below the frame buffers: values whose
/// live intervals do not overlap share a slot, so a long program with many
/// short-lived spills needs as many slots as values spilled at once.
struct SpillSlots {
    /// Frame bytes above the slots.
    base: u32,
    /// The intervals stored in each slot.
    slots: Vec<Vec<Interval>>,
}

impl SpillSlots {
    fn below(base: u32) -> SpillSlots {
        SpillSlots {
            base,
            slots: Vec::new(),
        }
    }

    /// The first slot free during all of `interval`.
    fn assign(&mut self, interval: Interval) -> Location {
        let free = |held: &Vec<Interval>| {
            (held.iter()).all(|h| h.end < interval.start || interval.end < h.start)
        };
        let index = match self.slots.iter().position(free) {
            Some(index) => index,
            None => {
                self.slots.push(Vec::new());
                self.slots.len() - 1
            }
        };
        self.slots[index].push(interval);
        let offset = -((self.base + 8 * (index as u32 + 1)) as i32);
        Location::Spill(offset as i16)
    }

    fn bytes(&self) -> u32 {
        8 * self.slots.len() as u32
    }
}

/// Intervals sorted by start, from a backward dataflow liveness analysis.
fn live_intervals(function: &Function) -> Vec<Interval> {
    let insts: Vec<&Inst> = function.insts.iter().map(|a| &a.inst).collect();
    let successors = successors(&insts);
    let mut live_in: Vec<Vec<VReg>> = vec![Vec::new(); insts.len()];
    let mut changed = true;
    while changed {
        changed = false;
        for i in (0..insts.len()).rev() {
            let mut live: Vec<VReg> = successors[i]
                .iter()
                .flat_map(|&s| live_in[s].iter().copied())
                .collect();
            if let Some(def) = insts[i].def() {
                live.retain(|v| *v != def);
            }
            live.extend(insts[i].uses());
            live.sort_unstable();
            live.dedup();
            if live != live_in[i] {
                live_in[i] = live;
                changed = true;
            }
        }
    }

    let mut ranges: HashMap<VReg, (usize, usize)> = HashMap::new();
    let mut touch = |vreg: VReg, at: usize| {
        let range = ranges.entry(vreg).or_insert((at, at));
        range.0 = range.0.min(at);
        range.1 = range.1.max(at);
    };
    for (i, inst) in insts.iter().enumerate() {
        for &vreg in &live_in[i] {
            touch(vreg, i);
        }
        if let Some(def) = inst.def() {
            touch(def, i);
        }
    }
    let mut intervals: Vec<Interval> = ranges
        .into_iter()
        .map(|(vreg, (start, end))| Interval { vreg, start, end })
        .collect();
    intervals.sort_by_key(|i| (i.start, i.vreg));
    intervals
}

pub(super) fn successors(insts: &[&Inst]) -> Vec<Vec<usize>> {
    let labels: HashMap<Label, usize> = insts
        .iter()
        .enumerate()
        .filter_map(|(i, inst)| match inst {
            Inst::Bind(label) => Some((*label, i)),
            _ => None,
        })
        .collect();
    let target = |label: &Label| *labels.get(label).expect("every jump target is bound");
    insts
        .iter()
        .enumerate()
        .map(|(i, inst)| {
            let next = (i + 1 < insts.len()).then_some(i + 1);
            match inst {
                Inst::Jump(label) => vec![target(label)],
                Inst::Branch { target: label, .. } => {
                    let mut succ = vec![target(label)];
                    succ.extend(next);
                    succ
                }
                Inst::Exit => vec![],
                _ => next.into_iter().collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::ir::{Arg, Cond, Src};

    fn function(insts: Vec<Inst>, vregs: u32) -> Function {
        Function::from_insts(insts, vregs, 4, 16)
    }

    fn mov(dst: u32, imm: i32) -> Inst {
        Inst::Mov {
            dst: VReg(dst),
            src: Src::Imm(imm),
        }
    }

    fn call_using(regs: &[u32]) -> Inst {
        Inst::Call {
            helper: 6,
            args: regs.iter().map(|r| Arg::Reg(VReg(*r))).collect(),
            ret: None,
        }
    }

    /// Values live across a helper call sit in r6–r9, never in r0–r5.
    #[test]
    fn values_across_calls_use_callee_saved_registers() {
        let f = function(
            vec![
                mov(0, 1),
                mov(1, 2),
                call_using(&[]),
                call_using(&[0, 1]),
                Inst::Exit,
            ],
            2,
        );
        let alloc = allocate(&f);
        for v in [VReg(0), VReg(1)] {
            assert!(matches!(alloc.locations[&v], Location::Reg(6..=9)));
        }
        assert_ne!(alloc.locations[&VReg(0)], alloc.locations[&VReg(1)]);
        assert_eq!(alloc.frame_bytes, 16);
    }

    /// With five values live at once, one is spilled below the buffers.
    #[test]
    fn fifth_live_value_spills() {
        let mut insts: Vec<Inst> = (0..5).map(|v| mov(v, v as i32)).collect();
        insts.push(call_using(&[0, 1, 2, 3, 4]));
        insts.push(Inst::Exit);
        let alloc = allocate(&function(insts, 5));
        let spilled: Vec<_> = alloc
            .locations
            .values()
            .filter(|l| matches!(l, Location::Spill(_)))
            .collect();
        assert_eq!(spilled, vec![&Location::Spill(-24)]);
        assert_eq!(alloc.frame_bytes, 24);
    }

    /// Spilled values whose lives do not overlap share one stack slot.
    #[test]
    fn spill_slots_are_reused() {
        let five_live = |first: u32| -> Vec<Inst> {
            let mut insts: Vec<Inst> = (first..first + 5).map(|v| mov(v, 1)).collect();
            insts.push(call_using(&(first..first + 5).collect::<Vec<_>>()));
            insts
        };
        let mut insts = five_live(0);
        insts.extend(five_live(5));
        insts.push(Inst::Exit);
        let alloc = allocate(&function(insts, 10));
        let spilled: Vec<_> = (alloc.locations.values())
            .filter(|l| matches!(l, Location::Spill(_)))
            .collect();
        assert_eq!(spilled, [&Location::Spill(-24); 2]);
        assert_eq!(alloc.frame_bytes, 24);
    }

    /// Registers are reused once a value is dead.
    #[test]
    fn dead_values_free_their_register() {
        let insts: Vec<Inst> = (0..8)
            .flat_map(|v| [mov(v, 1), call_using(&[v])])
            .chain([Inst::Exit])
            .collect();
        let alloc = allocate(&function(insts, 8));
        assert!(
            alloc
                .locations
                .values()
                .all(|l| matches!(l, Location::Reg(_)))
        );
    }

    /// A value used after a loop stays live through the loop's back edge.
    #[test]
    fn liveness_follows_back_edges() {
        let insts = vec![
            mov(0, 7),            // 0: v0 live until the end
            mov(1, 0),            // 1
            Inst::Bind(Label(0)), // 2
            Inst::Alu {
                op: crate::codegen::ir::AluOp::Add,
                dst: VReg(1),
                src: Src::Imm(1),
            },
            Inst::Branch {
                cond: Cond::Lt,
                lhs: VReg(1),
                rhs: Src::Imm(10),
                target: Label(0),
            },
            call_using(&[0]), // 5
            Inst::Exit,
        ];
        let intervals = live_intervals(&function(insts, 2));
        let v1 = intervals.iter().find(|i| i.vreg == VReg(1)).unwrap();
        let v0 = intervals.iter().find(|i| i.vreg == VReg(0)).unwrap();
        assert_eq!((v0.start, v0.end), (0, 5));
        assert_eq!((v1.start, v1.end), (1, 4));
    }
}
