//! The files wprof writes and the captures it reads: output files are
//! created without following a final symbolic link, never written through a
//! hard link or into someone else's file, and are private (0600); a capture
//! to read must be a regular file, checked before anything blocks on it
//! (a FIFO) or reads forever (a device). Errors name the path and the
//! operating system's cause (`No such file or directory (ENOENT)`).

use std::fmt;
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Permissions of the files wprof creates: captures and traces reveal every
/// process's names, command lines and stacks, so only their owner reads them.
pub const OUTPUT_MODE: u32 = 0o600;

/// Why a file could not be created or opened.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot {op} {}: {}", path.display(), IoCause(cause))]
    Io {
        op: &'static str,
        path: PathBuf,
        cause: io::Error,
    },
    #[error(
        "refusing to write {}: it is a symbolic link, and wprof never follows one to \
         create an output (remove it or choose another path)",
        path.display()
    )]
    Symlink { path: PathBuf },
    #[error(
        "refusing to write {}: it has {links} hard links, and writing would change the \
         other names too (remove it or choose another path)",
        path.display()
    )]
    HardLinked { path: PathBuf, links: u64 },
    #[error(
        "refusing to write {}: it belongs to user {owner}, not to user {me} that wprof \
         runs as (remove it or choose another path)",
        path.display()
    )]
    NotOwned { path: PathBuf, owner: u32, me: u32 },
    #[error("{} is {kind}, not a capture file", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
}

/// An I/O error as the operating system's text and the errno's name:
/// `No such file or directory (ENOENT)`.
pub struct IoCause<'a>(pub &'a io::Error);

impl fmt::Display for IoCause<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(code) = self.0.raw_os_error() else {
            return self.0.fmt(f);
        };
        let text = io::Error::from_raw_os_error(code).to_string();
        // std's text ends with "(os error N)": name the errno instead.
        let text = text.split(" (os error").next().unwrap_or(&text);
        match errno_name(code) {
            Some(name) => write!(f, "{text} ({name})"),
            None => write!(f, "{text} (errno {code})"),
        }
    }
}

/// The symbolic name of the errors file operations report.
fn errno_name(code: i32) -> Option<&'static str> {
    let names = [
        (libc::EPERM, "EPERM"),
        (libc::ENOENT, "ENOENT"),
        (libc::EIO, "EIO"),
        (libc::ENXIO, "ENXIO"),
        (libc::EBADF, "EBADF"),
        (libc::EAGAIN, "EAGAIN"),
        (libc::ENOMEM, "ENOMEM"),
        (libc::EACCES, "EACCES"),
        (libc::EBUSY, "EBUSY"),
        (libc::EEXIST, "EEXIST"),
        (libc::EXDEV, "EXDEV"),
        (libc::ENODEV, "ENODEV"),
        (libc::ENOTDIR, "ENOTDIR"),
        (libc::EISDIR, "EISDIR"),
        (libc::EINVAL, "EINVAL"),
        (libc::ENFILE, "ENFILE"),
        (libc::EMFILE, "EMFILE"),
        (libc::ETXTBSY, "ETXTBSY"),
        (libc::EFBIG, "EFBIG"),
        (libc::ENOSPC, "ENOSPC"),
        (libc::ESPIPE, "ESPIPE"),
        (libc::EROFS, "EROFS"),
        (libc::EPIPE, "EPIPE"),
        (libc::ENAMETOOLONG, "ENAMETOOLONG"),
        (libc::ELOOP, "ELOOP"),
        (libc::EOVERFLOW, "EOVERFLOW"),
        (libc::EDQUOT, "EDQUOT"),
        (libc::ESTALE, "ESTALE"),
    ];
    names
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, name)| *name)
}

fn io_error<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> FileError + 'a {
    move |cause| FileError::Io {
        op,
        path: path.to_path_buf(),
        cause,
    }
}

/// Creates `path` for writing, or truncates it, the one way wprof opens
/// its outputs (captures, traces, NDJSON). A final symbolic link is refused;
/// a regular file must belong to the user wprof runs as and have no other
/// name, and is made [`OUTPUT_MODE`]; a new file is created with that mode.
/// Devices and FIFOs (`/dev/null`, a pipe) are written as they are.
pub fn create_output(path: &Path) -> Result<File, FileError> {
    // No O_TRUNC: nothing is changed before the checks below pass.
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .mode(OUTPUT_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|cause| match cause.raw_os_error() {
            Some(libc::ELOOP) if is_symlink(path) => FileError::Symlink {
                path: path.to_path_buf(),
            },
            _ => io_error("create", path)(cause),
        })?;
    let meta = file.metadata().map_err(io_error("inspect", path))?;
    if !meta.file_type().is_file() {
        return Ok(file);
    }
    check_ownership(path, &meta)?;
    file.set_len(0).map_err(io_error("truncate", path))?;
    if meta.permissions().mode() & 0o7777 != OUTPUT_MODE {
        let private = std::fs::Permissions::from_mode(OUTPUT_MODE);
        file.set_permissions(private)
            .map_err(io_error("restrict the permissions of", path))?;
    }
    Ok(file)
}

/// Checks, changing nothing, that [`create_output`] will be able to write
/// `path`: not a link or a directory, an existing file owned by this user
/// and writable, or else a directory that lets the file be created. Outputs
/// are checked before recording, so that a bad path is not found after the
/// whole capture.
pub fn check_output(path: &Path) -> Result<(), FileError> {
    let create_error = io_error("create", path);
    match path.symlink_metadata() {
        Ok(meta) if meta.file_type().is_symlink() => Err(FileError::Symlink {
            path: path.to_path_buf(),
        }),
        Ok(meta) if meta.is_dir() => Err(create_error(io::Error::from_raw_os_error(libc::EISDIR))),
        Ok(meta) if meta.is_file() => {
            check_ownership(path, &meta)?;
            writable(path).map_err(create_error)
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
            writable(dir.unwrap_or(Path::new("."))).map_err(create_error)
        }
        Err(e) => Err(io_error("inspect", path)(e)),
    }
}

/// Whether this process (its effective ids) may write `path`.
fn writable(path: &Path) -> io::Result<()> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: faccessat reads the NUL-terminated path we own.
    match unsafe {
        libc::faccessat(
            libc::AT_FDCWD,
            c_path.as_ptr(),
            libc::W_OK,
            libc::AT_EACCESS,
        )
    } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

fn is_symlink(path: &Path) -> bool {
    path.symlink_metadata()
        .is_ok_and(|meta| meta.file_type().is_symlink())
}

/// Refuses a file with other names, or one another user could have planted.
fn check_ownership(path: &Path, meta: &Metadata) -> Result<(), FileError> {
    if meta.nlink() > 1 {
        return Err(FileError::HardLinked {
            path: path.to_path_buf(),
            links: meta.nlink(),
        });
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(FileError::NotOwned {
            path: path.to_path_buf(),
            owner: meta.uid(),
            me,
        });
    }
    Ok(())
}

/// Opens a capture to read: it must be a regular file (the open does not
/// wait for a FIFO's writer). Returns the file and its length.
pub fn open_capture(path: &Path) -> Result<(File, u64), FileError> {
    open_regular(path)
        .map_err(io_error("open", path))?
        .map_err(|kind| FileError::NotRegular {
            path: path.to_path_buf(),
            kind,
        })
}

/// Opens `path` to read, without waiting for a FIFO's writer: the file and
/// its length when it is a regular file, else what it is (`"a FIFO"`), so
/// that nothing blocks on it or reads a device forever.
pub fn open_regular(path: &Path) -> io::Result<Result<(File, u64), &'static str>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let meta = file.metadata()?;
    let kind = meta.file_type();
    Ok(if kind.is_file() {
        Ok((file, meta.len()))
    } else if kind.is_dir() {
        Err("a directory")
    } else if kind.is_fifo() {
        Err("a FIFO")
    } else if kind.is_char_device() || kind.is_block_device() {
        Err("a device")
    } else {
        Err("not a regular file")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    /// Outputs that cannot be written are found without touching anything:
    /// a missing directory, a directory, a link, another user's file.
    #[test]
    fn checks_outputs_up_front() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("new.pb");
        check_output(&new).unwrap();
        assert!(!new.exists(), "the check created the file");
        std::fs::write(&new, "old").unwrap();
        check_output(&new).unwrap();
        assert_eq!(std::fs::read(&new).unwrap(), b"old");
        check_output(Path::new("/dev/null")).unwrap();
        let missing = dir.path().join("no/such/dir/t.pb");
        let error = check_output(&missing).unwrap_err().to_string();
        assert!(error.contains("(ENOENT)"), "{error}");
        let error = check_output(dir.path()).unwrap_err().to_string();
        assert!(error.contains("(EISDIR)"), "{error}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&new, &link).unwrap();
        assert!(matches!(
            check_output(&link),
            Err(FileError::Symlink { .. })
        ));
        let theirs = dir.path().join("theirs");
        std::fs::write(&theirs, "").unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
        assert!(matches!(
            check_output(&theirs),
            Err(FileError::NotOwned { .. })
        ));
    }

    /// New outputs are private; an existing one is emptied and made private.
    #[test]
    fn creates_private_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.pb");
        create_output(&path).unwrap().write_all(b"first").unwrap();
        assert_eq!(mode(&path), OUTPUT_MODE);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        create_output(&path).unwrap().write_all(b"2").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"2");
        assert_eq!(mode(&path), OUTPUT_MODE);
    }

    /// A planted symbolic link is refused and what it points at is untouched.
    #[test]
    fn refuses_symbolic_links() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = dir.path().join("wprof.data");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = create_output(&link).unwrap_err();
        assert!(matches!(err, FileError::Symlink { .. }), "{err}");
        assert!(err.to_string().contains("it is a symbolic link"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        assert!(matches!(
            create_output(&dangling),
            Err(FileError::Symlink { .. })
        ));
        assert!(!dir.path().join("nowhere").exists());
    }

    /// A file with another name (a hard link) is refused and left as it was.
    #[test]
    fn refuses_hard_links() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = dir.path().join("out.json");
        std::fs::hard_link(&victim, &link).unwrap();
        let err = create_output(&link).unwrap_err();
        assert!(
            matches!(err, FileError::HardLinked { links: 2, .. }),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }

    /// A file another user owns (one planted for root to fill) is refused.
    #[test]
    fn refuses_files_of_other_users() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("planted");
        std::fs::write(&path, "").unwrap();
        if let Err(e) = std::os::unix::fs::chown(&path, Some(65534), Some(65534)) {
            eprintln!("skipped: cannot give a file to another user ({e}); needs root");
            return;
        }
        let err = create_output(&path).unwrap_err();
        assert!(
            matches!(err, FileError::NotOwned { owner: 65534, .. }),
            "{err}"
        );
    }

    /// Devices are written as they are: `/dev/null` works, `/dev/full`
    /// fails on write with ENOSPC named.
    #[test]
    fn writes_devices() {
        create_output(Path::new("/dev/null"))
            .unwrap()
            .write_all(b"x")
            .unwrap();
        let err = create_output(Path::new("/dev/full"))
            .unwrap()
            .write_all(b"x")
            .unwrap_err();
        assert_eq!(
            IoCause(&err).to_string(),
            "No space left on device (ENOSPC)"
        );
    }

    /// Errors name the path, the operation and the errno.
    #[test]
    fn errors_name_the_cause() {
        let dir = tempfile::tempdir().unwrap();
        let err = create_output(&dir.path().join("missing/out.pb")).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("No such file or directory (ENOENT)"),
            "{err}"
        );
        let err = create_output(dir.path()).unwrap_err();
        assert!(
            err.to_string().ends_with("Is a directory (EISDIR)"),
            "{err}"
        );
        let other = io::Error::new(io::ErrorKind::UnexpectedEof, "failed to fill whole buffer");
        assert_eq!(IoCause(&other).to_string(), "failed to fill whole buffer");
    }
}
