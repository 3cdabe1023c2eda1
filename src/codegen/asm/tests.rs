//! Encodings of the assembler, checked against the kernel's instruction-set document.

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

/// A bpf-to-bpf call and a function address carry the callee's offset in
/// `imm`, counted from the next slot, with src_reg 1 and 4.
#[test]
fn local_call_and_function_address() {
    let insns = assemble(|a| {
        let f = a.new_label();
        a.call_local(f); // 0 → 4: +3
        a.ld_func(R2, f); // 1-2 → 4: +2
        a.exit(); // 3
        a.bind(f).unwrap();
        a.call_local(f); // 4 → 4: -1
    });
    assert_eq!(insns[0], 0x0000_0003_0000_1085);
    assert_eq!((insns[1], insns[2]), (0x0000_0002_0000_4218, 0));
    assert_eq!(insns[4], 0xffff_ffff_0000_1085);
}
