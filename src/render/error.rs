//! The one error type of every renderer: what could not be read (a capture,
//! with the byte where it is damaged), what could not be written (an output,
//! by path), and what does not apply (an output given captures it cannot use).

use std::io;
use std::path::PathBuf;

use crate::capture::files::FileError;
use crate::capture::format::CaptureError;
use crate::render::compare::CompareError;
use crate::render::profile::ProfileError;

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum RenderError {
    /// A capture could not be opened, or its events could not be read part
    /// way through; the capture error names the file and the byte offset.
    #[error(transparent)]
    Read(#[from] CaptureError),
    /// An event names a record the capture has no schema for.
    #[error(
        "{} has an event of record {record}, but only {schemas} record schemas",
        path.display()
    )]
    UnknownRecord {
        path: PathBuf,
        record: u32,
        schemas: usize,
    },
    /// The task filters saved in a capture (or given) do not compile.
    #[error("cannot apply the task filters to {}: {message}", path.display())]
    Filter { path: PathBuf, message: String },
    /// An output file could not be created safely (`capture::files::create_output`).
    #[error(transparent)]
    Create(#[from] FileError),
    /// Writing an output failed; `output` is its path or `standard output`.
    #[error("cannot write {output}")]
    Write {
        output: String,
        #[source]
        source: io::Error,
    },
    /// Standard output's reader went away (`wprof -R … -J - | head`): it has
    /// what it wanted, so this output ends quietly and the others are written.
    #[error("the reader of standard output closed it")]
    StdoutClosed,
    /// The profile asked for cannot be made from the capture.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// The captures cannot be compared, or a gate not evaluated.
    #[error(transparent)]
    Compare(#[from] CompareError),
    /// The output cannot be made from the captures given.
    #[error("{output} {problem}")]
    Captures {
        output: &'static str,
        problem: String,
    },
}

impl RenderError {
    /// The error and its causes in one line, `: `-separated.
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(error) = cause {
            text.push_str(": ");
            text.push_str(&error.to_string());
            cause = error.source();
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-line form names the output and the system's reason.
    #[test]
    fn chains_causes() {
        let error = RenderError::Write {
            output: "t.pb".into(),
            source: io::Error::from_raw_os_error(libc::ENOSPC),
        };
        assert_eq!(
            error.chain(),
            "cannot write t.pb: No space left on device (os error 28)"
        );
        let corrupt = CaptureError::Corrupt {
            path: "w.data".into(),
            offset: 4096,
            what: "events chunk checksum mismatch".into(),
        };
        assert_eq!(
            RenderError::from(corrupt).chain(),
            "w.data is corrupt at byte 4096: events chunk checksum mismatch"
        );
    }
}
