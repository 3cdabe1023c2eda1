//! The BPF kernel-stack walker: BPF functions a raw tracepoint program can
//! call instead of `bpf_get_stack` for the current task's kernel stack,
//! with the kernel's own ORC rules ([`super::orc`], placed by
//! [`super::orc_maps::place`]) walked as `arch/x86/kernel/unwind_orc.c`
//! walks them. Output: the same frames `bpf_get_stack` stores after its
//! skip, or "given up" (-1): the caller then takes the kernel's.
//!
//! It starts from its own frame: the x86-64 JIT keeps a BPF function's r10
//! in `rbp` (a function using less than 64 bytes of stack never gets a
//! private stack), so `[r10]` is the calling program's `rbp`, and that
//! frame's return address, `[rbp + 8]`, is in the tracepoint glue that ran
//! it — where the kernel's walk (`orc_fp_entry` for BPF code) goes on from.
//! It copies the task's kernel stack from there to its top with one
//! `bpf_probe_read_kernel` and walks the copy. Anything it cannot do as
//! the kernel does (an `ip` outside the core text: modules, BPF, ftrace
//! trampolines; a replaced return address; an unusable rule; a read
//! outside the copy; a stack the kernel would cut) gives up. Design and
//! costs: `docs/unwinding.md`, "Kernel stacks".

use crate::codegen::asm::{AluOp, AsmError, Assembler, Cond, Label, Reg, Size};
use crate::codegen::helpers;

use super::maps::MAX_FRAMES;
use super::orc::{BLOCK_BYTES, kind, layout as row};
use super::orc_maps::{MAX_BLOCKS, OrcMaps, ROWS_PER_CHUNK, SEARCH_STEPS, info, walk};

use Reg::{R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10};

/// Lowest kernel address: an `ip` below is user space, where the kernel's
/// walk stops (it stores no frame there).
const KERNEL_SPACE: u64 = 0xffff_8000_0000_0000;
/// Offsets in `struct pt_regs` (x86-64): `bp`, `ip`, `sp`; and of `ip` and
/// `sp` in the hardware's interrupt frame (`IRET_FRAME_OFFSET` is `ip`'s).
const REGS_BP: i16 = 32;
const REGS_IP: i16 = 128;
const REGS_SP: i16 = 152;
const REGS_BYTES: i32 = 168;
const IRET_IP: i16 = 0;
const IRET_SP: i16 = 24;
const IRET_BYTES: i32 = 40;
/// Steps at most: every frame a stack can store, and the tracer's.
const STEPS: i32 = MAX_FRAMES as i32 + 32;

/// Stack slots: the entry function's map key and `bpf_loop` context (the
/// walk, info and blocks pointers: 32 bytes, under the 64 at which the
/// kernel would give the function a private stack), the step's search
/// counter.
mod slot {
    pub const KEY: i16 = -8;
    pub const LOOP_CTX: i16 = -32;
    pub const COUNTER: i16 = -8;
}

/// The walker's functions in one program: [`KernelWalker::call`] anywhere,
/// then [`KernelWalker::emit_functions`] once after the program's last
/// instruction.
pub struct KernelWalker {
    maps: OrcMaps,
    /// `task_struct.stack`'s offset.
    task_stack: u32,
    entry: Label,
    step: Label,
}

impl KernelWalker {
    pub fn new(asm: &mut Assembler, maps: OrcMaps, task_stack: u32) -> Self {
        KernelWalker {
            maps,
            task_stack,
            entry: asm.new_label(),
            step: asm.new_label(),
        }
    }

    /// `r0 = walk(to)`: the frames into `to` (room for `MAX_FRAMES`);
    /// r0 is their bytes, or negative when the walker gave up. r1-r5
    /// clobbered. Must be called from the program's main function, whose
    /// frame the walk starts above.
    pub fn call(&self, asm: &mut Assembler, to: Reg) {
        if to != R1 {
            asm.mov64_reg(R1, to);
        }
        asm.call_local(self.entry);
    }

    /// Emits the walker's functions.
    pub fn emit_functions(&self, asm: &mut Assembler) -> Result<(), AsmError> {
        asm.bind(self.entry)?;
        asm.comment("kernel_walk(to): the current task's kernel stack with ORC");
        let give_up = asm.new_label();
        asm.mov64_reg(R9, R1);
        asm.store_imm(Size::U32, R10, slot::KEY, 0);
        for (map, reg) in [
            (self.maps.walk, R6),
            (self.maps.info, R7),
            (self.maps.blocks, R8),
        ] {
            asm.ld_map_fd(R1, map);
            asm.mov64_reg(R2, R10);
            asm.alu64_imm(AluOp::Add, R2, i32::from(slot::KEY));
            asm.call_helper(helpers::MAP_LOOKUP_ELEM);
            asm.jmp_imm(Cond::Eq, R0, 0, give_up);
            asm.mov64_reg(reg, R0);
        }
        asm.load(Size::U32, R1, R7, info::BLOCKS);
        asm.jmp_imm(Cond::Eq, R1, 0, give_up);
        self.emit_copy_stack(asm, give_up)?;
        emit_program_frame(asm, give_up)?;
        asm.store_reg(Size::U64, R10, slot::LOOP_CTX, R6);
        asm.store_reg(Size::U64, R10, slot::LOOP_CTX + 8, R7);
        asm.store_reg(Size::U64, R10, slot::LOOP_CTX + 16, R8);
        asm.mov64_imm(R1, STEPS);
        asm.ld_func(R2, self.step);
        asm.mov64_reg(R3, R10);
        asm.alu64_imm(AluOp::Add, R3, i32::from(slot::LOOP_CTX));
        asm.mov64_imm(R4, 0);
        asm.call_helper(helpers::LOOP);
        emit_hand_over(asm, give_up)?;
        asm.bind(give_up)?;
        asm.mov64_imm(R0, -1);
        asm.exit();
        asm.bind(self.step)?;
        asm.comment("kernel_step(index, ctx): one frame; 0 goes on, 1 stops");
        emit_step(asm, self.maps)
    }

    /// Copies the task's kernel stack from this function's frame (r10) to
    /// the stack's top into the walk (r6); r9 (`to`), r7, r8 kept.
    fn emit_copy_stack(&self, asm: &mut Assembler, give_up: Label) -> Result<(), AsmError> {
        asm.comment("copy the kernel stack from this frame to its top");
        // Stored as a number: the walk compares and offsets it.
        asm.store_reg(Size::U64, R6, walk::LOW, R10);
        asm.call_helper(helpers::GET_CURRENT_TASK);
        asm.mov64_reg(R3, R0);
        asm.alu64_imm(AluOp::Add, R3, self.task_stack as i32);
        asm.mov64_reg(R1, R6);
        asm.alu64_imm(AluOp::Add, R1, i32::from(walk::STACK));
        asm.mov64_imm(R2, 8);
        asm.call_helper(helpers::PROBE_READ_KERNEL);
        asm.jmp_imm(Cond::Ne, R0, 0, give_up);
        asm.load(Size::U64, R1, R6, walk::STACK);
        asm.load(Size::U64, R2, R6, walk::LOW);
        asm.jmp_reg(Cond::Lt, R2, R1, give_up);
        asm.alu64_imm(AluOp::Add, R1, walk::COPY_BYTES as i32);
        asm.jmp_reg(Cond::Ge, R2, R1, give_up);
        asm.alu64_reg(AluOp::Sub, R1, R2);
        asm.jmp_imm(Cond::Lt, R1, 16, give_up);
        asm.jmp_imm(Cond::Gt, R1, walk::COPY_BYTES as i32, give_up);
        asm.store_reg(Size::U64, R6, walk::LEN, R1);
        asm.mov64_reg(R2, R1);
        asm.mov64_reg(R1, R6);
        asm.alu64_imm(AluOp::Add, R1, i32::from(walk::COPY));
        asm.load(Size::U64, R3, R6, walk::LOW);
        asm.call_helper(helpers::PROBE_READ_KERNEL);
        asm.jmp_imm(Cond::Ne, R0, 0, give_up);
        Ok(())
    }
}

/// The first frame: the program's return address into the glue that ran
/// it (`[rbp + 8]`, the program's `rbp` at `[r10]`), its CFA `rbp + 16`,
/// the glue's `rbp` at `[rbp]`, as the kernel's frame-pointer rule for BPF
/// code gives them; no registers, no signal, nothing walked yet.
fn emit_program_frame(asm: &mut Assembler, give_up: Label) -> Result<(), AsmError> {
    asm.load(Size::U64, R3, R6, walk::LOW);
    copy_word(asm, R4, R3, give_up);
    asm.mov64_reg(R3, R4);
    asm.alu64_imm(AluOp::Add, R3, 16);
    asm.store_reg(Size::U64, R6, walk::SP, R3);
    copy_word(asm, R3, R4, give_up);
    asm.store_reg(Size::U64, R6, walk::BP, R3);
    asm.alu64_imm(AluOp::Add, R4, 8);
    copy_word(asm, R3, R4, give_up);
    asm.store_reg(Size::U64, R6, walk::IP, R3);
    for field in [walk::REGS, walk::PREV_REGS] {
        asm.store_imm(Size::U64, R6, field, 0);
    }
    for field in [
        walk::WALKED,
        walk::STORED,
        walk::REGS_FULL,
        walk::SIGNAL,
        walk::STATUS,
    ] {
        asm.store_imm(Size::U32, R6, field, 0);
    }
    Ok(())
}

/// After the loop: a finished walk's frames into `to` (r9), r0 their
/// bytes; anything else gives up.
fn emit_hand_over(asm: &mut Assembler, give_up: Label) -> Result<(), AsmError> {
    let empty = asm.new_label();
    asm.load(Size::U32, R1, R6, walk::STATUS);
    asm.jmp_imm(Cond::Ne, R1, walk::DONE, give_up);
    asm.load(Size::U32, R7, R6, walk::STORED);
    asm.alu64_imm(AluOp::And, R7, MAX_FRAMES as i32);
    asm.alu64_imm(AluOp::Lsh, R7, 3);
    asm.jmp_imm(Cond::Eq, R7, 0, empty);
    asm.mov64_reg(R1, R9);
    asm.mov64_reg(R2, R7);
    asm.mov64_reg(R3, R6);
    asm.alu64_imm(AluOp::Add, R3, i32::from(walk::FRAMES));
    asm.call_helper(helpers::PROBE_READ_KERNEL);
    asm.jmp_imm(Cond::Ne, R0, 0, give_up);
    asm.bind(empty)?;
    asm.mov64_reg(R0, R7);
    asm.exit();
    Ok(())
}

/// Where a step goes when it is not moving one frame up.
struct Exits {
    done: Label,
    give_up: Label,
}

/// One frame, r2 the `bpf_loop` context: record `ip`, find its row, apply
/// it (`unwind_next_frame`).
fn emit_step(asm: &mut Assembler, maps: OrcMaps) -> Result<(), AsmError> {
    let exits = Exits {
        done: asm.new_label(),
        give_up: asm.new_label(),
    };
    asm.load(Size::U64, R6, R2, 0);
    asm.load(Size::U64, R7, R2, 8);
    asm.load(Size::U64, R8, R2, 16);
    emit_record(asm, &exits)?;
    emit_find_row(asm, maps, &exits)?;
    emit_apply_row(asm, &exits)?;
    asm.bind(exits.done)?;
    asm.store_imm(Size::U32, R6, walk::STATUS, walk::DONE);
    asm.mov64_imm(R0, 1);
    asm.exit();
    asm.bind(exits.give_up)?;
    asm.store_imm(Size::U32, R6, walk::STATUS, walk::GIVEN_UP);
    asm.mov64_imm(R0, 1);
    asm.exit();
    Ok(())
}

/// Ends at a user (or zero) `ip`, as the kernel's walk does; gives up on
/// one outside the core text or at a trampoline; stores `ip` past the
/// skipped frames; leaves the pc to look up in `walk::PC`.
fn emit_record(asm: &mut Assembler, exits: &Exits) -> Result<(), AsmError> {
    let (counted, own) = (asm.new_label(), asm.new_label());
    asm.load(Size::U64, R3, R6, walk::IP);
    asm.jmp_imm(Cond::Eq, R3, 0, exits.done);
    asm.ld_imm64(R1, KERNEL_SPACE);
    asm.jmp_reg(Cond::Lt, R3, R1, exits.done);
    asm.load(Size::U64, R1, R7, info::TEXT_BASE);
    asm.jmp_reg(Cond::Lt, R3, R1, exits.give_up);
    asm.load(Size::U64, R1, R7, info::TEXT_END);
    asm.jmp_reg(Cond::Ge, R3, R1, exits.give_up);
    for i in 0..info::TRAMPOLINES as i16 {
        asm.load(Size::U64, R1, R7, info::TRAMPOLINE + 8 * i);
        asm.jmp_reg(Cond::Eq, R3, R1, exits.give_up);
    }
    asm.load(Size::U32, R1, R6, walk::WALKED);
    asm.load(Size::U32, R2, R7, info::SKIP);
    asm.jmp_reg(Cond::Lt, R1, R2, counted);
    asm.load(Size::U32, R4, R6, walk::STORED);
    asm.load(Size::U32, R5, R7, info::MAX_STORED);
    asm.jmp_reg(Cond::Ge, R4, R5, exits.give_up);
    asm.alu64_imm(AluOp::And, R4, MAX_FRAMES as i32);
    asm.mov64_reg(R5, R4);
    asm.alu64_imm(AluOp::Lsh, R5, 3);
    asm.alu64_reg(AluOp::Add, R5, R6);
    asm.store_reg(Size::U64, R5, walk::FRAMES, R3);
    asm.alu64_imm(AluOp::Add, R4, 1);
    asm.store_reg(Size::U32, R6, walk::STORED, R4);
    asm.bind(counted)?;
    asm.alu64_imm(AluOp::Add, R1, 1);
    asm.store_reg(Size::U32, R6, walk::WALKED, R1);
    // A return address may be the first byte after a call to a function
    // that does not return: the call's own rule is the one in force.
    asm.load(Size::U64, R1, R7, info::TEXT_BASE);
    asm.alu64_reg(AluOp::Sub, R3, R1);
    asm.load(Size::U32, R1, R6, walk::SIGNAL);
    asm.jmp_imm(Cond::Ne, R1, 0, own);
    asm.alu64_imm(AluOp::Sub, R3, 1);
    asm.bind(own)?;
    asm.store_reg(Size::U64, R6, walk::PC, R3);
    Ok(())
}

/// The pc's row, pointed to by r0: the row cache's (`walk::ROW_CACHE`),
/// else the search's, then kept there.
fn emit_find_row(asm: &mut Assembler, maps: OrcMaps, exits: &Exits) -> Result<(), AsmError> {
    let (search, found) = (asm.new_label(), asm.new_label());
    row_cache_entry(asm);
    asm.load(Size::U64, R3, R2, walk::ROW_CACHE);
    asm.jmp_reg(Cond::Ne, R3, R1, search);
    asm.mov64_reg(R0, R2);
    asm.alu64_imm(AluOp::Add, R0, i32::from(walk::ROW_CACHE) + 8);
    asm.jmp(found);
    asm.bind(search)?;
    emit_search_row(asm, maps, exits)?;
    row_cache_entry(asm);
    asm.store_reg(Size::U64, R2, walk::ROW_CACHE, R1);
    asm.load(Size::U64, R3, R0, 0);
    asm.store_reg(Size::U64, R2, walk::ROW_CACHE + 8, R3);
    asm.bind(found)
}

/// r2 = the walk (r6) plus the offset of the pc's row cache entry, r1 =
/// the entry's tag for the pc (`pc + 1`).
fn row_cache_entry(asm: &mut Assembler) {
    asm.load(Size::U64, R1, R6, walk::PC);
    asm.mov64_reg(R2, R1);
    asm.alu64_imm(AluOp::Rsh, R2, 8);
    asm.alu64_reg(AluOp::Xor, R2, R1);
    asm.alu64_imm(AluOp::And, R2, walk::ROW_CACHE_ENTRIES as i32 - 1);
    asm.alu64_imm(AluOp::Lsh, R2, 4);
    asm.alu64_reg(AluOp::Add, R2, R6);
    asm.alu64_imm(AluOp::Add, R1, 1);
}

/// The pc's block, then a binary search among the block's rows for the
/// last at or below the pc; leaves a pointer to it in r0.
fn emit_search_row(asm: &mut Assembler, maps: OrcMaps, exits: &Exits) -> Result<(), AsmError> {
    let (top, found, upper) = (asm.new_label(), asm.new_label(), asm.new_label());
    asm.load(Size::U64, R1, R6, walk::PC);
    asm.alu64_imm(AluOp::Rsh, R1, BLOCK_BYTES.trailing_zeros() as i32);
    asm.mov64_reg(R2, R1);
    asm.alu64_imm(AluOp::Add, R2, 1);
    asm.load(Size::U32, R3, R7, info::BLOCKS);
    asm.jmp_reg(Cond::Ge, R2, R3, exits.give_up);
    asm.alu64_imm(AluOp::And, R1, MAX_BLOCKS as i32 - 1);
    asm.alu64_imm(AluOp::Lsh, R1, 2);
    asm.alu64_reg(AluOp::Add, R1, R8);
    asm.load(Size::U32, R8, R1, 0);
    asm.load(Size::U32, R9, R1, 4);
    asm.alu64_imm(AluOp::Add, R9, 1);
    asm.store_imm(Size::U64, R10, slot::COUNTER, 0);
    asm.bind(top)?;
    asm.jmp_reg(Cond::Ge, R8, R9, found);
    asm.load(Size::U64, R1, R10, slot::COUNTER);
    asm.alu64_imm(AluOp::Add, R1, 1);
    asm.store_reg(Size::U64, R10, slot::COUNTER, R1);
    asm.jmp_imm(Cond::Gt, R1, SEARCH_STEPS as i32, exits.give_up);
    midpoint(asm, R4);
    row_pointer(asm, maps, R4, exits.give_up);
    asm.load(Size::U32, R1, R0, row::PC);
    asm.load(Size::U64, R2, R6, walk::PC);
    midpoint(asm, R4);
    asm.jmp_reg(Cond::Gt, R1, R2, upper);
    asm.mov64_reg(R8, R4);
    asm.alu64_imm(AluOp::Add, R8, 1);
    asm.jmp(top);
    asm.bind(upper)?;
    asm.mov64_reg(R9, R4);
    asm.jmp(top);
    asm.bind(found)?;
    asm.alu64_imm(AluOp::Sub, R8, 1);
    row_pointer(asm, maps, R8, exits.give_up);
    Ok(())
}

/// `dst = (r8 + r9) / 2`.
fn midpoint(asm: &mut Assembler, dst: Reg) {
    asm.mov64_reg(dst, R8);
    asm.alu64_reg(AluOp::Add, dst, R9);
    asm.alu64_imm(AluOp::Rsh, dst, 1);
}

/// `r0 = &rows[index]` (its chunk looked up, the offset masked for the
/// verifier); r1-r5 clobbered, `index` kept unless it is one of them.
fn row_pointer(asm: &mut Assembler, maps: OrcMaps, index: Reg, fail: Label) {
    let offset_mask = (ROWS_PER_CHUNK - 1) as i32;
    asm.mov64_reg(R1, index);
    asm.alu64_imm(AluOp::And, R1, offset_mask);
    asm.alu64_imm(AluOp::Lsh, R1, 3);
    asm.store_reg(Size::U64, R6, walk::TEMP, R1);
    asm.mov64_reg(R1, index);
    asm.alu64_imm(AluOp::Rsh, R1, ROWS_PER_CHUNK.trailing_zeros() as i32);
    asm.store_reg(Size::U32, R6, walk::KEY, R1);
    asm.ld_map_fd(R1, maps.rows);
    asm.mov64_reg(R2, R6);
    asm.alu64_imm(AluOp::Add, R2, i32::from(walk::KEY));
    asm.call_helper(helpers::MAP_LOOKUP_ELEM);
    asm.jmp_imm(Cond::Eq, R0, 0, fail);
    asm.load(Size::U64, R1, R6, walk::TEMP);
    asm.alu64_imm(AluOp::And, R1, offset_mask << 3);
    asm.alu64_reg(AluOp::Add, R0, R1);
}

/// Applies row r0 to the frame: the CFA, the caller's `ip` and `sp` by the
/// frame's type, its `bp`; then moves up, if up.
fn emit_apply_row(asm: &mut Assembler, exits: &Exits) -> Result<(), AsmError> {
    asm.load(Size::U8, R8, R0, row::KIND);
    asm.load(Size::U16, R9, R0, row::SP_OFFSET);
    asm.alu64_imm(AluOp::Lsh, R9, 48);
    asm.alu64_imm(AluOp::Arsh, R9, 48);
    // The saved bp's offset, in 8-byte units: sign-extended and scaled.
    asm.load(Size::U8, R1, R0, row::BP_OFFSET);
    asm.alu64_imm(AluOp::Lsh, R1, 56);
    asm.alu64_imm(AluOp::Arsh, R1, 53);
    asm.store_reg(Size::U64, R6, walk::TEMP, R1);
    asm.mov64_reg(R1, R8);
    asm.alu64_imm(AluOp::And, R1, i32::from(kind::TYPE_MASK));
    let end = i32::from(kind::TYPE_END << kind::TYPE_SHIFT);
    asm.jmp_imm(Cond::Eq, R1, end, exits.done);
    emit_cfa(asm, exits)?;
    asm.mov64_reg(R1, R8);
    asm.alu64_imm(AluOp::Rsh, R1, 7);
    asm.store_reg(Size::U32, R6, walk::SIGNAL, R1);
    emit_caller(asm, exits)?;
    emit_caller_bp(asm, exits)?;
    emit_advance(asm, exits)
}

/// The CFA (the caller's `sp` before its call) by the row's base, into
/// `walk::CFA` and r4.
fn emit_cfa(asm: &mut Assembler, exits: &Exits) -> Result<(), AsmError> {
    let (offset, have, bp_indirect) = (asm.new_label(), asm.new_label(), asm.new_label());
    asm.mov64_reg(R1, R8);
    asm.alu64_imm(AluOp::And, R1, i32::from(kind::SP_MASK));
    asm.load(Size::U64, R4, R6, walk::SP);
    asm.jmp_imm(Cond::Eq, R1, i32::from(kind::SP_SP), offset);
    asm.load(Size::U64, R4, R6, walk::BP);
    asm.jmp_imm(Cond::Eq, R1, i32::from(kind::SP_BP), offset);
    asm.jmp_imm(Cond::Eq, R1, i32::from(kind::SP_BP_INDIRECT), bp_indirect);
    asm.load(Size::U64, R3, R6, walk::SP);
    copy_word(asm, R4, R3, exits.give_up);
    asm.jmp(offset);
    asm.bind(bp_indirect)?;
    asm.load(Size::U64, R3, R6, walk::BP);
    asm.alu64_reg(AluOp::Add, R3, R9);
    copy_word(asm, R4, R3, exits.give_up);
    asm.jmp(have);
    asm.bind(offset)?;
    asm.alu64_reg(AluOp::Add, R4, R9);
    asm.bind(have)?;
    asm.store_reg(Size::U64, R6, walk::CFA, R4);
    Ok(())
}

/// The caller's `ip` and `sp` into `walk::NEW_IP`, `walk::NEW_SP`: the
/// return address below the CFA, or the registers at it (a whole `pt_regs`,
/// or the interrupt frame, keeping the last whole set).
fn emit_caller(asm: &mut Assembler, exits: &Exits) -> Result<(), AsmError> {
    let [call, regs, partial, kept, done] = [(); 5].map(|()| asm.new_label());
    asm.mov64_reg(R1, R8);
    asm.alu64_imm(AluOp::And, R1, i32::from(kind::TYPE_MASK));
    let of = |frame_type: u8| i32::from(frame_type << kind::TYPE_SHIFT);
    asm.jmp_imm(Cond::Eq, R1, of(kind::TYPE_CALL), call);
    asm.jmp_imm(Cond::Eq, R1, of(kind::TYPE_REGS), regs);
    asm.jmp_imm(Cond::Eq, R1, of(kind::TYPE_REGS_PARTIAL), partial);
    asm.jmp(exits.give_up);
    asm.bind(call)?;
    asm.mov64_reg(R3, R4);
    asm.alu64_imm(AluOp::Sub, R3, 8);
    copy_word(asm, R5, R3, exits.give_up);
    asm.store_reg(Size::U64, R6, walk::NEW_IP, R5);
    asm.store_reg(Size::U64, R6, walk::NEW_SP, R4);
    asm.store_imm(Size::U64, R6, walk::REGS, 0);
    asm.store_imm(Size::U64, R6, walk::PREV_REGS, 0);
    asm.jmp(done);
    asm.bind(regs)?;
    emit_saved_ip_sp(asm, REGS_BYTES, (REGS_IP, REGS_SP), exits.give_up);
    asm.store_imm(Size::U64, R6, walk::PREV_REGS, 0);
    asm.store_reg(Size::U64, R6, walk::REGS, R4);
    asm.store_imm(Size::U32, R6, walk::REGS_FULL, 1);
    asm.jmp(done);
    asm.bind(partial)?;
    emit_saved_ip_sp(asm, IRET_BYTES, (IRET_IP, IRET_SP), exits.give_up);
    asm.load(Size::U32, R1, R6, walk::REGS_FULL);
    asm.jmp_imm(Cond::Eq, R1, 0, kept);
    asm.load(Size::U64, R1, R6, walk::REGS);
    asm.store_reg(Size::U64, R6, walk::PREV_REGS, R1);
    asm.bind(kept)?;
    asm.mov64_reg(R1, R4);
    asm.alu64_imm(AluOp::Sub, R1, i32::from(REGS_IP));
    asm.store_reg(Size::U64, R6, walk::REGS, R1);
    asm.store_imm(Size::U32, R6, walk::REGS_FULL, 0);
    asm.bind(done)?;
    Ok(())
}

/// `walk::NEW_IP` and `walk::NEW_SP` from the `bytes` of saved registers
/// at `r4` (a `pt_regs` or an interrupt frame), `ip` and `sp` at `at`; r1
/// is left pointing at them in the copy.
fn emit_saved_ip_sp(asm: &mut Assembler, bytes: i32, at: (i16, i16), give_up: Label) {
    copy_pointer(asm, R4, bytes, give_up);
    asm.load(Size::U64, R5, R1, walk::COPY + at.0);
    asm.store_reg(Size::U64, R6, walk::NEW_IP, R5);
    asm.load(Size::U64, R5, R1, walk::COPY + at.1);
    asm.store_reg(Size::U64, R6, walk::NEW_SP, R5);
}

/// The caller's `bp`: saved at the CFA or at `bp` plus the row's offset,
/// or, where the row says nothing, the one in the registers found (the
/// whole set, else the last whole set), else unchanged.
fn emit_caller_bp(asm: &mut Assembler, exits: &Exits) -> Result<(), AsmError> {
    let [at_cfa, at_bp, from_regs, read, done] = [(); 5].map(|()| asm.new_label());
    asm.mov64_reg(R1, R8);
    asm.alu64_imm(AluOp::And, R1, i32::from(kind::BP_MASK));
    let of = |rule: u8| i32::from(rule << kind::BP_SHIFT);
    asm.jmp_imm(Cond::Eq, R1, of(kind::BP_AT_PREV_SP), at_cfa);
    asm.jmp_imm(Cond::Eq, R1, of(kind::BP_AT_BP), at_bp);
    asm.jmp_imm(Cond::Ne, R1, of(kind::BP_UNCHANGED), exits.give_up);
    asm.load(Size::U64, R3, R6, walk::REGS);
    asm.jmp_imm(Cond::Eq, R3, 0, done);
    asm.load(Size::U32, R1, R6, walk::REGS_FULL);
    asm.jmp_imm(Cond::Ne, R1, 0, from_regs);
    asm.load(Size::U64, R3, R6, walk::PREV_REGS);
    asm.jmp_imm(Cond::Eq, R3, 0, done);
    asm.bind(from_regs)?;
    asm.alu64_imm(AluOp::Add, R3, i32::from(REGS_BP));
    asm.jmp(read);
    asm.bind(at_cfa)?;
    asm.load(Size::U64, R3, R6, walk::CFA);
    asm.load(Size::U64, R1, R6, walk::TEMP);
    asm.alu64_reg(AluOp::Add, R3, R1);
    asm.jmp(read);
    asm.bind(at_bp)?;
    asm.load(Size::U64, R3, R6, walk::BP);
    asm.load(Size::U64, R1, R6, walk::TEMP);
    asm.alu64_reg(AluOp::Add, R3, R1);
    asm.bind(read)?;
    copy_word(asm, R5, R3, exits.give_up);
    asm.store_reg(Size::U64, R6, walk::BP, R5);
    asm.bind(done)?;
    Ok(())
}

/// Moves to the caller unless its `sp` is on the task's stack and not
/// above the current one (the kernel calls that an error).
fn emit_advance(asm: &mut Assembler, exits: &Exits) -> Result<(), AsmError> {
    let up = asm.new_label();
    asm.load(Size::U64, R1, R6, walk::NEW_SP);
    asm.load(Size::U64, R2, R6, walk::SP);
    asm.jmp_reg(Cond::Gt, R1, R2, up);
    asm.load(Size::U64, R2, R6, walk::STACK);
    asm.jmp_reg(Cond::Lt, R1, R2, up);
    asm.alu64_imm(AluOp::Add, R2, walk::COPY_BYTES as i32);
    asm.jmp_reg(Cond::Ge, R1, R2, up);
    asm.jmp(exits.give_up);
    asm.bind(up)?;
    asm.store_reg(Size::U64, R6, walk::SP, R1);
    asm.load(Size::U64, R1, R6, walk::NEW_IP);
    asm.store_reg(Size::U64, R6, walk::IP, R1);
    asm.mov64_imm(R0, 0);
    asm.exit();
    Ok(())
}

/// r1 = the walk (r6) plus the offset in the copy of `bytes` bytes at
/// kernel address `addr` (read them at `walk::COPY` from r1); jumps to
/// `fail` when they are not all in the copy. r2 clobbered.
fn copy_pointer(asm: &mut Assembler, addr: Reg, bytes: i32, fail: Label) {
    asm.mov64_reg(R1, addr);
    asm.load(Size::U64, R2, R6, walk::LOW);
    asm.alu64_reg(AluOp::Sub, R1, R2);
    asm.load(Size::U64, R2, R6, walk::LEN);
    asm.jmp_imm(Cond::Lt, R2, bytes, fail);
    asm.alu64_imm(AluOp::Sub, R2, bytes);
    asm.jmp_reg(Cond::Gt, R1, R2, fail);
    asm.alu64_imm(AluOp::And, R1, walk::COPY_BYTES as i32 - 1);
    asm.alu64_reg(AluOp::Add, R1, R6);
}

/// `dst = *(u64 *)addr`, read from the copy; r1, r2 clobbered.
fn copy_word(asm: &mut Assembler, dst: Reg, addr: Reg, fail: Label) {
    copy_pointer(asm, addr, 8, fail);
    asm.load(Size::U64, dst, R1, walk::COPY);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::asm::opcode;
    use crate::vocab::MapId;

    /// A caller and the walker assemble: one bpf-to-bpf call, one
    /// callback address, a few hundred instructions.
    #[test]
    fn assembles() {
        let mut asm = Assembler::new();
        let maps = OrcMaps {
            rows: MapId(1),
            blocks: MapId(2),
            info: MapId(3),
            walk: MapId(4),
        };
        let walker = KernelWalker::new(&mut asm, maps, 2000);
        walker.call(&mut asm, R6);
        asm.exit();
        walker.emit_functions(&mut asm).expect("labels bind");
        let insns = asm.finish().expect("assembles").insns;
        let count = |code: u8, src: u8| {
            let matches = |i: &&u64| (**i as u8, (**i >> 12) as u8 & 0xf) == (code, src);
            insns.iter().filter(matches).count()
        };
        assert_eq!(count(opcode::CALL, opcode::PSEUDO_CALL), 1);
        assert_eq!(count(opcode::LD_IMM64, opcode::PSEUDO_FUNC), 1);
        assert!(insns.len() < 600, "{}", insns.len());
    }
}
