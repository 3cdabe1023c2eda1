//! The BPF unwinder's way past code mapped since the process's mappings
//! were read (`docs/unwinding.md`, "Code mapped since the last read"): for
//! a pc in no known mapping, the kernel's memory area there
//! (`bpf_find_vma` on the current task) names the file by device and
//! inode; the table the manager loaded for that file (the files map) and
//! the area's start and file offset give the row, and the walk goes on
//! with it. The area is noted in the vmas map, so the recorder can name
//! such frames even when the process is gone before its mappings are read
//! again.
//!
//! One lookup per walk: where interrupts are off (timer samples, the
//! scheduler's tracepoint) the kernel releases the area lock through a
//! per-CPU IRQ work and refuses another lookup on that CPU until it ran;
//! later frames in the same area reuse the first lookup.
//!
//! Registers: r6 = the state, r7 = the process's mappings entry (kept).

use crate::codegen::asm::{AluOp, AsmError, Assembler, Cond, Label, Reg, Size};
use crate::codegen::helpers;

use super::bpf::{read_kernel, set_flag, slot};
use super::layout::VmaLayout;
use super::maps::{UnwindMaps, file_table, flags, found_vma, state, vma};
use super::walk_cache_bpf;

use Reg::{R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10};

/// `VM_EXEC` of `vm_area_struct.vm_flags`.
const VM_EXEC: i32 = 0x4;

/// State field `field` of the walk's memory area.
const fn at(field: i16) -> i16 {
    state::VMA + field
}

/// Clears the walk's memory area (at its start).
pub(super) fn reset(asm: &mut Assembler) {
    asm.store_imm(Size::U64, R6, at(vma::END), 0);
    asm.store_imm(Size::U32, R6, at(vma::LOOKED), 0);
}

/// For the pc in `slot::PC`, in no known mapping: the memory area found
/// earlier in this walk if it holds the pc, else (first time only) the
/// kernel's, when its file has a loaded table. Then jumps to `biased`
/// with r4 = pc, r5 = bias, r3 = table id, flag `KERNEL_VMA` set; falls
/// through when there is none. r0-r5 clobbered.
pub(super) fn emit_kernel_vma(
    asm: &mut Assembler,
    maps: &UnwindMaps,
    callback: Label,
    biased: Label,
) -> Result<(), AsmError> {
    let (ask, found, none) = (asm.new_label(), asm.new_label(), asm.new_label());
    asm.comment("a pc in no known mapping: the kernel's memory area there");
    asm.load(Size::U64, R4, R6, slot::PC);
    asm.load(Size::U64, R1, R6, at(vma::END));
    asm.jmp_reg(Cond::Ge, R4, R1, ask);
    asm.load(Size::U64, R1, R6, at(vma::START));
    asm.jmp_reg(Cond::Ge, R4, R1, found);
    asm.bind(ask)?;
    asm.load(Size::U32, R1, R6, at(vma::LOOKED));
    asm.jmp_imm(Cond::Ne, R1, 0, none);
    asm.store_imm(Size::U32, R6, at(vma::LOOKED), 1);
    asm.store_imm(Size::U64, R6, at(vma::END), 0);
    asm.store_reg(Size::U64, R10, slot::VMA_CTX, R6);
    asm.call_helper(helpers::GET_CURRENT_TASK_BTF);
    asm.mov64_reg(R1, R0);
    asm.load(Size::U64, R2, R6, slot::PC);
    asm.ld_func(R3, callback);
    asm.mov64_reg(R4, R10);
    asm.alu64_imm(AluOp::Add, R4, i32::from(slot::VMA_CTX));
    asm.mov64_imm(R5, 0);
    asm.call_helper(helpers::FIND_VMA);
    asm.jmp_imm(Cond::Ne, R0, 0, none);
    asm.load(Size::U64, R1, R6, at(vma::END));
    asm.jmp_imm(Cond::Eq, R1, 0, none);
    asm.comment("the table of the area's file");
    asm.mov64_reg(R2, R6);
    asm.alu64_imm(AluOp::Add, R2, i32::from(at(vma::INO)));
    asm.ld_map_fd(R1, maps.files);
    asm.call_helper(helpers::MAP_LOOKUP_ELEM);
    let known = asm.new_label();
    asm.jmp_imm(Cond::Ne, R0, 0, known);
    asm.store_imm(Size::U64, R6, at(vma::END), 0);
    asm.jmp(none);
    asm.bind(known)?;
    asm.load(Size::U32, R1, R0, file_table::TABLE);
    asm.store_reg(Size::U32, R6, at(vma::TABLE), R1);
    // ELF address = pc - start + offset + delta.
    asm.load(Size::U64, R1, R6, at(vma::START));
    asm.load(Size::U64, R2, R6, at(vma::OFFSET));
    asm.alu64_reg(AluOp::Sub, R1, R2);
    asm.load(Size::U64, R2, R0, file_table::DELTA);
    asm.alu64_reg(AluOp::Sub, R1, R2);
    asm.store_reg(Size::U64, R6, at(vma::BIAS), R1);
    emit_note_area(asm, maps);
    walk_cache_bpf::forget(asm);
    asm.bind(found)?;
    set_flag(asm, flags::KERNEL_VMA);
    asm.load(Size::U64, R4, R6, slot::PC);
    asm.load(Size::U64, R5, R6, at(vma::BIAS));
    asm.load(Size::U32, R3, R6, at(vma::TABLE));
    asm.jmp(biased);
    asm.bind(none)?;
    Ok(())
}

/// Notes the area in the vmas map under `{tgid, start page % SLOTS}`.
fn emit_note_area(asm: &mut Assembler, maps: &UnwindMaps) {
    asm.load(Size::U32, R1, R6, state::TGID);
    asm.store_reg(Size::U32, R6, at(vma::KEY), R1);
    asm.load(Size::U64, R1, R6, at(vma::START));
    asm.alu64_imm(AluOp::Rsh, R1, 12);
    asm.alu64_imm(AluOp::And, R1, found_vma::SLOTS as i32 - 1);
    asm.store_reg(Size::U32, R6, at(vma::KEY_SLOT), R1);
    asm.ld_map_fd(R1, maps.vmas);
    asm.mov64_reg(R2, R6);
    asm.alu64_imm(AluOp::Add, R2, i32::from(at(vma::KEY)));
    asm.mov64_reg(R3, R6);
    asm.alu64_imm(AluOp::Add, R3, i32::from(at(vma::START)));
    asm.mov64_imm(R4, 0);
    asm.call_helper(helpers::MAP_UPDATE_ELEM);
}

/// `bpf_find_vma`'s callback `(task, vma, ctx)`, ctx pointing at the state
/// pointer: an executable area of a file fills the state's area (its end
/// last: 0 says none was found). Returns 0.
pub(super) fn emit_vma_callback(asm: &mut Assembler, layout: &VmaLayout) -> Result<(), AsmError> {
    asm.comment("find_vma callback(task, vma, ctx): the area's file and place");
    let done = asm.new_label();
    asm.load(Size::U64, R6, R3, 0);
    asm.mov64_reg(R7, R2);
    read_kernel(asm, R7, layout.vm_flags, done);
    asm.load(Size::U64, R1, R6, slot::READ);
    asm.alu64_imm(AluOp::And, R1, VM_EXEC);
    asm.jmp_imm(Cond::Eq, R1, 0, done);
    read_kernel(asm, R7, layout.vm_file, done);
    asm.load(Size::U64, R8, R6, slot::READ);
    asm.jmp_imm(Cond::Eq, R8, 0, done);
    read_kernel(asm, R8, layout.file_inode, done);
    asm.load(Size::U64, R8, R6, slot::READ);
    asm.jmp_imm(Cond::Eq, R8, 0, done);
    read_kernel(asm, R8, layout.inode_ino, done);
    asm.load(Size::U64, R1, R6, slot::READ);
    asm.store_reg(Size::U64, R6, at(vma::INO), R1);
    read_kernel(asm, R8, layout.inode_sb, done);
    asm.load(Size::U64, R9, R6, slot::READ);
    asm.jmp_imm(Cond::Eq, R9, 0, done);
    read_kernel(asm, R9, layout.sb_dev, done);
    asm.load(Size::U32, R1, R6, slot::READ);
    asm.store_reg(Size::U32, R6, at(vma::DEV), R1);
    asm.store_imm(Size::U32, R6, at(vma::ZERO), 0);
    read_kernel(asm, R7, layout.vm_pgoff, done);
    asm.load(Size::U64, R1, R6, slot::READ);
    asm.alu64_imm(AluOp::Lsh, R1, 12);
    asm.store_reg(Size::U64, R6, at(vma::OFFSET), R1);
    read_kernel(asm, R7, layout.vm_start, done);
    asm.load(Size::U64, R1, R6, slot::READ);
    asm.store_reg(Size::U64, R6, at(vma::START), R1);
    read_kernel(asm, R7, layout.vm_end, done);
    asm.load(Size::U64, R1, R6, slot::READ);
    asm.store_reg(Size::U64, R6, at(vma::END), R1);
    asm.bind(done)?;
    asm.mov64_imm(R0, 0);
    asm.exit();
    Ok(())
}
