//! Runtime, user-space attach targets: finds the file a `uprobe:` or `usdt:`
//! probe's binary or library name refers to, as the dynamic loader would,
//! and the programs a traced command line runs.
//! Input: a name and an optional pid; output: a path (or why none was found).

use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::elf::{self, ElfError};

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

/// The first library `binary` loads (`DT_NEEDED`, found as the loader
/// would) that defines function `name`: where a probe on it belongs
/// (libpthread's `pthread_create` is libc's since glibc 2.34).
pub fn library_defining(binary: &Path, name: &str, pid: Option<i32>) -> Option<PathBuf> {
    let needed = elf::needed_libraries(binary).ok()?;
    (needed.iter())
        .filter_map(|library| resolve_binary(library, pid).ok())
        .find(|library| {
            elf::find_functions(library, name)
                .is_ok_and(|found| found.iter().any(|f| f.name == name))
        })
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
        program_in_path(name)
    }
}

/// The programs a command line runs, its own first: the first word as
/// [`resolve_binary`] finds it, then each later word that names an
/// executable file, by path or in `$PATH` — a launcher (`taskset -c 0 perf
/// …`, `nice`, `chrt`, `env`, `timeout`) runs its program after its own
/// arguments. A word that only looks like one (`make test`) adds a file.
pub fn command_programs(argv: &[String]) -> Vec<PathBuf> {
    let first = argv
        .first()
        .and_then(|name| resolve_binary(name, None).ok());
    let mut programs: Vec<PathBuf> = first.into_iter().collect();
    for path in argv.iter().skip(1).filter_map(|word| executable(word)) {
        if !programs.contains(&path) {
            programs.push(path);
        }
    }
    programs
}

/// The executable file `word` names: a path, or a name in `$PATH`.
fn executable(word: &str) -> Option<PathBuf> {
    if word.contains('/') {
        let path = PathBuf::from(word);
        return is_executable(&path).then_some(path);
    }
    program_in_path(word)
}

/// An executable file named `name` in a directory of `$PATH`.
fn program_in_path(name: &str) -> Option<PathBuf> {
    let path_var = std::env::var("PATH").unwrap_or_default();
    (path_var.split(':'))
        .filter(|d| !d.is_empty() && !name.is_empty())
        .map(|dir| Path::new(dir).join(name))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
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

pub(crate) const LD_CACHE: &str = "/etc/ld.so.cache";

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
    pub(crate) fn is_native(&self) -> bool {
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
mod tests {
    use super::*;

    fn libc() -> PathBuf {
        resolve_binary("libc", None).expect("libc resolves")
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

    /// libpthread's `pthread_create` is found in libc, which it loads (glibc
    /// 2.34 on); a function no loaded library has is nowhere.
    #[test]
    fn finds_the_library_defining_a_function() {
        let pthread = resolve_binary("libpthread", None).expect("libpthread resolves");
        if elf::find_functions(&pthread, "pthread_create").is_ok() {
            eprintln!("SKIPPED: this libpthread defines pthread_create (glibc before 2.34)");
            return;
        }
        assert_eq!(
            library_defining(&pthread, "pthread_create", None),
            Some(libc())
        );
        assert_eq!(library_defining(&pthread, "no_such_function", None), None);
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

    /// A launcher's program is found after its arguments, by path or in
    /// `$PATH`, once; words naming no executable file are not programs.
    #[test]
    fn command_programs_include_launched_ones() {
        let dir = tempfile::tempdir().unwrap();
        let launched = dir.path().join("launched");
        let data = dir.path().join("data");
        fs::write(&launched, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&launched, fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(&data, "not a program").unwrap();
        let sh = resolve_binary("sh", None).expect("sh is in $PATH");
        let words = ["taskset", "-c", "0", "", "no-such-program-here", "sh"];
        let argv: Vec<String> = [path_str(&sh), "-c".into(), path_str(&data)]
            .into_iter()
            .chain([path_str(&launched), path_str(&launched)])
            .chain(words.map(String::from))
            .collect();
        let taskset = resolve_binary("taskset", None).ok();
        let expected: Vec<PathBuf> = [sh, launched].into_iter().chain(taskset).collect();
        assert_eq!(command_programs(&argv), expected);
        assert!(command_programs(&[]).is_empty());
    }

    fn path_str(path: &Path) -> String {
        path.to_string_lossy().into_owned()
    }
}
