//! Finding `#include`d files: `"name"` looks beside the including file
//! first, then both forms search `--include-dir` directories and the
//! system directories in the order gcc uses on Debian; `#include_next`
//! resumes after the directory that held the current file.

use std::fs;
use std::path::{Path, PathBuf};

/// Bytes of one header read at most: glibc's largest is about 100 KB.
pub const MAX_HEADER_BYTES: u64 = 4 << 20;

/// Where `#include <...>` looks after `--include-dir` directories, as
/// `cpp -v` lists them on Debian (gcc's own directory first).
pub fn system_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = gcc_include_dir().into_iter().collect();
    dirs.extend(
        [
            "/usr/local/include",
            "/usr/include/x86_64-linux-gnu",
            "/usr/include",
        ]
        .map(PathBuf::from),
    );
    dirs
}

/// `/usr/lib/gcc/x86_64-linux-gnu/N/include` of the newest gcc, which
/// holds `stddef.h` and `stdarg.h`.
fn gcc_include_dir() -> Option<PathBuf> {
    let root = Path::new("/usr/lib/gcc/x86_64-linux-gnu");
    fs::read_dir(root)
        .ok()?
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let version: u32 = entry
                .file_name()
                .to_str()?
                .split('.')
                .next()?
                .parse()
                .ok()?;
            Some((version, entry.path().join("include")))
        })
        .filter(|(_, dir)| dir.is_dir())
        .max()
        .map(|(_, dir)| dir)
}

/// How an include names its file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IncludeName {
    pub name: String,
    /// `<name>` rather than `"name"`.
    pub angled: bool,
}

/// A file found for an include.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    /// The index of the search directory it was found in, for `#include_next`.
    pub dir_index: Option<usize>,
    /// Found in a system directory: nested includes it cannot find are skipped.
    pub system: bool,
}

/// The search order for one preprocessing run.
#[derive(Clone, Debug)]
pub struct SearchPath {
    /// `--include-dir` directories, then the system ones.
    dirs: Vec<PathBuf>,
    /// How many of `dirs` the user gave.
    user_dirs: usize,
}

impl SearchPath {
    pub fn new(user_dirs: &[PathBuf], system: Vec<PathBuf>) -> SearchPath {
        let mut dirs = user_dirs.to_vec();
        dirs.extend(system);
        SearchPath {
            dirs,
            user_dirs: user_dirs.len(),
        }
    }

    /// Every directory searched for `<...>`, for error messages.
    pub fn describe(&self) -> String {
        let dirs: Vec<String> = self.dirs.iter().map(|d| d.display().to_string()).collect();
        dirs.join(", ")
    }

    /// Finds `include`, written in a file in `current_dir`; `after` is the
    /// directory index to resume after for `#include_next`.
    pub fn find(
        &self,
        include: &IncludeName,
        current_dir: Option<&Path>,
        after: Option<usize>,
    ) -> Option<Found> {
        let name = Path::new(&include.name);
        if name.is_absolute() {
            return name.is_file().then(|| Found {
                path: name.to_path_buf(),
                dir_index: None,
                system: false,
            });
        }
        if !include.angled
            && after.is_none()
            && let Some(dir) = current_dir
            && dir.join(name).is_file()
        {
            return Some(Found {
                path: dir.join(name),
                dir_index: None,
                system: false,
            });
        }
        let first = after.map_or(0, |i| i + 1);
        self.dirs
            .iter()
            .enumerate()
            .skip(first)
            .find(|(_, dir)| dir.join(name).is_file())
            .map(|(i, dir)| Found {
                path: dir.join(name),
                dir_index: Some(i),
                system: i >= self.user_dirs,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str, angled: bool) -> IncludeName {
        IncludeName {
            name: text.into(),
            angled,
        }
    }

    /// Quoted names look beside the including file first; angled ones do
    /// not; user directories come before system ones.
    #[test]
    fn searches_in_order() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (local, user, system) = (
            dir.path().join("l"),
            dir.path().join("u"),
            dir.path().join("s"),
        );
        for d in [&local, &user, &system] {
            fs::create_dir_all(d).expect("dir");
            fs::write(d.join("x.h"), "").expect("header");
        }
        fs::write(system.join("only.h"), "").expect("header");
        let search = SearchPath::new(std::slice::from_ref(&user), vec![system.clone()]);
        let quoted = search
            .find(&name("x.h", false), Some(&local), None)
            .expect("found");
        assert_eq!(quoted.path, local.join("x.h"));
        let angled = search
            .find(&name("x.h", true), Some(&local), None)
            .expect("found");
        assert_eq!((angled.path, angled.system), (user.join("x.h"), false));
        let next = search
            .find(&name("x.h", true), None, Some(0))
            .expect("found");
        assert_eq!((next.path, next.system), (system.join("x.h"), true));
        assert!(search.find(&name("nope.h", true), None, None).is_none());
    }

    /// The system directories of this machine hold glibc's headers.
    #[test]
    fn system_dirs_hold_glibc() {
        let search = SearchPath::new(&[], system_dirs());
        let found = search.find(&name("sys/socket.h", true), None, None);
        assert!(found.is_some_and(|f| f.system), "{}", search.describe());
    }
}
