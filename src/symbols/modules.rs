//! Which file a build id names: the kernel reports user frames as (build id,
//! file offset), and symbolizing needs a path. Paths come from the probes'
//! own binaries, the traced command, and every process seen while it lives.

use std::collections::{HashMap, HashSet};

/// Build ids as the kernel stores them: zero-padded to 20 bytes.
pub type PaddedBuildId = [u8; 20];

#[derive(Debug, Default)]
pub struct ModuleIndex {
    /// The file's path and its real (unpadded) build id.
    by_build_id: HashMap<PaddedBuildId, (String, Vec<u8>)>,
    paths: HashSet<String>,
    /// File mappings of every process seen, as they were when first seen.
    processes: HashMap<u32, Vec<Mapping>>,
}

/// `start..end` of a process maps `path` from `file_offset`.
#[derive(Clone, Debug)]
struct Mapping {
    start: u64,
    end: u64,
    file_offset: u64,
    path: String,
}

impl ModuleIndex {
    pub fn new() -> Self {
        Self::default()
    }

    /// Learn the build id of the ELF file at `path` (once per path).
    pub fn add_path(&mut self, path: &str) {
        self.add_path_as(path, path);
    }

    /// Learn every file mapped by process `pid` (once per pid, while it lives).
    pub fn add_process(&mut self, pid: u32) {
        if self.processes.contains_key(&pid) {
            return;
        }
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        let mappings: Vec<Mapping> = maps.lines().filter_map(parse_mapping).collect();
        let files: HashSet<String> = mappings.iter().map(|m| m.path.clone()).collect();
        self.processes.insert(pid, mappings);
        for file in files {
            // Through the process's root, so files in other mount namespaces resolve.
            let path = format!("/proc/{pid}/root{file}");
            if std::path::Path::new(&path).exists() && !self.paths.contains(&file) {
                self.add_path_as(&path, &file);
            }
        }
    }

    /// Read the build id from `readable`, remember it under the name `shown`.
    fn add_path_as(&mut self, readable: &str, shown: &str) {
        if !self.paths.insert(shown.to_string()) {
            return;
        }
        if let Ok(Some(id)) = blazesym::helper::read_elf_build_id(&readable) {
            let mut padded = [0u8; 20];
            let len = id.len().min(20);
            padded[..len].copy_from_slice(&id[..len]);
            self.by_build_id
                .insert(padded, (shown.to_string(), id.to_vec()));
        }
    }

    /// The file and offset address `addr` of process `pid` was in, from the
    /// mappings seen when the process was first seen.
    pub fn translate(&self, pid: u32, addr: u64) -> Option<(&str, u64)> {
        let mapping = self
            .processes
            .get(&pid)?
            .iter()
            .find(|m| (m.start..m.end).contains(&addr))?;
        Some((&mapping.path, addr - mapping.start + mapping.file_offset))
    }

    /// The real build id of a file seen, if it has one.
    pub fn build_id_of(&self, path: &str) -> Option<&[u8]> {
        self.by_build_id
            .values()
            .find(|(p, _)| p == path)
            .map(|(_, id)| id.as_slice())
    }

    /// The path and real build id of the file with this (padded) build id.
    pub fn lookup(&self, build_id: &PaddedBuildId) -> Option<(&str, &[u8])> {
        self.by_build_id
            .get(build_id)
            .map(|(path, id)| (path.as_str(), id.as_slice()))
    }
}

/// One line of `/proc/PID/maps` with a file: `start-end perms offset dev inode path`.
fn parse_mapping(line: &str) -> Option<Mapping> {
    let mut fields = line.split_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let file_offset = fields.nth(1)?;
    let path = fields.nth(2)?;
    if !path.starts_with('/') {
        return None;
    }
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        file_offset: u64::from_str_radix(file_offset, 16).ok()?,
        path: path.to_string(),
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
}
