//! Runtime, user-space attach targets: resolves the binary or library a `uprobe:`
//! probe names (as the dynamic loader would) and finds its functions. Input: a
//! name, an optional pid and a symbol glob; output: a path and the
//! [`FunctionSymbol`]s with the file offsets uprobes attach to.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
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

/// The file a probe's binary or library name refers to.
///
/// A name with `/` is a path, returned as given. A library name (`libc`,
/// `libpthread`, `libc.so.6`) is looked up in `/proc/PID/maps` when `pid` is
/// given, then in `LD_LIBRARY_PATH`, `/etc/ld.so.cache` and the standard
/// directories. A program name (`bash`) is looked up in the process's maps
/// and `$PATH` (then as `lib<name>`).
pub fn resolve_binary(name: &str, pid: Option<i32>) -> Result<PathBuf, ElfError> {
    let not_found = |searched: String| ElfError::NotFound {
        name: name.into(),
        searched,
    };
    if name.contains('/') {
        let path = PathBuf::from(name);
        // With a process, an absolute path may be one in its mount namespace.
        let in_process = pid
            .filter(|_| path.is_absolute())
            .map(|pid| PathBuf::from(format!("/proc/{pid}/root{name}")));
        return match (path.exists(), in_process) {
            (true, _) => Ok(path),
            (false, Some(inside)) if inside.exists() => Ok(inside),
            (false, Some(inside)) => Err(not_found(format!(
                "the path as given and {}",
                inside.display()
            ))),
            (false, None) => Err(not_found("the path as given".into())),
        };
    }
    if name.is_empty() {
        return Err(not_found("nothing: the name is empty".into()));
    }
    let mut search = Search::default();
    if let Some(path) = pid.and_then(|pid| search.process(name, pid)) {
        return Ok(path);
    }
    let found = if name.starts_with("lib") || name.contains(".so") {
        search.library(name).or_else(|| search.program(name))
    } else {
        search
            .program(name)
            .or_else(|| search.library(&format!("lib{name}")))
    };
    found.ok_or_else(|| not_found(search.searched.join(", ")))
}

/// One lookup, remembering where it looked for the error message.
#[derive(Default)]
struct Search {
    searched: Vec<String>,
}

/// The standard library directories, after `LD_LIBRARY_PATH` and the cache.
const LIBRARY_DIRS: [&str; 7] = [
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
    "/usr/local/lib",
];

impl Search {
    /// The executable or a library mapped into process `pid`.
    fn process(&mut self, name: &str, pid: i32) -> Option<PathBuf> {
        self.searched.push(format!("/proc/{pid}/maps"));
        let maps = fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        let mapped = maps.lines().filter_map(mapped_path);
        let path = mapped
            .into_iter()
            .find(|p| file_name(p).is_some_and(|f| f == name || library_matches(f, name)))?;
        // The process may live in another mount namespace: reach the file through its root.
        Some(match Path::new(path).exists() {
            true => PathBuf::from(path),
            false => PathBuf::from(format!("/proc/{pid}/root{path}")),
        })
    }

    /// A library through `LD_LIBRARY_PATH`, `/etc/ld.so.cache` and the standard directories.
    fn library(&mut self, name: &str) -> Option<PathBuf> {
        let env_dirs = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
        for dir in env_dirs.split(':').filter(|d| !d.is_empty()) {
            self.searched.push(format!("{dir} (LD_LIBRARY_PATH)"));
            if let Some(path) = library_in_dir(Path::new(dir), name) {
                return Some(path);
            }
        }
        self.searched.push(LD_CACHE.into());
        if let Some(path) = library_in_cache(name) {
            return Some(path);
        }
        LIBRARY_DIRS.iter().find_map(|dir| {
            self.searched.push((*dir).into());
            library_in_dir(Path::new(dir), name)
        })
    }

    /// An executable file in `$PATH`.
    fn program(&mut self, name: &str) -> Option<PathBuf> {
        let path_var = std::env::var("PATH").unwrap_or_default();
        self.searched.push(format!("$PATH ({path_var})"));
        path_var
            .split(':')
            .filter(|d| !d.is_empty())
            .map(|dir| Path::new(dir).join(name))
            .find(|p| {
                fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
    }
}

fn file_name(path: &str) -> Option<&str> {
    Path::new(path).file_name()?.to_str()
}

/// The path of a `/proc/PID/maps` line, unless the mapping is anonymous or deleted.
pub(crate) fn mapped_path(line: &str) -> Option<&str> {
    let mut rest = line;
    for _ in 0..5 {
        rest = rest.trim_start().split_once(char::is_whitespace)?.1;
    }
    let path = rest.trim();
    (path.starts_with('/') && !path.ends_with(" (deleted)")).then_some(path)
}

/// Whether a library file name matches a name from a probe: `libc` matches
/// `libc.so.6`, `libc.so` and `libc-2.31.so`; `libc.so` matches `libc.so.6`.
fn library_matches(file_name: &str, name: &str) -> bool {
    let Some(rest) = file_name.strip_prefix(name) else {
        return false;
    };
    if rest.is_empty() {
        return true;
    }
    if name.contains(".so") {
        return rest.starts_with('.');
    }
    rest.starts_with(".so")
        || rest
            .strip_prefix('-')
            .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()) && r.contains(".so"))
}

/// Whether the file starts with the ELF magic (`libc.so` is often a linker script).
pub(crate) fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// The best match in one directory: the exact name, else the shortest ELF file name.
fn library_in_dir(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut candidates: Vec<String> = fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|f| library_matches(f, name))
        .collect();
    candidates.sort_by_key(|f| (f != name, f.len(), f.clone()));
    candidates
        .into_iter()
        .map(|f| dir.join(f))
        .find(|p| is_elf(p))
}

const LD_CACHE: &str = "/etc/ld.so.cache";

/// The first cache entry for this machine's architecture that matches `name`.
fn library_in_cache(name: &str) -> Option<PathBuf> {
    let data = fs::read(LD_CACHE).ok()?;
    let entries = parse_ld_cache(&data).ok()?;
    let usable = |e: &&LdCacheEntry| e.is_native() && library_matches(&e.soname, name);
    let exact = entries.iter().filter(usable).find(|e| e.soname == name);
    exact
        .into_iter()
        .chain(entries.iter().filter(usable))
        .map(|e| PathBuf::from(&e.path))
        .find(|p| is_elf(p))
}

/// One library in `/etc/ld.so.cache`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LdCacheEntry {
    pub flags: u32,
    pub soname: String,
    pub path: String,
}

impl LdCacheEntry {
    /// An ELF library for the architecture this program was built for.
    fn is_native(&self) -> bool {
        const FLAG_ELF: u32 = 0x01;
        const FLAG_ELF_LIBC6: u32 = 0x03;
        let kind = self.flags & 0xff;
        let arch = self.flags & 0xff00;
        let native_arch = if cfg!(target_arch = "x86_64") {
            Some(0x0300) // FLAG_X8664_LIB64
        } else if cfg!(target_arch = "aarch64") {
            Some(0x0a00) // FLAG_AARCH64_LIB64
        } else {
            None
        };
        (kind == FLAG_ELF || kind == FLAG_ELF_LIBC6) && native_arch.is_none_or(|a| a == arch)
    }
}

/// Parses the "glibc-ld.so.cache1.1" format, alone or after an old "ld.so-1.7.0" table.
///
/// Layout (native endian): a 48-byte header (magic and version, 20 bytes; `nlibs`
/// u32; string table length u32; flags u8 and 3 padding; extension offset u32;
/// 3 unused u32), then `nlibs` 24-byte entries (flags i32, key u32, value u32,
/// osversion u32, hwcap u64). Keys and values are offsets of NUL-terminated
/// strings from the start of the new-format header.
pub(crate) fn parse_ld_cache(data: &[u8]) -> Result<Vec<LdCacheEntry>, String> {
    const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
    const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
    let start = if data.starts_with(OLD_MAGIC) {
        // Old header: magic padded to 12 bytes, nlibs u32; then 12-byte entries.
        let old_entries = read_u32(data, 12)? as usize;
        let end = old_entries
            .checked_mul(12)
            .and_then(|n| n.checked_add(16))
            .ok_or("old entry count overflows")?;
        end.next_multiple_of(8)
    } else {
        0
    };
    let cache = data.get(start..).ok_or("truncated old-format table")?;
    if !cache.starts_with(NEW_MAGIC) {
        return Err("no glibc-ld.so.cache1.1 header".into());
    }
    let count = read_u32(cache, 20)? as usize;
    let mut entries = Vec::new();
    for index in 0..count {
        let at = index
            .checked_mul(24)
            .and_then(|n| n.checked_add(48))
            .ok_or("entry count overflows")?;
        let key = read_u32(cache, at + 4)? as usize;
        let value = read_u32(cache, at + 8)? as usize;
        entries.push(LdCacheEntry {
            flags: read_u32(cache, at)?,
            soname: c_string(cache, key)?,
            path: c_string(cache, value)?,
        });
    }
    Ok(entries)
}

fn read_u32(data: &[u8], at: usize) -> Result<u32, String> {
    let bytes = data
        .get(at..at.saturating_add(4))
        .ok_or_else(|| format!("truncated at byte {at}"))?;
    Ok(u32::from_ne_bytes(
        bytes.try_into().expect("slice of 4 bytes"),
    ))
}

fn c_string(data: &[u8], at: usize) -> Result<String, String> {
    let tail = data
        .get(at..)
        .ok_or_else(|| format!("string offset {at} out of range"))?;
    let len = tail
        .iter()
        .position(|&b| b == 0)
        .ok_or("unterminated string")?;
    Ok(String::from_utf8_lossy(&tail[..len]).into_owned())
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

    /// `libc`, `libc.so.6` and `libpthread` resolve to ELF files as the loader would.
    #[test]
    fn resolves_library_names() {
        let libc = libc();
        assert_eq!(libc.file_name().unwrap(), "libc.so.6", "{}", libc.display());
        assert!(is_elf(&libc));
        assert_eq!(resolve_binary("libc.so.6", None).unwrap(), libc);
        let pthread = resolve_binary("libpthread", None).expect("libpthread resolves");
        assert!(
            pthread
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("libpthread.so")
        );
        assert!(
            resolve_binary("libc", Some(std::process::id() as i32))
                .unwrap()
                .ends_with("libc.so.6")
        );
    }

    /// Program names come from `$PATH`; paths are returned as given, or
    /// looked for in a process's mount namespace too.
    #[test]
    fn resolves_programs_and_paths() {
        let sh = resolve_binary("sh", None).expect("sh in $PATH");
        assert!(sh.is_absolute() && sh.ends_with("sh"));
        assert_eq!(
            resolve_binary("/bin/sh", None).unwrap(),
            Path::new("/bin/sh")
        );
        let err = resolve_binary("libwprof_nonexistent", None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("libwprof_nonexistent") && err.contains(LD_CACHE),
            "{err}"
        );
        assert!(resolve_binary("./no/such/file", None).is_err());
        let pid = std::process::id() as i32;
        let err = resolve_binary("/no/such/file", Some(pid)).unwrap_err();
        let inside = format!("/proc/{pid}/root/no/such/file");
        assert!(err.to_string().contains(&inside), "{err}");
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

    /// The real `/etc/ld.so.cache` parses; cut copies are errors.
    #[test]
    fn parses_ld_cache() {
        let data = fs::read(LD_CACHE).expect("ld.so.cache exists");
        let entries = parse_ld_cache(&data).expect("cache parses");
        assert!(
            entries
                .iter()
                .any(|e| e.soname == "libc.so.6" && e.is_native())
        );
        for len in [0, 10, 30, 60, data.len() / 2] {
            assert!(parse_ld_cache(&data[..len]).is_err(), "cut at {len}");
        }
        assert!(library_matches("libc.so.6", "libc") && library_matches("libc-2.31.so", "libc"));
        assert!(
            !library_matches("libcap.so.2", "libc") && !library_matches("libc-client.so", "libc")
        );
        assert!(
            library_matches("libc.so.6", "libc.so") && !library_matches("libc.so.6", "libc.so.6.1")
        );
    }
}
