//! Session step: gives the ORC kernel-stack walker (`unwind::orc_bpf`) the
//! kernel's table, read from the running kernel (`unwind::orc_read`), and
//! what it must know of the tracer: how many frames of its walk are the
//! tracer's, how deep the kernel's own walk would go. Until then, or when
//! that cannot be done, every walk gives the stack up to the kernel's walk:
//! the stacks are the same, only slower.

use crate::codegen::program::Compiled;
use crate::runtime::bpf::loader::Loaded;
use crate::runtime::bpf::stack_skip::Measured;
use crate::timings;
use crate::unwind::maps::MAX_FRAMES;
use crate::unwind::orc_maps::{Placement, place};
use crate::unwind::orc_read;

/// Places the table when the programs walk kernel stacks; says why not
/// when it cannot.
pub(super) fn prepare(compiled: &Compiled, loaded: &Loaded, tracer: Option<&Measured>) {
    let Some(maps) = compiled.kernel_walk else {
        return;
    };
    match placement_inputs(tracer).and_then(|(skip, max_stored)| {
        let orc = orc_read::read().map_err(|e| e.to_string())?;
        let placement = Placement {
            table: &orc.table,
            trampolines: &orc.trampolines,
            skip,
            max_stored,
        };
        place(loaded, maps, &placement).map_err(|e| e.to_string())
    }) {
        Ok(()) => timings::step("kernel ORC table placed"),
        Err(why) => eprintln!("wprof: kernel stacks are taken by the kernel's walk: {why}"),
    }
}

/// The walk's skip (the tracer's frames after the program's own) and the
/// most frames the kernel would store after its skip.
fn placement_inputs(tracer: Option<&Measured>) -> Result<(u32, u32), String> {
    let tracer = tracer.ok_or("the tracer's frames were not measured")?;
    if read_number("/proc/sys/net/core/bpf_jit_enable") == Some(0) {
        return Err("BPF programs are interpreted (net.core.bpf_jit_enable = 0)".into());
    }
    let skip = u32::try_from(tracer.skip).map_err(|e| e.to_string())?;
    let program_frames = tracer.program_frames as u32;
    // `bpf_get_stack` walks at most its room plus the skip, capped by the
    // kernel's limit, and stores what follows the skip.
    let limit = read_number("/proc/sys/kernel/perf_event_max_stack").unwrap_or(MAX_FRAMES);
    let depth = limit.min(MAX_FRAMES + skip);
    // One frame less: a walk that fills it is left to the kernel, which
    // knows whether the stack went on.
    let max_stored = depth.saturating_sub(skip + 1);
    Ok((skip - program_frames.min(skip), max_stored))
}

fn read_number(path: &str) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}
