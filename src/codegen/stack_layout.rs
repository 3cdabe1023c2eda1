//! The maps and byte layouts of records with stacks (`docs/unwinding.md`,
//! "Record stacks"). A record with a stack is built in a per-CPU scratch
//! buffer rather than on the 512-byte BPF stack, because its frames follow
//! its fields in the message: up to 127 user frames (8-byte addresses, or
//! 32-byte build-id frames when the kernel walked them) and 127 kernel
//! frames. Programs can interrupt each other on one CPU (a timer sample
//! during a uprobe), so each CPU has one buffer per nesting level and a
//! counter of the level in use.
//!
//! Input: the checked program's records. Output: the map specs and the
//! [`StackMaps`] the lowering uses.

use crate::frontend::checked::{
    CheckedProbe, CheckedProgram, CheckedRecord, StackKind, TStmt, TStmtKind,
};
use crate::unwind::maps::{MAX_FRAMES, UnwindLimits, UnwindMaps, state};
use crate::vocab::{BUILD_ID_FRAME_BYTES, MapId, MapKind, MapSpec, record_header as header};

/// Programs that may run nested on one CPU: task context, soft IRQ, hard
/// IRQ, NMI.
pub const NEST_LEVELS: u32 = 4;
/// Most bytes of fields a record with a stack may have (a span's start
/// and end fields together).
pub const MAX_STACK_RECORD_FIELDS: u32 = 1024;
/// Room for the user frames: 127 build-id frames, rounded up to a power
/// of two so that a mask bounds the length for the verifier.
pub const USER_FRAMES_BYTES: u32 = 4096;
/// Room for the kernel frames (127 addresses), likewise.
pub const KERNEL_FRAMES_BYTES: u32 = 1024;
/// The most bytes the kernel stack helpers write.
pub const KERNEL_STACK_MAX: u32 = 8 * MAX_FRAMES;
/// The most bytes a build-id user walk writes.
pub const BUILD_ID_STACK_MAX: u32 = BUILD_ID_FRAME_BYTES * MAX_FRAMES;
/// A scratch buffer: the message (header, fields, frames), then the
/// unwind state of the current task's user stack.
pub const STATE_AT: u32 =
    header::FIELDS + MAX_STACK_RECORD_FIELDS + USER_FRAMES_BYTES + KERNEL_FRAMES_BYTES;
pub const SCRATCH_BYTES: u32 = STATE_AT + state::BYTES;
/// Bytes of frames a span start with a stack keeps until its end.
pub const SPAN_FRAMES_BYTES: u32 = USER_FRAMES_BYTES + KERNEL_FRAMES_BYTES;

/// A task's off-CPU bookkeeping (task storage), for `stack(offcpu, NEXT)`:
/// when it last left the CPU, and its user stack then, cached with the
/// registers it was unwound from (`state::KEY`; `state::CALLER_U32` is 1
/// while the cache is valid).
pub mod offcpu {
    use crate::unwind::maps::state;

    pub const OUT_NS: i16 = 0;
    pub const STATE: i16 = 8;
    pub const BYTES: u32 = STATE as u32 + state::BYTES;
}

/// The maps records with stacks use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackMaps {
    /// Per-CPU u64: the nesting level in use.
    pub nest: MapId,
    /// Per-CPU, [`NEST_LEVELS`] buffers of [`SCRATCH_BYTES`].
    pub scratch: MapId,
    /// The unwinder's tables, when a record has a user stack.
    pub unwind: Option<UnwindMaps>,
    /// Task storage of [`offcpu::BYTES`], when a record has `stack(offcpu, NEXT)`.
    pub offcpu: Option<MapId>,
}

/// Adds the maps the program's stack records need to `specs`; `None`
/// when no record has a stack.
pub fn add_maps(program: &CheckedProgram, specs: &mut Vec<MapSpec>) -> Option<StackMaps> {
    let wants = |f: fn(StackKind) -> bool| program.records.iter().any(|r| r.stack.is_some_and(f));
    if !wants(|_| true) {
        return None;
    }
    let mut add = |name: &str, kind, key_size, value_size, max_entries| {
        specs.push(MapSpec {
            name: name.into(),
            kind,
            key_size,
            value_size,
            max_entries,
            script_map: None,
        });
        MapId(specs.len() as u32 - 1)
    };
    let nest = add("wprof_nest", MapKind::PerCpuArray, 4, 8, 1);
    let scratch = add(
        "wprof_scratch",
        MapKind::PerCpuArray,
        4,
        SCRATCH_BYTES,
        NEST_LEVELS,
    );
    let offcpu = has_switch_stack(program)
        .then(|| add("wprof_offcpu", MapKind::TaskStorage, 4, offcpu::BYTES, 0));
    let unwind = wants(StackKind::user).then(|| UnwindMaps::add_specs(specs, UnwindLimits::default()));
    Some(StackMaps {
        nest,
        scratch,
        unwind,
        offcpu,
    })
}

/// Whether a probe records `stack(offcpu, NEXT)`.
fn has_switch_stack(program: &CheckedProgram) -> bool {
    (program.probes.iter())
        .any(|probe| records_of(probe).any(|record| record.switch_stack.is_some()))
}

/// Every record a probe may send: its record block and `record` statements.
pub fn records_of(probe: &CheckedProbe) -> impl Iterator<Item = &CheckedRecord> {
    fn walk<'a>(stmts: &'a [TStmt], out: &mut Vec<&'a CheckedRecord>) {
        for stmt in stmts {
            match &stmt.kind {
                TStmtKind::Record(record) => out.push(record),
                TStmtKind::If {
                    then, otherwise, ..
                } => {
                    walk(then, out);
                    walk(otherwise, out);
                }
                TStmtKind::While { body, .. } | TStmtKind::Unroll { body, .. } => walk(body, out),
                _ => {}
            }
        }
    }
    let mut records: Vec<&CheckedRecord> = probe.record.iter().collect();
    walk(&probe.body, &mut records);
    records.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest message and the state fit the scratch buffer, and every
    /// region the verifier bounds with a mask holds its largest write.
    #[test]
    fn regions_hold_their_largest_writes() {
        assert!(BUILD_ID_STACK_MAX <= USER_FRAMES_BYTES && USER_FRAMES_BYTES.is_power_of_two());
        assert!(KERNEL_STACK_MAX <= KERNEL_FRAMES_BYTES && KERNEL_FRAMES_BYTES.is_power_of_two());
        assert!(STATE_AT.is_multiple_of(8));
        assert_eq!(SCRATCH_BYTES, STATE_AT + state::BYTES);
    }
}
