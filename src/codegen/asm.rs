//! Assembler: the one place BPF instructions are encoded (the loader only
//! patches map fds into `ld_imm64` slots).
//!
//! Codegen emits instructions through an [`Assembler`], naming jump targets
//! with [`Label`]s and tagging instructions with the script [`Span`] they came
//! from and an optional comment. [`Assembler::finish`] resolves the jumps last
//! and returns an [`Assembled`] whose slot arrays drop straight into a
//! [`BpfProgram`]. The runtime's fentry probe and kernel tests use it too.
//!
//! ALU, memory, 64-bit jump, call, exit and `ld_imm64` encodings come from the
//! `bpf-ins` crate. It cannot build JMP32 jumps, atomics, bpf-to-bpf calls or
//! function addresses (its instruction fields are private and it has no
//! constructors for them), so those are packed
//! here by [`raw`] from the field layout of the kernel's instruction-set
//! document. Encodings codegen does not emit yet (32-bit ALU, JMP32, fetching
//! atomics) are compiled for tests only. Its decoder does not sign-extend
//! `imm`, which is why the disassembler decodes fields itself.

use bpf_ins::{ArithmeticOperation, Instruction, JumpOperation, MemoryOpLoadType, MemoryOpSize};
use thiserror::Error;

use crate::codegen::program::{BpfProgram, Insn, MapReloc};

use crate::frontend::ast::Span;
use crate::vocab::{AttachPoint, MapId};

/// A BPF register, `R0` to `R10` (`R10` is the read-only frame pointer).
pub use bpf_ins::Register as Reg;

/// Opcode fields the assembler packs itself (see [`raw`]); the disassembler
/// decodes with these plus its own.
pub(crate) mod opcode {
    pub const STX: u8 = 0x03;
    pub const JMP32: u8 = 0x06;
    /// Source operand bit: register (`X`) rather than immediate (`K`).
    pub const SRC_X: u8 = 0x08;
    pub const SIZE_DW: u8 = 0x18;
    pub const MODE_ATOMIC: u8 = 0xc0;
    /// Atomic `imm` flag: also load the old value into `src`.
    pub const FETCH: i32 = 0x01;
    /// Atomic `imm` values; both always fetch.
    pub const XCHG: i32 = 0xe0 | FETCH;
    pub const CMPXCHG: i32 = 0xf0 | FETCH;
    /// `ld_imm64` `src_reg` marking `imm` as a map fd (bpf-ins `MemoryOpLoadType::Map`).
    pub const PSEUDO_MAP_FD: u8 = 1;
    /// `src_reg` of an `ld_imm64` loading a pointer into a map's value.
    pub const PSEUDO_MAP_VALUE: u8 = 2;
    /// `BPF_JMP | BPF_CALL`
    pub const CALL: u8 = 0x85;
    /// `BPF_LD | BPF_IMM | BPF_DW`
    pub const LD_IMM64: u8 = 0x18;
    /// Call `src_reg`: `imm` is the callee's offset from the next slot.
    pub const PSEUDO_CALL: u8 = 1;
    /// `src_reg` of a call of a kernel function, `imm` its kernel BTF id.
    pub const PSEUDO_KFUNC_CALL: u8 = 2;
    /// `ld_imm64` `src_reg`: `imm` is a function's offset from the next slot
    /// (a callback for `bpf_loop` and the like).
    pub const PSEUDO_FUNC: u8 = 4;
}

/// Width of a memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Size {
    U8,
    U16,
    U32,
    U64,
}

impl Size {
    /// Width in bytes.
    #[cfg(test)]
    pub fn bytes(self) -> u32 {
        match self {
            Size::U8 => 1,
            Size::U16 => 2,
            Size::U32 => 4,
            Size::U64 => 8,
        }
    }

    fn to_bpf_ins(self) -> MemoryOpSize {
        match self {
            Size::U8 => MemoryOpSize::Byte,
            Size::U16 => MemoryOpSize::HalfWord,
            Size::U32 => MemoryOpSize::Word,
            Size::U64 => MemoryOpSize::DoubleWord,
        }
    }
}

/// Width of an atomic access; the kernel has no 8- or 16-bit atomics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicSize {
    U32,
    U64,
}

/// Two-operand ALU operations (`dst op= src`). `Div` and `Mod` are unsigned,
/// `Rsh` shifts in zeros and `Arsh` copies of the sign bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AluOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Or,
    And,
    Xor,
    Lsh,
    Rsh,
    Arsh,
    Mov,
}

impl AluOp {
    fn to_bpf_ins(self) -> ArithmeticOperation {
        match self {
            AluOp::Add => ArithmeticOperation::Add,
            AluOp::Sub => ArithmeticOperation::Sub,
            AluOp::Mul => ArithmeticOperation::Mul,
            AluOp::Div => ArithmeticOperation::Div,
            AluOp::Mod => ArithmeticOperation::Mod,
            AluOp::Or => ArithmeticOperation::Or,
            AluOp::And => ArithmeticOperation::And,
            AluOp::Xor => ArithmeticOperation::Xor,
            AluOp::Lsh => ArithmeticOperation::Lhs,
            AluOp::Rsh => ArithmeticOperation::Rhs,
            AluOp::Arsh => ArithmeticOperation::Ash,
            AluOp::Mov => ArithmeticOperation::Mov,
        }
    }
}

/// Jump conditions: `Gt`..`Le` compare unsigned, `Sgt`..`Sle` signed, `Set`
/// jumps when `a & b != 0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cond {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    Sgt,
    Sge,
    Slt,
    Sle,
    Set,
}

impl Cond {
    /// The condition that holds exactly when `self` does not; `Set` has none.
    pub fn negate(self) -> Option<Cond> {
        Some(match self {
            Cond::Eq => Cond::Ne,
            Cond::Ne => Cond::Eq,
            Cond::Gt => Cond::Le,
            Cond::Ge => Cond::Lt,
            Cond::Lt => Cond::Ge,
            Cond::Le => Cond::Gt,
            Cond::Sgt => Cond::Sle,
            Cond::Sge => Cond::Slt,
            Cond::Slt => Cond::Sge,
            Cond::Sle => Cond::Sgt,
            Cond::Set => return None,
        })
    }

    fn to_bpf_ins(self) -> JumpOperation {
        match self {
            Cond::Eq => JumpOperation::IfEqual,
            Cond::Ne => JumpOperation::IfNotEqual,
            Cond::Gt => JumpOperation::IfGreater,
            Cond::Ge => JumpOperation::IfGreaterOrEqual,
            Cond::Lt => JumpOperation::IfLessThan,
            Cond::Le => JumpOperation::IfLessThanOrEqual,
            Cond::Sgt => JumpOperation::IfSignedGreater,
            Cond::Sge => JumpOperation::IfSignedGreaterOrEqual,
            Cond::Slt => JumpOperation::IfSignedLessThan,
            Cond::Sle => JumpOperation::IfSignedLessThanOrEqual,
            Cond::Set => JumpOperation::IfAnd,
        }
    }

    /// The operation bits of the opcode, the same for JMP and JMP32.
    fn code(self) -> u8 {
        self.to_bpf_ins() as u8
    }
}

/// Read-modify-write operations for the atomic instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    Add,
    Or,
    And,
    Xor,
}

impl AtomicOp {
    /// The `imm` of the instruction: the ALU operation code.
    fn imm(self) -> i32 {
        match self {
            AtomicOp::Add => 0x00,
            AtomicOp::Or => 0x40,
            AtomicOp::And => 0x50,
            AtomicOp::Xor => 0xa0,
        }
    }
}

/// A jump target; create with [`Assembler::new_label`], place with [`Assembler::bind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Label(u32);

/// Mistakes in the use of labels, found while assembling.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum AsmError {
    /// `bind` was called again for a bound label (`first`, `second`: slot indices).
    #[error("label {label} bound twice (at instructions {first} and {second})")]
    LabelBoundTwice {
        label: u32,
        first: usize,
        second: usize,
    },
    /// A jump at slot `insn` targets a label never bound.
    #[error("jump at instruction {insn} targets label {label}, which is never bound")]
    UnboundLabel { insn: usize, label: u32 },
    /// A jump at slot `insn` is too far from its target for the 16-bit offset.
    #[error("jump at instruction {insn} needs offset {offset}, outside the 16-bit range")]
    JumpOutOfRange { insn: usize, offset: i64 },
    /// A load at a kernel type's field `offset` beyond a 16-bit offset.
    #[error("field offset {offset} is outside a load's 16-bit range")]
    FieldOutOfRange { offset: u32 },
}

/// A finished instruction stream. `spans` and `comments` have one entry per
/// slot, like `insns`; the second slot of an `ld_imm64` repeats the span and has
/// no comment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Assembled {
    /// The 8-byte slots.
    pub insns: Vec<Insn>,
    /// One per `ld_map_fd`, in emission order.
    pub map_relocs: Vec<MapReloc>,
    /// Per slot: the span set when the instruction was emitted.
    pub spans: Vec<Option<Span>>,
    /// Per slot: the notes given before the instruction.
    pub comments: Vec<Option<String>>,
}

impl Assembled {
    /// Wraps the slots in a program with the given identity.
    pub fn into_program(self, name: String, probe: String, attach: AttachPoint) -> BpfProgram {
        BpfProgram {
            name,
            probe,
            attach,
            blocks: 1,
            insns: self.insns,
            map_relocs: self.map_relocs,
            spans: self.spans,
            comments: self.comments,
        }
    }
}

/// A slot whose target offset is filled in by `finish`.
#[derive(Clone, Copy, Debug)]
struct Fixup {
    slot: usize,
    label: Label,
    field: FixupField,
}

/// Where a fixup's offset goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FixupField {
    /// The 16-bit `off` of a jump.
    Off,
    /// The 32-bit `imm` of a bpf-to-bpf call or a function address.
    Imm,
}

/// Builds one program's instruction stream. Emitting never fails; label errors
/// surface in [`Assembler::bind`] and [`Assembler::finish`].
#[derive(Debug, Default)]
pub struct Assembler {
    out: Assembled,
    /// Slot each label is bound to.
    labels: Vec<Option<usize>>,
    fixups: Vec<Fixup>,
    span: Option<Span>,
    comment: Option<String>,
}

impl Assembler {
    /// An empty program with no labels.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of 8-byte slots emitted so far (an `ld_imm64` counts 2).
    fn len(&self) -> usize {
        self.out.insns.len()
    }

    /// A fresh, unbound label.
    pub fn new_label(&mut self) -> Label {
        let id = u32::try_from(self.labels.len()).expect("fewer than 2^32 labels");
        self.labels.push(None);
        Label(id)
    }

    /// Places `label` at the next instruction to be emitted.
    pub fn bind(&mut self, label: Label) -> Result<(), AsmError> {
        let here = self.len();
        let slot = self
            .labels
            .get_mut(label.0 as usize)
            .expect("label created by this assembler");
        if let Some(first) = *slot {
            return Err(AsmError::LabelBoundTwice {
                label: label.0,
                first,
                second: here,
            });
        }
        *slot = Some(here);
        Ok(())
    }

    /// Source span for the instructions emitted from now on.
    pub fn set_span(&mut self, span: Option<Span>) {
        self.span = span;
    }

    /// Attaches a note to the next instruction; several notes are joined with `; `.
    /// A note after the last instruction is dropped.
    pub fn comment(&mut self, text: impl Into<String>) {
        let text = text.into();
        self.comment = Some(match self.comment.take() {
            Some(prev) => format!("{prev}; {text}"),
            None => text,
        });
    }

    /// `dst op= imm` on 64 bits (`imm` sign-extended).
    pub fn alu64_imm(&mut self, op: AluOp, dst: Reg, imm: i32) {
        self.emit(Instruction::alu64(dst, imm, op.to_bpf_ins()));
    }

    /// `dst op= src` on 64 bits.
    pub fn alu64_reg(&mut self, op: AluOp, dst: Reg, src: Reg) {
        self.emit(Instruction::alux64(dst, src, op.to_bpf_ins()));
    }

    /// 32-bit ALU; the result is zero-extended into the 64-bit register.
    #[cfg(test)]
    pub fn alu32_imm(&mut self, op: AluOp, dst: Reg, imm: i32) {
        self.emit(Instruction::alu32(dst, imm, op.to_bpf_ins()));
    }

    /// `dst op= src` on the low 32 bits, zero-extending the result.
    #[cfg(test)]
    pub fn alu32_reg(&mut self, op: AluOp, dst: Reg, src: Reg) {
        self.emit(Instruction::alux32(dst, src, op.to_bpf_ins()));
    }

    /// `dst = -dst`
    pub fn neg64(&mut self, dst: Reg) {
        self.emit(Instruction::alu64(dst, 0, ArithmeticOperation::Neg));
    }

    /// `dst = -dst` on the low 32 bits, zero-extending the result.
    #[cfg(test)]
    pub fn neg32(&mut self, dst: Reg) {
        self.emit(Instruction::alu32(dst, 0, ArithmeticOperation::Neg));
    }

    /// `dst = imm`, sign-extended to 64 bits.
    pub fn mov64_imm(&mut self, dst: Reg, imm: i32) {
        self.alu64_imm(AluOp::Mov, dst, imm);
    }

    /// `dst = src`
    pub fn mov64_reg(&mut self, dst: Reg, src: Reg) {
        self.alu64_reg(AluOp::Mov, dst, src);
    }

    /// `dst = imm` as u32, zero-extended.
    #[cfg(test)]
    pub fn mov32_imm(&mut self, dst: Reg, imm: i32) {
        self.alu32_imm(AluOp::Mov, dst, imm);
    }

    /// `dst = src` as u32, zero-extended.
    #[cfg(test)]
    pub fn mov32_reg(&mut self, dst: Reg, src: Reg) {
        self.alu32_reg(AluOp::Mov, dst, src);
    }

    /// Two-slot load of a full 64-bit constant.
    pub fn ld_imm64(&mut self, dst: Reg, value: u64) {
        let insn = Instruction::load(dst, value as i64, MemoryOpSize::DoubleWord);
        self.emit(insn);
    }

    /// Loads a map reference. Until the loader rewrites it with the map's fd,
    /// `imm` holds the `MapId`, which the disassembly shows as `map[N]`.
    pub fn ld_map_fd(&mut self, dst: Reg, map: MapId) {
        let insn = self.len();
        self.out.map_relocs.push(MapReloc { insn, map });
        let insn = Instruction::loadtype(dst, i64::from(map.0), MemoryOpLoadType::Map);
        self.emit(insn);
    }

    /// `dst = &map_value[0] + offset` (`src_reg = BPF_PSEUDO_MAP_VALUE`): a
    /// direct pointer into a one-element array map, no helper call needed.
    pub fn ld_map_value(&mut self, dst: Reg, map: MapId, offset: u32) {
        let insn = self.len();
        self.out.map_relocs.push(MapReloc { insn, map });
        let imm = (i64::from(offset) << 32) | i64::from(map.0);
        self.emit(Instruction::loadtype(dst, imm, MemoryOpLoadType::MapValue));
    }

    /// `dst = *(size *)(base + off)`, zero-extended.
    pub fn load(&mut self, size: Size, dst: Reg, base: Reg, off: i16) {
        self.emit(Instruction::loadx(dst, base, off, size.to_bpf_ins()));
    }

    /// `*(size *)(base + off) = src`
    pub fn store_reg(&mut self, size: Size, base: Reg, off: i16, src: Reg) {
        self.emit(Instruction::storex(base, off, src, size.to_bpf_ins()));
    }

    /// `*(size *)(base + off) = imm`; a `U64` store sign-extends `imm`.
    pub fn store_imm(&mut self, size: Size, base: Reg, off: i16, imm: i32) {
        let insn = Instruction::store(base, off, i64::from(imm), size.to_bpf_ins());
        self.emit(insn);
    }

    /// `lock *(size *)(base + off) op= src`
    pub fn atomic(&mut self, size: AtomicSize, op: AtomicOp, base: Reg, off: i16, src: Reg) {
        self.emit_atomic(size, base, off, src, op.imm());
    }

    /// Like [`Assembler::atomic`], and `src` receives the old value.
    #[cfg(test)]
    pub fn atomic_fetch(&mut self, size: AtomicSize, op: AtomicOp, base: Reg, off: i16, src: Reg) {
        self.emit_atomic(size, base, off, src, op.imm() | opcode::FETCH);
    }

    /// Swaps `src` with `*(size *)(base + off)`.
    #[cfg(test)]
    pub fn atomic_xchg(&mut self, size: AtomicSize, base: Reg, off: i16, src: Reg) {
        self.emit_atomic(size, base, off, src, opcode::XCHG);
    }

    /// If `*(size *)(base + off) == r0`, stores `src`; `r0` receives the old value.
    #[cfg(test)]
    pub fn atomic_cmpxchg(&mut self, size: AtomicSize, base: Reg, off: i16, src: Reg) {
        self.emit_atomic(size, base, off, src, opcode::CMPXCHG);
    }

    /// `goto target`
    pub fn jmp(&mut self, target: Label) {
        self.emit_jump(Instruction::jmp_abs(0).encode().0, target);
    }

    /// `if reg cond imm goto target`, comparing 64 bits (`imm` sign-extended).
    pub fn jmp_imm(&mut self, cond: Cond, reg: Reg, imm: i32, target: Label) {
        let insn = Instruction::jmp_if(reg, cond.to_bpf_ins(), i64::from(imm), 0);
        self.emit_jump(insn.encode().0, target);
    }

    /// `if a cond b goto target`, comparing 64 bits.
    pub fn jmp_reg(&mut self, cond: Cond, a: Reg, b: Reg, target: Label) {
        let insn = Instruction::jmp_ifx(a, cond.to_bpf_ins(), b, 0);
        self.emit_jump(insn.encode().0, target);
    }

    /// Like [`Assembler::jmp_imm`], comparing only the low 32 bits.
    pub fn jmp32_imm(&mut self, cond: Cond, reg: Reg, imm: i32, target: Label) {
        let insn = raw(opcode::JMP32 | cond.code(), reg, Reg::R0, 0, imm);
        self.emit_jump(insn, target);
    }

    /// Like [`Assembler::jmp_reg`], comparing only the low 32 bits.
    #[cfg(test)]
    pub fn jmp32_reg(&mut self, cond: Cond, a: Reg, b: Reg, target: Label) {
        let insn = raw(opcode::JMP32 | opcode::SRC_X | cond.code(), a, b, 0, 0);
        self.emit_jump(insn, target);
    }

    /// Calls helper `id` (`BPF_FUNC_*`): arguments in r1-r5, result in r0,
    /// r1-r5 clobbered.
    pub fn call_helper(&mut self, id: u32) {
        self.emit(Instruction::call(id));
    }

    /// `r0 = bpf_map_lookup_elem(map, &key)`, the u32 `key` stored at
    /// `r10 - 4`: how the hand-assembled programs reach their map.
    pub fn lookup_u32_key(&mut self, map: MapId, key: i32) {
        self.store_imm(Size::U32, Reg::R10, -4, key);
        self.ld_map_fd(Reg::R1, map);
        self.mov64_reg(Reg::R2, Reg::R10);
        self.alu64_imm(AluOp::Add, Reg::R2, -4);
        self.call_helper(crate::codegen::helpers::MAP_LOOKUP_ELEM);
    }

    /// Calls kernel function (kfunc) `btf_id` of vmlinux BTF: arguments in
    /// r1-r5, result in r0, r1-r5 clobbered.
    pub fn call_kfunc(&mut self, btf_id: u32) {
        let insn = raw(opcode::CALL, Reg::R0, Reg::R0, 0, btf_id as i32)
            | src_bits(opcode::PSEUDO_KFUNC_CALL);
        self.push(insn, None);
    }

    /// Calls the BPF function starting at `function` (a bpf-to-bpf call):
    /// arguments in r1-r5, result in r0, r1-r5 clobbered, r6-r9 kept. The
    /// function must start after the calling program's last instruction.
    pub fn call_local(&mut self, function: Label) {
        let insn = raw(opcode::CALL, Reg::R0, Reg::R0, 0, 0) | src_bits(opcode::PSEUDO_CALL);
        self.emit_fixup(insn, None, function, FixupField::Imm);
    }

    /// `dst = &function` (`ld_imm64` with `src_reg = BPF_PSEUDO_FUNC`): a
    /// callback argument for helpers such as `bpf_loop`.
    pub fn ld_func(&mut self, dst: Reg, function: Label) {
        let insn = raw(opcode::LD_IMM64, dst, Reg::R0, 0, 0) | src_bits(opcode::PSEUDO_FUNC);
        self.emit_fixup(insn, Some(0), function, FixupField::Imm);
    }

    /// Returns r0.
    pub fn exit(&mut self) {
        self.emit(Instruction::exit());
    }

    /// Resolves every jump and returns the program's slots.
    pub fn finish(mut self) -> Result<Assembled, AsmError> {
        for fixup in &self.fixups {
            let target = self
                .labels
                .get(fixup.label.0 as usize)
                .copied()
                .flatten()
                .ok_or(AsmError::UnboundLabel {
                    insn: fixup.slot,
                    label: fixup.label.0,
                })?;
            // Offsets are relative to the slot after the jump (after the
            // first slot of an `ld_imm64`, as the kernel counts them).
            let offset = target as i64 - fixup.slot as i64 - 1;
            let insn = &mut self.out.insns[fixup.slot];
            if fixup.field == FixupField::Imm {
                let imm = i32::try_from(offset).expect("fewer than 2^31 slots");
                *insn = (*insn & 0xffff_ffff) | (u64::from(imm as u32) << 32);
                continue;
            }
            let off = i16::try_from(offset).map_err(|_| AsmError::JumpOutOfRange {
                insn: fixup.slot,
                offset,
            })?;
            *insn = (*insn & !0xffff_0000) | (u64::from(off as u16) << 16);
        }
        Ok(self.out)
    }

    fn emit_atomic(&mut self, size: AtomicSize, base: Reg, off: i16, src: Reg, imm: i32) {
        let size = match size {
            AtomicSize::U32 => 0x00,
            AtomicSize::U64 => opcode::SIZE_DW,
        };
        let code = opcode::STX | opcode::MODE_ATOMIC | size;
        self.push(raw(code, base, src, off, imm), None);
    }

    fn emit_jump(&mut self, insn: Insn, target: Label) {
        self.emit_fixup(insn, None, target, FixupField::Off);
    }

    fn emit_fixup(&mut self, insn: Insn, second: Option<Insn>, target: Label, field: FixupField) {
        self.fixups.push(Fixup {
            slot: self.len(),
            label: target,
            field,
        });
        self.push(insn, second);
    }

    fn emit(&mut self, insn: Instruction) {
        let (first, second) = insn.encode();
        self.push(first, second);
    }

    fn push(&mut self, first: Insn, second: Option<Insn>) {
        let out = &mut self.out;
        out.insns.push(first);
        out.spans.push(self.span);
        out.comments.push(self.comment.take());
        if let Some(second) = second {
            out.insns.push(second);
            out.spans.push(self.span);
            out.comments.push(None);
        }
    }
}

/// A `src_reg` marker (not a register) in its field.
fn src_bits(marker: u8) -> Insn {
    u64::from(marker) << 12
}

/// Packs one slot from its fields: opcode in bits 0-7, dst 8-11, src 12-15,
/// offset 16-31, immediate 32-63.
pub(crate) fn raw(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> Insn {
    u64::from(code)
        | u64::from(dst.as_num()) << 8
        | u64::from(src.as_num()) << 12
        | u64::from(off as u16) << 16
        | u64::from(imm as u32) << 32
}

#[cfg(test)]
mod tests;
