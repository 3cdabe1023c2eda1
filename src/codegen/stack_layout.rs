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
use crate::unwind::orc_maps::OrcMaps;
use crate::vocab::{
    AttachPoint, BUILD_ID_FRAME_BYTES, MapId, MapKind, MapSpec, record_header as header,
};

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
/// The state is done with once the frames are copied: a stack snapshot
/// written after the frames may run over it.
pub const SCRATCH_BYTES: u32 = STATE_AT + max(state::BYTES, snapshot::BYTES);
/// Bytes of frames a span start with a stack keeps until its end.
pub const SPAN_FRAMES_BYTES: u32 = USER_FRAMES_BYTES + KERNEL_FRAMES_BYTES;

const fn max(a: u32, b: u32) -> u32 {
    if a > b { a } else { b }
}

/// A copy of the user stack after a message's frames (flag `SNAPSHOT`),
/// taken when the BPF walk found no table (`docs/unwinding.md`, "Stack
/// snapshots"): the interrupted user registers, the address space's
/// identity (`mm->start_stack`, `mm->end_code`), the bytes copied (`len:
/// u32`, 4 bytes of padding), then `len` bytes of stack from `sp` up.
pub mod snapshot {
    pub const IP: i16 = 0;
    pub const SP: i16 = 8;
    pub const BP: i16 = 16;
    pub const START_STACK: i16 = 24;
    pub const END_CODE: i16 = 32;
    pub const LEN: i16 = 40;
    pub const HEADER: u32 = 48;
    /// Most stack bytes copied. Measured from the sample to the outermost
    /// frame (`docs/unwinding.md`, "Stack snapshots"): C and Rust release
    /// programs 0.3–0.8 KiB, perl 0.5–3.9 KiB, gzip 2 KiB, python3 a median
    /// of 1.8 KiB with 8% beyond 16 KiB (35% beyond `perf --call-graph
    /// dwarf`'s default of 8 KiB).
    pub const STACK_BYTES: u32 = 16384;
    /// Bytes after the frames at most.
    pub const BYTES: u32 = HEADER + STACK_BYTES;
}

/// A task's off-CPU bookkeeping (task storage), for `stack(offcpu, NEXT)`
/// and `stack(offcpu, pending)`: when it last left the CPU, whether it was
/// then in a system call (under `-S offcpu=DUR` its user stack was not
/// walked: it is taken at the call's return), the switch-in time of its
/// first long block waiting for that return (0: none) and its address
/// space then (`task->mm`: an `execve` returns into another), and the user
/// stack walked when it left the CPU outside a system call: [`offcpu::WALKS`]
/// unwind states, each keeping the walk it last made (a task blocks at a few
/// places in turn, e.g. in `read` and preempted on `write`'s way out), and
/// which of them holds the latest walk (`LAST`, 0 or 1).
pub mod offcpu {
    use crate::unwind::maps::state;

    pub const OUT_NS: i16 = 0;
    pub const IN_SYSCALL: i16 = 8;
    pub const PENDING_FROM: i16 = 16;
    pub const PENDING_MM: i16 = 24;
    pub const LAST: i16 = 32;
    pub const STATE: i16 = 40;
    pub const WALKS: u32 = 2;
    pub const BYTES: u32 = STATE as u32 + WALKS * state::BYTES;
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
    /// One u64 under `-S offcpu=DUR`: how many tasks have long blocks
    /// waiting for their user stack (`offcpu::PENDING_FROM` set), so that
    /// the `sys_exit` of every other task returns without a task-storage
    /// lookup. It errs only high: a task that ends inside a system call with
    /// blocks pending (`exit_group`) stays counted, which costs lookups,
    /// never a join.
    pub waiting: Option<MapId>,
    /// Under `-S offcpu=DUR` with the task-work kfunc: a hash by thread id
    /// of `struct bpf_task_work`, the handle of the callback scheduled in a
    /// task with long blocks waiting; the callback deletes its element.
    pub task_work: Option<MapId>,
    /// One value, [`GLUE_BYTES`] per probe: the `[start, end)` addresses of
    /// the raw tracepoint's iterator (`__traceiter_NAME`), when a raw tracepoint
    /// probe takes a kernel stack ([`tracepoint_glue`]).
    pub glue: Option<MapId>,
    /// The kernel-stack walker's maps, when a switch record takes the
    /// switching task's kernel stack with it (`CheckedProgram::kernel_walk`).
    pub orc: Option<OrcMaps>,
}

/// Tasks that may wait at once for their deferred user stack (elements of
/// [`StackMaps::task_work`]); past it a long block's user stack is lost.
const TASK_WORK_MAX: u32 = 4096;

/// Bytes of a [`StackMaps::glue`] value: start and end address.
pub const GLUE_BYTES: u32 = 16;

/// The raw tracepoint probes that take kernel stacks of the current task,
/// by probe index, with their tracepoint. With more than one handler
/// attached, a tracepoint calls them through its iterator, whose frame sits
/// between the tracer's (skipped by count) and the event's caller; the
/// program drops it when its first frame is in the iterator, whose address
/// range user space writes at start-up (it is absent with one handler,
/// which the tracepoint's static call reaches directly).
pub fn tracepoint_glue(program: &CheckedProgram) -> Vec<(u32, String)> {
    (program.probes.iter().enumerate())
        .filter(|(_, probe)| records_of(probe).any(|r| r.stack.is_some_and(StackKind::kernel)))
        .filter_map(|(index, probe)| match &probe.attach {
            AttachPoint::TpBtf { name } | AttachPoint::RawTracepoint { name } => {
                Some((index as u32, name.clone()))
            }
            _ => None,
        })
        .collect()
}

/// Adds the maps the program's stack records need to `specs`; `None`
/// when no record has a stack.
pub fn add_maps(program: &CheckedProgram, specs: &mut Vec<MapSpec>) -> Option<StackMaps> {
    let wants = |f: fn(StackKind) -> bool| program.records.iter().any(|r| r.stack.is_some_and(f));
    if !wants(|_| true) {
        return None;
    }
    let mut add = |name: &str, kind, key_size, value_size, max_entries| {
        MapSpec::add_internal(specs, name, kind, key_size, value_size, max_entries)
    };
    let nest = add("wprof_nest", MapKind::PerCpuArray, 4, 8, 1);
    let scratch = add(
        "wprof_scratch",
        MapKind::PerCpuArray,
        4,
        SCRATCH_BYTES,
        NEST_LEVELS,
    );
    let offcpu = has_offcpu_stack(program)
        .then(|| add("wprof_offcpu", MapKind::TaskStorage, 4, offcpu::BYTES, 0));
    let waiting = (offcpu.is_some() && program.offcpu_min_block_ns.is_some())
        .then(|| add("wprof_offcpu_waiting", MapKind::Array, 4, 8, 1));
    let task_work = (waiting.is_some() && program.task_work.is_some()).then(|| {
        let bytes = crate::vocab::TASK_WORK_BYTES;
        add(
            "wprof_offcpu_work",
            MapKind::TaskWork,
            4,
            bytes,
            TASK_WORK_MAX,
        )
    });
    let glue = (!tracepoint_glue(program).is_empty()).then(|| {
        let probes = program.probes.len() as u32;
        add("wprof_tp_glue", MapKind::Array, 4, GLUE_BYTES * probes, 1)
    });
    let unwind =
        wants(StackKind::user).then(|| UnwindMaps::add_specs(specs, UnwindLimits::default()));
    let orc = (program.kernel_walk)
        .filter(|_| has_offcpu_stack(program))
        .map(|_| OrcMaps::add_specs(specs));
    Some(StackMaps {
        nest,
        scratch,
        unwind,
        offcpu,
        waiting,
        task_work,
        glue,
        orc,
    })
}

/// Whether a probe records `stack(offcpu, NEXT)` or `stack(offcpu, pending)`.
fn has_offcpu_stack(program: &CheckedProgram) -> bool {
    (program.probes.iter())
        .any(|probe| records_of(probe).any(|record| record.offcpu_stack.is_some()))
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
    use crate::unwind::maps::walk_cache;

    /// The largest message and the state fit the scratch buffer, and every
    /// region the verifier bounds with a mask holds its largest write.
    #[test]
    fn regions_hold_their_largest_writes() {
        assert!(BUILD_ID_STACK_MAX <= USER_FRAMES_BYTES && USER_FRAMES_BYTES.is_power_of_two());
        assert!(KERNEL_STACK_MAX <= KERNEL_FRAMES_BYTES && KERNEL_FRAMES_BYTES.is_power_of_two());
        assert!(STATE_AT.is_multiple_of(8));
        // A snapshot starts after at most a whole region of frames.
        const {
            assert!(SCRATCH_BYTES >= STATE_AT + state::BYTES);
            assert!(SCRATCH_BYTES >= STATE_AT + snapshot::BYTES);
            assert!(SCRATCH_BYTES >= STATE_AT + walk_cache::RANGE_MAX + 8);
            // The task's states are 8-byte aligned, and one bit picks one.
            assert!(offcpu::STATE % 8 == 0 && state::BYTES.is_multiple_of(8));
            assert!(offcpu::WALKS == 2);
        }
    }
}
