//! Wildcarded binary paths in uprobe and USDT attach points
//! (`uprobe:/usr/lib/*/libc.so.6:malloc`): a path glob → the ELF files it
//! names, sorted. bpftrace 0.17 expands them the same way: files that are not
//! ELF are passed over, a library need not be executable.

use std::path::PathBuf;

use super::elf::{ElfError, is_elf};

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
        .collect();
    files.sort();
    match files.is_empty() {
        true => Err(not_found("none is an ELF file")),
        false => Ok(files),
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
