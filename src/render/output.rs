//! Where an output goes: [`Destination`] is what the command line named (`-`
//! for standard output, or a path); [`Output`] is it opened for writing, and
//! turns write failures into [`RenderError::Write`] naming it. A renderer
//! that writes several files opens one `Output` per file.

use std::fmt;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::capture::files::create_output;
use crate::render::RenderError;

/// An output's destination as the command line gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    Stdout,
    File(PathBuf),
}

impl Destination {
    /// `-` is standard output, anything else a file path.
    pub fn new(path: &Path) -> Destination {
        if path.as_os_str() == "-" {
            Destination::Stdout
        } else {
            Destination::File(path.to_path_buf())
        }
    }

    /// Creates (or truncates) the file, buffered, or locks standard output.
    /// Files are created by `create_output`: no symbolic link followed, mode 0600.
    pub fn open(&self) -> Result<Output<'static>, RenderError> {
        match self {
            Destination::Stdout => Ok(Output {
                stdout: true,
                ..Output::new(self.to_string(), io::stdout().lock())
            }),
            Destination::File(path) => {
                let file = create_output(path)?;
                Ok(Output::new(self.to_string(), BufWriter::new(file)))
            }
        }
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Destination::Stdout => f.write_str("standard output"),
            Destination::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// An output open for writing, named for error messages.
pub struct Output<'w> {
    name: String,
    writer: Box<dyn Write + 'w>,
    stdout: bool,
}

impl<'w> Output<'w> {
    pub fn new(name: impl Into<String>, writer: impl Write + 'w) -> Self {
        Output {
            name: name.into(),
            writer: Box::new(writer),
            stdout: false,
        }
    }

    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), RenderError> {
        self.writer
            .write_all(bytes)
            .map_err(|source| self.error(source))
    }

    /// Hands what is buffered to the destination.
    pub fn flush(&mut self) -> Result<(), RenderError> {
        self.writer.flush().map_err(|source| self.error(source))
    }

    fn error(&self, source: io::Error) -> RenderError {
        if self.stdout && source.kind() == io::ErrorKind::BrokenPipe {
            return RenderError::StdoutClosed;
        }
        RenderError::Write {
            output: self.name.clone(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    /// `-` is standard output; a file is created, written and flushed.
    #[test]
    fn opens_files_and_stdout() {
        assert_eq!(Destination::new(Path::new("-")), Destination::Stdout);
        assert_eq!(Destination::Stdout.to_string(), "standard output");
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("out.txt");
        let mut out = Destination::new(&path).open().expect("created");
        out.write_all(b"hello").expect("written");
        out.flush().expect("flushed");
        assert_eq!(std::fs::read(&path).expect("read back"), b"hello");
    }

    /// A file that cannot be created, and a write that fails, name the path.
    #[test]
    fn failures_name_the_output() {
        let missing = Destination::new(Path::new("/nonexistent-dir/out.pb"));
        let error = missing.open().err().expect("no such directory");
        assert!(
            error
                .chain()
                .starts_with("cannot create /nonexistent-dir/out.pb: "),
            "{}",
            error.chain()
        );
        let full = File::options()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let mut out = Output::new("/dev/full", full);
        let error = out.write_all(b"x").expect_err("the device is full");
        assert_eq!(
            error.chain(),
            "cannot write /dev/full: No space left on device (os error 28)"
        );
    }
}
