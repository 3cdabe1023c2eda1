//! Where glibc's dynamic loader looks for a library named by `DT_NEEDED`
//! (ld.so(8)): the directories of `DT_RPATH`/`DT_RUNPATH` lists with
//! `$ORIGIN` expanded, `LD_LIBRARY_PATH`, the exact `DT_SONAME` entries of
//! `/etc/ld.so.cache` for this machine, and the loader's system directories.
//! `unwind::program_files` walks a program's libraries with it. Not
//! followed: `glibc-hwcaps` and legacy hardware-capability subdirectories,
//! and directories with `$LIB` or `$PLATFORM` (a library found only there
//! gets its table when a process maps it).

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use crate::runtime::targets::library_search::{LD_CACHE, LdCacheEntry, parse_ld_cache};

/// The loader's system directories (`ld.so --help`: "system search path"),
/// Debian's multiarch ones first.
#[cfg(not(target_arch = "aarch64"))]
const SYSTEM_DIRS: [&str; 4] = [
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib",
    "/usr/lib",
];
#[cfg(target_arch = "aarch64")]
const SYSTEM_DIRS: [&str; 4] = [
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib",
    "/usr/lib",
];

/// A list of directories to search, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchPath(Vec<PathBuf>);

impl SearchPath {
    /// The directories of colon-separated `lists` (`DT_RPATH` or
    /// `DT_RUNPATH` strings), `$ORIGIN` and `${ORIGIN}` replaced by
    /// `origin`; empty entries and those with other tokens are left out.
    pub fn expand(lists: &[String], origin: &Path) -> SearchPath {
        let origin = origin.to_string_lossy();
        let dirs = (lists.iter().flat_map(|list| list.split(':')))
            .map(|dir| {
                dir.replace("${ORIGIN}", &origin)
                    .replace("$ORIGIN", &origin)
            })
            .filter(|dir| !dir.is_empty() && !dir.contains('$'))
            .map(PathBuf::from);
        SearchPath(dirs.collect())
    }

    pub fn dirs(&self) -> impl Iterator<Item = &Path> {
        self.0.iter().map(PathBuf::as_path)
    }
}

/// What the loader's search takes from its environment, read once.
pub struct LoaderSearch {
    library_path: SearchPath,
    cache: OnceCell<Vec<LdCacheEntry>>,
}

impl LoaderSearch {
    /// The search of a program started from this environment (the traced
    /// command inherits wprof's `LD_LIBRARY_PATH`).
    pub fn from_environment() -> LoaderSearch {
        let value = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
        // The loader separates its entries with `:` or `;`.
        let lists: Vec<String> = value.split([':', ';']).map(String::from).collect();
        LoaderSearch {
            library_path: SearchPath::expand(&lists, Path::new("")),
            cache: OnceCell::new(),
        }
    }

    /// `LD_LIBRARY_PATH`'s directories.
    pub fn library_path(&self) -> &SearchPath {
        &self.library_path
    }

    /// The paths `/etc/ld.so.cache` gives for exactly `soname` on this
    /// machine's architecture, in the cache's order.
    pub fn cached(&self, soname: &str) -> Vec<PathBuf> {
        let entries = self.cache.get_or_init(|| {
            let data = std::fs::read(LD_CACHE).unwrap_or_default();
            parse_ld_cache(&data).unwrap_or_default()
        });
        (entries.iter())
            .filter(|e| e.soname == soname && e.is_native())
            .map(|e| PathBuf::from(&e.path))
            .collect()
    }

    /// The loader's system directories.
    pub fn default_dirs(&self) -> impl Iterator<Item = &'static Path> {
        SYSTEM_DIRS.iter().map(Path::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `$ORIGIN` in both spellings becomes the directory; empty entries and
    /// other tokens go.
    #[test]
    fn expands_origin() {
        let lists = [
            "$ORIGIN/../lib::/opt/x".to_string(),
            "${ORIGIN}:$LIB/y".into(),
        ];
        let path = SearchPath::expand(&lists, Path::new("/usr/bin"));
        let dirs: Vec<&Path> = path.dirs().collect();
        assert_eq!(
            dirs,
            [
                Path::new("/usr/bin/../lib"),
                Path::new("/opt/x"),
                Path::new("/usr/bin")
            ]
        );
    }

    /// The C library is in the cache under its exact soname, a prefix of it
    /// is not.
    #[test]
    fn cache_matches_exact_sonames() {
        let search = LoaderSearch::from_environment();
        let libc = search.cached("libc.so.6");
        assert!(libc.iter().any(|p| p.ends_with("libc.so.6")), "{libc:?}");
        assert!(search.cached("libc.so").is_empty());
        assert!(search.default_dirs().any(|d| d == Path::new("/usr/lib")));
    }
}
