//! Which file a build id names: the kernel reports user frames as (build id,
//! file offset), and symbolizing needs a path. Paths come from the probes'
//! own binaries, the traced command, and every process seen while it lives,
//! and from the code the unwinder found mapped through the kernel (a file
//! mapped after the process's mappings were last read, the process maybe
//! gone since).
//! Executable code without a file is named after its mapping: the vDSO
//! (`[vdso]`, at its offset in the image), anonymous memory (`[anon]`, or
//! the mapping's own name such as `[anon:NAME]`, at its address): JIT code,
//! whose module is the process's perf map when it writes one
//! (`/tmp/perf-PID.map`, `symbols::perf_map`).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// A process's mappings are read again at most this often for addresses
/// already missing from them once (stacks walked through garbage return
/// addresses may ask at every stack); an address in a page not seen missing
/// asks at once (code mapped since: `dlopen`, JIT code, whose first stacks
/// the recorder may take within moments of the last read).
const REFRESH_INTERVAL: Duration = Duration::from_millis(100);
/// Most pages remembered missing per process; past it only the interval
/// applies.
const MISSING_PAGES: usize = 4096;

/// Build ids as the kernel stores them: zero-padded to 20 bytes.
pub type PaddedBuildId = [u8; 20];

#[derive(Debug, Default)]
pub struct ModuleIndex {
    /// The file's path and its real (unpadded) build id.
    by_build_id: HashMap<PaddedBuildId, (String, Vec<u8>)>,
    /// Every path whose build id was read, with its build id if it has one.
    paths: HashMap<String, Option<Vec<u8>>>,
    /// Mappings of every process seen, as they were when last read, and when.
    processes: HashMap<u32, Vec<Mapping>>,
    read_at: HashMap<u32, Instant>,
    /// Pages of each process found in no mapping after a read.
    missing: HashMap<u32, HashSet<u64>>,
    /// Code the unwinder found mapped in each process through the kernel,
    /// for addresses no mapping as read holds.
    found: HashMap<u32, Vec<Mapping>>,
    /// Mappings read by the index itself (not handed over).
    reads: u64,
}

/// `start..end` of a process maps `path` (a file) from `file_offset`, as
/// the unwinder found it through the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundCode {
    pub start: u64,
    pub end: u64,
    pub file_offset: u64,
    pub path: String,
}

/// `start..end` of a process maps `path` from `file_offset`.
#[derive(Clone, Debug)]
struct Mapping {
    start: u64,
    end: u64,
    file_offset: u64,
    path: String,
    /// Code can run there; other file mappings only name build ids.
    executable: bool,
}

impl ModuleIndex {
    pub fn new() -> Self {
        let mut index = Self::default();
        if let Some(id) = super::vdso::build_id() {
            let name = super::vdso::MODULE.to_string();
            (index.by_build_id).insert(padded(&id), (name.clone(), id.clone()));
            index.paths.insert(name, Some(id));
        }
        index
    }

    /// Learn the build id of the ELF file at `path` (once per path).
    pub fn add_path(&mut self, path: &str) {
        self.add_path_as(path, path);
    }

    /// Learn every file mapped by process `pid` (once per pid, while it lives).
    pub fn add_process(&mut self, pid: u32) {
        if !self.processes.contains_key(&pid) {
            self.refresh_process(pid);
        }
    }

    /// Learns code found mapped in process `pid` (replacing what overlaps
    /// it), and its file's build id.
    pub fn add_found(&mut self, pid: u32, code: FoundCode) {
        self.add_path(&code.path);
        let found = self.found.entry(pid).or_default();
        found.retain(|m| m.end <= code.start || code.end <= m.start);
        found.push(Mapping {
            start: code.start,
            end: code.end,
            file_offset: code.file_offset,
            path: code.path,
            executable: true,
        });
    }

    /// Reads the mappings of process `pid` again for `addr`, which none
    /// holds (code mapped since: a `dlopen`, JIT code), unless `addr`'s
    /// page was missing before and they were read moments ago; keeps the
    /// old ones when it is gone.
    pub fn refresh_for(&mut self, pid: u32, addr: u64) {
        let page = addr >> 12;
        let missing = self.missing.entry(pid).or_default();
        let known_missing = missing.contains(&page);
        let recent = (self.read_at.get(&pid)).is_some_and(|at| at.elapsed() < REFRESH_INTERVAL);
        if known_missing && recent {
            return;
        }
        self.refresh_process(pid);
        if self.translate(pid, addr).is_none() {
            let missing = self.missing.entry(pid).or_default();
            if missing.len() < MISSING_PAGES {
                missing.insert(page);
            }
        }
    }

    /// Reads the mappings of process `pid`; keeps the old ones when it is
    /// gone.
    pub fn refresh_process(&mut self, pid: u32) {
        self.reads += 1;
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        self.refresh_from(pid, &maps);
    }

    /// Takes `maps`, the text of process `pid`'s `/proc/PID/maps` just
    /// read (by the unwind tables' reader), as its mappings; keeps the old
    /// ones when it is empty (the process is gone). Files not seen before
    /// have their build ids read.
    pub fn refresh_from(&mut self, pid: u32, maps: &str) {
        self.read_at.insert(pid, Instant::now());
        let mut mappings: Vec<Mapping> = maps.lines().filter_map(parse_mapping).collect();
        if mappings.is_empty() {
            return;
        }
        let perf_map = super::perf_map::path_of(pid);
        if std::path::Path::new(&perf_map).is_file() {
            for mapping in mappings.iter_mut().filter(|m| m.path.starts_with("[anon")) {
                mapping.path.clone_from(&perf_map);
            }
        }
        // Only paths not seen before: a system-wide capture reads busy
        // processes' mappings again and again, and each path through
        // `/proc/PID/root` costs a lookup.
        let files: HashSet<String> = (mappings.iter())
            .filter(|m| m.path.starts_with('/') && !super::perf_map::is_perf_map(&m.path))
            .filter(|m| !self.paths.contains_key(&m.path))
            .map(|m| m.path.clone())
            .collect();
        self.processes.insert(pid, mappings);
        for file in files {
            // Through the process's root, so files in other mount namespaces resolve.
            let path = format!("/proc/{pid}/root{file}");
            if std::path::Path::new(&path).exists() {
                self.add_path_as(&path, &file);
            }
        }
    }

    /// How many times the index read a process's mappings itself.
    pub fn reads(&self) -> u64 {
        self.reads
    }

    /// Read the build id from `readable`, remember it under the name `shown`.
    fn add_path_as(&mut self, readable: &str, shown: &str) {
        if self.paths.contains_key(shown) {
            return;
        }
        let id = blazesym::helper::read_elf_build_id(&readable)
            .ok()
            .flatten()
            .map(|id| id.to_vec());
        if let Some(id) = &id {
            (self.by_build_id).insert(padded(id), (shown.to_string(), id.clone()));
        }
        self.paths.insert(shown.to_string(), id);
    }

    /// Whether `addr` of process `pid` needs its mappings read again: no
    /// mapping holds it, or it is in anonymous code read before the
    /// process wrote its perf map (a JIT writes the map after the code).
    pub fn needs_reading(&self, pid: u32, addr: u64) -> bool {
        match self.translate(pid, addr) {
            None => true,
            Some((path, _)) => {
                path.starts_with("[anon")
                    && std::path::Path::new(&super::perf_map::path_of(pid)).is_file()
            }
        }
    }

    /// The file and offset code at `addr` of process `pid` was in, from the
    /// mappings as last read, else from the code the unwinder found there.
    /// An address in a mapping that is not executable has none: the
    /// mappings changed since (the range was unmapped and reused, as JIT
    /// code reuses where `ld.so.cache` was read at startup).
    pub fn translate(&self, pid: u32, addr: u64) -> Option<(&str, u64)> {
        let holds = |m: &&Mapping| (m.start..m.end).contains(&addr) && m.executable;
        let read = self
            .processes
            .get(&pid)
            .and_then(|ms| ms.iter().find(holds));
        let mapping = read.or_else(|| self.found.get(&pid)?.iter().find(holds))?;
        Some((&mapping.path, addr - mapping.start + mapping.file_offset))
    }

    /// The real build id of a file seen, if it has one.
    pub fn build_id_of(&self, path: &str) -> Option<&[u8]> {
        self.paths.get(path)?.as_deref()
    }

    /// The path and real build id of the file with this (padded) build id.
    pub fn lookup(&self, build_id: &PaddedBuildId) -> Option<(&str, &[u8])> {
        self.by_build_id
            .get(build_id)
            .map(|(path, id)| (path.as_str(), id.as_slice()))
    }
}

/// A build id as the kernel stores it: zero-padded to 20 bytes.
fn padded(id: &[u8]) -> PaddedBuildId {
    let mut padded = [0u8; 20];
    let len = id.len().min(20);
    padded[..len].copy_from_slice(&id[..len]);
    padded
}

/// One line of `/proc/PID/maps`: `start-end perms offset dev inode path`.
/// Kept: mappings of files, and executable mappings without one (the
/// vDSO at its offset in the image, anonymous code at its address).
fn parse_mapping(line: &str) -> Option<Mapping> {
    let mut fields = line.split_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    let file_offset = fields.next()?;
    let path = fields.nth(2).unwrap_or("");
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let executable = perms.as_bytes().get(2) == Some(&b'x');
    let (path, file_offset) = if path.starts_with('/') {
        (path.to_string(), u64::from_str_radix(file_offset, 16).ok()?)
    } else if !executable {
        return None;
    } else if path == super::vdso::MODULE {
        (path.to_string(), 0)
    } else if path.is_empty() {
        ("[anon]".to_string(), start)
    } else {
        (path.to_string(), start)
    };
    Some(Mapping {
        start,
        end,
        file_offset,
        path,
        executable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Our own executable's build id leads back to its path, through the
    /// process's mappings as well as directly.
    #[test]
    fn finds_own_executable() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap();
        let Ok(Some(id)) = blazesym::helper::read_elf_build_id(&exe) else {
            eprintln!("SKIPPED: the test binary has no build id");
            return;
        };
        let mut padded = [0u8; 20];
        padded[..id.len().min(20)].copy_from_slice(&id[..id.len().min(20)]);
        let mut index = ModuleIndex::new();
        index.add_process(std::process::id());
        assert_eq!(index.lookup(&padded).map(|(p, _)| p), Some(exe));
    }

    /// Executable mappings without a file keep a name: the vDSO at its
    /// offset, anonymous code at its address; other anonymous memory is left out.
    #[test]
    fn names_code_without_a_file() {
        let vdso = parse_mapping("7ffd0000-7ffd2000 r-xp 00000000 00:00 0   [vdso]").unwrap();
        assert_eq!((vdso.path.as_str(), vdso.file_offset), ("[vdso]", 0));
        let jit = parse_mapping("7f0000000000-7f0000010000 rwxp 00000000 00:00 0 ").unwrap();
        assert_eq!(
            (jit.path.as_str(), jit.file_offset),
            ("[anon]", 0x7f00_0000_0000)
        );
        let named = parse_mapping("7f0000000000-7f0000010000 r-xp 00000000 00:00 0 [anon:jit]");
        assert_eq!(named.unwrap().path, "[anon:jit]");
        assert!(parse_mapping("7f0000000000-7f0000010000 rw-p 00000000 00:00 0 [heap]").is_none());
        let mut index = ModuleIndex::new();
        index.processes.insert(
            1,
            vec![
                vdso,
                parse_mapping("7f0000000000-7f0000010000 rwxp 00000000 00:00 0 ").unwrap(),
            ],
        );
        assert_eq!(index.translate(1, 0x7ffd_0010), Some(("[vdso]", 0x10)));
        assert_eq!(
            index.translate(1, 0x7f00_0000_0042),
            Some(("[anon]", 0x7f00_0000_0042))
        );
        assert!(index.build_id_of("[vdso]").is_some());
    }

    /// Code mapped right after the mappings were read is found at once,
    /// named by the process's perf map when it has one; a page still
    /// missing is remembered.
    #[test]
    fn finds_code_mapped_since() {
        let (me, mut index, _code, addr) = code_mapped_after_reading();
        assert_eq!(index.translate(me, addr), None);
        let perf_map = super::super::perf_map::path_of(me);
        std::fs::write(&perf_map, format!("{:x} 10 jitted\n", addr - 8)).expect("perf map");
        index.refresh_for(me, addr);
        let _ = std::fs::remove_file(&perf_map);
        assert_eq!(index.translate(me, addr), Some((perf_map.as_str(), addr)));
        index.refresh_for(me, 8);
        assert!(index.missing[&me].contains(&0));
    }

    /// A file mapping that is not executable names no code: an address
    /// there (anonymous code where `ld.so.cache` was mapped when the
    /// mappings were read) is looked up afresh, not named after the file.
    #[test]
    fn names_no_code_after_a_non_executable_mapping() {
        let (me, mut index, _code, addr) = code_mapped_after_reading();
        let stale = "7f0000000000-7f0000001000 r--p 00000000 08:01 42 /etc/ld.so.cache";
        let mut stale = parse_mapping(stale).expect("a file mapping");
        (stale.start, stale.end) = (addr - 8, addr + 4088);
        index.processes.get_mut(&me).expect("read").insert(0, stale);
        assert_eq!(index.translate(me, addr), None);
        index.refresh_for(me, addr);
        // `[anon]`, or this process's perf map if a test here wrote one.
        let (path, offset) = index.translate(me, addr).expect("found afresh");
        assert_eq!((path.starts_with("/etc"), offset), (false, addr), "{path}");
    }

    /// Code found through the kernel names addresses no mapping as read
    /// holds (the process gone: none read at all here), with its file's
    /// build id; what overlaps a newer find is replaced; the mappings as
    /// read come first.
    #[test]
    fn names_code_found_since() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap().to_string();
        let gone = u32::MAX;
        let mut index = ModuleIndex::new();
        let code = |start, end, path: &str| FoundCode {
            start,
            end,
            file_offset: 0x1000,
            path: path.to_string(),
        };
        index.add_found(gone, code(0x7f00_0000_0000, 0x7f00_0001_0000, "/old"));
        index.add_found(gone, code(0x7f00_0000_8000, 0x7f00_0002_0000, &exe));
        assert_eq!(index.translate(gone, 0x7f00_0000_1000), None);
        assert_eq!(
            index.translate(gone, 0x7f00_0000_9000),
            Some((exe.as_str(), 0x2000))
        );
        let own_id = blazesym::helper::read_elf_build_id(&exe).ok().flatten();
        assert_eq!(index.build_id_of(&exe), own_id.as_deref());
        let me = std::process::id();
        index.add_process(me);
        let main = names_code_found_since as *const () as usize as u64;
        let read = index.translate(me, main).map(|(p, o)| (p.to_string(), o));
        index.add_found(me, code(main & !0xfff, (main | 0xfff) + 1, "/other"));
        assert_eq!(
            index.translate(me, main).map(|(p, o)| (p.to_string(), o)),
            read
        );
    }

    /// This process's mappings, read; then an executable page mapped, and an
    /// address in it.
    fn code_mapped_after_reading() -> (u32, ModuleIndex, memmap2::Mmap, u64) {
        let me = std::process::id();
        let mut index = ModuleIndex::new();
        index.add_process(me);
        let map = memmap2::MmapOptions::new().len(4096).map_anon();
        let code = map.and_then(|m| m.make_exec()).expect("an executable page");
        let addr = code.as_ptr() as u64 + 8;
        (me, index, code, addr)
    }
}
