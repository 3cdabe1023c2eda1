//! The validated walk cache of the BPF unwinder ([`super::maps::walk_cache`]):
//! the entry function reuses a task's last walk when its registers, its
//! process's mappings stamp and every user word that walk read are
//! unchanged (the words read again in one copy of the stack); otherwise
//! the walk runs, logs each word it reads, and is kept at its end.
//!
//! Registers: r6 = the state, r7 = the process's mappings entry; the copy
//! buffer (a map value pointer, or 0 for callers without a cache) spilled
//! on the entry function's stack. Each function clobbers r1-r5; the reuse
//! check also r8, r9 (free before the walk starts).

use crate::codegen::asm::{AluOp, AsmError, Assembler, Cond, Label, Reg, Size};
use crate::codegen::helpers;

use super::bpf::{set_flag, slot};
use super::maps::{flags, input, process_mappings as pm, state, walk_cache as wc};

use Reg::{R0, R1, R2, R3, R4, R6, R7, R8, R9, R10};

/// The copy buffer on the entry function's stack (below `bpf::slot::LOOP_CTX`).
const COPY_BUFFER: i16 = -24;

/// The starting registers in the state and where the kept walk has them.
const START: [(i16, i16); 3] = [
    (state::IP, wc::IP),
    (state::SP, wc::SP),
    (state::BP, wc::BP),
];

/// Spills the copy buffer (r2 at the entry).
pub(super) fn save_copy_buffer(asm: &mut Assembler) {
    asm.store_reg(Size::U64, R10, COPY_BUFFER, R2);
}

/// The state's stack no longer holds the kept walk.
pub(super) fn invalidate(asm: &mut Assembler) {
    asm.store_imm(Size::U32, R6, wc::VALID, 0);
}

/// With a copy buffer and no function-entry input (state registers and
/// r7 loaded): on a hit restores the kept walk's frame count, flags (with
/// `WALK_CACHED`) and first slot and falls through; otherwise jumps to
/// `walk`, logging the walk when it may be kept.
pub(super) fn emit_reuse(asm: &mut Assembler, walk: Label) -> Result<(), AsmError> {
    asm.comment("walk cache: the last walk, if its registers and words hold");
    let miss = asm.new_label();
    asm.load(Size::U64, R1, R10, COPY_BUFFER);
    asm.jmp_imm(Cond::Eq, R1, 0, walk);
    asm.load(Size::U32, R1, R6, state::INPUT);
    asm.jmp_imm(Cond::Set, R1, input::FUNCTION_ENTRY as i32, walk);
    asm.load(Size::U32, R1, R6, wc::VALID);
    asm.jmp_imm(Cond::Eq, R1, 0, miss);
    asm.load(Size::U32, R1, R7, pm::STAMP);
    asm.load(Size::U32, R2, R6, wc::STAMP);
    asm.jmp_reg(Cond::Ne, R1, R2, miss);
    for (now, kept) in START {
        asm.load(Size::U64, R1, R6, now);
        asm.load(Size::U64, R2, R6, kept);
        asm.jmp_reg(Cond::Ne, R1, R2, miss);
    }
    emit_words_match(asm, miss)?;
    for (field, kept) in [(state::FRAMES, wc::FRAMES), (state::FLAGS, wc::FLAGS)] {
        asm.load(Size::U32, R1, R6, kept);
        asm.store_reg(Size::U32, R6, field, R1);
    }
    asm.load(Size::U64, R1, R6, wc::FIRST_SLOT);
    asm.store_reg(Size::U64, R6, state::FIRST_SLOT, R1);
    set_flag(asm, flags::WALK_CACHED);
    let hit = asm.new_label();
    asm.jmp(hit);
    asm.bind(miss)?;
    invalidate(asm);
    asm.load(Size::U32, R1, R7, pm::STAMP);
    asm.store_reg(Size::U32, R6, wc::STAMP, R1);
    for (now, kept) in START {
        asm.load(Size::U64, R1, R6, now);
        asm.store_reg(Size::U64, R6, kept, R1);
    }
    asm.store_imm(Size::U32, R6, wc::READS, 0);
    asm.store_imm(Size::U32, R6, wc::RANGE, 0);
    asm.load(Size::U32, R1, R6, state::INPUT);
    asm.alu64_imm(AluOp::Or, R1, input::WALK_CACHE as i32);
    asm.store_reg(Size::U32, R6, state::INPUT, R1);
    asm.jmp(walk);
    asm.bind(hit)?;
    Ok(())
}

/// Copies the stack from `sp` over the kept walk's range into the buffer
/// and compares each logged word; jumps to `miss` at the first difference
/// (or when the copy fails).
fn emit_words_match(asm: &mut Assembler, miss: Label) -> Result<(), AsmError> {
    let (compare, top, matched) = (asm.new_label(), asm.new_label(), asm.new_label());
    asm.load(Size::U32, R2, R6, wc::RANGE);
    asm.jmp_imm(Cond::Eq, R2, 0, compare);
    asm.jmp_imm(Cond::Gt, R2, wc::RANGE_MAX as i32, miss);
    asm.load(Size::U64, R1, R10, COPY_BUFFER);
    asm.load(Size::U64, R3, R6, state::SP);
    asm.call_helper(helpers::PROBE_READ_USER);
    asm.jmp_imm(Cond::Ne, R0, 0, miss);
    asm.bind(compare)?;
    asm.mov64_imm(R8, 0);
    asm.load(Size::U32, R9, R6, wc::READS);
    asm.bind(top)?;
    asm.jmp_reg(Cond::Ge, R8, R9, matched);
    asm.jmp_imm(Cond::Ge, R8, wc::LOG_ENTRIES as i32, miss);
    log_entry(asm, R1, R8);
    asm.load(Size::U64, R2, R1, wc::LOG);
    asm.alu64_imm(AluOp::And, R2, wc::RANGE_MAX as i32 - 1);
    asm.load(Size::U64, R3, R10, COPY_BUFFER);
    asm.alu64_reg(AluOp::Add, R3, R2);
    asm.load(Size::U64, R3, R3, 0);
    asm.load(Size::U64, R4, R1, wc::LOG + 8);
    asm.jmp_reg(Cond::Ne, R3, R4, miss);
    asm.alu64_imm(AluOp::Add, R8, 1);
    asm.jmp(top);
    asm.bind(matched)?;
    Ok(())
}

/// `dst = r6 + LOG_ENTRY_BYTES * index`: the log entry `index` (below
/// `LOG_ENTRIES`) is at `dst + wc::LOG`.
fn log_entry(asm: &mut Assembler, dst: Reg, index: Reg) {
    asm.mov64_reg(dst, index);
    asm.alu64_imm(AluOp::Lsh, dst, wc::LOG_ENTRY_BYTES.trailing_zeros() as i32);
    asm.alu64_reg(AluOp::Add, dst, R6);
}

/// After a successful read of `words` u64 at `slot::READ_AT` into
/// `slot::READ`: logs them while the walk may be kept; a word outside the
/// range or past the log's room ends the logging (the walk is not kept).
pub(super) fn emit_log_read(asm: &mut Assembler, words: i32) -> Result<(), AsmError> {
    let (done, give_up) = (asm.new_label(), asm.new_label());
    asm.load(Size::U32, R1, R6, state::INPUT);
    asm.alu64_imm(AluOp::And, R1, input::WALK_CACHE as i32);
    asm.jmp_imm(Cond::Eq, R1, 0, done);
    for word in 0..words {
        let widest = asm.new_label();
        asm.load(Size::U64, R2, R6, slot::READ_AT);
        asm.load(Size::U64, R3, R6, wc::SP);
        asm.alu64_reg(AluOp::Sub, R2, R3);
        asm.alu64_imm(AluOp::Add, R2, 8 * word);
        asm.jmp_imm(Cond::Gt, R2, wc::RANGE_MAX as i32 - 8, give_up);
        asm.load(Size::U32, R1, R6, wc::READS);
        asm.jmp_imm(Cond::Ge, R1, wc::LOG_ENTRIES as i32, give_up);
        log_entry(asm, R3, R1);
        asm.store_reg(Size::U64, R3, wc::LOG, R2);
        asm.load(Size::U64, R4, R6, slot::READ + 8 * word as i16);
        asm.store_reg(Size::U64, R3, wc::LOG + 8, R4);
        asm.alu64_imm(AluOp::Add, R1, 1);
        asm.store_reg(Size::U32, R6, wc::READS, R1);
        asm.alu64_imm(AluOp::Add, R2, 8);
        asm.load(Size::U32, R1, R6, wc::RANGE);
        asm.jmp_reg(Cond::Ge, R1, R2, widest);
        asm.store_reg(Size::U32, R6, wc::RANGE, R2);
        asm.bind(widest)?;
    }
    asm.jmp(done);
    asm.bind(give_up)?;
    forget(asm);
    asm.bind(done)?;
    Ok(())
}

/// The walk in progress will not be kept (r1 clobbered).
pub(super) fn forget(asm: &mut Assembler) {
    asm.load(Size::U32, R1, R6, state::INPUT);
    asm.alu64_imm(AluOp::And, R1, !(input::WALK_CACHE as i32));
    asm.store_reg(Size::U32, R6, state::INPUT, R1);
}

/// At the walk's end: keeps it when every word it read was logged and no
/// read failed (a failed read is not a word the reuse could check).
pub(super) fn emit_keep(asm: &mut Assembler) -> Result<(), AsmError> {
    let done = asm.new_label();
    asm.load(Size::U32, R1, R6, state::INPUT);
    asm.alu64_imm(AluOp::And, R1, input::WALK_CACHE as i32);
    asm.jmp_imm(Cond::Eq, R1, 0, done);
    asm.load(Size::U32, R1, R6, state::FLAGS);
    asm.jmp_imm(Cond::Set, R1, flags::READ_FAILED as i32, done);
    for (field, kept) in [(state::FRAMES, wc::FRAMES), (state::FLAGS, wc::FLAGS)] {
        asm.load(Size::U32, R1, R6, field);
        asm.store_reg(Size::U32, R6, kept, R1);
    }
    asm.load(Size::U64, R1, R6, state::FIRST_SLOT);
    asm.store_reg(Size::U64, R6, wc::FIRST_SLOT, R1);
    asm.store_imm(Size::U32, R6, wc::VALID, 1);
    asm.bind(done)?;
    Ok(())
}

const _: () = assert!(wc::RANGE_MAX.is_power_of_two());

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unwind::maps::MAX_FRAMES;

    /// The kept walk lies after the state's frames, and the last log entry
    /// the masked index can reach ends inside the state.
    #[test]
    fn log_fits_the_state() {
        assert!(wc::VALID as u32 >= state::STACK as u32 + 8 * MAX_FRAMES);
        let last = wc::LOG as u32 + wc::LOG_ENTRY_BYTES * (wc::LOG_ENTRIES - 1) + 16;
        assert!(last <= state::BYTES, "{last} > {}", state::BYTES);
    }

    /// Each logged word costs a fixed run of instructions, and a 16-byte
    /// read logs two words.
    #[test]
    fn words_are_logged_one_by_one() {
        let length = |words| {
            let mut asm = Assembler::new();
            emit_log_read(&mut asm, words).expect("labels bind");
            asm.exit();
            asm.finish().expect("assembles").insns.len()
        };
        let (one, two) = (length(1), length(2));
        assert!(two > one && two - one == one - length(0), "{one} {two}");
    }
}
