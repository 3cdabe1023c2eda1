//! Runtime, user-space attach targets: reads a binary's ELF headers and symbols
//! and finds its functions and data objects (`library_search` finds the
//! binary). Input: a path and a symbol glob; output: the [`FunctionSymbol`]s
//! with the file offsets uprobes attach to.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use object::read::elf::{FileHeader, ProgramHeader, Sym};
use object::{Endianness, FileKind, elf};

use crate::capture::files::open_regular;
use crate::symbols::demangle_cpp;
use crate::vocab::ObjectSymbol;

/// Everything that can go wrong while resolving binaries and their symbols.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The file exists (or was named) but could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file is a FIFO, a device or a directory: reading it could block
    /// or never end.
    #[error("{} is {kind}, not an ELF file", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    /// The file is larger than any binary wprof reads.
    #[error("{} is {size} bytes, more than the {MAX_ELF_BYTES} bytes wprof reads of a binary", path.display())]
    TooLarge { path: PathBuf, size: u64 },
    /// The file is not ELF, or its headers are truncated or inconsistent.
    #[error("{} is not a usable ELF file: {reason}", path.display())]
    Malformed { path: PathBuf, reason: String },
    /// No file matched a binary or library name.
    #[error("cannot find binary or library `{name}` (searched {searched})")]
    NotFound { name: String, searched: String },
    /// No defined function matched the pattern.
    #[error("no function matching `{pattern}` in {}", path.display())]
    NoFunction { pattern: String, path: PathBuf },
    /// No defined data symbol has the name.
    #[error("no data symbol `{name}` in {}", path.display())]
    NoObject { name: String, path: PathBuf },
    /// The function pattern is not a valid glob.
    #[error("invalid function pattern `{pattern}`: {reason}")]
    BadPattern { pattern: String, reason: String },
}

/// A defined function in an ELF file.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FunctionSymbol {
    /// The symbol name (without a version suffix).
    pub name: String,
    /// The symbol's value: its link-time virtual address.
    pub address: u64,
    /// Where its first instruction is in the file: what a uprobe attaches to.
    pub file_offset: u64,
    /// Size in bytes (0 when the symbol table does not say).
    pub size: u64,
    /// The C++ name of a mangled symbol, which patterns also match.
    pub demangled: Option<String>,
}

/// Every defined function (`STT_FUNC` or `STT_GNU_IFUNC`, non-zero value) in
/// `.symtab` and `.dynsym` whose name matches the glob, sorted by name and address.
pub fn find_functions(binary: &Path, pattern: &str) -> Result<Vec<FunctionSymbol>, ElfError> {
    let glob = glob::Pattern::new(pattern).map_err(|e| ElfError::BadPattern {
        pattern: pattern.into(),
        reason: e.to_string(),
    })?;
    let data = read_file(binary)?;
    let mut functions = visit_elf(binary, &data, FunctionCollector { glob: &glob })?;
    functions.sort();
    functions.dedup_by(|a, b| a.name == b.name && a.address == b.address);
    if functions.is_empty() {
        return Err(ElfError::NoFunction {
            pattern: pattern.into(),
            path: binary.into(),
        });
    }
    Ok(functions)
}

/// Collects matching functions from both symbol tables.
struct FunctionCollector<'a> {
    glob: &'a glob::Pattern,
}

impl ElfVisitor for FunctionCollector<'_> {
    type Output = Vec<FunctionSymbol>;

    fn visit<Elf: FileHeader<Endian = Endianness>>(
        self,
        data: &[u8],
    ) -> object::read::Result<Self::Output> {
        let header = Elf::parse(data)?;
        let endian = header.endian()?;
        let segments = load_segments(header, endian, data)?;
        let sections = header.sections(endian, data)?;
        let mut found = Vec::new();
        for table in [elf::SHT_SYMTAB, elf::SHT_DYNSYM] {
            let symbols = sections.symbols(endian, data, table)?;
            for sym in symbols.symbols() {
                let kind = sym.st_type();
                let address: u64 = sym.st_value(endian).into();
                if !(kind == elf::STT_FUNC || kind == elf::STT_GNU_IFUNC)
                    || sym.st_shndx(endian) == elf::SHN_UNDEF
                    || address == 0
                {
                    continue;
                }
                let Some(name) = symbols
                    .symbol_name(endian, sym)
                    .ok()
                    .and_then(|n| std::str::from_utf8(n).ok())
                else {
                    continue;
                };
                // A function outside every PT_LOAD is never mapped: nothing to attach to.
                let Some(file_offset) = vaddr_to_offset(&segments, address) else {
                    continue;
                };
                let demangled = demangle_cpp(name);
                if self.glob.matches(name)
                    || demangled.as_ref().is_some_and(|d| self.glob.matches(d))
                {
                    found.push(FunctionSymbol {
                        name: name.into(),
                        address,
                        file_offset,
                        size: sym.st_size(endian).into(),
                        demangled,
                    });
                }
            }
        }
        Ok(found)
    }
}

/// Data symbol `name` (`STT_OBJECT`, defined) of `binary`, from `.symtab`
/// or `.dynsym`, with whether the binary is position independent.
pub fn find_object(binary: &Path, name: &str) -> Result<ObjectSymbol, ElfError> {
    let data = read_file(binary)?;
    let found = visit_elf(binary, &data, ObjectFinder { name })?;
    found.ok_or_else(|| ElfError::NoObject {
        name: name.into(),
        path: binary.into(),
    })
}

/// The link-time virtual address of file offset `offset` of `binary`.
pub fn code_address(binary: &Path, offset: u64) -> Result<u64, ElfError> {
    let data = read_file(binary)?;
    let segments = visit_elf(binary, &data, SegmentReader)?;
    segments
        .iter()
        .find(|s| offset >= s.file_offset && offset - s.file_offset < s.file_size)
        .map(|s| offset - s.file_offset + s.vaddr)
        .ok_or_else(|| ElfError::Malformed {
            path: binary.into(),
            reason: format!("no loaded segment holds file offset {offset:#x}"),
        })
}

/// The libraries `binary` names as `DT_NEEDED` (`libc.so.6`), in order;
/// none for a static binary.
pub fn needed_libraries(binary: &Path) -> Result<Vec<String>, ElfError> {
    let data = read_file(binary)?;
    visit_elf(binary, &data, NeededReader)
}

/// Reads the `DT_NEEDED` entries of the dynamic section.
struct NeededReader;

impl ElfVisitor for NeededReader {
    type Output = Vec<String>;

    fn visit<Elf: FileHeader<Endian = Endianness>>(
        self,
        data: &[u8],
    ) -> object::read::Result<Self::Output> {
        let header = Elf::parse(data)?;
        let sections = header.sections(header.endian()?, data)?;
        let table = sections.dynamic_table(header.endian()?, data)?;
        let mut needed = Vec::new();
        for entry in table.iter().filter(|d| d.tag == elf::DT_NEEDED) {
            let name = table.string(entry)?;
            needed.push(String::from_utf8_lossy(name).into_owned());
        }
        Ok(needed)
    }
}

/// Finds one data symbol.
struct ObjectFinder<'a> {
    name: &'a str,
}

impl ElfVisitor for ObjectFinder<'_> {
    type Output = Option<ObjectSymbol>;

    fn visit<Elf: FileHeader<Endian = Endianness>>(
        self,
        data: &[u8],
    ) -> object::read::Result<Self::Output> {
        let header = Elf::parse(data)?;
        let endian = header.endian()?;
        let relocatable = header.e_type(endian) == elf::ET_DYN;
        let sections = header.sections(endian, data)?;
        for table in [elf::SHT_SYMTAB, elf::SHT_DYNSYM] {
            let symbols = sections.symbols(endian, data, table)?;
            for sym in symbols.symbols() {
                let defined =
                    sym.st_type() == elf::STT_OBJECT && sym.st_shndx(endian) != elf::SHN_UNDEF;
                if defined && symbols.symbol_name(endian, sym)? == self.name.as_bytes() {
                    return Ok(Some(ObjectSymbol {
                        address: sym.st_value(endian).into(),
                        size: sym.st_size(endian).into(),
                        relocatable,
                    }));
                }
            }
        }
        Ok(None)
    }
}

/// Reads the `PT_LOAD` segments.
struct SegmentReader;

impl ElfVisitor for SegmentReader {
    type Output = Vec<LoadSegment>;

    fn visit<Elf: FileHeader<Endian = Endianness>>(
        self,
        data: &[u8],
    ) -> object::read::Result<Self::Output> {
        let header = Elf::parse(data)?;
        load_segments(header, header.endian()?, data)
    }
}

/// A parser generic over the ELF class, run by [`visit_elf`] (closures cannot be generic).
pub(crate) trait ElfVisitor {
    type Output;
    fn visit<Elf: FileHeader<Endian = Endianness>>(
        self,
        data: &[u8],
    ) -> object::read::Result<Self::Output>;
}

/// Runs `visitor` for the class of the ELF file in `data`; errors name `path`.
pub(crate) fn visit_elf<V: ElfVisitor>(
    path: &Path,
    data: &[u8],
    visitor: V,
) -> Result<V::Output, ElfError> {
    let malformed = |reason: String| ElfError::Malformed {
        path: path.into(),
        reason,
    };
    match FileKind::parse(data) {
        Ok(FileKind::Elf64) => visitor.visit::<elf::FileHeader64<Endianness>>(data),
        Ok(FileKind::Elf32) => visitor.visit::<elf::FileHeader32<Endianness>>(data),
        Ok(other) => return Err(malformed(format!("it is {other:?}, not ELF"))),
        Err(e) => return Err(malformed(e.to_string())),
    }
    .map_err(|e| malformed(e.to_string()))
}

/// Largest binary or library read for its symbols (a big program with
/// debug information is a few GB).
pub const MAX_ELF_BYTES: u64 = 4 << 30;

/// Reads a whole binary, naming it on error. It must be a regular file of
/// at most [`MAX_ELF_BYTES`], checked before anything is read: a FIFO, a
/// device (`/dev/zero`) or a huge file is refused instead of blocking or
/// filling memory.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>, ElfError> {
    let read_error = |source| ElfError::Read {
        path: path.into(),
        source,
    };
    let (file, size) =
        open_regular(path)
            .map_err(read_error)?
            .map_err(|kind| ElfError::NotRegular {
                path: path.into(),
                kind,
            })?;
    if size > MAX_ELF_BYTES {
        return Err(ElfError::TooLarge {
            path: path.into(),
            size,
        });
    }
    let mut data = Vec::with_capacity(size as usize);
    // A file growing while read stops at the limit too.
    file.take(MAX_ELF_BYTES)
        .read_to_end(&mut data)
        .map_err(read_error)?;
    Ok(data)
}

/// A `PT_LOAD` segment: the map from virtual addresses to file offsets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LoadSegment {
    vaddr: u64,
    file_offset: u64,
    file_size: u64,
}

/// The file's `PT_LOAD` segments.
pub(crate) fn load_segments<Elf: FileHeader>(
    header: &Elf,
    endian: Elf::Endian,
    data: &[u8],
) -> object::read::Result<Vec<LoadSegment>> {
    Ok(header
        .program_headers(endian, data)?
        .iter()
        .filter(|p| p.p_type(endian) == elf::PT_LOAD)
        .map(|p| LoadSegment {
            vaddr: p.p_vaddr(endian).into(),
            file_offset: p.p_offset(endian).into(),
            file_size: p.p_filesz(endian).into(),
        })
        .collect())
}

/// `vaddr - p_vaddr + p_offset` of the segment whose file image holds `vaddr`.
pub(crate) fn vaddr_to_offset(segments: &[LoadSegment], vaddr: u64) -> Option<u64> {
    segments
        .iter()
        .find(|s| vaddr >= s.vaddr && vaddr - s.vaddr < s.file_size)
        .and_then(|s| (vaddr - s.vaddr).checked_add(s.file_offset))
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// Compiles C `source` with `cc` into the executable `dir/name`.
    #[track_caller]
    pub(crate) fn compile_c(dir: &Path, name: &str, source: &str, extra_args: &[&str]) -> PathBuf {
        let src = dir.join(format!("{name}.c"));
        let out = dir.join(name);
        std::fs::write(&src, source).expect("write test C source");
        let status = Command::new("cc")
            .args(extra_args)
            .arg("-o")
            .arg(&out)
            .arg(&src)
            .status()
            .expect("run cc (gcc must be installed)");
        assert!(status.success(), "cc failed on the test program");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::targets::library_search::resolve_binary;
    use std::fs;
    use std::process::Command;

    const TEST_PROGRAM: &str = r#"
        __attribute__((noinline)) int wprof_add(int a, int b) { return a + b; }
        __attribute__((noinline)) int wprof_mul(int a, int b) { return a * b; }
        int main(int argc, char **argv) { (void)argv; return wprof_add(argc, 1) + wprof_mul(argc, 2); }
    "#;

    fn libc() -> PathBuf {
        resolve_binary("libc", None).expect("libc resolves")
    }

    /// Runs a tool and returns its stdout.
    fn run(tool: &str, args: &[&str]) -> String {
        let out = Command::new(tool)
            .args(args)
            .output()
            .expect("binutils installed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `malloc` in libc has the file offset that `nm -D` and the PT_LOAD headers imply.
    #[test]
    fn malloc_offset_matches_binutils() {
        let libc = libc();
        let path = libc.to_str().unwrap();
        let found = find_functions(&libc, "malloc").expect("malloc in libc");
        assert_eq!(found.len(), 1, "{found:?}");
        let nm = run("nm", &["-D", "--defined-only", path]);
        let address = nm
            .lines()
            .find_map(|l| {
                l.strip_suffix(" T malloc")
                    .or_else(|| l.strip_suffix(" T malloc@@GLIBC_2.2.5"))
            })
            .map(|a| u64::from_str_radix(a, 16).unwrap())
            .expect("nm lists malloc");
        assert_eq!(found[0].address, address);
        let segment = run("readelf", &["-lW", path])
            .lines()
            .filter(|l| l.trim_start().starts_with("LOAD"))
            .map(|l| {
                let f: Vec<u64> = l
                    .split_whitespace()
                    .skip(1)
                    .take(5)
                    .map(parse_hex)
                    .collect();
                (f[0], f[1], f[3])
            })
            .find(|&(_, vaddr, filesz)| address >= vaddr && address < vaddr + filesz)
            .expect("a PT_LOAD holds malloc");
        assert_eq!(found[0].file_offset, address - segment.1 + segment.0);
        assert!(found[0].size > 0);
    }

    fn parse_hex(s: &str) -> u64 {
        u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
    }

    /// A misspelt function is an error naming the pattern and the binary.
    #[test]
    fn missing_function_names_binary() {
        let libc = libc();
        let err = find_functions(&libc, "mallocc").unwrap_err().to_string();
        assert_eq!(
            err,
            format!("no function matching `mallocc` in {}", libc.display())
        );
    }

    /// libpthread, a stub since glibc 2.34, needs libc; a static program
    /// needs nothing.
    #[test]
    fn reads_needed_libraries() {
        let pthread = resolve_binary("libpthread", None).expect("libpthread resolves");
        let needed = needed_libraries(&pthread).expect("dynamic section read");
        assert!(needed.iter().any(|n| n == "libc.so.6"), "{needed:?}");
        let dir = tempfile::tempdir().unwrap();
        let prog = test_support::compile_c(dir.path(), "prog", TEST_PROGRAM, &["-static"]);
        assert_eq!(needed_libraries(&prog).expect("read"), Vec::<String>::new());
    }

    /// A compiled non-PIE program's functions match a glob, with offsets translated from addresses.
    #[test]
    fn finds_functions_in_compiled_program() {
        let dir = tempfile::tempdir().unwrap();
        let prog = test_support::compile_c(dir.path(), "prog", TEST_PROGRAM, &["-O1", "-no-pie"]);
        let found = find_functions(&prog, "wprof_*").expect("functions found");
        let names: Vec<_> = found.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["wprof_add", "wprof_mul"]);
        let bytes = fs::read(&prog).unwrap();
        for f in &found {
            assert_ne!(
                f.address, f.file_offset,
                "non-PIE text is not at its file offset"
            );
            assert!(f.file_offset < bytes.len() as u64 && f.size > 0);
        }
        assert!(find_functions(&prog, "main").is_ok());
    }

    /// Truncated or foreign files are errors naming the file, never panics.
    #[test]
    fn malformed_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let libc_bytes = fs::read(libc()).unwrap();
        for (name, bytes) in [
            ("truncated", &libc_bytes[..200]),
            ("headers-only", &libc_bytes[..64]),
            ("text", &b"#!/bin/sh\necho hi\n"[..]),
            ("empty", &[][..]),
        ] {
            let path = dir.path().join(name);
            fs::write(&path, bytes).unwrap();
            let err = find_functions(&path, "*").unwrap_err().to_string();
            assert!(err.contains(name), "{err}");
        }
        assert!(find_functions(Path::new("/no/such/binary"), "f").is_err());
    }

    /// A FIFO, a device and a directory are refused at once, named with
    /// what they are, and so are their USDT notes.
    #[test]
    fn non_regular_targets_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        for (path, kind) in [
            (fifo.as_path(), "a FIFO"),
            (Path::new("/dev/zero"), "a device"),
            (dir.path(), "a directory"),
        ] {
            let err = find_functions(path, "main").unwrap_err().to_string();
            assert_eq!(
                err,
                format!("{} is {kind}, not an ELF file", path.display())
            );
            let err = crate::runtime::targets::usdt::find_usdt(path, None, "p")
                .unwrap_err()
                .to_string();
            assert!(err.contains(kind), "{err}");
        }
    }
}
