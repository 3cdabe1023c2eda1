//! Measures, once at start-up, how many frames of a raw tracepoint
//! program's kernel stack are the tracer's own: the BPF program and the glue
//! that calls it (`bpf_trace_runN`, and `__bpf_trace_NAME` where the
//! compiler did not turn it into a jump). Kernel stacks then start at the
//! traced event: the count is passed to `bpf_get_stack` as its skip.
//!
//! How: a `tp_btf` program and a classic tracepoint program on the same
//! tracepoint (`task_rename`, which this thread fires by renaming itself to
//! its own name) each take their stack. The classic program's stack starts
//! at the tracepoint's caller (the kernel fetches the caller's registers
//! for it); its first frame appears in the `tp_btf` stack after the
//! tracer's frames, so its position there is the skip count. No symbol
//! names are involved.
//!
//! Input: nothing. Output: the skip count, and the loaded programs, which
//! the caller keeps until its teardown (closing a tracepoint's perf event
//! waits for an RCU grace period).

use libbpf_rs::{MapCore, MapFlags};

use super::loader::{AttachOptions, LoadError, Loaded, load};
use crate::codegen::asm::{AluOp, Assembler, Cond, Reg, Size};
use crate::codegen::helpers;
use crate::codegen::program::{BpfProgram, Compiled};
use crate::vocab::{AttachPoint, MapId, MapKind, MapSpec};

/// Frames each program keeps: more than the tracer's and a few of the event's.
const FRAMES: u32 = 16;
/// Map value: the frames, then the helper's return value.
const VALUE_BYTES: u32 = 8 * FRAMES + 8;

#[derive(Debug, thiserror::Error)]
pub enum SkipError {
    #[error("cannot assemble the measuring programs: {0}")]
    Assemble(String),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("cannot attach the measuring programs: {0}")]
    Attach(String),
    #[error("cannot read the measured stacks: {0}")]
    Read(String),
    #[error("the measured stacks do not meet: {0}")]
    Unmatched(String),
}

/// The measurement: the skip count, how many of the skipped frames are
/// the program's own address (the helper's caller, and again as the
/// kernel's walk found the program's frame), and the programs that took it.
pub struct Measured {
    pub skip: u64,
    pub program_frames: u64,
    pub programs: Loaded,
}

/// Takes both stacks and compares them.
pub fn measure() -> Result<Measured, SkipError> {
    let tgid = std::process::id();
    let points = [
        AttachPoint::TpBtf {
            name: "task_rename".into(),
        },
        AttachPoint::Tracepoint {
            category: "task".into(),
            name: "task_rename".into(),
        },
    ];
    let mut compiled = Compiled::default();
    for (index, point) in points.iter().enumerate() {
        compiled.maps.push(MapSpec {
            name: format!("skip_stack{index}"),
            kind: MapKind::Array,
            key_size: 4,
            value_size: VALUE_BYTES,
            max_entries: 1,
            script_map: None,
        });
        compiled
            .programs
            .push(stack_program(index, point, MapId(index as u32), tgid)?);
    }
    let mut programs = load(&compiled)?;
    programs
        .attach_all(AttachOptions::default())
        .map_err(|e| SkipError::Attach(e.to_string()))?;
    rename_to_own_name();
    let [raw, classic] = [0, 1].map(|map| read_stack(&programs, MapId(map)));
    let raw = raw?;
    let skip = skip_count(&raw, &classic?)?;
    let program_frames = raw.iter().take_while(|&&frame| frame == raw[0]).count() as u64;
    Ok(Measured {
        skip,
        program_frames: program_frames.min(skip),
        programs,
    })
}

/// `bpf_get_stack(ctx, value, ...)` into map `map`, for thread group `tgid` only.
fn stack_program(
    index: usize,
    attach: &AttachPoint,
    map: MapId,
    tgid: u32,
) -> Result<BpfProgram, SkipError> {
    use Reg::*;
    let mut asm = Assembler::new();
    let out = asm.new_label();
    asm.mov64_reg(R6, R1);
    asm.call_helper(helpers::GET_CURRENT_PID_TGID);
    asm.alu64_imm(AluOp::Rsh, R0, 32);
    asm.jmp32_imm(Cond::Ne, R0, tgid as i32, out);
    asm.lookup_u32_key(map, 0);
    asm.jmp_imm(Cond::Eq, R0, 0, out);
    asm.mov64_reg(R7, R0);
    asm.mov64_reg(R1, R6);
    asm.mov64_reg(R2, R7);
    asm.mov64_imm(R3, 8 * FRAMES as i32);
    asm.mov64_imm(R4, 0);
    asm.call_helper(helpers::GET_STACK);
    asm.store_reg(Size::U64, R7, 8 * FRAMES as i16, R0);
    asm.bind(out)
        .map_err(|e| SkipError::Assemble(e.to_string()))?;
    asm.mov64_imm(R0, 0);
    asm.exit();
    let assembled = asm
        .finish()
        .map_err(|e| SkipError::Assemble(e.to_string()))?;
    Ok(assembled.into_program(format!("skip{index}"), "stack skip".into(), attach.clone()))
}

/// Sets this thread's name to itself: `task_rename` fires.
fn rename_to_own_name() {
    let mut name = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL-terminated, into
    // the buffer; PR_SET_NAME reads a NUL-terminated string from it.
    unsafe {
        libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr());
        libc::prctl(libc::PR_SET_NAME, name.as_ptr());
    }
}

/// The frames map `map` holds, innermost first.
fn read_stack(programs: &Loaded, map: MapId) -> Result<Vec<u64>, SkipError> {
    let read = |why: String| SkipError::Read(why);
    let value = (programs.map(map).map_err(|e| read(e.to_string()))?)
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
        .map_err(|e| read(format!("{e:#}")))?
        .ok_or_else(|| read("no value".into()))?;
    let word = |at: usize| u64::from_ne_bytes(value[at..at + 8].try_into().expect("8 bytes"));
    let got = word(8 * FRAMES as usize) as i64;
    if got <= 0 {
        return Err(read(format!(
            "the program took no stack (bpf_get_stack returned {got}; did task_rename fire?)"
        )));
    }
    Ok((0..got as usize / 8).map(|i| word(8 * i)).collect())
}

/// Where the classic stack's first frame is in the raw tracepoint's stack,
/// checked against the frames after it.
fn skip_count(raw: &[u64], classic: &[u64]) -> Result<u64, SkipError> {
    let first = *classic
        .first()
        .ok_or_else(|| SkipError::Unmatched("the tracepoint's stack is empty".into()))?;
    let at = raw
        .iter()
        .position(|&frame| frame == first)
        .ok_or_else(|| {
            SkipError::Unmatched(format!(
                "{first:#x} is not in the raw tracepoint's stack {raw:x?}"
            ))
        })?;
    let common = (raw.len() - at).min(classic.len());
    if raw[at..at + common] != classic[..common] {
        return Err(SkipError::Unmatched(format!(
            "{:x?} and {:x?} part after their first common frame",
            &raw[at..],
            classic
        )));
    }
    Ok(at as u64)
}

/// The `[start, end)` address range of each tracepoint's iterator
/// (`__traceiter_NAME`): asked of the kernel by name
/// ([`super::ksym_range`]), or, on kernels that cannot run its programs,
/// read from `/proc/kallsyms` (empty where it cannot be read). Tracepoints
/// whose iterator is not found are left out.
pub fn tracepoint_iterators(tracepoints: &[&str]) -> Vec<(String, u64, u64)> {
    let symbols: Vec<String> = (tracepoints.iter())
        .map(|tracepoint| format!("__traceiter_{tracepoint}"))
        .collect();
    let symbols: Vec<&str> = symbols.iter().map(String::as_str).collect();
    match super::ksym_range::ranges(&symbols) {
        Ok(ranges) => (tracepoints.iter().zip(ranges))
            .filter_map(|(tracepoint, range)| {
                range.map(|(start, end)| (tracepoint.to_string(), start, end))
            })
            .collect(),
        Err(_) => {
            let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
            iterator_ranges(&kallsyms, tracepoints)
        }
    }
}

/// The `[start, end)` address range of each tracepoint's iterator
/// (`__traceiter_NAME`) in `kallsyms` (the text of `/proc/kallsyms`): the
/// symbol's address to the next higher text symbol's. Tracepoints whose
/// iterator is not found are left out.
pub fn iterator_ranges(kallsyms: &str, tracepoints: &[&str]) -> Vec<(String, u64, u64)> {
    let mut text = Vec::new();
    let mut starts = Vec::new();
    for line in kallsyms.lines() {
        let mut fields = line.split_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        if !matches!(kind, "t" | "T") || addr == 0 {
            continue;
        }
        text.push(addr);
        if let Some(tracepoint) = name.strip_prefix("__traceiter_")
            && tracepoints.contains(&tracepoint)
        {
            starts.push((tracepoint.to_string(), addr));
        }
    }
    text.sort_unstable();
    (starts.into_iter())
        .filter_map(|(tracepoint, start)| {
            let next = text.partition_point(|&addr| addr <= start);
            Some((tracepoint, start, *text.get(next)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The skip is where the classic stack begins within the raw one.
    #[test]
    fn finds_the_common_tail() {
        assert_eq!(skip_count(&[1, 2, 10, 11, 12], &[10, 11, 12]).unwrap(), 2);
        assert_eq!(skip_count(&[1, 2, 3, 10, 11], &[10, 11, 12]).unwrap(), 3);
        assert!(skip_count(&[1, 2, 3], &[10, 11]).is_err());
        assert!(skip_count(&[1, 10, 12], &[10, 11]).is_err());
        assert!(skip_count(&[1, 2], &[]).is_err());
    }

    /// An iterator's range ends at the next text symbol; data symbols,
    /// other tracepoints and unknown names are not taken.
    #[test]
    fn finds_iterator_ranges() {
        let kallsyms = "ffff0010 T __traceiter_sched_switch\n\
                        ffff0000 T __schedule\n\
                        ffff0030 d __traceiter_task_rename\n\
                        ffff0050 t __traceiter_sched_waking\n\
                        ffff0080 T __probestub_sched_switch\n\
                        junk\n";
        let ranges = iterator_ranges(kallsyms, &["sched_switch", "task_rename", "nothing"]);
        assert_eq!(
            ranges,
            vec![("sched_switch".into(), 0xffff0010, 0xffff0050)]
        );
    }

    /// On this kernel the tracer's frames are the program and its glue: at
    /// least two, and few.
    #[test]
    fn measures_this_kernel() {
        let measured = measure().unwrap_or_else(|e| panic!("{e}"));
        assert!((2..=4).contains(&measured.skip), "skip {}", measured.skip);
        assert!((1..=2).contains(&measured.program_frames));
    }
}
