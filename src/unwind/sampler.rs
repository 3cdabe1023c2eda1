//! A sampler of one process's user stacks (CPU-clock or uprobe), one program
//! per stack source (the table unwinder with either loop, or the kernel's
//! frame-pointer walk), each sending the unwind state to a ring buffer. It
//! proves and measures the unwinder; record stacks use it the same way
//! (`docs/unwinding.md`, "Phase 2"). Also [`MapStore`], the table manager's
//! writer into the loaded maps.

use libbpf_rs::{MapCore, MapFlags};

use crate::codegen::asm::{AluOp, AsmError, Assembler, Cond, Reg, Size};
use crate::codegen::helpers;
use crate::codegen::program::{BpfProgram, Compiled};
use crate::runtime::bpf::loader::Loaded;
use crate::vocab::{AttachPoint, MapId, MapKind, MapSpec, PerfEvent, PerfSample};

use super::bpf::{LoopKind, UserUnwinder};
use super::layout::MmLayout;
use super::manager::TableStore;
use super::maps::{MAX_FRAMES, UnwindLimits, UnwindMaps, file_table, flags, state};

/// Where a sampled stack comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackSource {
    Table(LoopKind),
    /// `bpf_get_stack(BPF_F_USER_STACK)`: the kernel follows frame pointers.
    KernelFramePointers,
    /// No stack (0 frames): the cost every source shares (filter, state,
    /// ring buffer), to subtract from theirs.
    Baseline,
}

impl StackSource {
    /// Program name (at most 15 characters, as the kernel keeps them).
    pub fn program_name(self) -> &'static str {
        match self {
            StackSource::Table(LoopKind::BpfLoop) => "uw_table_loop",
            StackSource::Table(LoopKind::Bounded { .. }) => "uw_table_bound",
            StackSource::KernelFramePointers => "uw_kernel_fp",
            StackSource::Baseline => "uw_baseline",
        }
    }
}

/// The state fields the sampler uses: its source index, and the
/// nanoseconds (`bpf_ktime_get_ns`) collecting the stack took.
const SOURCE_OFFSET: i16 = state::CALLER_U32;
/// The sampler's per-CPU unwind state.
const STATE_MAP: MapId = MapId(1);
const DURATION_OFFSET: i16 = state::CALLER_U64;

/// CPU-clock sampling at `hz` on every CPU.
pub fn cpu_clock(hz: u64) -> AttachPoint {
    AttachPoint::PerfEvent {
        event: PerfEvent {
            type_: 1,  // PERF_TYPE_SOFTWARE
            config: 0, // PERF_COUNT_SW_CPU_CLOCK
        },
        sample: PerfSample::FrequencyHz(hz),
        all_cpus: true,
    }
}

/// The programs and maps of a sampler, ready for `loader::load`: map 0 is
/// the ring buffer, map 1 the per-CPU unwind state, `programs[i]` samples
/// with `sources[i]` at `attach`
/// ([`cpu_clock`], or a uprobe: the stack is the task's user stack either way).
pub fn sampler(
    tgid: u32,
    attach: &AttachPoint,
    sources: &[StackSource],
    limits: UnwindLimits,
    mm: MmLayout,
) -> Result<(Compiled, UnwindMaps), AsmError> {
    let mut maps = vec![MapSpec {
        name: "uw_ring".into(),
        kind: MapKind::RingBuf,
        key_size: 0,
        value_size: 0,
        max_entries: 1 << 22,
        script_map: None,
    }];
    maps.push(MapSpec {
        name: "uw_state".into(),
        kind: MapKind::PerCpuArray,
        key_size: 4,
        value_size: state::BYTES,
        max_entries: 1,
        script_map: None,
    });
    let unwind = UnwindMaps::add_specs(&mut maps, limits);
    let programs = sources
        .iter()
        .enumerate()
        .map(|(index, &source)| sample_program(tgid, attach, source, index as u32, unwind, mm))
        .collect::<Result<_, _>>()?;
    let compiled = Compiled {
        programs,
        maps,
        ringbuf: Some(MapId(0)),
        ..Compiled::default()
    };
    Ok((compiled, unwind))
}

fn sample_program(
    tgid: u32,
    attach: &AttachPoint,
    source: StackSource,
    index: u32,
    maps: UnwindMaps,
    mm: MmLayout,
) -> Result<BpfProgram, AsmError> {
    use Reg::*;
    let mut asm = Assembler::new();
    let out = asm.new_label();
    asm.mov64_reg(R9, R1);
    asm.call_helper(helpers::GET_CURRENT_PID_TGID);
    asm.alu64_imm(AluOp::Rsh, R0, 32);
    asm.jmp32_imm(Cond::Ne, R0, tgid as i32, out);
    asm.lookup_u32_key(STATE_MAP, 0);
    asm.jmp_imm(Cond::Eq, R0, 0, out);
    asm.mov64_reg(R6, R0);
    asm.store_imm(Size::U32, R6, SOURCE_OFFSET, index as i32);
    asm.call_helper(helpers::KTIME_GET_NS);
    asm.mov64_reg(R7, R0);
    let unwinder = match source {
        StackSource::Table(kind) => {
            let unwinder = UserUnwinder::new(&mut asm, maps, kind, mm);
            asm.store_imm(Size::U32, R6, state::INPUT, 0);
            unwinder.call(&mut asm, R6, None);
            Some(unwinder)
        }
        StackSource::KernelFramePointers => {
            emit_kernel_stack(&mut asm);
            None
        }
        StackSource::Baseline => {
            asm.store_imm(Size::U32, R6, state::FRAMES, 0);
            None
        }
    };
    asm.call_helper(helpers::KTIME_GET_NS);
    asm.alu64_reg(AluOp::Sub, R0, R7);
    asm.store_reg(Size::U64, R6, DURATION_OFFSET, R0);
    asm.ld_map_fd(R1, MapId(0));
    asm.mov64_reg(R2, R6);
    asm.mov64_imm(R3, state::BYTES as i32);
    asm.mov64_imm(R4, 0);
    asm.call_helper(helpers::RINGBUF_OUTPUT);
    asm.bind(out)?;
    asm.mov64_imm(R0, 0);
    asm.exit();
    if let Some(unwinder) = unwinder {
        unwinder.emit_functions(&mut asm)?;
    }
    let name = source.program_name().to_string();
    Ok(asm
        .finish()?
        .into_program(name, "sampler".into(), attach.clone()))
}

/// `bpf_get_stack(ctx (r9), state.stack, BPF_F_USER_STACK)` into the state.
fn emit_kernel_stack(asm: &mut Assembler) {
    use Reg::*;
    asm.mov64_reg(R1, R9);
    asm.mov64_reg(R2, R6);
    asm.alu64_imm(AluOp::Add, R2, i32::from(state::STACK));
    asm.mov64_imm(R3, 8 * MAX_FRAMES as i32);
    asm.mov64_imm(R4, helpers::BPF_F_USER_STACK as i32);
    asm.call_helper(helpers::GET_STACK);
    let found = asm.new_label();
    asm.jmp_imm(Cond::Sge, R0, 0, found);
    asm.mov64_imm(R0, 0);
    asm.bind(found).expect("fresh label");
    asm.alu64_imm(AluOp::Rsh, R0, 3);
    asm.store_reg(Size::U32, R6, state::FRAMES, R0);
    asm.store_imm(Size::U32, R6, state::FLAGS, flags::FRAME_POINTER as i32);
}

/// One stack the sampler sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampledStack {
    pub tgid: u32,
    /// Index into the sources the sampler was built with.
    pub source: u32,
    pub flags: u32,
    /// Nanoseconds collecting the stack took in BPF.
    pub duration_ns: u64,
    /// Innermost first: the interrupted ip, then return addresses.
    pub frames: Vec<u64>,
}

impl SampledStack {
    /// Decodes a ring buffer record; `None` when it is too short.
    pub fn parse(record: &[u8]) -> Option<SampledStack> {
        let u32_at = |at: i16| {
            let at = at as usize;
            record
                .get(at..at + 4)
                .map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")))
        };
        let count = u32_at(state::FRAMES)?.min(MAX_FRAMES) as usize;
        let at = DURATION_OFFSET as usize;
        let duration = record.get(at..at + 8)?;
        let stack = record.get(state::STACK as usize..state::STACK as usize + 8 * count)?;
        Some(SampledStack {
            tgid: u32_at(state::TGID)?,
            source: u32_at(SOURCE_OFFSET)?,
            flags: u32_at(state::FLAGS)?,
            duration_ns: u64::from_ne_bytes(duration.try_into().expect("8 bytes")),
            frames: stack
                .chunks_exact(8)
                .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
                .collect(),
        })
    }
}

/// Writes the table manager's data into a loaded program's unwinder maps.
pub struct MapStore<'a> {
    pub loaded: &'a Loaded,
    pub maps: UnwindMaps,
}

impl MapStore<'_> {
    fn handle(&self, map: MapId) -> Result<&libbpf_rs::MapHandle, String> {
        self.loaded.map(map).map_err(|e| e.to_string())
    }
}

impl TableStore for MapStore<'_> {
    fn write_rows(&mut self, first_row: u32, encoded: &[u8]) -> Result<(), String> {
        let count = (encoded.len() / 8) as u32;
        let keys: Vec<u8> = (first_row..first_row + count)
            .flat_map(u32::to_ne_bytes)
            .collect();
        self.handle(self.maps.rows)?
            .update_batch(&keys, encoded, count, MapFlags::ANY, MapFlags::ANY)
            .map_err(|e| format!("{e:#}"))
    }

    fn write_table(&mut self, id: u32, first_row: u32, rows: u32) -> Result<(), String> {
        let value: Vec<u8> = [first_row, rows]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        self.loaded
            .update(self.maps.tables, &id.to_ne_bytes(), &value)
            .map_err(|e| e.to_string())
    }

    fn write_process(&mut self, tgid: u32, value: &[u8]) -> Result<(), String> {
        self.loaded
            .update(self.maps.processes, &tgid.to_ne_bytes(), value)
            .map_err(|e| e.to_string())
    }

    fn delete_process(&mut self, tgid: u32) -> Result<(), String> {
        self.delete(self.maps.processes, &tgid.to_ne_bytes())
    }

    fn write_file(&mut self, dev: u32, ino: u64, table: u32, delta: u64) -> Result<(), String> {
        let value = file_table::value(table, delta);
        self.loaded
            .update(self.maps.files, &file_table::key(dev, ino), &value)
            .map_err(|e| e.to_string())
    }

    fn delete_file(&mut self, dev: u32, ino: u64) -> Result<(), String> {
        self.delete(self.maps.files, &file_table::key(dev, ino))
    }
}

impl MapStore<'_> {
    /// Deletes `key` from `map`; a key not there is no error.
    fn delete(&self, map: MapId, key: &[u8]) -> Result<(), String> {
        match self.handle(map)?.delete(key) {
            Err(e) if e.kind() != libbpf_rs::ErrorKind::NotFound => Err(format!("{e:#}")),
            _ => Ok(()),
        }
    }
}
