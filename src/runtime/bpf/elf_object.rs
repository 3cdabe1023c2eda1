//! Wraps finished BPF programs (map fds already patched in) in the smallest
//! relocatable ELF that libbpf accepts: one executable section per program,
//! named after its libbpf section (which selects the program type), a global
//! function symbol per program, and a `license` section. No BTF, no `.maps`,
//! no relocations: maps are created beforehand and referenced by fd.

use object::write::{Object, Symbol, SymbolSection};
use object::{
    Architecture, BinaryFormat, Endianness, SectionKind, SymbolFlags, SymbolKind, SymbolScope,
};

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
pub fn write_elf(programs: &[ElfProgram<'_>]) -> Result<Vec<u8>, object::write::Error> {
    let mut obj = Object::new(BinaryFormat::Elf, Architecture::Bpf, Endianness::Little);
    for prog in programs {
        // Several programs may share a section name (two `uprobe`s); libbpf
        // keys programs by symbol, so give each its own section anyway.
        let section = obj.add_section(
            Vec::new(),
            prog.section.as_bytes().to_vec(),
            SectionKind::Text,
        );
        let bytes: Vec<u8> = prog.insns.iter().flat_map(|i| i.to_le_bytes()).collect();
        let offset = obj.append_section_data(section, &bytes, 8);
        obj.add_symbol(Symbol {
            name: prog.name.as_bytes().to_vec(),
            value: offset,
            size: bytes.len() as u64,
            kind: SymbolKind::Text,
            scope: SymbolScope::Dynamic,
            weak: false,
            section: SymbolSection::Section(section),
            flags: SymbolFlags::None,
        });
    }
    let license = obj.add_section(Vec::new(), b"license".to_vec(), SectionKind::Data);
    obj.append_section_data(license, b"GPL\0", 1);
    obj.write()
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
