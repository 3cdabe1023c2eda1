//! Wildcarded binary paths in uprobe and USDT attach points
//! (`uprobe:/usr/lib/*/libc.so.6:malloc`): a path glob → the ELF files it
//! names, sorted. bpftrace 0.17 expands them the same way: files that are not
//! ELF are passed over, a library need not be executable. With a process
//! (`-p PID`), a wildcarded name (`uprobe:*`) names the files it maps.

use std::path::{Path, PathBuf};

use super::elf::ElfError;
use super::library_search::{is_elf, mapped_path};

/// Whether a binary name is a path holding glob characters.
pub fn is_glob(name: &str) -> bool {
    name.contains('/') && name.contains(['*', '?', '['])
}

/// The ELF files `pattern` names, sorted; an error when there are none.
pub fn expand(pattern: &str) -> Result<Vec<PathBuf>, ElfError> {
    let not_found = |why: &str| ElfError::NotFound {
        name: pattern.into(),
        searched: format!("files matching the pattern: {why}"),
    };
    let paths = glob::glob(pattern).map_err(|e| ElfError::BadPattern {
        pattern: pattern.into(),
        reason: e.to_string(),
    })?;
    let mut files: Vec<PathBuf> = paths
        .flatten()
        .filter(|path| path.is_file() && is_elf(path))
        .map(|path| spelled_as(pattern, path))
        .collect();
    files.sort();
    match files.is_empty() {
        true => Err(not_found("none is an ELF file")),
        false => Ok(files),
    }
}

/// The ELF files process `pid` maps whose file name matches the glob
/// `pattern`, sorted; a file in another mount namespace is reached through
/// `/proc/PID/root`. An error when there are none.
pub fn mapped_by(pid: i32, pattern: &str) -> Result<Vec<PathBuf>, ElfError> {
    let not_found = |why: String| ElfError::NotFound {
        name: pattern.into(),
        searched: why,
    };
    let glob = glob::Pattern::new(pattern).map_err(|e| ElfError::BadPattern {
        pattern: pattern.into(),
        reason: e.to_string(),
    })?;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| not_found(format!("/proc/{pid}/maps: {e}")))?;
    let mut files: Vec<PathBuf> = maps
        .lines()
        .filter_map(mapped_path)
        .filter(|path| {
            Path::new(path)
                .file_name()
                .is_some_and(|name| glob.matches(&name.to_string_lossy()))
        })
        .map(|path| match Path::new(path).exists() {
            true => PathBuf::from(path),
            false => PathBuf::from(format!("/proc/{pid}/root{path}")),
        })
        .filter(|path| is_elf(path))
        .collect();
    files.sort();
    files.dedup();
    match files.is_empty() {
        true => Err(not_found(format!("the ELF files /proc/{pid}/maps lists"))),
        false => Ok(files),
    }
}

/// `path` with the leading `./` of `pattern`, which the glob crate drops
/// and bpftrace keeps (`uprobe:./bin/prog:f`).
fn spelled_as(pattern: &str, path: PathBuf) -> PathBuf {
    match pattern.starts_with("./") && path.is_relative() && !path.starts_with(".") {
        true => Path::new(".").join(path),
        false => path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// Only glob paths are expanded; program and library names are not paths.
    #[test]
    fn globs_are_paths_with_wildcards() {
        assert!(is_glob("/usr/lib/*/libc.so.6"));
        assert!(is_glob("./bin?"));
        assert!(!is_glob("/bin/bash"));
        assert!(!is_glob("libc*"));
    }

    /// A pattern's leading `./` stays on the files it names.
    #[test]
    fn keeps_a_leading_dot_slash() {
        let found = PathBuf::from("testprogs/a");
        assert_eq!(
            spelled_as("./testprogs/*", found.clone()),
            Path::new("./testprogs/a")
        );
        assert_eq!(spelled_as("testprogs/*", found.clone()), found);
        assert_eq!(spelled_as("./x*", PathBuf::from("/abs")), Path::new("/abs"));
    }

    /// A process's mapped ELF files are found by file name; other patterns
    /// name none.
    #[test]
    fn files_a_process_maps() {
        let exe = std::fs::canonicalize("/proc/self/exe").unwrap();
        let pid = std::process::id() as i32;
        let all = mapped_by(pid, "*").unwrap();
        assert!(all.contains(&exe), "{all:?}");
        let name = exe.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(mapped_by(pid, &name).unwrap(), [exe]);
        assert!(mapped_by(pid, "no-such-file*").is_err());
    }

    /// ELF files match, in order; text files and directories are passed over.
    #[test]
    fn expands_to_elf_files() {
        let dir = std::env::temp_dir().join(format!("wprof-binary-glob-{}", std::process::id()));
        fs::create_dir_all(dir.join("b-dir")).unwrap();
        let elf = fs::read("/proc/self/exe").unwrap();
        fs::write(dir.join("b1"), &elf[..64]).unwrap();
        fs::write(dir.join("a1"), &elf[..64]).unwrap();
        fs::write(dir.join("b-text"), "hello").unwrap();
        let pattern = format!("{}/*", dir.display());
        let found = expand(&pattern).unwrap();
        assert_eq!(found, [dir.join("a1"), dir.join("b1")]);
        let error = expand(&format!("{}/b-t*", dir.display())).unwrap_err();
        assert!(error.to_string().contains("none is an ELF file"), "{error}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
