//! The cache directory, handled as a directory other users must not be able
//! to plant files in: created 0700, opened with `O_NOFOLLOW` (a symlinked
//! directory is refused), owned by the effective user with no group or other
//! access; entries are opened relative to it (`openat`, `O_NOFOLLOW`), must
//! be regular files of that owner, mode 0600, and are written to a fresh
//! temporary file then renamed into place, so a reader never sees half an
//! entry.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Entries larger than this are not read (a cached program is ~100 KB).
const MAX_ENTRY_BYTES: u64 = 64 << 20;
/// Entries kept: each set of options and each wprof build has its own, so
/// the least recently used beyond this are removed when one is written.
const MAX_ENTRIES: usize = 16;

/// Why the cache directory is not used.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    #[error("cannot create {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open {path} (a symlink is refused): {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is not private: owner uid {uid} (want {want}), mode {mode:o} (want no group or other access)"
    )]
    NotPrivate {
        path: PathBuf,
        uid: u32,
        want: u32,
        mode: u32,
    },
}

/// An open, checked cache directory.
#[derive(Debug)]
pub struct CacheDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl CacheDir {
    /// Opens `path`, creating it (and missing parents) 0700 first.
    pub fn open(path: &Path) -> Result<CacheDir, DirError> {
        if let Err(source) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
        {
            return Err(DirError::Create {
                path: path.into(),
                source,
            });
        }
        let open_failed = |source| DirError::Open {
            path: path.into(),
            source,
        };
        let name = CString::new(path.as_os_str().as_bytes())
            .map_err(|e| open_failed(std::io::Error::other(e)))?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: `name` is a NUL-terminated path; the fd is owned below.
        let fd = unsafe { libc::open(name.as_ptr(), flags) };
        if fd < 0 {
            return Err(open_failed(std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let meta = File::from(fd.try_clone().map_err(open_failed)?)
            .metadata()
            .map_err(open_failed)?;
        if !private(&meta) {
            return Err(DirError::NotPrivate {
                path: path.into(),
                uid: meta.uid(),
                want: effective_uid(),
                mode: meta.mode() & 0o7777,
            });
        }
        Ok(CacheDir {
            fd,
            path: path.into(),
        })
    }

    /// Where the directory is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes of entry `name`; `None` when it is missing, not a private
    /// regular file, too large or unreadable.
    pub fn read(&self, name: &str) -> Option<Vec<u8>> {
        let mut file = self.open_at(name, libc::O_RDONLY, 0)?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() || !private(&meta) || meta.len() > MAX_ENTRY_BYTES {
            return None;
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.read_to_end(&mut bytes).ok()?;
        // The modification time marks the last use, for `prune`.
        // SAFETY: a valid fd; null times mean "now".
        unsafe { libc::futimens(file.as_raw_fd(), std::ptr::null()) };
        Some(bytes)
    }

    /// Replaces entry `name` with `bytes` (temporary file, then rename).
    pub fn write(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let temporary = format!(".{name}.{}.{}", std::process::id(), fastrand::u64(..));
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let mut file = self
            .open_at(&temporary, flags, 0o600)
            .ok_or_else(std::io::Error::last_os_error)?;
        let written = file
            .write_all(bytes)
            .and_then(|()| self.rename(&temporary, name));
        if written.is_err() {
            let _ = self.unlink(&temporary);
        }
        self.prune(MAX_ENTRIES);
        written
    }

    /// Removes the least recently used entries beyond `keep`, and temporary
    /// files a killed writer left more than an hour ago.
    fn prune(&self, keep: usize) {
        let Ok(listing) = std::fs::read_dir(&self.path) else {
            return;
        };
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let mut entries = Vec::new();
        for item in listing.flatten() {
            let (Ok(meta), Some(name)) = (
                item.metadata(),
                item.file_name().to_str().map(str::to_owned),
            ) else {
                continue;
            };
            let Ok(used) = meta.modified() else { continue };
            if !meta.is_file() {
                continue;
            }
            if name.starts_with('.') {
                if used < hour_ago {
                    let _ = self.unlink(&name);
                }
            } else {
                entries.push((used, name));
            }
        }
        entries.sort_unstable_by_key(|(used, _)| std::cmp::Reverse(*used));
        for (_, name) in entries.iter().skip(keep) {
            let _ = self.unlink(name);
        }
    }

    fn open_at(&self, name: &str, flags: i32, mode: libc::mode_t) -> Option<File> {
        let name = CString::new(name).ok()?;
        let flags = flags | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: `name` is NUL-terminated and relative to our directory fd.
        let fd = unsafe { libc::openat(self.fd.as_raw_fd(), name.as_ptr(), flags, mode) };
        // SAFETY: a fresh fd, owned by the returned file.
        (fd >= 0).then(|| unsafe { File::from_raw_fd(fd) })
    }

    fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        let (from, to) = (CString::new(from)?, CString::new(to)?);
        let dir = self.fd.as_raw_fd();
        // SAFETY: both names are NUL-terminated and relative to our directory.
        match unsafe { libc::renameat(dir, from.as_ptr(), dir, to.as_ptr()) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }

    fn unlink(&self, name: &str) -> std::io::Result<()> {
        let name = CString::new(name)?;
        // SAFETY: `name` is NUL-terminated and relative to our directory.
        match unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }
}

/// Owned by the effective user, no access for group or others.
fn private(meta: &std::fs::Metadata) -> bool {
    meta.uid() == effective_uid() && meta.mode() & 0o077 == 0
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn make_dir(path: &Path, mode: u32) {
        std::fs::create_dir(path).expect("mkdir");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    /// A new directory is created 0700; an entry written is read back 0600.
    #[test]
    fn creates_private_dir_and_entries() {
        let scratch = tempfile::tempdir().expect("tempdir");
        let path = scratch.path().join("a/cache");
        let dir = CacheDir::open(&path).expect("open");
        let mode = std::fs::metadata(&path).expect("stat").mode() & 0o777;
        assert_eq!(mode, 0o700);
        dir.write("entry", b"bytes").expect("write");
        assert_eq!(dir.read("entry").as_deref(), Some(&b"bytes"[..]));
        let mode = std::fs::metadata(path.join("entry")).expect("stat").mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(dir.read("missing"), None);
        let leftovers = std::fs::read_dir(&path).expect("list").count();
        assert_eq!(leftovers, 1, "the temporary file was renamed");
    }

    /// Writing keeps the most recently used entries (a read counts as a
    /// use) and removes the rest.
    #[test]
    fn keeps_the_most_recently_used_entries() {
        let scratch = tempfile::tempdir().expect("tempdir");
        let path = scratch.path().join("cache");
        let dir = CacheDir::open(&path).expect("open");
        let set_used = |name: &str, seconds_ago: u64| {
            let at = std::time::SystemTime::now() - std::time::Duration::from_secs(seconds_ago);
            let file = File::options()
                .write(true)
                .open(path.join(name))
                .expect("open");
            file.set_modified(at).expect("set mtime");
        };
        for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
            dir.write(name, b"x").expect("write");
            set_used(name, 100 - i as u64 * 10);
        }
        dir.read("a").expect("a is there");
        dir.prune(2);
        let mut left: Vec<String> = std::fs::read_dir(&path)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["a", "c"], "b was the least recently used");
    }

    /// A symlink in place of the directory is refused.
    #[test]
    fn refuses_symlinked_dir() {
        let scratch = tempfile::tempdir().expect("tempdir");
        let real = scratch.path().join("real");
        make_dir(&real, 0o700);
        let link = scratch.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        assert!(matches!(CacheDir::open(&link), Err(DirError::Open { .. })));
    }

    /// A directory others can write to, or an entry others can, is not used.
    #[test]
    fn refuses_shared_dir_and_entries() {
        let scratch = tempfile::tempdir().expect("tempdir");
        let path = scratch.path().join("shared");
        make_dir(&path, 0o777);
        assert!(matches!(
            CacheDir::open(&path),
            Err(DirError::NotPrivate { .. })
        ));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let dir = CacheDir::open(&path).expect("open");
        std::fs::write(path.join("loose"), b"x").expect("write");
        std::fs::set_permissions(path.join("loose"), std::fs::Permissions::from_mode(0o666))
            .expect("chmod");
        assert_eq!(dir.read("loose"), None);
        std::os::unix::fs::symlink(path.join("loose"), path.join("link")).expect("symlink");
        assert_eq!(dir.read("link"), None);
    }
}
