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
//! `bpf-ins` crate. It cannot build atomics or JMP32 jumps (its instruction
//! fields are private and it has no constructors for them), so those are packed
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
    #[cfg(test)]
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
            insns: self.insns,
            map_relocs: self.map_relocs,
            spans: self.spans,
            comments: self.comments,
        }
    }
}

/// A jump whose offset is filled in by `finish`.
#[derive(Clone, Copy, Debug)]
struct Fixup {
    slot: usize,
    label: Label,
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
    #[cfg(test)]
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
            // Offsets are relative to the slot after the jump.
            let offset = target as i64 - fixup.slot as i64 - 1;
            let off = i16::try_from(offset).map_err(|_| AsmError::JumpOutOfRange {
                insn: fixup.slot,
                offset,
            })?;
            let insn = &mut self.out.insns[fixup.slot];
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
        self.fixups.push(Fixup {
            slot: self.len(),
            label: target,
        });
        self.push(insn, None);
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
mod tests {
    use super::Reg::*;
    use super::*;

    fn assemble(build: impl FnOnce(&mut Assembler)) -> Vec<Insn> {
        let mut asm = Assembler::new();
        build(&mut asm);
        asm.finish().expect("assembles").insns
    }

    /// `r0 = 0; exit` encodes to the values the spec gives (opcodes 0xb7, 0x95).
    #[test]
    fn return_zero() {
        let insns = assemble(|a| {
            a.mov64_imm(R0, 0);
            a.exit();
        });
        assert_eq!(insns, [0x0000_0000_0000_00b7, 0x0000_0000_0000_0095]);
    }

    /// Asserts that each `method(args) => slot` line assembles to exactly that slot.
    macro_rules! encodes {
        ($($method:ident($($arg:expr),*) => $want:expr;)*) => {$(
            let mut asm = Assembler::new();
            asm.$method($($arg),*);
            let got = asm.finish().expect("assembles").insns;
            assert_eq!(got, [$want], "{}", stringify!($method($($arg),*)));
        )*};
    }

    /// ALU64 and ALU32 forms put class, source bit, op, registers and imm in the right fields.
    #[test]
    fn alu_encodings() {
        encodes! {
            mov64_reg(R1, R2) => 0x0000_0000_0000_21bf;
            mov32_reg(R1, R2) => 0x0000_0000_0000_21bc;
            alu64_imm(AluOp::Add, R1, -1) => 0xffff_ffff_0000_0107;
            alu64_reg(AluOp::Mod, R1, R2) => 0x0000_0000_0000_219f;
            alu32_imm(AluOp::Arsh, R1, 3) => 0x0000_0003_0000_01c4;
            alu64_imm(AluOp::Lsh, R4, 8) => 0x0000_0008_0000_0467;
            alu64_imm(AluOp::Rsh, R4, 8) => 0x0000_0008_0000_0477;
            alu32_reg(AluOp::Xor, R9, R10) => 0x0000_0000_0000_a9ac;
            neg64(R3) => 0x0000_0000_0000_0387;
            neg32(R3) => 0x0000_0000_0000_0384;
            mov32_imm(R7, -2) => 0xffff_fffe_0000_07b4;
        }
    }

    /// Loads and stores: LDX/STX/ST with MEM mode, each size, negative offsets.
    #[test]
    fn memory_encodings() {
        encodes! {
            load(Size::U64, R1, R10, -8) => 0x0000_0000_fff8_a179;
            load(Size::U8, R2, R1, 3) => 0x0000_0000_0003_1271;
            store_reg(Size::U64, R10, -8, R1) => 0x0000_0000_fff8_1a7b;
            store_reg(Size::U16, R10, -2, R1) => 0x0000_0000_fffe_1a6b;
            store_imm(Size::U32, R10, -4, 7) => 0x0000_0007_fffc_0a62;
            store_imm(Size::U64, R10, -16, -1) => 0xffff_ffff_fff0_0a7a;
        }
    }

    /// `ld_imm64` splits the value over two slots; a map load sets src_reg 1 and records a reloc.
    #[test]
    fn wide_loads_and_map_reloc() {
        let mut asm = Assembler::new();
        asm.mov64_imm(R0, 0);
        asm.ld_imm64(R2, 0x1122_3344_5566_7788);
        asm.ld_map_fd(R1, MapId(3));
        let out = asm.finish().unwrap();
        let expected = [
            0x0000_0000_0000_00b7,
            0x5566_7788_0000_0218,
            0x1122_3344_0000_0000,
            0x0000_0003_0000_1118,
            0x0000_0000_0000_0000,
        ];
        assert_eq!(out.insns, expected);
        let relocs: Vec<_> = out.map_relocs.iter().map(|r| (r.insn, r.map)).collect();
        assert_eq!(relocs, [(3, MapId(3))]);
    }

    /// Call and 64-bit conditional jumps (imm and reg forms, signed and unsigned).
    #[test]
    fn call_and_jump_encodings() {
        let insns = assemble(|a| {
            let l = a.new_label();
            a.call_helper(130);
            a.jmp_imm(Cond::Gt, R1, 5, l);
            a.jmp_reg(Cond::Sle, R1, R2, l);
            a.jmp_imm(Cond::Set, R3, 0x10, l);
            a.jmp(l);
            a.bind(l).unwrap();
        });
        let expected = [
            0x0000_0082_0000_0085,
            0x0000_0005_0003_0125,
            0x0000_0000_0002_21dd,
            0x0000_0010_0001_0345,
            0x0000_0000_0000_0005,
        ];
        assert_eq!(insns, expected);
    }

    /// JMP32 jumps use class 0x06 with the same operation bits as JMP.
    #[test]
    fn jmp32_encodings() {
        let insns = assemble(|a| {
            let top = a.new_label();
            a.bind(top).unwrap();
            let skip = a.new_label();
            a.jmp32_imm(Cond::Eq, R1, 0, skip);
            a.jmp32_reg(Cond::Slt, R1, R2, top);
            a.bind(skip).unwrap();
            a.jmp32_imm(Cond::Lt, R4, -1, top);
        });
        let expected = [
            0x0000_0000_0001_0116,
            0x0000_0000_fffe_21ce,
            0xffff_ffff_fffd_04a6,
        ];
        assert_eq!(insns, expected);
    }

    /// Atomics: STX|ATOMIC with W or DW size, the operation (and FETCH) in imm.
    #[test]
    fn atomic_encodings() {
        use AtomicOp::*;
        use AtomicSize::{U32, U64};
        encodes! {
            atomic(U64, Add, R1, 0, R2) => 0x0000_0000_0000_21db;
            atomic(U32, Or, R1, 0, R2) => 0x0000_0040_0000_21c3;
            atomic(U64, And, R1, 0, R2) => 0x0000_0050_0000_21db;
            atomic(U64, Xor, R1, 0, R2) => 0x0000_00a0_0000_21db;
            atomic_fetch(U32, Add, R10, -4, R3) => 0x0000_0001_fffc_3ac3;
            atomic_fetch(U64, Xor, R1, 0, R2) => 0x0000_00a1_0000_21db;
            atomic_xchg(U64, R1, 8, R2) => 0x0000_00e1_0008_21db;
            atomic_cmpxchg(U64, R1, 0, R2) => 0x0000_00f1_0000_21db;
        }
    }

    /// Offsets count slots from the one after the jump, forward and backward.
    #[test]
    fn jump_offsets() {
        let insns = assemble(|a| {
            let top = a.new_label();
            let end = a.new_label();
            a.bind(top).unwrap();
            a.mov64_imm(R0, 0); // 0
            a.jmp_imm(Cond::Eq, R0, 0, end); // 1 → 4: +2
            a.mov64_imm(R0, 1); // 2
            a.jmp(top); // 3 → 0: -4
            a.bind(end).unwrap();
            a.jmp(end); // 4 → 4: -1
        });
        let off = |i: usize| (insns[i] >> 16) as u16 as i16;
        assert_eq!((off(1), off(3), off(4)), (2, -4, -1));
    }

    /// An `ld_imm64` between a jump and its target adds 2 to the offset.
    #[test]
    fn ld_imm64_counts_two_slots() {
        let insns = assemble(|a| {
            let end = a.new_label();
            a.jmp(end);
            a.ld_imm64(R1, u64::MAX);
            a.ld_map_fd(R2, MapId(0));
            a.bind(end).unwrap();
            a.exit();
        });
        assert_eq!(insns.len(), 6);
        assert_eq!((insns[0] >> 16) as u16 as i16, 4);
    }

    /// A jump to a label never bound, or a second bind of a label, is an error.
    #[test]
    fn label_errors() {
        let mut asm = Assembler::new();
        let l = asm.new_label();
        asm.exit();
        asm.jmp(l);
        let unbound = AsmError::UnboundLabel { insn: 1, label: 0 };
        assert_eq!(asm.finish(), Err(unbound));

        let mut asm = Assembler::new();
        let l = asm.new_label();
        asm.bind(l).unwrap();
        asm.exit();
        let twice = asm.bind(l).unwrap_err().to_string();
        assert_eq!(twice, "label 0 bound twice (at instructions 0 and 1)");
    }

    /// Assembles a jump over `gap` instructions, forward or backward.
    fn far_jump(gap: usize, forward: bool) -> Result<Vec<Insn>, AsmError> {
        let mut asm = Assembler::new();
        let l = asm.new_label();
        if forward {
            asm.jmp(l);
        } else {
            asm.bind(l)?;
        }
        (0..gap).for_each(|_| asm.mov64_imm(R0, 0));
        if forward {
            asm.bind(l)?;
        } else {
            asm.jmp(l);
        }
        asm.finish().map(|out| out.insns)
    }

    /// Offsets from i16::MIN to i16::MAX assemble; one further is an error.
    #[test]
    fn jump_range_limits() {
        let off = |insn: u64| (insn >> 16) as u16 as i16;
        assert_eq!(off(far_jump(32767, true).unwrap()[0]), i16::MAX);
        assert_eq!(off(far_jump(32767, false).unwrap()[32767]), i16::MIN);
        let fwd = far_jump(32768, true).unwrap_err().to_string();
        assert_eq!(
            fwd,
            "jump at instruction 0 needs offset 32768, outside the 16-bit range"
        );
        let back = far_jump(32768, false).unwrap_err();
        assert_eq!(
            back.to_string(),
            "jump at instruction 32768 needs offset -32769, outside the 16-bit range"
        );
    }

    /// Spans and comments have one entry per slot and attach to the right instructions.
    #[test]
    fn spans_and_comments_per_slot() {
        let mut asm = Assembler::new();
        let span = Span::new(3, 9);
        asm.comment("prologue");
        asm.mov64_imm(R6, 0);
        asm.set_span(Some(span));
        asm.comment("a");
        asm.comment("b");
        asm.ld_imm64(R1, 1);
        asm.set_span(None);
        asm.exit();
        asm.comment("dropped");
        let out = asm.finish().unwrap();
        assert_eq!(out.spans, [None, Some(span), Some(span), None]);
        let comments: Vec<_> = out.comments.iter().map(Option::as_deref).collect();
        assert_eq!(comments, [Some("prologue"), Some("a; b"), None, None]);
    }

    /// Negating a condition swaps it with its complement.
    #[test]
    fn cond_negation() {
        assert_eq!(Cond::Gt.negate(), Some(Cond::Le));
        assert_eq!(Cond::Sge.negate(), Some(Cond::Slt));
        assert_eq!(Cond::Set.negate(), None);
    }
}
