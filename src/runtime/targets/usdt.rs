//! Runtime, USDT attach targets: reads a binary's `.note.stapsdt` notes. Input: an
//! ELF file and provider/name globs; output: [`UsdtProbe`]s with the file offset to
//! attach a uprobe to, the semaphore offset (`ref_ctr_offset`) and each argument's
//! x86-64 location decoded into [`UsdtArgLocation`], ready for code generation.

use std::path::{Path, PathBuf};

use object::read::elf::{FileHeader, SectionHeader};
use object::{Endian, Endianness, elf};

use crate::vocab::x86_64::Register;

use super::elf::{
    ElfError, ElfVisitor, LoadSegment, load_segments, read_file, vaddr_to_offset, visit_elf,
};

/// Everything that can go wrong while reading USDT notes.
#[derive(Debug, thiserror::Error)]
pub enum UsdtError {
    /// The file could not be read or is not usable ELF.
    #[error(transparent)]
    Elf(#[from] ElfError),
    /// A note is shorter than its fixed fields or lacks its strings.
    #[error("malformed USDT note #{index} in {}: {reason}", path.display())]
    MalformedNote {
        path: PathBuf,
        index: usize,
        reason: String,
    },
    /// A provider or name glob is not a valid pattern.
    #[error("invalid USDT pattern `{pattern}`: {reason}")]
    BadPattern { pattern: String, reason: String },
    /// No note matched.
    #[error("no USDT probe matching `{pattern}` in {}", path.display())]
    NoProbe { pattern: String, path: PathBuf },
}

/// One USDT probe site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtProbe {
    /// The provider, the first argument of `DTRACE_PROBEn`.
    pub provider: String,
    /// The probe name.
    pub name: String,
    /// Link-time address of the probe's `nop`, adjusted by `.stapsdt.base`.
    pub address: u64,
    /// File offset of the `nop`: what the uprobe attaches to.
    pub file_offset: u64,
    /// File offset of the probe's semaphore, the uprobe's `ref_ctr_offset`; 0 when it has none.
    pub semaphore_offset: u64,
    /// The arguments, `arg0` first.
    pub args: Vec<UsdtArg>,
}

/// One probe argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtArg {
    /// Size in bytes of the value (the `N` of `N@...`; 8 when absent).
    pub size: u8,
    /// A negative `N`: the value is sign-extended.
    pub signed: bool,
    /// Where the value is.
    pub location: UsdtArgLocation,
    /// The spec as written in the note, for messages.
    pub spec: String,
}

/// Where an argument's value is when the probe fires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UsdtArgLocation {
    /// `N@%reg`: the value is in a register.
    Register(Register),
    /// `N@$imm`: a constant.
    Immediate(i64),
    /// `N@off(%reg)`: the value is in memory at `reg + offset`.
    Memory { base: Register, offset: i64 },
    /// `N@off(%base,%index,scale)`: memory at `base + index * scale + offset`.
    Indexed {
        base: Option<Register>,
        index: Register,
        scale: u8,
        offset: i64,
    },
    /// `N@sym+off(%rip)`: memory at `pt_regs.ip + pc_offset`. A uprobe handler
    /// sees `ip` equal to the probe address, so the link-time distance from the
    /// probe to the symbol gives the runtime address in any load bias.
    PcRelative { pc_offset: i64 },
    /// A form this decoder does not handle; probes using it can still attach
    /// if the script never reads this argument.
    Unsupported { reason: String },
}

/// The probes in `binary` whose provider (any when `None`) and name match the globs,
/// sorted by provider, name and offset.
pub fn find_usdt(
    binary: &Path,
    provider_glob: Option<&str>,
    name_glob: &str,
) -> Result<Vec<UsdtProbe>, UsdtError> {
    let pattern = format!("{}:{name_glob}", provider_glob.unwrap_or("*"));
    let compile = |glob: &str| {
        glob::Pattern::new(glob).map_err(|e| UsdtError::BadPattern {
            pattern: pattern.clone(),
            reason: e.to_string(),
        })
    };
    let provider = compile(provider_glob.unwrap_or("*"))?;
    let name = compile(name_glob)?;
    let data = read_file(binary)?;
    let notes = visit_elf(binary, &data, NoteCollector)?;
    let mut probes = Vec::new();
    for (index, note) in notes.into_iter().enumerate() {
        let malformed = |reason: &str| UsdtError::MalformedNote {
            path: binary.into(),
            index,
            reason: reason.into(),
        };
        let probe = note.into_probe().map_err(malformed)?;
        if provider.matches(&probe.provider) && name.matches(&probe.name) {
            probes.push(probe);
        }
    }
    probes.sort_by(|a, b| {
        (&a.provider, &a.name, a.file_offset).cmp(&(&b.provider, &b.name, b.file_offset))
    });
    probes.dedup();
    if probes.is_empty() {
        return Err(UsdtError::NoProbe {
            pattern,
            path: binary.into(),
        });
    }
    Ok(probes)
}

/// A `stapsdt` note with the file context needed to place it.
struct RawNote {
    desc: Vec<u8>,
    is_64: bool,
    little_endian: bool,
    /// `sh_addr` of `.stapsdt.base`, when the section exists.
    base_section: Option<u64>,
    segments: Vec<LoadSegment>,
    /// Function and object symbols by address, for `sym(%rip)` arguments.
    symbols: Vec<(String, u64)>,
}

/// Gathers every `stapsdt` note (owner `stapsdt`, type 3) from the file's note sections.
struct NoteCollector;

const NT_STAPSDT: elf::NoteType = elf::NoteType(3);

impl ElfVisitor for NoteCollector {
    type Output = Vec<RawNote>;

    fn visit<Elf: FileHeader<Endian = Endianness>>(
        self,
        data: &[u8],
    ) -> object::read::Result<Self::Output> {
        let header = Elf::parse(data)?;
        let endian = header.endian()?;
        let segments = load_segments(header, endian, data)?;
        let sections = header.sections(endian, data)?;
        let base_section = sections
            .section_by_name(endian, b".stapsdt.base")
            .map(|(_, s)| s.sh_addr(endian).into());
        let mut notes = Vec::new();
        for section in sections.iter() {
            let Some(mut iter) = section.notes(endian, data)? else {
                continue;
            };
            while let Some(note) = iter.next()? {
                if note.name() == b"stapsdt" && note.n_type(endian) == NT_STAPSDT {
                    notes.push(note.desc().to_vec());
                }
            }
        }
        let symbols = if notes.is_empty() {
            Vec::new()
        } else {
            data_symbols(header, endian, data)?
        };
        Ok(notes
            .into_iter()
            .map(|desc| RawNote {
                desc,
                is_64: header.is_class_64(),
                little_endian: endian.is_little_endian(),
                base_section,
                segments: segments.clone(),
                symbols: symbols.clone(),
            })
            .collect())
    }
}

/// Named, defined symbols of `.symtab` and `.dynsym` with their addresses.
fn data_symbols<Elf: FileHeader>(
    header: &Elf,
    endian: Elf::Endian,
    data: &[u8],
) -> object::read::Result<Vec<(String, u64)>> {
    use object::read::elf::Sym;
    let sections = header.sections(endian, data)?;
    let mut out = Vec::new();
    for table in [elf::SHT_SYMTAB, elf::SHT_DYNSYM] {
        let symbols = sections.symbols(endian, data, table)?;
        for sym in symbols.symbols() {
            if sym.st_shndx(endian) == elf::SHN_UNDEF {
                continue;
            }
            if let Ok(name) = symbols.symbol_name(endian, sym) {
                out.push((
                    String::from_utf8_lossy(name).into_owned(),
                    sym.st_value(endian).into(),
                ));
            }
        }
    }
    Ok(out)
}

impl RawNote {
    /// Decodes `pc, base, semaphore` (words of the file's class) and
    /// `provider\0name\0args\0`.
    fn into_probe(self) -> Result<UsdtProbe, &'static str> {
        let word = if self.is_64 { 8 } else { 4 };
        let read_word = |index: usize| -> Result<u64, &'static str> {
            let bytes = self
                .desc
                .get(index * word..(index + 1) * word)
                .ok_or("descriptor shorter than its three addresses")?;
            let mut buf = [0u8; 8];
            if self.little_endian {
                buf[..word].copy_from_slice(bytes);
                Ok(u64::from_le_bytes(buf))
            } else {
                buf[8 - word..].copy_from_slice(bytes);
                Ok(u64::from_be_bytes(buf))
            }
        };
        let (pc, base, semaphore) = (read_word(0)?, read_word(1)?, read_word(2)?);
        let mut strings = self.desc[3 * word..].split(|&b| b == 0);
        let mut next = || {
            strings
                .next()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .ok_or("missing provider, name or argument string")
        };
        let (provider, name, arg_text) = (next()?, next()?, next().unwrap_or_default());
        // Prelinking moves the file's sections but not the note's addresses; the
        // `.stapsdt.base` section records how far, and semaphores move alike.
        let delta = self.base_section.map_or(0, |addr| addr.wrapping_sub(base));
        let address = pc.wrapping_add(delta);
        let file_offset = vaddr_to_offset(&self.segments, address)
            .ok_or("probe address is in no PT_LOAD segment")?;
        let semaphore_offset = match semaphore {
            0 => 0,
            sem => vaddr_to_offset(&self.segments, sem.wrapping_add(delta))
                .ok_or("semaphore address is in no PT_LOAD segment")?,
        };
        let args = arg_text
            .split_whitespace()
            .map(|spec| parse_arg(spec, address, &self.symbols))
            .collect();
        Ok(UsdtProbe {
            provider,
            name,
            address,
            file_offset,
            semaphore_offset,
            args,
        })
    }
}

/// Decodes one argument spec (`-4@%edi`, `8@$5`, `-8@-16(%rbp)`, `8@(%rax,%rdx,8)`,
/// `-4@counter(%rip)`); `probe_address` and `symbols` resolve `%rip` forms.
pub fn parse_arg(spec: &str, probe_address: u64, symbols: &[(String, u64)]) -> UsdtArg {
    let (size, signed, operand) = match spec.split_once('@') {
        Some((n, operand)) => match n.parse::<i8>() {
            Ok(n) if [1, 2, 4, 8].contains(&n.unsigned_abs()) => (n.unsigned_abs(), n < 0, operand),
            _ => {
                let reason = format!("unsupported size `{n}`");
                return unsupported(spec, 8, false, reason);
            }
        },
        None => (8, false, spec),
    };
    let location = parse_operand(operand, probe_address, symbols)
        .unwrap_or_else(|reason| UsdtArgLocation::Unsupported { reason });
    UsdtArg {
        size,
        signed,
        location,
        spec: spec.into(),
    }
}

fn unsupported(spec: &str, size: u8, signed: bool, reason: String) -> UsdtArg {
    UsdtArg {
        size,
        signed,
        location: UsdtArgLocation::Unsupported { reason },
        spec: spec.into(),
    }
}

fn register(text: &str) -> Result<Register, String> {
    let name = text
        .trim()
        .strip_prefix('%')
        .ok_or_else(|| format!("expected a register, found `{text}`"))?;
    Register::parse(name).ok_or_else(|| format!("unknown register `%{name}`"))
}

/// An AT&T operand: `%reg`, `$imm` or `disp(base[,index[,scale]])`.
fn parse_operand(
    operand: &str,
    probe_address: u64,
    symbols: &[(String, u64)],
) -> Result<UsdtArgLocation, String> {
    if operand.starts_with('%') {
        return register(operand).map(UsdtArgLocation::Register);
    }
    if let Some(imm) = operand.strip_prefix('$') {
        return parse_int(imm)
            .map(UsdtArgLocation::Immediate)
            .ok_or_else(|| format!("immediate `{imm}` is not a number"));
    }
    let (disp, inner) = operand
        .strip_suffix(')')
        .and_then(|o| o.split_once('('))
        .ok_or_else(|| format!("unrecognised operand `{operand}`"))?;
    let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
    let base = match parts[0] {
        "" => None,
        text => Some(register(text)?),
    };
    let offset = match parse_int(disp) {
        Some(offset) => offset,
        None => {
            // A symbolic displacement is only meaningful relative to %rip.
            if base.map(|b| b.name) != Some("rip") || parts.len() != 1 {
                return Err(format!("symbolic displacement `{disp}` without %rip"));
            }
            let address = symbol_address(disp, symbols)?;
            let pc_offset = address.wrapping_sub(probe_address) as i64;
            return Ok(UsdtArgLocation::PcRelative { pc_offset });
        }
    };
    match (parts.len(), base) {
        (1, Some(base)) if base.name == "rip" => Err("numeric %rip displacement".into()),
        (1, Some(base)) => Ok(UsdtArgLocation::Memory { base, offset }),
        (2 | 3, base) => {
            let index = register(parts[1])?;
            let scale = match parts.get(2) {
                Some(s) => s
                    .parse()
                    .ok()
                    .filter(|s| [1, 2, 4, 8].contains(s))
                    .ok_or_else(|| format!("bad scale `{s}`"))?,
                None => 1,
            };
            Ok(UsdtArgLocation::Indexed {
                base,
                index,
                scale,
                offset,
            })
        }
        _ => Err(format!("unrecognised operand `{operand}`")),
    }
}

/// `sym`, `sym+N` or `sym-N`, resolved through the symbol tables.
fn symbol_address(disp: &str, symbols: &[(String, u64)]) -> Result<u64, String> {
    let (name, addend) = match disp.find(['+', '-']) {
        Some(i) => {
            let addend =
                parse_int(&disp[i..]).ok_or_else(|| format!("bad displacement `{disp}`"))?;
            (&disp[..i], addend)
        }
        None => (disp, 0),
    };
    let address = symbols
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, a)| *a)
        .ok_or_else(|| format!("symbol `{name}` is not in the symbol tables"))?;
    Ok(address.wrapping_add_signed(addend))
}

/// A decimal or `0x` hexadecimal integer with an optional sign; empty is 0.
fn parse_int(text: &str) -> Option<i64> {
    let text = text.trim();
    if text.is_empty() {
        return Some(0);
    }
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let magnitude = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16).ok()?,
        None => digits.parse::<u64>().ok()?,
    };
    // Two's complement wraps, so `-0x8000000000000000` and `0xffff...` both fit.
    let value = magnitude as i64;
    Some(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::targets::elf::test_support::compile_c;

    const PROGRAM: &str = r#"
        #include <sys/sdt.h>
        long counter = 5;
        int main(int argc, char **argv) {
            int x = argc;
            long y = (long)argv;
            DTRACE_PROBE2(myprov, myprobe, x, y);
            DTRACE_PROBE2(myprov, other, counter, -7);
            return 0;
        }
    "#;

    /// With `_SDT_HAS_SEMAPHORES` every probe needs a `provider_name_semaphore`.
    const SEMAPHORE_PROGRAM: &str = r#"
        #define _SDT_HAS_SEMAPHORES 1
        #include <sys/sdt.h>
        __attribute__((section(".probes"))) unsigned short withsem_hit_semaphore;
        int main(int argc, char **argv) {
            (void)argv;
            if (withsem_hit_semaphore) DTRACE_PROBE1(withsem, hit, argc);
            return 0;
        }
    "#;

    fn reg(name: &str) -> Register {
        Register::parse(name).expect("known register")
    }

    /// `DTRACE_PROBE2(myprov, myprobe, x, y)` yields a probe with two decoded register args.
    #[test]
    fn finds_probes_in_compiled_program() {
        let dir = tempfile::tempdir().unwrap();
        let prog = compile_c(dir.path(), "prog", PROGRAM, &["-O2"]);
        let probes = find_usdt(&prog, Some("myprov"), "myprobe").expect("probe found");
        assert_eq!(probes.len(), 1);
        let probe = &probes[0];
        assert_eq!(
            (probe.provider.as_str(), probe.name.as_str()),
            ("myprov", "myprobe")
        );
        assert_eq!(probe.semaphore_offset, 0);
        let bytes = std::fs::read(&prog).unwrap();
        assert_eq!(
            bytes[probe.file_offset as usize], 0x90,
            "a USDT site is a nop"
        );
        assert_eq!(probe.args.len(), 2);
        assert_eq!((probe.args[0].size, probe.args[0].signed), (4, true));
        assert_eq!((probe.args[1].size, probe.args[1].signed), (8, true));
        for arg in &probe.args {
            assert!(
                !matches!(arg.location, UsdtArgLocation::Unsupported { .. }),
                "{arg:?}"
            );
        }
    }

    /// Globs select probes; `%rip` symbols and immediates decode; semaphores get file offsets.
    #[test]
    fn globs_semaphores_and_constants() {
        let dir = tempfile::tempdir().unwrap();
        let prog = compile_c(dir.path(), "prog", PROGRAM, &["-O2"]);
        let all = find_usdt(&prog, None, "*").expect("probes");
        let names: Vec<_> = all
            .iter()
            .map(|p| format!("{}:{}", p.provider, p.name))
            .collect();
        assert_eq!(names, ["myprov:myprobe", "myprov:other"]);
        let other = &all[1];
        assert!(
            matches!(other.args[0].location, UsdtArgLocation::PcRelative { .. }),
            "{:?}",
            other.args[0]
        );
        assert_eq!(other.args[1].location, UsdtArgLocation::Immediate(-7));
        let sem_prog = compile_c(dir.path(), "sem", SEMAPHORE_PROGRAM, &["-O2"]);
        let hit = find_usdt(&sem_prog, Some("with*"), "hit").expect("probe with semaphore");
        let sem = hit[0].semaphore_offset as usize;
        let bytes = std::fs::read(&sem_prog).unwrap();
        assert!(
            sem != 0 && bytes[sem..sem + 2] == [0, 0],
            "semaphore starts at 0 in the file"
        );
        let err = find_usdt(&prog, Some("nope"), "*").unwrap_err().to_string();
        assert!(
            err.contains("nope:*") && err.contains(&prog.display().to_string()),
            "{err}"
        );
    }

    /// Every x86-64 spec form decodes to its `pt_regs` offsets, size and signedness.
    #[test]
    fn decodes_arg_specs() {
        let arg = parse_arg("-4@%edi", 0, &[]);
        assert_eq!((arg.size, arg.signed), (4, true));
        assert_eq!(arg.location, UsdtArgLocation::Register(reg("rdi")));
        assert_eq!(reg("rdi").pt_regs_offset, 112);
        assert_eq!(reg("r15b").pt_regs_offset, 0);
        assert!(reg("ah").high_byte && reg("ah").pt_regs_offset == 80);
        assert_eq!(
            parse_arg("8@$0x10", 0, &[]).location,
            UsdtArgLocation::Immediate(16)
        );
        let mem = parse_arg("2@-16(%rbp)", 0, &[]);
        assert_eq!((mem.size, mem.signed), (2, false));
        assert_eq!(
            mem.location,
            UsdtArgLocation::Memory {
                base: reg("rbp"),
                offset: -16
            }
        );
        let indexed = UsdtArgLocation::Indexed {
            base: Some(reg("rax")),
            index: reg("rdx"),
            scale: 8,
            offset: 8,
        };
        assert_eq!(parse_arg("-8@8(%rax,%rdx,8)", 0, &[]).location, indexed);
        let no_base = UsdtArgLocation::Indexed {
            base: None,
            index: reg("rcx"),
            scale: 1,
            offset: 0,
        };
        assert_eq!(parse_arg("8@(,%rcx)", 0, &[]).location, no_base);
        let symbols = [("counter".to_string(), 0x4010)];
        let rip = parse_arg("-8@counter+8(%rip)", 0x1000, &symbols).location;
        assert_eq!(rip, UsdtArgLocation::PcRelative { pc_offset: 0x3018 });
        assert_eq!(parse_arg("%rsi", 0, &[]).size, 8);
    }

    /// Odd specs become `Unsupported` with a reason instead of failing the probe.
    #[test]
    fn odd_specs_are_unsupported() {
        for spec in [
            "3@%eax",
            "4@%xmm0",
            "8@%fs:8",
            "8@$sym",
            "8@foo(%rax)",
            "8@(%rax,%rbx,3)",
            "8@1234",
            "8@(",
        ] {
            let arg = parse_arg(spec, 0, &[]);
            assert!(
                matches!(arg.location, UsdtArgLocation::Unsupported { .. }),
                "{spec}: {arg:?}"
            );
        }
    }

    /// A binary without notes or a non-ELF file is an error naming it.
    #[test]
    fn files_without_probes_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let prog = compile_c(dir.path(), "plain", "int main(void) { return 0; }", &[]);
        assert!(matches!(
            find_usdt(&prog, None, "*"),
            Err(UsdtError::NoProbe { .. })
        ));
        let junk = dir.path().join("junk");
        std::fs::write(&junk, b"\x7fELF\x02\x01\x01").unwrap();
        assert!(
            find_usdt(&junk, None, "*")
                .unwrap_err()
                .to_string()
                .contains("junk")
        );
        let truncated = RawNote {
            desc: vec![0; 10],
            is_64: true,
            little_endian: true,
            base_section: None,
            segments: Vec::new(),
            symbols: Vec::new(),
        };
        assert!(truncated.into_probe().is_err());
    }

    /// Truncated and corrupted copies of a binary with notes never panic.
    #[test]
    fn damaged_binaries_do_not_panic() {
        let dir = tempfile::tempdir().unwrap();
        let prog = compile_c(dir.path(), "prog", PROGRAM, &["-O2"]);
        let bytes = std::fs::read(&prog).unwrap();
        let damaged = dir.path().join("damaged");
        let step = bytes.len() / 64;
        for len in (0..bytes.len()).step_by(step) {
            std::fs::write(&damaged, &bytes[..len]).unwrap();
            let _ = find_usdt(&damaged, None, "*");
            let _ = crate::runtime::targets::elf::find_functions(&damaged, "*");
        }
        for at in (0..bytes.len()).step_by(step / 2).chain(16..64) {
            let mut copy = bytes.clone();
            copy[at] ^= 0xff;
            std::fs::write(&damaged, &copy).unwrap();
            let _ = find_usdt(&damaged, None, "*");
            let _ = crate::runtime::targets::elf::find_functions(&damaged, "*");
        }
    }
}
