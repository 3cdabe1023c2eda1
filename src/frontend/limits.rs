//! Input limits, checked on the script text before parsing: a hostile or
//! runaway program gets a diagnostic naming the limit, never a stack
//! overflow, a hang or a flood of output.
//!
//! The limits, and where each is enforced:
//! - program size: [`MAX_PROGRAM_BYTES`], here;
//! - bracket nesting: 128 levels, by the parser's pre-scan (`parse/scan.rs`),
//!   before pest recurses on it;
//! - `?:` and `else if` chains, which nest without brackets: pest's own stack
//!   guard stops at 64 KiB of stack left, and the syntax tree is bounded at 256
//!   levels (`parse.rs`), so later stages recurse at most that deep. The
//!   deepest accepted programs need up to 2 MiB of stack in a debug build
//!   (an `else if` chain of 253; measured by the tests below), well within
//!   the main thread's 8 MiB;
//! - errors shown: [`crate::frontend::diag::MAX_SHOWN_ERRORS`], each with a
//!   source window of bounded width.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::ast::Span;
use super::diag::ScriptError;
use crate::capture::files::IoCause;

/// The largest program accepted, in bytes: some thirty times the largest
/// bpftrace tool, small enough that the compiler's work stays bounded.
pub const MAX_PROGRAM_BYTES: usize = 1 << 20;

/// An error when `source` is larger than [`MAX_PROGRAM_BYTES`], pointing at
/// the first byte past the limit.
pub fn check_size(source: &str) -> Result<(), ScriptError> {
    if source.len() <= MAX_PROGRAM_BYTES {
        return Ok(());
    }
    let mut at = MAX_PROGRAM_BYTES;
    while !source.is_char_boundary(at) {
        at -= 1;
    }
    let message = format!(
        "the program is {} bytes; wprof accepts programs of up to {MAX_PROGRAM_BYTES} bytes (1 MiB)",
        source.len()
    );
    Err(ScriptError::new(Span::new(at, at), message).with_label("the limit is reached here"))
}

/// Why a script file could not be read as a program.
#[derive(Debug, thiserror::Error)]
pub enum ScriptFileError {
    #[error("failed to open file '{}': {}", path.display(), IoCause(cause))]
    Open { path: PathBuf, cause: io::Error },
    #[error("cannot read {}: {}", path.display(), IoCause(cause))]
    Read { path: PathBuf, cause: io::Error },
    #[error(
        "{} is larger than {MAX_PROGRAM_BYTES} bytes (1 MiB), wprof's limit for programs",
        path.display()
    )]
    TooLarge { path: PathBuf },
    #[error(
        "{} is a directory, not a script; for bpftrace's `-I DIR` (a directory of headers) \
         use `--include-dir DIR` (wprof's `-I` prints a capture summary)",
        path.display()
    )]
    Directory { path: PathBuf },
    #[error(
        "{}:{line}:{column}: the script is not UTF-8 text (byte {offset} is 0x{byte:02x})",
        path.display()
    )]
    NotUtf8 {
        path: PathBuf,
        line: usize,
        column: usize,
        offset: usize,
        byte: u8,
    },
}

/// The text of the script at `path`: at most [`MAX_PROGRAM_BYTES`] are
/// read (`/dev/zero` is refused, not read forever; a pipe works), and text
/// that is not UTF-8 is refused with the line and column (in bytes, as
/// diagnostics count them) of its first bad byte.
pub fn read_script(path: &Path) -> Result<String, ScriptFileError> {
    let read_error = |cause| ScriptFileError::Read {
        path: path.to_path_buf(),
        cause,
    };
    if path.is_dir() {
        return Err(ScriptFileError::Directory {
            path: path.to_path_buf(),
        });
    }
    let file = std::fs::File::open(path).map_err(|cause| ScriptFileError::Open {
        path: path.to_path_buf(),
        cause,
    })?;
    let mut bytes = Vec::new();
    let limit = MAX_PROGRAM_BYTES as u64 + 1;
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() > MAX_PROGRAM_BYTES {
        return Err(ScriptFileError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let line_start = bytes[..offset]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        ScriptFileError::NotUtf8 {
            path: path.to_path_buf(),
            line: 1 + bytes[..offset].iter().filter(|&&b| b == b'\n').count(),
            column: 1 + offset - line_start,
            offset,
            byte: bytes[offset],
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::model::RecordOrigin;
    use crate::driver::{self, Source};
    use crate::frontend::fake_machine::FakeMachine;
    use crate::frontend::options::CompileOptions;

    /// Programs up to the limit pass, one byte more names the limit.
    #[test]
    fn limits_program_size() {
        let fits = "#".repeat(MAX_PROGRAM_BYTES);
        assert!(check_size(&fits).is_ok());
        let error = check_size(&format!("{fits}x")).unwrap_err();
        assert!(
            error.message.contains("1048576 bytes (1 MiB)"),
            "{}",
            error.message
        );
        assert_eq!(error.span, Span::new(MAX_PROGRAM_BYTES, MAX_PROGRAM_BYTES));
    }

    /// Script files: too large or endless ones and non-UTF-8 text are
    /// refused with the limit or the position of the first bad byte; a
    /// directory (bpftrace's `-I DIR` misread) points to `--include-dir`.
    #[test]
    fn reads_script_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.bt");
        std::fs::write(&path, b"BEGIN {\n  printf(\"\xe9\");\n}\n").unwrap();
        let err = read_script(&path).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "{}:2:11: the script is not UTF-8 text (byte 18 is 0xe9)",
                path.display()
            )
        );
        std::fs::write(&path, "BEGIN { exit(); }").unwrap();
        assert_eq!(read_script(&path).unwrap(), "BEGIN { exit(); }");
        let err = read_script(Path::new("/dev/zero")).unwrap_err();
        assert!(matches!(err, ScriptFileError::TooLarge { .. }), "{err}");
        let err = read_script(&dir.path().join("missing.bt")).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("No such file or directory (ENOENT)"),
            "{err}"
        );
        let err = read_script(dir.path()).unwrap_err().to_string();
        assert!(err.contains("use `--include-dir DIR`"), "{err}");
    }

    /// Compiles `text` on the fake machine in a thread with `stack` bytes of
    /// stack; whether it was refused as nested too deeply.
    fn too_deep(text: String, stack: usize) -> bool {
        std::thread::Builder::new()
            .stack_size(stack)
            .spawn(move || {
                let source = Source {
                    name: "deep.bt".into(),
                    text,
                    origin: RecordOrigin::Script,
                };
                let options = CompileOptions::default();
                driver::compile(&[source], &[], &FakeMachine, &options).is_err_and(|errors| {
                    let deep = "the script is nested too deeply";
                    errors.errors.iter().any(|e| e.message == deep)
                })
            })
            .expect("spawning a thread")
            .join()
            .expect("compiling does not panic")
    }

    /// The deepest program of each shape that is accepted goes through every
    /// stage within a 4 MiB stack (measured: 2 MiB suffice in a debug build,
    /// 1.5 MiB do not), and one level more is refused.
    #[test]
    fn deepest_programs_compile_and_one_more_is_refused() {
        type Shape = fn(usize) -> String;
        let shapes: [(Shape, usize); 8] = [
            (
                |n| format!("BEGIN {{ $x = {}1{}; }}", "(".repeat(n), ")".repeat(n)),
                127,
            ),
            (
                |n| format!("BEGIN {{ $x = {}1{}; }}", "max(".repeat(n), ")".repeat(n)),
                127,
            ),
            (
                |n| format!("BEGIN {{ @m[{}1{}] = 1; }}", "@m[".repeat(n), "]".repeat(n)),
                126,
            ),
            (
                |n| format!("BEGIN {{ {}{} }}", "if (pid) { ".repeat(n), "}".repeat(n)),
                127,
            ),
            (
                |n| {
                    format!(
                        "BEGIN {{ if (1) {{ }}{} }}",
                        " else if (pid) { $x = 1 }".repeat(n)
                    )
                },
                253,
            ),
            (
                |n| format!("BEGIN {{ $x = 1{}; }}", " ? 1 : 1".repeat(n)),
                254,
            ),
            (|n| format!("BEGIN {{ $x = {}1; }}", "!".repeat(n)), 254),
            (|n| format!("BEGIN {{ $x = 1{}; }}", " + 1".repeat(n)), 254),
        ];
        for (shape, deepest) in shapes {
            let text = shape(deepest);
            assert!(!too_deep(text.clone(), 4 << 20), "refused: {}", &text[..60]);
            assert!(
                too_deep(shape(deepest + 1), 4 << 20),
                "accepted: {}",
                &text[..60]
            );
        }
    }
}
