//! The BPF user-stack unwinder: BPF functions any program can call, emitted
//! through the assembler. Input: an unwind [`state`] holding the user `ip`,
//! `sp`, `bp` and tgid. Output: the return addresses in the state's stack
//! (the frame count in r0), with [`flags`] saying how it went.
//!
//! Each step records `ip`, finds the mapping of the pc (binary search in the
//! process's sorted mappings), the last table row at or below it (binary
//! search in the table's rows), computes the CFA from `rsp` or `rbp`, reads
//! the return address at `CFA-8` and the saved `rbp`, and moves one frame
//! up. Without a mapping, table or usable row it follows frame pointers.
//! A pc in no known mapping (code mapped since the process's mappings were
//! read) asks the kernel for its memory area (`bpf_find_vma`) and goes on
//! with the table of the area's file when one is loaded.
//! A return address a pending uretprobe replaced with its trampoline is
//! taken from the kernel's record of it.
//! A caller that passes a copy buffer gets the state's last walk back when
//! it still holds (`super::walk_cache_bpf`). Algorithm and costs:
//! `docs/unwinding.md`.

use crate::codegen::asm::{AluOp, AsmError, Assembler, Cond, Label, Reg, Size};
use crate::codegen::helpers;
use crate::vocab::MapId;

use super::layout::{MmLayout, ReturnLayout, XolLayout};
use super::maps::{
    MAPPING_SEARCH_STEPS, MAX_FRAMES, MAX_MAPPINGS, NO_TABLE, ROW_SEARCH_STEPS, TABLE_PENDING,
    UnwindMaps, flags, input, process_mappings as pm, state, table_slot,
};
use super::rules::{kind, layout as row};
use super::vma_bpf::{self, emit_kernel_vma, emit_vma_callback};
use super::walk_cache_bpf;

use Reg::{R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10};

/// How the frames are iterated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopKind {
    /// `bpf_loop` with the step as callback: verified once.
    BpfLoop,
    /// A counted loop of at most `frames` steps (up to `MAX_FRAMES`), which
    /// the verifier walks step by step. Linux 6.18 refuses 127 steps ("the
    /// sequence of 8193 jumps is too complex"): only short stacks fit.
    Bounded { frames: u32 },
}

/// BPF stack the unwinder's functions use below their caller's frame: the
/// entry function keeps the `bpf_loop` context (16 bytes) and the copy
/// buffer of the walk cache (8 bytes), the step
/// callback its search counter and the memory-area lookup's context (32
/// bytes; its other temporaries are in the state), the lookup's callback
/// none; each frame counts at least 32 bytes where the kernel interprets
/// instead of compiling.
pub const FRAME_BYTES: u32 = 32 + 32 + 32;

/// Temporaries of the unwinder's functions, offsets into the state's work
/// area (`state::WORK`), and the one stack slot, the `bpf_loop` context.
pub(super) mod slot {
    use super::state::WORK;

    /// u32 map key.
    pub const KEY: i16 = WORK;
    /// 16 bytes read from user or kernel memory.
    pub const READ: i16 = WORK + 8;
    /// The pc being looked up, then its ELF address.
    pub const PC: i16 = WORK + 24;
    /// The first row of the table.
    pub const FIRST_ROW: i16 = WORK + 32;
    /// The return address.
    pub const RA: i16 = WORK + 40;
    /// The caller's rbp.
    pub const NEW_BP: i16 = WORK + 48;
    pub const CFA: i16 = WORK + 56;
    /// The user address of the last read.
    pub const READ_AT: i16 = WORK + 64;
    /// The user address the return address was read from.
    pub const RA_AT: i16 = WORK + 72;
    /// The first of the task's pending uretprobes not yet matched to a
    /// frame (from `state::RETURN_INSTANCES` on), or 0.
    pub const RETURN_INSTANCE: i16 = WORK + 80;
    /// `bpf_loop` context on the entry function's stack: the state and
    /// process pointers.
    pub const LOOP_CTX: i16 = -16;
    /// The row search's step counter, on the stack of the function running
    /// the step (the callback's own frame under `bpf_loop`): the verifier
    /// tracks a constant kept on the stack exactly, so the bounded search
    /// verifies once per step; kept in a map value it would be unknown.
    pub const COUNTER: i16 = -8;
    /// Frame counter of the bounded loop, on the entry function's stack
    /// (where that loop runs) for the same reason.
    pub const FRAME_COUNTER: i16 = -16;
    /// `bpf_find_vma`'s context on the stack of the function running the
    /// step: the state pointer (below the walk cache's copy buffer, -24).
    pub const VMA_CTX: i16 = -32;
}

/// The unwinder's functions in one program: call [`UserUnwinder::call`]
/// anywhere, then [`UserUnwinder::emit_functions`] once after the program's
/// last instruction.
pub struct UserUnwinder {
    maps: UnwindMaps,
    kind: LoopKind,
    mm: MmLayout,
    entry: Label,
    callback: Label,
    /// `bpf_find_vma`'s callback, when the kernel's memory areas can be read.
    vma_callback: Option<Label>,
}

impl UserUnwinder {
    pub fn new(asm: &mut Assembler, maps: UnwindMaps, kind: LoopKind, mm: MmLayout) -> Self {
        UserUnwinder {
            maps,
            kind,
            entry: asm.new_label(),
            callback: asm.new_label(),
            vma_callback: mm.vma.map(|_| asm.new_label()),
            mm,
        }
    }

    /// `r0 = unwind(state, copy)`: walks the current task's user stack
    /// into the state `state` points to (a map value of at least
    /// `state::BYTES`, its `input` set); r1-r5 clobbered. With `copy`, a
    /// map value pointer with `walk_cache::RANGE_MAX + 8` bytes of room,
    /// the state is the task's own and keeps its walk for the next call.
    pub fn call(&self, asm: &mut Assembler, state: Reg, copy: Option<Reg>) {
        match copy {
            Some(R2) => {}
            Some(copy) => asm.mov64_reg(R2, copy),
            None => asm.mov64_imm(R2, 0),
        }
        asm.mov64_reg(R1, state);
        asm.call_local(self.entry);
    }

    /// Emits the unwinder's functions.
    pub fn emit_functions(&self, asm: &mut Assembler) -> Result<(), AsmError> {
        asm.bind(self.entry)?;
        asm.comment("unwind(state): walk the current task's user stack");
        asm.mov64_reg(R6, R1);
        walk_cache_bpf::save_copy_buffer(asm);
        asm.store_imm(Size::U32, R6, state::FRAMES, 0);
        asm.store_imm(Size::U32, R6, state::FLAGS, 0);
        asm.store_imm(Size::U64, R6, state::FIRST_SLOT, 0);
        let no_user_stack = asm.new_label();
        emit_load_current(asm, &self.mm, no_user_stack)?;
        asm.load(Size::U32, R1, R6, state::TGID);
        lookup(asm, self.maps.processes, R1);
        asm.mov64_reg(R7, R0);
        let (unknown, known) = (asm.new_label(), asm.new_label());
        asm.jmp_imm(Cond::Eq, R7, 0, unknown);
        // The entry holds the mappings of this address space only if it
        // was read after the process's last exec.
        for field in [pm::START_STACK, pm::END_CODE] {
            let state_field = if field == pm::START_STACK {
                state::MM_START_STACK
            } else {
                state::MM_END_CODE
            };
            asm.load(Size::U64, R1, R7, field);
            asm.load(Size::U64, R2, R6, state_field);
            asm.jmp_reg(Cond::Ne, R1, R2, unknown);
        }
        asm.jmp(known);
        asm.bind(unknown)?;
        // The caller's kernel walk writes the state's stack.
        walk_cache_bpf::invalidate(asm);
        set_flag(asm, flags::NO_PROCESS);
        asm.bind(no_user_stack)?;
        asm.mov64_imm(R0, 0);
        asm.exit();
        asm.bind(known)?;
        let walk = asm.new_label();
        walk_cache_bpf::emit_reuse(asm, walk)?;
        return_frame_count(asm);
        asm.bind(walk)?;
        match self.kind {
            LoopKind::BpfLoop => self.emit_bpf_loop(asm)?,
            LoopKind::Bounded { frames } => self.emit_bounded(asm, frames.min(MAX_FRAMES))?,
        }
        if let (Some(callback), Some(layout)) = (self.vma_callback, &self.mm.vma) {
            asm.bind(callback)?;
            emit_vma_callback(asm, layout)?;
        }
        Ok(())
    }

    fn step(&self) -> Step<'_> {
        Step {
            maps: &self.maps,
            returns: self.returns(),
            vma_callback: self.vma_callback,
        }
    }

    /// Where the kernel keeps the return addresses of pending uretprobes.
    fn returns(&self) -> Option<&ReturnLayout> {
        self.mm.xol.as_ref().map(|xol| &xol.returns)
    }

    fn emit_bpf_loop(&self, asm: &mut Assembler) -> Result<(), AsmError> {
        asm.store_reg(Size::U64, R10, slot::LOOP_CTX, R6);
        asm.store_reg(Size::U64, R10, slot::LOOP_CTX + 8, R7);
        asm.mov64_imm(R1, MAX_FRAMES as i32 + 1);
        asm.ld_func(R2, self.callback);
        asm.mov64_reg(R3, R10);
        asm.alu64_imm(AluOp::Add, R3, i32::from(slot::LOOP_CTX));
        asm.mov64_imm(R4, 0);
        asm.call_helper(helpers::LOOP);
        walk_cache_bpf::emit_keep(asm)?;
        return_frame_count(asm);
        asm.bind(self.callback)?;
        asm.comment("step(index, ctx): one frame; 0 goes on, 1 stops");
        asm.load(Size::U64, R6, R2, 0);
        asm.load(Size::U64, R7, R2, 8);
        let (next, stop) = (asm.new_label(), asm.new_label());
        emit_step(asm, &self.step(), next, stop)?;
        asm.bind(next)?;
        asm.mov64_imm(R0, 0);
        asm.exit();
        asm.bind(stop)?;
        asm.mov64_imm(R0, 1);
        asm.exit();
        Ok(())
    }

    /// `frames + 1` steps: the last one only notices truncation.
    fn emit_bounded(&self, asm: &mut Assembler, frames: u32) -> Result<(), AsmError> {
        let (next, stop) = (asm.new_label(), asm.new_label());
        asm.store_imm(Size::U64, R10, slot::FRAME_COUNTER, 0);
        asm.bind(next)?;
        asm.load(Size::U64, R1, R10, slot::FRAME_COUNTER);
        asm.jmp_imm(Cond::Gt, R1, frames as i32, stop);
        asm.alu64_imm(AluOp::Add, R1, 1);
        asm.store_reg(Size::U64, R10, slot::FRAME_COUNTER, R1);
        emit_step(asm, &self.step(), next, stop)?;
        asm.bind(stop)?;
        walk_cache_bpf::emit_keep(asm)?;
        return_frame_count(asm);
        Ok(())
    }
}

fn return_frame_count(asm: &mut Assembler) {
    asm.load(Size::U32, R0, R6, state::FRAMES);
    asm.exit();
}

/// Where each way out of a step goes.
struct StepExits {
    next: Label,
    stop: Label,
    /// Unwind this frame with frame pointers.
    frame_pointer: Label,
    /// CFA, return address and caller rbp are in their slots: move up.
    advance: Label,
    read_failed: Label,
}

/// What a step uses besides the state: the maps, where the kernel keeps
/// pending uretprobes' return addresses, `bpf_find_vma`'s callback.
struct Step<'a> {
    maps: &'a UnwindMaps,
    returns: Option<&'a ReturnLayout>,
    vma_callback: Option<Label>,
}

/// One frame, with r6 = state, r7 = process mappings or NULL. Jumps to
/// `next` after moving one frame up, to `stop` when the stack ends.
fn emit_step(asm: &mut Assembler, step: &Step, next: Label, stop: Label) -> Result<(), AsmError> {
    let exits = StepExits {
        next,
        stop,
        frame_pointer: asm.new_label(),
        advance: asm.new_label(),
        read_failed: asm.new_label(),
    };
    emit_record_frame(asm, &exits)?;
    emit_function_entry(asm, &exits)?;
    emit_find_mapping(asm, step, &exits)?;
    emit_find_row(asm, step.maps, &exits)?;
    emit_apply_row(asm, &exits)?;
    asm.bind(exits.frame_pointer)?;
    emit_frame_pointer_step(asm, &exits)?;
    asm.bind(exits.advance)?;
    if let Some(returns) = step.returns {
        emit_return_address(asm, returns)?;
    }
    emit_advance(asm, &exits)?;
    asm.bind(exits.read_failed)?;
    set_flag(asm, flags::READ_FAILED);
    asm.jmp(stop);
    Ok(())
}

/// Appends `ip` to the stack (stops when full or when `ip` is 0) and puts
/// the pc to look up in `slot::PC`: `ip`, or `ip - 1` above the first frame
/// (a return address may be the first byte of the next function).
fn emit_record_frame(asm: &mut Assembler, exits: &StepExits) -> Result<(), AsmError> {
    asm.comment("record ip in the stack");
    let (room, first) = (asm.new_label(), asm.new_label());
    asm.load(Size::U32, R1, R6, state::FRAMES);
    asm.load(Size::U64, R2, R6, state::IP);
    asm.jmp_imm(Cond::Eq, R2, 0, exits.stop);
    asm.jmp_imm(Cond::Lt, R1, MAX_FRAMES as i32, room);
    set_flag(asm, flags::TRUNCATED);
    asm.jmp(exits.stop);
    asm.bind(room)?;
    asm.mov64_reg(R3, R1);
    asm.alu64_imm(AluOp::Lsh, R3, 3);
    asm.alu64_reg(AluOp::Add, R3, R6);
    asm.store_reg(Size::U64, R3, state::STACK, R2);
    asm.alu64_imm(AluOp::Add, R1, 1);
    asm.store_reg(Size::U32, R6, state::FRAMES, R1);
    asm.jmp_imm(Cond::Eq, R1, 1, first);
    asm.alu64_imm(AluOp::Sub, R2, 1);
    asm.bind(first)?;
    asm.store_reg(Size::U64, R6, slot::PC, R2);
    Ok(())
}

/// At a function's first instruction (the caller says so) the first frame
/// has pushed nothing: its return address is at `sp`, CFA `sp + 8`.
fn emit_function_entry(asm: &mut Assembler, exits: &StepExits) -> Result<(), AsmError> {
    let not_entry = asm.new_label();
    asm.load(Size::U32, R1, R6, state::FRAMES);
    asm.jmp_imm(Cond::Ne, R1, 1, not_entry);
    asm.load(Size::U32, R1, R6, state::INPUT);
    asm.alu64_imm(AluOp::And, R1, input::FUNCTION_ENTRY as i32);
    asm.jmp_imm(Cond::Eq, R1, 0, not_entry);
    asm.comment("function entry: return address at sp");
    asm.load(Size::U64, R4, R6, state::SP);
    asm.mov64_reg(R1, R4);
    asm.alu64_imm(AluOp::Add, R1, 8);
    asm.store_reg(Size::U64, R6, slot::CFA, R1);
    asm.store_reg(Size::U64, R6, slot::RA_AT, R4);
    read_user(asm, R4, 8, exits.read_failed)?;
    asm.load(Size::U64, R1, R6, slot::READ);
    asm.store_reg(Size::U64, R6, slot::RA, R1);
    asm.load(Size::U64, R1, R6, state::BP);
    asm.store_reg(Size::U64, R6, slot::NEW_BP, R1);
    asm.jmp(exits.advance);
    asm.bind(not_entry)?;
    Ok(())
}

/// Binary search for the last mapping starting at or below the pc; leaves
/// the pc's ELF address in `slot::PC` and the table id in r3. A pc in no
/// known mapping is looked up in the kernel's memory areas.
fn emit_find_mapping(asm: &mut Assembler, step: &Step, exits: &StepExits) -> Result<(), AsmError> {
    asm.comment("find the mapping of the pc");
    let (top, done, upper) = (asm.new_label(), asm.new_label(), asm.new_label());
    asm.jmp_imm(Cond::Eq, R7, 0, exits.frame_pointer);
    asm.mov64_imm(R8, 0);
    asm.load(Size::U32, R9, R7, pm::COUNT);
    asm.mov64_imm(R5, 0);
    asm.bind(top)?;
    asm.jmp_reg(Cond::Ge, R8, R9, done);
    asm.alu64_imm(AluOp::Add, R5, 1);
    asm.jmp_imm(Cond::Gt, R5, MAPPING_SEARCH_STEPS as i32, done);
    midpoint(asm, R1);
    mapping_entry(asm, R2, R1);
    asm.load(Size::U64, R3, R2, pm::ENTRIES + pm::START);
    asm.load(Size::U64, R4, R6, slot::PC);
    asm.jmp_reg(Cond::Lt, R4, R3, upper);
    narrow(asm, R1, top, upper)?;
    asm.bind(done)?;
    let unmapped = asm.new_label();
    asm.jmp_imm(Cond::Eq, R8, 0, unmapped);
    asm.alu64_imm(AluOp::Sub, R8, 1);
    mapping_entry(asm, R8, R8);
    asm.load(Size::U64, R4, R6, slot::PC);
    asm.load(Size::U64, R3, R8, pm::ENTRIES + pm::END);
    let mapped = asm.new_label();
    asm.jmp_reg(Cond::Lt, R4, R3, mapped);
    asm.bind(unmapped)?;
    let biased = asm.new_label();
    if let Some(callback) = step.vma_callback {
        emit_kernel_vma(asm, step.maps, callback, biased)?;
    }
    set_flag(asm, flags::UNKNOWN_MAPPING);
    asm.jmp(exits.frame_pointer);
    asm.bind(mapped)?;
    asm.load(Size::U32, R3, R8, pm::ENTRIES + pm::TABLE);
    asm.jmp32_imm(Cond::Eq, R3, NO_TABLE as i32, exits.frame_pointer);
    let placed = asm.new_label();
    asm.jmp32_imm(Cond::Ne, R3, TABLE_PENDING as i32, placed);
    set_flag(asm, flags::TABLE_PENDING);
    asm.jmp(exits.frame_pointer);
    asm.bind(placed)?;
    asm.load(Size::U64, R5, R8, pm::ENTRIES + pm::BIAS);
    asm.bind(biased)?;
    asm.alu64_reg(AluOp::Sub, R4, R5);
    asm.mov64_reg(R5, R4);
    asm.alu64_imm(AluOp::Rsh, R5, 32);
    asm.jmp_imm(Cond::Ne, R5, 0, exits.frame_pointer);
    asm.store_reg(Size::U64, R6, slot::PC, R4);
    Ok(())
}

/// `dst = (r8 + r9) / 2`: the middle of the search range `[r8, r9)`.
fn midpoint(asm: &mut Assembler, dst: Reg) {
    asm.mov64_reg(dst, R8);
    asm.alu64_reg(AluOp::Add, dst, R9);
    asm.alu64_imm(AluOp::Rsh, dst, 1);
}

/// Keeps the upper half (`r8 = mid + 1`) on fall-through, the lower half
/// (`r9 = mid`) at `upper`, and loops to `top`.
fn narrow(asm: &mut Assembler, mid: Reg, top: Label, upper: Label) -> Result<(), AsmError> {
    asm.mov64_reg(R8, mid);
    asm.alu64_imm(AluOp::Add, R8, 1);
    asm.jmp(top);
    asm.bind(upper)?;
    asm.mov64_reg(R9, mid);
    asm.jmp(top);
    Ok(())
}

/// `dst = r7 + 32 * (index % MAX_MAPPINGS)`: the mask keeps the verifier
/// sure the entry is inside the value.
fn mapping_entry(asm: &mut Assembler, dst: Reg, index: Reg) {
    if dst != index {
        asm.mov64_reg(dst, index);
    }
    asm.alu64_imm(AluOp::And, dst, MAX_MAPPINGS as i32 - 1);
    asm.alu64_imm(AluOp::Lsh, dst, pm::ENTRY_BYTES.trailing_zeros() as i32);
    asm.alu64_reg(AluOp::Add, dst, R7);
}

/// Table r3's rows: binary search for the last row at or below the ELF
/// address; leaves a pointer to it in r8.
fn emit_find_row(
    asm: &mut Assembler,
    maps: &UnwindMaps,
    exits: &StepExits,
) -> Result<(), AsmError> {
    asm.comment("find the row of the pc");
    let (top, done, upper) = (asm.new_label(), asm.new_label(), asm.new_label());
    lookup(asm, maps.tables, R3);
    asm.jmp_imm(Cond::Eq, R0, 0, exits.frame_pointer);
    asm.load(Size::U32, R8, R0, table_slot::FIRST_ROW);
    asm.load(Size::U32, R9, R0, table_slot::ROWS);
    asm.alu64_reg(AluOp::Add, R9, R8);
    asm.store_reg(Size::U64, R6, slot::FIRST_ROW, R8);
    asm.store_imm(Size::U64, R10, slot::COUNTER, 0);
    asm.bind(top)?;
    asm.jmp_reg(Cond::Ge, R8, R9, done);
    asm.load(Size::U64, R1, R10, slot::COUNTER);
    asm.alu64_imm(AluOp::Add, R1, 1);
    asm.store_reg(Size::U64, R10, slot::COUNTER, R1);
    asm.jmp_imm(Cond::Gt, R1, ROW_SEARCH_STEPS as i32, done);
    midpoint(asm, R1);
    lookup(asm, maps.rows, R1);
    asm.jmp_imm(Cond::Eq, R0, 0, exits.frame_pointer);
    asm.load(Size::U32, R1, R0, row::PC);
    asm.load(Size::U64, R2, R6, slot::PC);
    midpoint(asm, R3);
    asm.jmp_reg(Cond::Gt, R1, R2, upper);
    narrow(asm, R3, top, upper)?;
    asm.bind(done)?;
    asm.load(Size::U64, R1, R6, slot::FIRST_ROW);
    asm.jmp_reg(Cond::Le, R8, R1, exits.frame_pointer);
    asm.alu64_imm(AluOp::Sub, R8, 1);
    lookup(asm, maps.rows, R8);
    asm.jmp_imm(Cond::Eq, R0, 0, exits.frame_pointer);
    asm.mov64_reg(R8, R0);
    Ok(())
}

/// Evaluates row r8: CFA, return address at CFA-8, the caller's rbp.
fn emit_apply_row(asm: &mut Assembler, exits: &StepExits) -> Result<(), AsmError> {
    asm.comment("apply the row: CFA, return address, rbp");
    let [rsp, rbp, plt, have_cfa, outermost, rbp_kept, rbp_lost] =
        [(); 7].map(|()| asm.new_label());
    asm.load(Size::U8, R1, R8, row::KIND);
    asm.alu64_imm(AluOp::And, R1, i32::from(kind::CFA_MASK));
    asm.load(Size::U16, R3, R8, row::CFA_OFFSET);
    asm.jmp_imm(Cond::Eq, R1, i32::from(kind::CFA_RSP), rsp);
    asm.jmp_imm(Cond::Eq, R1, i32::from(kind::CFA_RBP), rbp);
    asm.jmp_imm(Cond::Eq, R1, i32::from(kind::CFA_PLT), plt);
    asm.jmp_imm(Cond::Eq, R1, i32::from(kind::OUTERMOST), outermost);
    asm.jmp(exits.frame_pointer);
    asm.bind(outermost)?;
    set_flag(asm, flags::OUTERMOST);
    asm.jmp(exits.stop);
    asm.bind(rsp)?;
    asm.load(Size::U64, R4, R6, state::SP);
    asm.jmp(have_cfa);
    asm.bind(rbp)?;
    asm.load(Size::U64, R4, R6, state::BP);
    asm.jmp(have_cfa);
    asm.bind(plt)?;
    // rsp + 8, and 8 more from the entry's threshold on (rules.rs); r3
    // held the threshold, not an offset to add.
    asm.load(Size::U64, R4, R6, state::SP);
    asm.alu64_imm(AluOp::Add, R4, 8);
    asm.load(Size::U64, R5, R6, state::IP);
    asm.alu64_imm(AluOp::And, R5, 15);
    asm.mov64_reg(R1, R3);
    asm.mov64_imm(R3, 0);
    asm.jmp_reg(Cond::Lt, R5, R1, have_cfa);
    asm.alu64_imm(AluOp::Add, R4, 8);
    asm.bind(have_cfa)?;
    asm.alu64_reg(AluOp::Add, R4, R3);
    asm.store_reg(Size::U64, R6, slot::CFA, R4);
    asm.alu64_imm(AluOp::Sub, R4, 8);
    asm.store_reg(Size::U64, R6, slot::RA_AT, R4);
    read_user(asm, R4, 8, exits.read_failed)?;
    asm.load(Size::U64, R1, R6, slot::READ);
    asm.store_reg(Size::U64, R6, slot::RA, R1);
    set_flag(asm, flags::TABLE);
    asm.load(Size::U64, R1, R6, state::BP);
    asm.store_reg(Size::U64, R6, slot::NEW_BP, R1);
    asm.load(Size::U8, R1, R8, row::KIND);
    asm.jmp_imm(Cond::Set, R1, i32::from(kind::RBP_SAVED), rbp_kept);
    asm.jmp_imm(Cond::Set, R1, i32::from(kind::RBP_LOST), rbp_lost);
    asm.jmp(exits.advance);
    asm.bind(rbp_lost)?;
    asm.store_imm(Size::U64, R6, slot::NEW_BP, 0);
    asm.jmp(exits.advance);
    asm.bind(rbp_kept)?;
    // CFA + 8 * (i8)rbp_offset: sign-extend the byte with two shifts.
    asm.load(Size::U8, R3, R8, row::RBP_OFFSET);
    asm.alu64_imm(AluOp::Lsh, R3, 56);
    asm.alu64_imm(AluOp::Arsh, R3, 53);
    asm.load(Size::U64, R1, R6, slot::CFA);
    asm.alu64_reg(AluOp::Add, R3, R1);
    read_user(asm, R3, 8, exits.read_failed)?;
    asm.load(Size::U64, R1, R6, slot::READ);
    asm.store_reg(Size::U64, R6, slot::NEW_BP, R1);
    asm.jmp(exits.advance);
    Ok(())
}

/// The classic frame: saved rbp at `[rbp]`, return address at `[rbp+8]`,
/// CFA `rbp+16`. Stops when rbp is 0.
fn emit_frame_pointer_step(asm: &mut Assembler, exits: &StepExits) -> Result<(), AsmError> {
    asm.comment("frame pointer step");
    asm.load(Size::U64, R3, R6, state::BP);
    asm.jmp_imm(Cond::Eq, R3, 0, exits.stop);
    asm.mov64_reg(R1, R3);
    asm.alu64_imm(AluOp::Add, R1, 16);
    asm.store_reg(Size::U64, R6, slot::CFA, R1);
    asm.alu64_imm(AluOp::Sub, R1, 8);
    asm.store_reg(Size::U64, R6, slot::RA_AT, R1);
    read_user(asm, R3, 16, exits.read_failed)?;
    asm.load(Size::U64, R1, R6, slot::READ);
    asm.store_reg(Size::U64, R6, slot::NEW_BP, R1);
    asm.load(Size::U64, R1, R6, slot::READ + 8);
    asm.store_reg(Size::U64, R6, slot::RA, R1);
    set_flag(asm, flags::FRAME_POINTER);
    Ok(())
}

/// Most return instances a frame's lookup moves past: those of frames
/// walked without meeting their trampoline (frame-pointer steps that
/// skipped a frame), and those left behind by a `longjmp` (the kernel drops
/// them at the task's next uretprobe).
const SKIPPED_INSTANCES: u32 = 4;

/// A return address that is the uretprobe trampoline: the pending
/// uretprobe whose `stack` is the slot it was read from replaced it, and
/// its `orig_ret_vaddr` is the real one. The list is innermost first, so a
/// cursor moves past the instances below the slot; a tail call's chained
/// instance shares its caller's slot and address. No match leaves the
/// trampoline. Such a walk is not cached: it depends on kernel memory the
/// cache does not check. r0-r3, r8 clobbered.
fn emit_return_address(asm: &mut Assembler, returns: &ReturnLayout) -> Result<(), AsmError> {
    let (done, found) = (asm.new_label(), asm.new_label());
    asm.load(Size::U64, R1, R6, state::TRAMPOLINE);
    asm.jmp_imm(Cond::Eq, R1, 0, done);
    asm.load(Size::U64, R2, R6, slot::RA);
    asm.jmp_reg(Cond::Ne, R1, R2, done);
    asm.comment("a uretprobe's trampoline: the return address it replaced");
    asm.load(Size::U64, R8, R6, slot::RETURN_INSTANCE);
    for _ in 0..SKIPPED_INSTANCES {
        asm.jmp_imm(Cond::Eq, R8, 0, done);
        read_kernel(asm, R8, returns.instance_stack, done);
        asm.load(Size::U64, R1, R6, slot::READ);
        asm.load(Size::U64, R2, R6, slot::RA_AT);
        asm.jmp_reg(Cond::Eq, R1, R2, found);
        asm.jmp_reg(Cond::Gt, R1, R2, done);
        read_kernel(asm, R8, returns.instance_next, done);
        asm.load(Size::U64, R8, R6, slot::READ);
        asm.store_reg(Size::U64, R6, slot::RETURN_INSTANCE, R8);
    }
    asm.jmp(done);
    asm.bind(found)?;
    walk_cache_bpf::forget(asm);
    take_instance(asm, returns, done);
    asm.bind(done)?;
    Ok(())
}

/// Instance r8's `orig_ret_vaddr` into `slot::RA`, and the cursor past it;
/// jumps to `failed` when a read faults. r0-r3 clobbered.
fn take_instance(asm: &mut Assembler, returns: &ReturnLayout, failed: Label) {
    read_kernel(asm, R8, returns.instance_orig_ret, failed);
    asm.load(Size::U64, R1, R6, slot::READ);
    asm.store_reg(Size::U64, R6, slot::RA, R1);
    read_kernel(asm, R8, returns.instance_next, failed);
    asm.load(Size::U64, R1, R6, slot::READ);
    asm.store_reg(Size::U64, R6, slot::RETURN_INSTANCE, R1);
}

/// Moves to the caller: the CFA must be above the current sp (stacks grow
/// down), and a return address of 0 ends the stack.
fn emit_advance(asm: &mut Assembler, exits: &StepExits) -> Result<(), AsmError> {
    let progress = asm.new_label();
    asm.load(Size::U64, R1, R6, slot::CFA);
    asm.load(Size::U64, R2, R6, state::SP);
    asm.jmp_reg(Cond::Gt, R1, R2, progress);
    set_flag(asm, flags::NO_PROGRESS);
    asm.jmp(exits.stop);
    asm.bind(progress)?;
    let later = asm.new_label();
    asm.load(Size::U32, R2, R6, state::FRAMES);
    asm.jmp_imm(Cond::Ne, R2, 1, later);
    asm.load(Size::U64, R2, R6, slot::RA_AT);
    asm.store_reg(Size::U64, R6, state::FIRST_SLOT, R2);
    asm.bind(later)?;
    asm.load(Size::U64, R2, R6, slot::RA);
    asm.jmp_imm(Cond::Eq, R2, 0, exits.stop);
    asm.store_reg(Size::U64, R6, state::SP, R1);
    asm.store_reg(Size::U64, R6, state::IP, R2);
    asm.load(Size::U64, R1, R6, slot::NEW_BP);
    asm.store_reg(Size::U64, R6, state::BP, R1);
    asm.jmp(exits.next);
    Ok(())
}

/// `r0 = bpf_map_lookup_elem(map, &(u32)key)`, the key in the state (r6);
/// r1-r5 clobbered.
fn lookup(asm: &mut Assembler, map: MapId, key: Reg) {
    asm.store_reg(Size::U32, R6, slot::KEY, key);
    asm.ld_map_fd(R1, map);
    asm.mov64_reg(R2, R6);
    asm.alu64_imm(AluOp::Add, R2, i32::from(slot::KEY));
    asm.call_helper(helpers::MAP_LOOKUP_ELEM);
}

/// Reads `len` (8 or 16) user bytes at `addr` into `slot::READ`, logged
/// for the walk cache; jumps to `failed` when the read faults.
fn read_user(asm: &mut Assembler, addr: Reg, len: i32, failed: Label) -> Result<(), AsmError> {
    asm.store_reg(Size::U64, R6, slot::READ_AT, addr);
    asm.mov64_reg(R3, addr);
    asm.mov64_reg(R1, R6);
    asm.alu64_imm(AluOp::Add, R1, i32::from(slot::READ));
    asm.mov64_imm(R2, len);
    asm.call_helper(helpers::PROBE_READ_USER);
    asm.jmp_imm(Cond::Ne, R0, 0, failed);
    walk_cache_bpf::emit_log_read(asm, len / 8)
}

/// `state.flags |= bit` (r1 clobbered).
pub(super) fn set_flag(asm: &mut Assembler, bit: u32) {
    asm.load(Size::U32, R1, R6, state::FLAGS);
    asm.alu64_imm(AluOp::Or, R1, bit as i32);
    asm.store_reg(Size::U32, R6, state::FLAGS, R1);
}

/// Fills the state (r6) from the current task: `tgid`, the identity of its
/// address space (`mm->start_stack`, `mm->end_code`) and its user `ip`,
/// `sp`, `bp` (`bpf_task_pt_regs`: the registers saved at its last entry
/// into the kernel, right in any context, also when the program
/// interrupted the kernel; out of a uprobe's slot: `emit_map_out_of_line`).
/// The task's fields are loaded straight through its BTF pointer (the
/// verifier makes them faulting loads, ~1 ns each against ~20 for a
/// `bpf_probe_read_kernel` call). Jumps to `no_user_stack` for a kernel
/// thread (no `mm`). r0-r5, r7-r9 clobbered.
fn emit_load_current(
    asm: &mut Assembler,
    mm: &MmLayout,
    no_user_stack: Label,
) -> Result<(), AsmError> {
    use crate::vocab::x86_64::{RBP, RIP, RSP};
    asm.comment("the current task: tgid, address space, user registers");
    asm.call_helper(helpers::GET_CURRENT_PID_TGID);
    asm.alu64_imm(AluOp::Rsh, R0, 32);
    asm.store_reg(Size::U32, R6, state::TGID, R0);
    asm.call_helper(helpers::GET_CURRENT_TASK_BTF);
    asm.mov64_reg(R7, R0);
    asm.load(Size::U64, R8, R7, field_offset(mm.task_mm)?);
    asm.jmp_imm(Cond::Eq, R8, 0, no_user_stack);
    for (offset, field) in [
        (mm.mm_start_stack, state::MM_START_STACK),
        (mm.mm_end_code, state::MM_END_CODE),
    ] {
        asm.load(Size::U64, R1, R8, field_offset(offset)?);
        asm.store_reg(Size::U64, R6, field, R1);
    }
    asm.mov64_reg(R1, R7);
    asm.call_helper(helpers::TASK_PT_REGS);
    for (from, to) in [(RIP, state::IP), (RSP, state::SP), (RBP, state::BP)] {
        asm.load(Size::U64, R1, R0, from as i16);
        asm.store_reg(Size::U64, R6, to, R1);
    }
    asm.load(Size::U64, R1, R6, state::IP);
    asm.store_reg(Size::U64, R6, state::START_IP, R1);
    asm.load(Size::U64, R1, R6, state::SP);
    asm.store_reg(Size::U64, R6, state::START_SP, R1);
    asm.store_imm(Size::U64, R6, state::XOL_IP, 0);
    for field in [
        state::TRAMPOLINE,
        state::RETURN_INSTANCES,
        slot::RETURN_INSTANCE,
    ] {
        asm.store_imm(Size::U64, R6, field, 0);
    }
    vma_bpf::reset(asm);
    if let Some(xol) = &mm.xol {
        asm.mov64_reg(R9, R8);
        emit_load_uprobe_state(asm, xol)?;
    }
    Ok(())
}

/// What the task's uprobe state (`task->utask`, read once; NULL until
/// its first uprobe) says of its user stack: the instruction it runs out
/// of line, its pending uretprobes. r7 = the task (its BTF pointer), r9 =
/// its `mm`; r0-r5, r8 clobbered.
fn emit_load_uprobe_state(asm: &mut Assembler, xol: &XolLayout) -> Result<(), AsmError> {
    let done = asm.new_label();
    asm.load(Size::U64, R8, R7, field_offset(xol.task_utask)?);
    asm.jmp_imm(Cond::Eq, R8, 0, done);
    emit_map_out_of_line(asm, xol)?;
    emit_load_return_instances(asm, &xol.returns, done)?;
    asm.bind(done)?;
    Ok(())
}

/// The task's pending uretprobes and their trampoline's address, for
/// `emit_return_address` and the caller's stack copy:
/// `state::RETURN_INSTANCES` (and the step's cursor) =
/// `utask->return_instances`, `state::TRAMPOLINE` =
/// `mm->uprobes_state.xol_area->vaddr`, left 0 when the task has none.
/// r8 = `utask`, r9 = `mm`; jumps to `done` when done. r0-r3, r8
/// clobbered.
fn emit_load_return_instances(
    asm: &mut Assembler,
    returns: &ReturnLayout,
    done: Label,
) -> Result<(), AsmError> {
    read_kernel(asm, R8, returns.utask_return_instances, done);
    asm.load(Size::U64, R1, R6, slot::READ);
    asm.jmp_imm(Cond::Eq, R1, 0, done);
    asm.store_reg(Size::U64, R6, state::RETURN_INSTANCES, R1);
    asm.store_reg(Size::U64, R6, slot::RETURN_INSTANCE, R1);
    read_kernel(asm, R9, returns.mm_xol_area, done);
    asm.load(Size::U64, R8, R6, slot::READ);
    asm.jmp_imm(Cond::Eq, R8, 0, done);
    read_kernel(asm, R8, returns.xol_area_vaddr, done);
    asm.load(Size::U64, R1, R6, slot::READ);
    asm.store_reg(Size::U64, R6, state::TRAMPOLINE, R1);
    emit_leave_trampoline(asm, returns, done)
}

/// A task running the trampoline (its `ip` in the trampoline's slot: the
/// probed function returned into it, the kernel has not yet run the
/// handlers) is back in the caller the innermost instance recorded: the
/// walk starts at its `orig_ret_vaddr`, with the `sp` after the return
/// (`stack + 8`; the trampoline's own pushes are below), and that instance
/// is used up. A kernel walk keeps the trampoline. r0-r3, r8 clobbered.
fn emit_leave_trampoline(
    asm: &mut Assembler,
    returns: &ReturnLayout,
    done: Label,
) -> Result<(), AsmError> {
    asm.load(Size::U64, R2, R6, state::IP);
    asm.alu64_reg(AluOp::Sub, R2, R1);
    asm.jmp_imm(Cond::Ge, R2, XOL_SLOT_BYTES, done);
    asm.comment("returning through a uretprobe's trampoline: start in the caller");
    asm.load(Size::U64, R8, R6, state::RETURN_INSTANCES);
    read_kernel(asm, R8, returns.instance_stack, done);
    asm.load(Size::U64, R1, R6, slot::READ);
    asm.alu64_imm(AluOp::Add, R1, 8);
    asm.store_reg(Size::U64, R6, slot::CFA, R1);
    take_instance(asm, returns, done);
    asm.load(Size::U64, R1, R6, slot::RA);
    asm.store_reg(Size::U64, R6, state::IP, R1);
    asm.store_reg(Size::U64, R6, state::START_IP, R1);
    asm.load(Size::U64, R1, R6, slot::CFA);
    asm.store_reg(Size::U64, R6, state::SP, R1);
    asm.store_reg(Size::U64, R6, state::START_SP, R1);
    Ok(())
}

/// Bytes of a uprobe's out-of-line slot on x86-64 (`UPROBE_XOL_SLOT_BYTES`).
const XOL_SLOT_BYTES: i32 = 128;

/// While a uprobe's displaced instruction runs out of line (the task
/// stopped between the breakpoint and the single step's fix-up, its `ip`
/// in the `[uprobes]` page), the stack is the probed function's: the walk
/// starts at the probed address plus the offset into the slot (past the
/// instruction once it ran) instead. Records the slot `ip` in
/// `state::XOL_IP`. r8 = `utask` (kept); r0-r5 clobbered.
fn emit_map_out_of_line(asm: &mut Assembler, xol: &XolLayout) -> Result<(), AsmError> {
    let done = asm.new_label();
    read_kernel(asm, R8, xol.utask_xol_vaddr, done);
    asm.load(Size::U64, R1, R6, slot::READ);
    asm.jmp_imm(Cond::Eq, R1, 0, done);
    asm.load(Size::U64, R2, R6, state::IP);
    asm.alu64_reg(AluOp::Sub, R2, R1);
    asm.jmp_imm(Cond::Ge, R2, XOL_SLOT_BYTES, done);
    asm.store_reg(Size::U64, R6, slot::PC, R2);
    read_kernel(asm, R8, xol.utask_vaddr, done);
    asm.comment("in the uprobe's out-of-line slot: start at the probed address");
    asm.load(Size::U64, R1, R6, slot::READ);
    asm.load(Size::U64, R2, R6, slot::PC);
    asm.alu64_reg(AluOp::Add, R1, R2);
    asm.load(Size::U64, R2, R6, state::IP);
    asm.store_reg(Size::U64, R6, state::XOL_IP, R2);
    asm.store_reg(Size::U64, R6, state::IP, R1);
    asm.store_reg(Size::U64, R6, state::START_IP, R1);
    asm.bind(done)?;
    Ok(())
}

/// A kernel type's field offset as a load's offset.
fn field_offset(offset: u32) -> Result<i16, AsmError> {
    i16::try_from(offset).map_err(|_| AsmError::FieldOutOfRange { offset })
}

/// Reads the u64 at `base + offset` of kernel memory into `slot::READ`;
/// jumps to `failed` when the read faults.
pub(super) fn read_kernel(asm: &mut Assembler, base: Reg, offset: u32, failed: Label) {
    asm.mov64_reg(R3, base);
    asm.alu64_imm(AluOp::Add, R3, offset as i32);
    asm.mov64_reg(R1, R6);
    asm.alu64_imm(AluOp::Add, R1, i32::from(slot::READ));
    asm.mov64_imm(R2, 8);
    asm.call_helper(helpers::PROBE_READ_KERNEL);
    asm.jmp_imm(Cond::Ne, R0, 0, failed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::asm::opcode;
    use crate::unwind::layout::VmaLayout;
    use crate::vocab::MapId;

    fn maps() -> UnwindMaps {
        UnwindMaps {
            rows: MapId(1),
            tables: MapId(2),
            processes: MapId(3),
            files: MapId(4),
            vmas: MapId(5),
        }
    }

    /// Assembles a caller and the unwinder; counts its calls and callback addresses.
    fn assemble(kind: LoopKind) -> (usize, usize, usize) {
        let mut asm = Assembler::new();
        let mm = MmLayout {
            task_mm: 1000,
            mm_start_stack: 100,
            mm_end_code: 50,
            xol: Some(XolLayout {
                task_utask: 2000,
                utask_xol_vaddr: 64,
                utask_vaddr: 32,
                returns: ReturnLayout {
                    utask_return_instances: 8,
                    instance_stack: 24,
                    instance_orig_ret: 32,
                    instance_next: 48,
                    mm_xol_area: 900,
                    xol_area_vaddr: 40,
                },
            }),
            vma: Some(VmaLayout {
                vm_start: 0,
                vm_end: 8,
                vm_pgoff: 160,
                vm_flags: 32,
                vm_file: 168,
                file_inode: 32,
                inode_ino: 64,
                inode_sb: 40,
                sb_dev: 16,
            }),
        };
        let unwinder = UserUnwinder::new(&mut asm, maps(), kind, mm);
        unwinder.call(&mut asm, R6, None);
        asm.exit();
        unwinder.emit_functions(&mut asm).expect("labels bind");
        let insns = asm.finish().expect("assembles").insns;
        let count = |code: u8, src: u8| {
            let matches = |i: &&u64| (**i as u8, (**i >> 12) as u8 & 0xf) == (code, src);
            insns.iter().filter(matches).count()
        };
        let calls = count(opcode::CALL, opcode::PSEUDO_CALL);
        (
            calls,
            count(opcode::LD_IMM64, opcode::PSEUDO_FUNC),
            insns.len(),
        )
    }

    /// With `bpf_loop` the step is a callback; with a bounded loop it is
    /// inline. Either way the caller makes one bpf-to-bpf call, the step
    /// passes `bpf_find_vma` its callback, and the unwinder with its walk
    /// cache, the out-of-line check, the uretprobe return addresses and the
    /// kernel's memory areas stays under 950 instructions (908; 758 without
    /// the memory areas).
    #[test]
    fn loop_kinds_assemble() {
        let (calls, callbacks, bpf_loop_len) = assemble(LoopKind::BpfLoop);
        assert_eq!((calls, callbacks), (1, 2));
        let (calls, callbacks, bounded_len) = assemble(LoopKind::Bounded { frames: 8 });
        assert_eq!((calls, callbacks), (1, 1));
        assert!(
            bpf_loop_len < 950 && bounded_len < 950,
            "{bpf_loop_len} {bounded_len}"
        );
    }
}
