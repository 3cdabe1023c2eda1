//! Command line, the options bpftrace users know (`-l`, `-v`, `-q`, `-o`,
//! `-B`, `--info`, `--emit-llvm`), and the checks that give bpftrace's
//! messages where its runtime tests read them (pid values, a directory given
//! as the script, a missing script file). Input: clap; output: plain options
//! and the output sink the session prints to.
//!
//! Run under the name `bpftrace` (a symlink to wprof), wprof also speaks as
//! bpftrace 0.17 where scripts and wrappers read it: `ERROR: ` before
//! errors, bpftrace's usage error texts, `--version` starting
//! `bpftrace v0.17.0`, and `-c` split at spaces as bpftrace splits it.

use std::fs::File;
use std::io::{self, BufWriter, LineWriter, Write};
use std::path::{Path, PathBuf};

use clap::error::{ContextKind, ContextValue, ErrorKind};

use crate::frontend::options::HelperChecks;

/// bpftrace's options, flattened into [`crate::cli::Cli`].
#[derive(Debug, Default, clap::Args)]
pub struct BpftraceArgs {
    /// List the probes matching the pattern given as SCRIPT (every listable
    /// probe without one), e.g. -l 'tracepoint:sched:*', -l 'uprobe:/bin/bash:read*'.
    #[arg(short = 'l')]
    pub list: bool,

    /// With -l: also list each probe's arguments (-lv); otherwise print each
    /// program's id and verifier log as it loads, as bpftrace -v.
    #[arg(short = 'v')]
    pub verbose: bool,

    /// Report failed BPF helper calls at run time (bpftrace's -k): -k those
    /// whose failure leaves no trace (map updates and deletes, get_stackid,
    /// get_current_comm, send_signal); -kk also reads and map lookups.
    #[arg(short = 'k', action = clap::ArgAction::Count)]
    pub helper_checks: u8,

    /// Do not print `Attaching N probes...`.
    #[arg(short = 'q')]
    pub quiet: bool,

    /// Write what the script prints to FILE instead of standard output.
    #[arg(short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// How the script's output is buffered: line (the default, also into a
    /// pipe or a file), full, or none.
    #[arg(short = 'B', value_name = "MODE", value_enum)]
    pub buffering: Option<Buffering>,

    /// Print what this kernel and wprof support, in bpftrace's --info format, and exit.
    #[arg(long = "info")]
    pub info: bool,

    /// Compile, write the BPF programs as an ELF object to FILE (one section
    /// per program, named as libbpf names program types), and exit.
    #[arg(long = "emit-elf", value_name = "FILE")]
    pub emit_elf: Option<PathBuf>,

    /// bpftrace's LLVM IR output: wprof has no LLVM and says so.
    #[arg(long = "emit-llvm", value_name = "FILE", hide = true)]
    pub emit_llvm: Option<PathBuf>,
}

/// `-B`: when the script's output reaches its destination.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Buffering {
    /// At each end of line.
    #[default]
    Line,
    /// When the buffer fills, and at exit.
    Full,
    /// At each write.
    None,
}

/// Why the bpftrace options cannot be used as given.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OptionError {
    #[error(
        "--emit-llvm: wprof compiles scripts straight to BPF without LLVM, so there is no LLVM IR; use --dump-bpf to see the BPF programs"
    )]
    EmitLlvm,
    #[error("-k is given at most twice (-kk checks every helper)")]
    TooManyHelperChecks,
    #[error("pid '{0}' is not a valid decimal number")]
    PidNotANumber(String),
    #[error("pid '{0}' out of valid pid range [1,{MAX_PID}]")]
    PidOutOfRange(String),
}

/// Whether wprof runs under bpftrace's name (a symlink `bpftrace`).
pub fn invoked_as_bpftrace() -> bool {
    std::env::args_os()
        .next()
        .is_some_and(|argv0| Path::new(&argv0).file_name() == Some("bpftrace".as_ref()))
}

/// The version line bpftrace's users and tests read, naming wprof after it.
pub fn bpftrace_version() -> String {
    format!("bpftrace v0.17.0 (wprof v{})\n", env!("CARGO_PKG_VERSION"))
}

/// bpftrace's text for a usage error clap reports, where it differs from
/// clap's: `-f` values that are no output format, and the reason alone for
/// other refused values (`pid 'a1' is not a valid decimal number`).
pub fn bpftrace_usage_error(error: &clap::Error) -> Option<String> {
    if error.kind() != ErrorKind::ValueValidation {
        return None;
    }
    let value = match error.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(value)) => value,
        _ => return None,
    };
    let arg = match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg,
        _ => return None,
    };
    if arg.starts_with("-f ") {
        return Some(format!(
            "ERROR: Invalid output format \"{value}\"\nValid formats: 'text', 'json'\n"
        ));
    }
    let reason = std::error::Error::source(error)?;
    Some(format!("ERROR: {reason}\n"))
}

/// `-c COMMAND` split as bpftrace 0.17 splits it: at spaces, quotes kept
/// (`'A'` is an argument of three characters).
pub fn split_command_as_bpftrace(command: &str) -> Vec<String> {
    command
        .split(' ')
        .filter(|word| !word.is_empty())
        .map(String::from)
        .collect()
}

/// The largest pid Linux allows (`PID_MAX_LIMIT` on 64-bit machines).
pub const MAX_PID: u64 = 4_194_304;

/// `-p` values: a decimal number in `[1, MAX_PID]`, with bpftrace's wording.
pub fn parse_pid(text: &str) -> Result<u32, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(OptionError::PidNotANumber(text.into()).to_string());
    }
    match text.parse::<u64>() {
        Ok(pid @ 1..=MAX_PID) => Ok(pid as u32),
        _ => Err(OptionError::PidOutOfRange(text.into()).to_string()),
    }
}

impl BpftraceArgs {
    /// Options that cannot run as given, before anything else happens.
    pub fn validate(&self) -> Result<(), OptionError> {
        if self.emit_llvm.is_some() {
            return Err(OptionError::EmitLlvm);
        }
        self.helper_check_level()?;
        Ok(())
    }

    /// `-k`/`-kk` as a level.
    pub fn helper_check_level(&self) -> Result<HelperChecks, OptionError> {
        match self.helper_checks {
            0 => Ok(HelperChecks::Off),
            1 => Ok(HelperChecks::Silent),
            2 => Ok(HelperChecks::All),
            _ => Err(OptionError::TooManyHelperChecks),
        }
    }

    /// Where the session prints: `-o FILE` or standard output, buffered as `-B` says.
    pub fn output_sink(&self) -> Result<Box<dyn Write>, String> {
        let target: Box<dyn Write> = match &self.output {
            Some(path) => Box::new(
                File::create(path)
                    .map_err(|e| format!("cannot create -o file {}: {e}", path.display()))?,
            ),
            None => Box::new(io::stdout()),
        };
        Ok(match self.buffering.unwrap_or_default() {
            Buffering::Line => Box::new(LineWriter::new(target)),
            Buffering::Full => Box::new(BufWriter::new(target)),
            Buffering::None => Box::new(Unbuffered(target)),
        })
    }
}

/// Flushes after every write (standard output alone keeps partial lines).
struct Unbuffered(Box<dyn Write>);

impl Write for Unbuffered {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.0.write(buf)?;
        self.0.flush()?;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pids are checked with bpftrace's messages.
    #[test]
    fn pid_values() {
        assert_eq!(parse_pid("42"), Ok(42));
        assert_eq!(parse_pid("4194304"), Ok(4_194_304));
        assert_eq!(
            parse_pid("a1111").unwrap_err(),
            "pid 'a1111' is not a valid decimal number"
        );
        assert_eq!(
            parse_pid("-1").unwrap_err(),
            "pid '-1' is not a valid decimal number"
        );
        assert_eq!(
            parse_pid("5000000").unwrap_err(),
            "pid '5000000' out of valid pid range [1,4194304]"
        );
        assert!(
            parse_pid("0")
                .unwrap_err()
                .contains("out of valid pid range")
        );
    }

    /// -v goes alone or with -l, --emit-llvm is refused, -k at most twice.
    #[test]
    fn refused_combinations() {
        let verbose = BpftraceArgs {
            verbose: true,
            ..Default::default()
        };
        assert_eq!(verbose.validate(), Ok(()));
        let checks = BpftraceArgs {
            helper_checks: 3,
            ..Default::default()
        };
        assert_eq!(checks.validate(), Err(OptionError::TooManyHelperChecks));
        let listing = BpftraceArgs {
            verbose: true,
            list: true,
            ..Default::default()
        };
        assert_eq!(listing.validate(), Ok(()));
        let llvm = BpftraceArgs {
            emit_llvm: Some("x.ll".into()),
            ..Default::default()
        };
        assert_eq!(llvm.validate(), Err(OptionError::EmitLlvm));
    }

    /// Unbuffered output reaches the file at each write, full buffering at the end.
    #[test]
    fn buffering_modes() {
        let dir = tempfile::tempdir().unwrap();
        for (mode, before_flush) in [
            (Buffering::None, "a\nb"),
            (Buffering::Line, "a\n"),
            (Buffering::Full, ""),
        ] {
            let path = dir.path().join(format!("{mode:?}"));
            let args = BpftraceArgs {
                output: Some(path.clone()),
                buffering: Some(mode),
                ..Default::default()
            };
            let mut sink = args.output_sink().unwrap();
            sink.write_all(b"a\nb").unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), before_flush);
            sink.flush().unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "a\nb");
        }
    }
}
