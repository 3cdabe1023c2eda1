//! Wraps finished BPF programs (map fds already patched in) in the smallest
//! relocatable ELF that libbpf accepts: one executable section per program,
//! named after its libbpf section (which selects the program type), a global
//! function symbol per program, and a `license` section. No `.maps`: maps
//! are created beforehand and referenced by fd. Programs that call BPF
//! functions put those in `.text`, with the relocations and BTF function
//! information libbpf and the kernel need (`elf_functions.rs`); others get
//! neither.

use std::collections::HashMap;

use object::write::{Object, Relocation, SectionId, Symbol, SymbolId, SymbolSection};
use object::{
    Architecture, BinaryFormat, Endianness, RelocationFlags, SectionKind, SymbolFlags, SymbolKind,
    SymbolScope, elf,
};

use super::elf_functions::{FuncRecord, Functions, RefKind, find_functions, func_info_btf};

/// Why the ELF image could not be written: a compiler or loader bug.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error(transparent)]
    Object(#[from] object::write::Error),
    #[error("program `{program}`: {reason}")]
    Function { program: String, reason: String },
}

/// One program to place in the object.
pub struct ElfProgram<'a> {
    /// Symbol name; libbpf's program name.
    pub name: &'a str,
    /// libbpf section name, e.g. `tracepoint/syscalls/sys_enter_read`.
    pub section: String,
    /// Raw instruction slots, map fds already in place.
    pub insns: &'a [u64],
}

/// Builds the ELF image in memory.
pub fn write_elf(programs: &[ElfProgram<'_>]) -> Result<Vec<u8>, ElfError> {
    let mut obj = Object::new(BinaryFormat::Elf, Architecture::Bpf, Endianness::Little);
    // Programs of one section name share the section (libbpf keys programs
    // by symbol), so `.BTF.ext`, which names sections, is unambiguous.
    let mut sections: HashMap<&str, SectionId> = HashMap::new();
    let mut funcs = Vec::new();
    for prog in programs {
        let section = *sections.entry(&prog.section).or_insert_with(|| {
            obj.add_section(
                Vec::new(),
                prog.section.as_bytes().to_vec(),
                SectionKind::Text,
            )
        });
        let functions = find_functions(prog.insns).map_err(|reason| ElfError::Function {
            program: prog.name.to_string(),
            reason,
        })?;
        let Some(functions) = functions else {
            add_function(
                &mut obj,
                section,
                prog.name,
                prog.insns,
                SymbolScope::Dynamic,
            );
            continue;
        };
        let text = *sections
            .entry(".text")
            .or_insert_with(|| obj.add_section(Vec::new(), b".text".to_vec(), SectionKind::Text));
        add_with_functions(&mut obj, (section, text), prog, &functions, &mut funcs)?;
    }
    if !funcs.is_empty() {
        add_btf(&mut obj, &mut funcs);
    }
    let license = obj.add_section(Vec::new(), b"license".to_vec(), SectionKind::Data);
    obj.append_section_data(license, b"GPL\0", 1);
    Ok(obj.write()?)
}

/// Adds a program whose functions go to `.text` (`sections.1`), with the
/// relocations of its calls and function addresses.
fn add_with_functions(
    obj: &mut Object<'_>,
    (section, text): (SectionId, SectionId),
    prog: &ElfProgram<'_>,
    functions: &Functions,
    funcs: &mut Vec<FuncRecord>,
) -> Result<(), ElfError> {
    let entry_base = obj.section(section).data().len() as u64;
    let mut insns = prog.insns.to_vec();
    let relocations = refs_to_relocate(functions, &mut insns);
    let text_base = obj.section(text).data().len() as u64;
    let symbols = add_functions(obj, text, prog.name, functions, &insns, funcs);
    for (slot, target, r_type) in relocations {
        let (in_section, offset) = match slot.checked_sub(functions.split) {
            Some(in_text) => (text, text_base + 8 * in_text as u64),
            None => (section, entry_base + 8 * slot as u64),
        };
        let symbol = symbols.iter().find(|(start, _)| *start == target);
        let relocation = Relocation {
            offset,
            symbol: symbol.expect("every target starts a function").1,
            addend: 0,
            flags: RelocationFlags::Elf { r_type },
        };
        obj.add_relocation(in_section, relocation)?;
    }
    let entry = &insns[..functions.split];
    add_function(obj, section, prog.name, entry, SymbolScope::Dynamic);
    funcs.push(FuncRecord {
        section: prog.section.clone(),
        name: prog.name.to_string(),
        global: true,
        byte_offset: u32::try_from(entry_base).expect("sections under 4 GiB"),
    });
    Ok(())
}

/// Adds `.BTF` and `.BTF.ext` describing `funcs`.
fn add_btf(obj: &mut Object<'_>, funcs: &mut [FuncRecord]) {
    // `.BTF.ext` records go per section, ascending.
    funcs.sort_by(|a, b| (&a.section, a.byte_offset).cmp(&(&b.section, b.byte_offset)));
    let (btf, btf_ext) = func_info_btf(funcs);
    let btf_section = obj.add_section(Vec::new(), b".BTF".to_vec(), SectionKind::Other);
    obj.append_section_data(btf_section, &btf, 4);
    let ext_section = obj.add_section(Vec::new(), b".BTF.ext".to_vec(), SectionKind::Other);
    obj.append_section_data(ext_section, &btf_ext, 4);
}

/// Appends `insns` to `section` under a function symbol; returns it and its offset.
fn add_function(
    obj: &mut Object<'_>,
    section: SectionId,
    name: &str,
    insns: &[u64],
    scope: SymbolScope,
) -> (SymbolId, u64) {
    let bytes: Vec<u8> = insns.iter().flat_map(|i| i.to_le_bytes()).collect();
    let offset = obj.append_section_data(section, &bytes, 8);
    let symbol = obj.add_symbol(Symbol {
        name: name.as_bytes().to_vec(),
        value: offset,
        size: bytes.len() as u64,
        kind: SymbolKind::Text,
        scope,
        weak: false,
        section: SymbolSection::Section(section),
        flags: SymbolFlags::None,
    });
    (symbol, offset)
}

/// Appends a program's functions to `.text` in their order (so calls among
/// them keep their offsets), each under a hidden global symbol `PROG__fN`
/// (libbpf's marker for a function BTF calls static); returns the symbols
/// by start slot.
fn add_functions(
    obj: &mut Object<'_>,
    text: SectionId,
    program: &str,
    functions: &Functions,
    insns: &[u64],
    funcs: &mut Vec<FuncRecord>,
) -> Vec<(usize, SymbolId)> {
    let ends = functions
        .starts
        .iter()
        .skip(1)
        .copied()
        .chain([insns.len()]);
    let mut symbols = Vec::new();
    for (n, (&start, end)) in functions.starts.iter().zip(ends).enumerate() {
        let name = format!("{program}__f{n}");
        let (symbol, offset) =
            add_function(obj, text, &name, &insns[start..end], SymbolScope::Linkage);
        funcs.push(FuncRecord {
            section: ".text".into(),
            name,
            global: false,
            byte_offset: u32::try_from(offset).expect(".text under 4 GiB"),
        });
        symbols.push((start, symbol));
    }
    symbols
}

/// The `(slot, target, type)` of each relocation libbpf needs, with `imm`
/// set as libbpf expects beside a relocation: -1 for calls, 0 for function
/// addresses. Calls inside `.text` keep their offsets and need none.
fn refs_to_relocate(
    functions: &Functions,
    insns: &mut [u64],
) -> Vec<(usize, usize, elf::RelocationType)> {
    let mut out = Vec::new();
    for r in &functions.refs {
        let (r_type, imm) = match r.kind {
            RefKind::Call if r.slot >= functions.split => continue,
            RefKind::Call => (elf::R_BPF_64_32, -1i32),
            RefKind::Address => (elf::R_BPF_64_64, 0),
        };
        insns[r.slot] = (insns[r.slot] & 0xffff_ffff) | (u64::from(imm as u32) << 32);
        out.push((r.slot, r.target, r_type));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

    /// The image has the program section, its global symbol and the license.
    #[test]
    fn writes_sections_and_symbols() {
        let insns = [0xb7u64, 0x95]; // r0 = 0; exit
        let elf = write_elf(&[ElfProgram {
            name: "p0",
            section: "tracepoint/syscalls/sys_enter_getppid".into(),
            insns: &insns,
        }])
        .expect("write");
        let file = object::File::parse(&*elf).expect("parse");
        let sec = file
            .section_by_name("tracepoint/syscalls/sys_enter_getppid")
            .expect("section");
        assert_eq!(sec.data().expect("data").len(), 16);
        let sym = file
            .symbols()
            .find(|s| s.name() == Ok("p0"))
            .expect("symbol");
        assert!(sym.is_global());
        let lic = file.section_by_name("license").expect("license");
        assert_eq!(lic.data().expect("data"), b"GPL\0");
    }
}
