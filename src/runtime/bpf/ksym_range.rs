//! Kernel symbols' address ranges by name without reading `/proc/kallsyms`
//! (~120 k lines, 30–100 ms of kernel formatting here): one tiny sleepable
//! `BPF_PROG_TYPE_SYSCALL` program per name, run once, asks the kernel's
//! symbol table for the address (`bpf_kallsyms_lookup_name`) and formats it
//! with `bpf_snprintf("%pS")`, whose `NAME+0x0/0xSIZE` gives the size — the
//! distance to the next symbol, as `/proc/kallsyms`' order gives it.
//!
//! Input: symbol names. Output: each one's `[start, end)`, or `None` when the
//! kernel does not know it (or hides its address from this user); an error
//! when this kernel cannot run such programs (before Linux 5.16).

use std::os::fd::{AsFd, OwnedFd};

use libbpf_rs::libbpf_sys;
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

use super::syscall_program;
use crate::codegen::asm::{AluOp, Assembler, Cond, Reg, Size};
use crate::codegen::helpers;
use crate::vocab::MapId;

/// Longest name looked up, its NUL included (kernel names are far shorter).
const NAME_BYTES: usize = 128;
/// Room for `NAME+0x0/0xSIZE [module]`.
const TEXT_BYTES: usize = 128;
/// Stack offsets (below the frame pointer) of the address, name and text.
const ADDR_AT: i16 = -8;
const NAME_AT: i16 = ADDR_AT - NAME_BYTES as i16;
const TEXT_AT: i16 = NAME_AT - TEXT_BYTES as i16;
/// The program's context, copied back by the test run: the address, then
/// the formatted text.
const CONTEXT_BYTES: usize = 8 + TEXT_BYTES;
/// `bpf_snprintf`'s format must be in a frozen read-only map.
const FORMAT: &[u8; 4] = b"%pS\0";

#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("cannot create the format map: {0}")]
    Map(String),
    #[error("cannot assemble the lookup program: {0}")]
    Assemble(String),
    #[error("the kernel refused the lookup program: {0}")]
    Load(std::io::Error),
    #[error("cannot run the lookup program: {0}")]
    Run(std::io::Error),
}

/// The `[start, end)` range of each of `names`, in order.
pub fn ranges(names: &[&str]) -> Result<Vec<Option<(u64, u64)>>, LookupError> {
    Ok((lookups(names)?.iter())
        .map(|context| context.as_ref().and_then(range))
        .collect())
}

/// The address of each of `names`, in order: also of symbols outside the
/// text (section bounds), which have no size here.
pub fn addresses(names: &[&str]) -> Result<Vec<Option<u64>>, LookupError> {
    Ok((lookups(names)?.iter())
        .map(|context| {
            let context = context.as_ref()?;
            let start = u64::from_ne_bytes(context[..8].try_into().expect("8 bytes"));
            (start != 0).then_some(start)
        })
        .collect())
}

/// Each name's program run: its context, `None` for an unknown name.
fn lookups(names: &[&str]) -> Result<Vec<Option<[u8; CONTEXT_BYTES]>>, LookupError> {
    let format = format_map()?;
    (names.iter())
        .map(|name| match lookup_program(name, &format)? {
            Some(program) => run(&program),
            None => Ok(None),
        })
        .collect()
}

/// An array map of one read-only, frozen value: the `%pS` format.
fn format_map() -> Result<MapHandle, LookupError> {
    let fail = |e: libbpf_rs::Error| LookupError::Map(format!("{e:#}"));
    let opts = libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: libbpf_sys::BPF_F_RDONLY_PROG,
        ..Default::default()
    };
    let map = MapHandle::create(
        MapType::Array,
        Some("wprof_ksym_fmt"),
        4,
        FORMAT.len() as u32,
        1,
        &opts,
    )
    .map_err(fail)?;
    map.update(&0u32.to_ne_bytes(), FORMAT, MapFlags::ANY)
        .map_err(fail)?;
    map.freeze().map_err(fail)?;
    Ok(map)
}

/// Loads the program that looks `name` up; `None` for a name too long to be
/// a kernel symbol or holding a NUL.
fn lookup_program(name: &str, format: &MapHandle) -> Result<Option<OwnedFd>, LookupError> {
    if name.len() >= NAME_BYTES || name.contains('\0') {
        return Ok(None);
    }
    let insns = lookup_insns(name)?;
    syscall_program::load(&insns, format.as_fd(), c"wprof_ksym")
        .map(Some)
        .map_err(LookupError::Load)
}

/// `ctx[0] = kallsyms_lookup_name(name)`, `ctx[8..] = "%pS" of it`; returns
/// the lookup's error (`-ENOENT` for an unknown name), else 0.
fn lookup_insns(name: &str) -> Result<Vec<u64>, LookupError> {
    use Reg::*;
    let mut asm = Assembler::new();
    let done = asm.new_label();
    asm.mov64_reg(R6, R1);
    let mut bytes = name.as_bytes().to_vec();
    bytes.resize(name.len() / 4 * 4 + 4, 0);
    for (i, word) in bytes.chunks_exact(4).enumerate() {
        let word = i32::from_ne_bytes(word.try_into().expect("4 bytes"));
        asm.store_imm(Size::U32, R10, NAME_AT + 4 * i as i16, word);
    }
    for i in 0..TEXT_BYTES as i16 / 8 {
        asm.store_imm(Size::U64, R10, TEXT_AT + 8 * i, 0);
    }
    let frame_pointer_plus = |asm: &mut Assembler, reg: Reg, offset: i16| {
        asm.mov64_reg(reg, R10);
        asm.alu64_imm(AluOp::Add, reg, i32::from(offset));
    };
    frame_pointer_plus(&mut asm, R1, NAME_AT);
    asm.mov64_imm(R2, name.len() as i32 + 1);
    asm.mov64_imm(R3, 0);
    frame_pointer_plus(&mut asm, R4, ADDR_AT);
    asm.call_helper(helpers::KALLSYMS_LOOKUP_NAME);
    asm.jmp_imm(Cond::Ne, R0, 0, done);
    asm.load(Size::U64, R1, R10, ADDR_AT);
    asm.store_reg(Size::U64, R6, 0, R1);
    frame_pointer_plus(&mut asm, R1, TEXT_AT);
    asm.mov64_imm(R2, TEXT_BYTES as i32);
    asm.ld_map_value(R3, MapId(0), 0);
    frame_pointer_plus(&mut asm, R4, ADDR_AT);
    asm.mov64_imm(R5, 8);
    asm.call_helper(helpers::SNPRINTF);
    for i in 0..TEXT_BYTES as i16 / 8 {
        asm.load(Size::U64, R1, R10, TEXT_AT + 8 * i);
        asm.store_reg(Size::U64, R6, 8 + 8 * i, R1);
    }
    asm.mov64_imm(R0, 0);
    let fail = |e: crate::codegen::asm::AsmError| LookupError::Assemble(e.to_string());
    asm.bind(done).map_err(fail)?;
    asm.exit();
    Ok(asm.finish().map_err(fail)?.insns)
}

/// Runs the program once; its context afterwards, or `None` when the lookup
/// failed (the name is not a kernel symbol).
fn run(program: &OwnedFd) -> Result<Option<[u8; CONTEXT_BYTES]>, LookupError> {
    let mut context = [0u8; CONTEXT_BYTES];
    let retval = syscall_program::run(program, &mut context).map_err(LookupError::Run)?;
    Ok((retval == 0).then_some(context))
}

/// The range a run's context gives: its address and the size in the text.
fn range(context: &[u8; CONTEXT_BYTES]) -> Option<(u64, u64)> {
    let start = u64::from_ne_bytes(context[..8].try_into().expect("8 bytes"));
    let text = &context[8..];
    let text = std::str::from_utf8(&text[..text.iter().position(|&b| b == 0)?]).ok()?;
    let size = size_of_symbol(text)?;
    (start != 0 && size > 0).then(|| (start, start + size))
}

/// The size in `%pS` text `NAME+0xOFFSET/0xSIZE [MODULE]`, of the symbol
/// the address starts (offset 0).
fn size_of_symbol(text: &str) -> Option<u64> {
    let (_, place) = text.rsplit_once('+')?;
    let place = place.split(' ').next()?;
    let (offset, size) = place.split_once('/')?;
    let hex = |field: &str| u64::from_str_radix(field.strip_prefix("0x")?, 16).ok();
    (hex(offset)? == 0).then_some(hex(size)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::bpf::stack_skip::iterator_ranges;

    /// The size is read from `%pS` text, with or without a module; an
    /// address inside a symbol, or text without a size, gives none.
    #[test]
    fn reads_sizes() {
        assert_eq!(
            size_of_symbol("__traceiter_sched_switch+0x0/0x70"),
            Some(0x70)
        );
        assert_eq!(size_of_symbol("__traceiter_x+0x0/0x40 [kvm]"), Some(0x40));
        assert_eq!(size_of_symbol("a+b+0x0/0x10"), Some(0x10));
        assert_eq!(size_of_symbol("f+0x8/0x70"), None);
        assert_eq!(size_of_symbol("0xffffffff81000000"), None);
    }

    /// On this kernel the ranges equal those `/proc/kallsyms` gives (the
    /// symbol to the next text symbol); an unknown name has none.
    #[test]
    fn agrees_with_kallsyms() {
        let names = ["sched_switch", "sched_waking", "task_rename"];
        let symbols: Vec<String> = names.iter().map(|n| format!("__traceiter_{n}")).collect();
        let mut wanted: Vec<&str> = symbols.iter().map(String::as_str).collect();
        wanted.push("wprof_no_such_symbol");
        let found = ranges(&wanted).unwrap_or_else(|e| panic!("{e}"));
        let kallsyms = std::fs::read_to_string("/proc/kallsyms").expect("read /proc/kallsyms");
        let expected = iterator_ranges(&kallsyms, &names);
        assert_eq!(expected.len(), names.len(), "{expected:x?}");
        for (name, start, end) in expected {
            let at = names.iter().position(|n| *n == name).expect("asked for");
            assert_eq!(found[at], Some((start, end)), "{name}");
        }
        assert_eq!(found[names.len()], None);
    }
}
