//! Names of PLT stubs: `func@plt`, as objdump and perf print them.
//!
//! A binary's symbol table has no symbols for its PLT, so a symbolizer names
//! an address there after the nearest symbol before it (`_init`, which ends
//! right before `.plt`). Each stub jumps through its GOT slot
//! (`jmp *disp(%rip)`, `ff 25`, after an `endbr64` or a `bnd` prefix in some
//! layouts), and the dynamic relocation of that slot (`R_X86_64_JUMP_SLOT`
//! from `.rela.plt`, `R_X86_64_GLOB_DAT` from `.rela.dyn` for `.plt.got`)
//! names the function it reaches. A slot filled by an IFUNC resolver
//! (`R_X86_64_IRELATIVE`, in the C library) is named as objdump does,
//! `*ABS*+0xRESOLVER@plt`.
//!
//! Input: an x86-64 ELF image. Output: [`PltStubs`], the stubs by file offset.

use std::collections::HashMap;
use std::path::Path;

use object::elf::{R_X86_64_GLOB_DAT, R_X86_64_IRELATIVE, R_X86_64_JUMP_SLOT};
use object::read::elf::{ElfFile64, ElfSection64, SectionHeader};
use object::{
    Endianness, Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationFlags,
    RelocationTarget,
};

type Elf<'data> = ElfFile64<'data, Endianness>;

/// The sections that hold stubs, with their entry size when the section
/// does not give one (`sh_entsize`).
const SECTIONS: [(&str, u64); 3] = [(".plt", 16), (".plt.sec", 16), (".plt.got", 8)];
/// `jmp *disp32(%rip)`.
const JMP_RIP: [u8; 2] = [0xff, 0x25];

/// One stub: its bytes in the file and the function it jumps to.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stub {
    start: u64,
    end: u64,
    name: String,
}

/// The named PLT stubs of one file, sorted by file offset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PltStubs {
    stubs: Vec<Stub>,
}

impl PltStubs {
    /// The stubs of the file at `path`; none when it cannot be read or is
    /// not ELF.
    pub fn of_file(path: &Path) -> PltStubs {
        match crate::unwind::manager::map_file(path) {
            Ok(image) => PltStubs::of_image(&image),
            Err(_) => PltStubs::default(),
        }
    }

    /// The stubs of an ELF image; none when it is not ELF.
    pub fn of_image(image: &[u8]) -> PltStubs {
        let Ok(file) = Elf::parse(image) else {
            return PltStubs::default();
        };
        let slots = got_slot_names(&file);
        let mut stubs = Vec::new();
        for (name, default_size) in SECTIONS {
            if let Some(section) = file.section_by_name(name) {
                stubs.extend(section_stubs(&file, &section, default_size, &slots));
            }
        }
        stubs.sort_by_key(|s| s.start);
        PltStubs { stubs }
    }

    /// `func@plt` and the offset into its stub, when `file_offset` is in one.
    pub fn name_at(&self, file_offset: u64) -> Option<(&str, u64)> {
        let after = self.stubs.partition_point(|s| s.start <= file_offset);
        let stub = self.stubs[..after].last()?;
        (file_offset < stub.end).then(|| (stub.name.as_str(), file_offset - stub.start))
    }
}

/// GOT slot address → `func@plt`, from the dynamic relocations that fill
/// the slots with functions (or their IFUNC resolvers).
fn got_slot_names(file: &Elf<'_>) -> HashMap<u64, String> {
    let (Some(relocations), Some(symbols)) =
        (file.dynamic_relocations(), file.dynamic_symbol_table())
    else {
        return HashMap::new();
    };
    let mut names = HashMap::new();
    for (slot, relocation) in relocations {
        let RelocationFlags::Elf { r_type } = relocation.flags() else {
            continue;
        };
        if r_type == R_X86_64_IRELATIVE {
            let resolver = relocation.addend();
            names.insert(slot, format!("*ABS*+{resolver:#x}@plt"));
            continue;
        }
        if r_type != R_X86_64_JUMP_SLOT && r_type != R_X86_64_GLOB_DAT {
            continue;
        }
        let RelocationTarget::Symbol(index) = relocation.target() else {
            continue;
        };
        let name = symbols.symbol_by_index(index).and_then(|s| s.name());
        if let Ok(name) = name
            && !name.is_empty()
        {
            names.insert(slot, format!("{name}@plt"));
        }
    }
    names
}

/// The stubs of one PLT section whose jump goes through a named slot.
fn section_stubs(
    file: &Elf<'_>,
    section: &ElfSection64<'_, '_, Endianness>,
    default_size: u64,
    slots: &HashMap<u64, String>,
) -> Vec<Stub> {
    let (Ok(bytes), Some((file_start, _))) = (section.data(), section.file_range()) else {
        return Vec::new();
    };
    let size = match section.elf_section_header().sh_entsize(file.endian()) {
        size @ (8 | 16) => size,
        _ => default_size,
    };
    let mut stubs = Vec::new();
    for (index, entry) in bytes.chunks(size as usize).enumerate() {
        let entry_at = index as u64 * size;
        let Some(jump) = entry.windows(2).position(|w| w == JMP_RIP) else {
            continue;
        };
        let Some(disp) = entry.get(jump + 2..jump + 6) else {
            continue;
        };
        let disp = i32::from_le_bytes([disp[0], disp[1], disp[2], disp[3]]);
        let next = section.address() + entry_at + jump as u64 + 6;
        let slot = next.wrapping_add_signed(i64::from(disp));
        if let Some(name) = slots.get(&slot) {
            let start = file_start + entry_at;
            let end = start + entry.len() as u64;
            let name = name.clone();
            stubs.push(Stub { start, end, name });
        }
    }
    stubs
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// `func@plt` labels and their addresses in `objdump -d`'s listing of
    /// the PLT sections of `path`; `None` without objdump.
    fn objdump_stubs(path: &str) -> Option<Vec<(u64, String)>> {
        let mut args = vec!["-d".to_owned()];
        args.extend(SECTIONS.map(|(name, _)| format!("--section={name}")));
        let out = Command::new("objdump")
            .args(&args)
            .arg(path)
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let labels = text.lines().filter_map(|line| {
            let (address, label) = line.strip_suffix(">:")?.split_once(" <")?;
            let name = label.strip_suffix("@plt")?;
            Some((
                u64::from_str_radix(address, 16).ok()?,
                format!("{name}@plt"),
            ))
        });
        Some(labels.collect())
    }

    /// Every stub objdump names in a program and the C library has that
    /// name here, at every byte of it, and there are no others.
    #[test]
    fn names_match_objdump() {
        let mut checked = 0;
        for path in ["/usr/bin/ls", "/lib/x86_64-linux-gnu/libc.so.6"] {
            let Some(expected) = objdump_stubs(path) else {
                eprintln!("skipped: objdump is not installed");
                return;
            };
            let image = std::fs::read(path).expect("read the binary");
            let file = Elf::parse(&*image).expect("ELF");
            let stubs = PltStubs::of_image(&image);
            for (address, name) in &expected {
                let section = (file.sections())
                    .find(|s| (s.address()..s.address() + s.size()).contains(address))
                    .expect("a section holds the stub");
                let (offset, _) = section.file_range().expect("in the file");
                let at = address - section.address() + offset;
                assert_eq!(stubs.name_at(at), Some((name.as_str(), 0)), "{path}");
                assert_eq!(stubs.name_at(at + 5), Some((name.as_str(), 5)), "{path}");
            }
            assert_eq!(stubs.stubs.len(), expected.len(), "{path}");
            checked += expected.len();
        }
        assert!(checked > 50, "only {checked} stubs");
    }

    /// Offsets outside every stub, and images that are not ELF, name nothing.
    #[test]
    fn nothing_outside_stubs() {
        let image = std::fs::read("/usr/bin/ls").expect("read ls");
        let stubs = PltStubs::of_image(&image);
        assert_eq!(stubs.name_at(0), None);
        assert_eq!(stubs.name_at(u64::MAX), None);
        assert_eq!(PltStubs::of_image(b"not an ELF image"), PltStubs::default());
    }
}
