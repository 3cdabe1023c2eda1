//! BPF functions (bpf-to-bpf calls, callbacks) in the in-memory ELF.
//!
//! Input: a program's slots as the assembler wrote them, every call and
//! function address already pointing at its target (`imm` = offset from the
//! next slot). Output: where to split the program, and the BTF function
//! information the kernel wants with them.
//!
//! libbpf 1.7 takes subprograms only from `.text` and rebuilds every call
//! itself (`bpf_object__reloc_code`): a call from a program's own section
//! needs an `R_BPF_64_32` relocation against the callee's symbol (with
//! `imm = -1`); a call inside `.text` needs none when the offsets hold there;
//! a function address (`BPF_PSEUDO_FUNC`) always needs an `R_BPF_64_64`
//! relocation, or libbpf fails with "missing subprog addr relo". The kernel
//! accepts a function address only with BTF `func_info` naming every function
//! and the callback `static` ("missing btf func_info" otherwise), so objects
//! with functions also carry `.BTF` and `.BTF.ext`.

use crate::codegen::asm::opcode;

/// How a slot refers to a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefKind {
    Call,
    Address,
}

/// A call or function address at `slot`, to the function starting at `target`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FunctionRef {
    pub slot: usize,
    pub target: usize,
    pub kind: RefKind,
}

/// A program with functions: slots before `split` are the entry function,
/// the rest go to `.text`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Functions {
    pub split: usize,
    /// Start slot of every function after the entry, ascending.
    pub starts: Vec<usize>,
    pub refs: Vec<FunctionRef>,
}

/// Finds the functions `insns` calls; `None` when it calls none.
pub fn find_functions(insns: &[u64]) -> Result<Option<Functions>, String> {
    let mut refs = Vec::new();
    let mut slot = 0;
    while slot < insns.len() {
        let insn = insns[slot];
        let (code, src, imm) = (insn as u8, (insn >> 12) as u8 & 0xf, (insn >> 32) as i32);
        let kind = match (code, src) {
            (opcode::CALL, opcode::PSEUDO_CALL) => Some(RefKind::Call),
            (opcode::LD_IMM64, opcode::PSEUDO_FUNC) => Some(RefKind::Address),
            _ => None,
        };
        if let Some(kind) = kind {
            let target = slot as i64 + i64::from(imm) + 1;
            let target = usize::try_from(target)
                .ok()
                .filter(|&t| t > 0 && t < insns.len())
                .ok_or_else(|| {
                    format!("instruction {slot} refers to slot {target}, outside the program")
                })?;
            refs.push(FunctionRef { slot, target, kind });
        }
        slot += if code == opcode::LD_IMM64 { 2 } else { 1 };
    }
    let mut starts: Vec<usize> = refs.iter().map(|r| r.target).collect();
    starts.sort_unstable();
    starts.dedup();
    Ok(starts.first().copied().map(|split| Functions {
        split,
        starts,
        refs,
    }))
}

/// One function for BTF: its name, whether the kernel should verify it
/// alone (`global`, the entry) or in its caller's context (`static`), and
/// its byte offset in its ELF section.
pub struct FuncRecord {
    pub section: String,
    pub name: String,
    pub global: bool,
    pub byte_offset: u32,
}

const BTF_MAGIC: u16 = 0xeb9f;
const BTF_KIND_INT: u32 = 1;
const BTF_KIND_PTR: u32 = 2;
const BTF_KIND_FUNC: u32 = 12;
const BTF_KIND_FUNC_PROTO: u32 = 13;
/// `int`, `void *`, `int (void *ctx)`; functions follow.
const FIRST_FUNC_TYPE: u32 = 4;
const PROTO_TYPE: u32 = 3;

/// `.BTF` and `.BTF.ext` contents: every function typed `int (void *ctx)`,
/// and the `func_info` of each section in the order given (records of one
/// section must be in ascending offset order).
pub fn func_info_btf(funcs: &[FuncRecord]) -> (Vec<u8>, Vec<u8>) {
    let mut strings = Strings::default();
    // `.BTF.ext` names sections by their offset in this string table.
    for func in funcs {
        strings.add(&func.section);
    }
    let int_name = strings.add("int");
    let ctx_name = strings.add("ctx");
    let mut types: Vec<u32> = vec![
        int_name,
        BTF_KIND_INT << 24,
        4,
        1 << 24 | 32, // signed, 32 bits
        0,
        BTF_KIND_PTR << 24,
        0,
        0,
        BTF_KIND_FUNC_PROTO << 24 | 1,
        1,
        ctx_name,
        2,
    ];
    for func in funcs {
        let linkage = u32::from(func.global);
        types.extend([
            strings.add(&func.name),
            BTF_KIND_FUNC << 24 | linkage,
            PROTO_TYPE,
        ]);
    }
    let btf = btf_blob(&types, &strings.bytes);
    let mut info: Vec<u32> = vec![8]; // record size: insn_off, type_id
    let mut index = 0;
    while index < funcs.len() {
        let section = &funcs[index].section;
        let count = funcs[index..]
            .iter()
            .take_while(|f| &f.section == section)
            .count();
        info.extend([strings_offset(&strings, section), count as u32]);
        for (i, func) in funcs[index..index + count].iter().enumerate() {
            info.extend([func.byte_offset, FIRST_FUNC_TYPE + (index + i) as u32]);
        }
        index += count;
    }
    (btf, btf_ext_blob(&info))
}

fn strings_offset(strings: &Strings, name: &str) -> u32 {
    strings.find(name).expect("section names were added first")
}

/// BTF header (24 bytes), types, strings.
fn btf_blob(types: &[u32], strings: &[u8]) -> Vec<u8> {
    let type_len = 4 * types.len() as u32;
    let mut blob = Vec::new();
    blob.extend(BTF_MAGIC.to_le_bytes());
    blob.extend([1u8, 0]);
    for word in [24, 0, type_len, type_len, strings.len() as u32] {
        blob.extend(u32::to_le_bytes(word));
    }
    types.iter().for_each(|w| blob.extend(w.to_le_bytes()));
    blob.extend(strings);
    blob
}

/// `.BTF.ext` header (24 bytes: func_info and line_info offsets and
/// lengths), then the func_info words; no line_info.
fn btf_ext_blob(func_info: &[u32]) -> Vec<u8> {
    let mut blob = Vec::new();
    blob.extend(BTF_MAGIC.to_le_bytes());
    blob.extend([1u8, 0]);
    let len = 4 * func_info.len() as u32;
    for word in [24, 0, len, len, 0] {
        blob.extend(u32::to_le_bytes(word));
    }
    func_info.iter().for_each(|w| blob.extend(w.to_le_bytes()));
    blob
}

/// A BTF string section; offset 0 is the empty string.
struct Strings {
    bytes: Vec<u8>,
}

impl Default for Strings {
    fn default() -> Self {
        Strings { bytes: vec![0] }
    }
}

impl Strings {
    fn add(&mut self, s: &str) -> u32 {
        if let Some(at) = self.find(s) {
            return at;
        }
        let at = self.bytes.len() as u32;
        self.bytes.extend(s.as_bytes());
        self.bytes.push(0);
        at
    }

    fn find(&self, s: &str) -> Option<u32> {
        let mut at = 0;
        for piece in self.bytes.split(|&b| b == 0) {
            if piece == s.as_bytes() && !s.is_empty() {
                return Some(at as u32);
            }
            at += piece.len() + 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::asm::{AluOp, Assembler, Reg, Size};
    use crate::codegen::program::BpfProgram;
    use crate::runtime::bpf::loader::load;
    use crate::runtime::bpf::test_support::{empty_program, with_ring};
    use crate::vocab::AttachPoint;

    /// Calls and function addresses are found with their targets.
    #[test]
    fn finds_functions() {
        let mut asm = Assembler::new();
        let (f, g) = (asm.new_label(), asm.new_label());
        asm.call_local(f);
        asm.ld_imm64(Reg::R1, 0x1085);
        asm.exit();
        asm.bind(f).unwrap();
        asm.ld_func(Reg::R2, g);
        asm.exit();
        asm.bind(g).unwrap();
        asm.exit();
        let insns = asm.finish().unwrap().insns;
        let found = find_functions(&insns).unwrap().expect("functions");
        assert_eq!((found.split, found.starts.clone()), (4, vec![4, 7]));
        let refs: Vec<_> = found
            .refs
            .iter()
            .map(|r| (r.slot, r.target, r.kind))
            .collect();
        assert_eq!(refs, [(0, 4, RefKind::Call), (4, 7, RefKind::Address)]);
        assert_eq!(
            find_functions(&insns[..1]).unwrap_err(),
            "instruction 0 refers to slot 4, outside the program"
        );
    }

    /// A program without calls has no functions.
    #[test]
    fn no_functions() {
        assert_eq!(find_functions(&[0xb7, 0x95]).unwrap(), None);
    }

    /// `r0 = f() + bpf_loop(3, g, &count)`, where `f` returns 40 and calls
    /// `h` (a call inside `.text`), and the callback `g` adds 1 to `count`.
    fn calls_and_loop() -> BpfProgram {
        const BPF_LOOP: u32 = 181;
        let mut a = Assembler::new();
        let (f, g, h) = (a.new_label(), a.new_label(), a.new_label());
        a.call_local(f);
        a.mov64_reg(Reg::R6, Reg::R0);
        a.store_imm(Size::U64, Reg::R10, -8, 0);
        a.mov64_imm(Reg::R1, 3);
        a.ld_func(Reg::R2, g);
        a.mov64_reg(Reg::R3, Reg::R10);
        a.alu64_imm(AluOp::Add, Reg::R3, -8);
        a.mov64_imm(Reg::R4, 0);
        a.call_helper(BPF_LOOP);
        a.load(Size::U64, Reg::R0, Reg::R10, -8);
        a.alu64_reg(AluOp::Add, Reg::R0, Reg::R6);
        a.exit();
        a.bind(f).unwrap();
        a.call_local(h);
        a.alu64_imm(AluOp::Add, Reg::R0, 30);
        a.exit();
        a.bind(g).unwrap();
        a.load(Size::U64, Reg::R1, Reg::R2, 0);
        a.alu64_imm(AluOp::Add, Reg::R1, 1);
        a.store_reg(Size::U64, Reg::R2, 0, Reg::R1);
        a.mov64_imm(Reg::R0, 0);
        a.exit();
        a.bind(h).unwrap();
        a.mov64_imm(Reg::R0, 10);
        a.exit();
        let out = a.finish().unwrap();
        out.into_program("calls".into(), "BEGIN".into(), AttachPoint::Begin)
    }

    /// The kernel loads and runs programs with bpf-to-bpf calls and a
    /// `bpf_loop` callback through libbpf, beside a program without
    /// functions and a second copy sharing `.text`.
    #[test]
    fn kernel_runs_calls_and_callbacks() {
        let mut second = calls_and_loop();
        second.name = "calls2".into();
        let plain = empty_program("plain", "BEGIN", AttachPoint::Begin);
        let compiled = with_ring(vec![], vec![calls_and_loop(), plain, second]);
        let loaded = load(&compiled).unwrap_or_else(|e| panic!("{e}: {e:?}"));
        assert_eq!(loaded.run_once(0).expect("run"), 43);
        assert_eq!(loaded.run_once(1).expect("run"), 0);
        assert_eq!(loaded.run_once(2).expect("run"), 43);
    }
}
