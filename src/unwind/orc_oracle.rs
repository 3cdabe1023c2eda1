//! A `sched_switch` program that takes the switching task's kernel stack
//! both ways on the same switch — `bpf_get_stack` with nothing skipped, and
//! the ORC walker ([`super::orc_bpf`]) — in an order that alternates, each
//! timed with `bpf_ktime_get_ns`, and sends both: the walker's proof and
//! cost (`tests/suite/unwind/kernel_stacks.rs`).

use crate::codegen::asm::{AluOp, AsmError, Assembler, Cond, Reg, Size};
use crate::codegen::helpers;
use crate::codegen::program::Compiled;
use crate::vocab::{AttachPoint, MapId, MapKind, MapSpec};

use super::maps::MAX_FRAMES;
use super::orc_bpf::KernelWalker;
use super::orc_maps::OrcMaps;

/// A record: `tid: u32`, the helper's and the walker's results (bytes of
/// frames, negative when it failed or gave up), their nanoseconds, the
/// helper's frames, the walker's frames.
pub mod record {
    use super::MAX_FRAMES;

    pub const TID: i16 = 0;
    pub const KERNEL_BYTES: i16 = 8;
    pub const WALK_BYTES: i16 = 16;
    pub const KERNEL_NS: i16 = 24;
    pub const WALK_NS: i16 = 32;
    pub const KERNEL: i16 = 64;
    pub const WALK: i16 = KERNEL + 8 * (MAX_FRAMES as i16 + 1);
    pub const BYTES: u32 = WALK as u32 + 8 * (MAX_FRAMES + 1);
}

const RING: MapId = MapId(0);
const RECORD: MapId = MapId(1);

/// The program, for switches of thread group `tgid`, and its maps: map 0
/// the ring buffer, map 1 the per-CPU record, then the walker's.
pub fn oracle(tgid: u32, task_stack: u32) -> Result<(Compiled, OrcMaps), AsmError> {
    use Reg::*;
    let mut maps = vec![
        MapSpec {
            name: "kso_ring".into(),
            kind: MapKind::RingBuf,
            key_size: 0,
            value_size: 0,
            max_entries: 1 << 22,
            script_map: None,
        },
        MapSpec {
            name: "kso_record".into(),
            kind: MapKind::PerCpuArray,
            key_size: 4,
            value_size: record::BYTES,
            max_entries: 1,
            script_map: None,
        },
    ];
    let orc = OrcMaps::add_specs(&mut maps);
    let mut asm = Assembler::new();
    let walker = KernelWalker::new(&mut asm, orc, task_stack);
    let (out, walk_first, send) = (asm.new_label(), asm.new_label(), asm.new_label());
    asm.mov64_reg(R9, R1);
    asm.call_helper(helpers::GET_CURRENT_PID_TGID);
    asm.mov64_reg(R7, R0);
    asm.alu64_imm(AluOp::Rsh, R0, 32);
    asm.jmp32_imm(Cond::Ne, R0, tgid as i32, out);
    asm.lookup_u32_key(RECORD, 0);
    asm.jmp_imm(Cond::Eq, R0, 0, out);
    asm.mov64_reg(R6, R0);
    asm.store_reg(Size::U32, R6, record::TID, R7);
    asm.call_helper(helpers::KTIME_GET_NS);
    asm.jmp_imm(Cond::Set, R0, 1, walk_first);
    emit_kernel_stack(&mut asm);
    emit_walk(&mut asm, &walker);
    asm.jmp(send);
    asm.bind(walk_first)?;
    emit_walk(&mut asm, &walker);
    emit_kernel_stack(&mut asm);
    asm.bind(send)?;
    asm.ld_map_fd(R1, RING);
    asm.mov64_reg(R2, R6);
    asm.mov64_imm(R3, record::BYTES as i32);
    asm.mov64_imm(R4, 0);
    asm.call_helper(helpers::RINGBUF_OUTPUT);
    asm.bind(out)?;
    asm.mov64_imm(R0, 0);
    asm.exit();
    walker.emit_functions(&mut asm)?;
    let attach = AttachPoint::TpBtf {
        name: "sched_switch".into(),
    };
    let program = (asm.finish()?).into_program("kstack_oracle".into(), "oracle".into(), attach);
    let compiled = Compiled {
        programs: vec![program],
        maps,
        ringbuf: Some(RING),
        ..Compiled::default()
    };
    Ok((compiled, orc))
}

/// `bpf_get_stack(ctx (r9), record.kernel, 0)`, timed; r6 the record.
fn emit_kernel_stack(asm: &mut Assembler) {
    use Reg::*;
    asm.call_helper(helpers::KTIME_GET_NS);
    asm.mov64_reg(R8, R0);
    asm.mov64_reg(R1, R9);
    asm.mov64_reg(R2, R6);
    asm.alu64_imm(AluOp::Add, R2, i32::from(record::KERNEL));
    asm.mov64_imm(R3, 8 * MAX_FRAMES as i32);
    asm.mov64_imm(R4, 0);
    asm.call_helper(helpers::GET_STACK);
    asm.store_reg(Size::U64, R6, record::KERNEL_BYTES, R0);
    stamp_since(asm, record::KERNEL_NS);
}

/// The walker into `record.walk`, timed; r6 the record.
fn emit_walk(asm: &mut Assembler, walker: &KernelWalker) {
    use Reg::*;
    asm.call_helper(helpers::KTIME_GET_NS);
    asm.mov64_reg(R8, R0);
    asm.mov64_reg(R1, R6);
    asm.alu64_imm(AluOp::Add, R1, i32::from(record::WALK));
    walker.call(asm, R1);
    asm.store_reg(Size::U64, R6, record::WALK_BYTES, R0);
    stamp_since(asm, record::WALK_NS);
}

/// `record[at] = bpf_ktime_get_ns() - r8`.
fn stamp_since(asm: &mut Assembler, at: i16) {
    use Reg::*;
    asm.call_helper(helpers::KTIME_GET_NS);
    asm.alu64_reg(AluOp::Sub, R0, R8);
    asm.store_reg(Size::U64, R6, at, R0);
}

/// One switch's stacks, both ways.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OracleStacks {
    pub tid: u32,
    /// `bpf_get_stack`'s frames, or its error.
    pub kernel: Result<Vec<u64>, i64>,
    /// The walker's frames, or `None` when it gave up.
    pub walk: Option<Vec<u64>>,
    pub kernel_ns: u64,
    pub walk_ns: u64,
}

impl OracleStacks {
    /// Decodes a ring buffer record; `None` when it is too short.
    pub fn parse(bytes: &[u8]) -> Option<OracleStacks> {
        let u64_at = |at: i16| {
            let at = at as usize;
            Some(u64::from_ne_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
        };
        let frames = |at: i16, got: i64| -> Option<Vec<u64>> {
            let count = (got.max(0) as usize / 8).min(MAX_FRAMES as usize);
            (0..count).map(|i| u64_at(at + 8 * i as i16)).collect()
        };
        let (kernel_bytes, walk_bytes) = (
            u64_at(record::KERNEL_BYTES)? as i64,
            u64_at(record::WALK_BYTES)? as i64,
        );
        Some(OracleStacks {
            tid: u64_at(record::TID)? as u32,
            kernel: match kernel_bytes {
                ..0 => Err(kernel_bytes),
                got => Ok(frames(record::KERNEL, got)?),
            },
            walk: match walk_bytes {
                ..0 => None,
                got => Some(frames(record::WALK, got)?),
            },
            kernel_ns: u64_at(record::KERNEL_NS)?,
            walk_ns: u64_at(record::WALK_NS)?,
        })
    }
}
