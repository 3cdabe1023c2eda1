//! `wprof profile`: the front door for users of bcc `profile` and of the
//! wall-clock profiler — profile a command or a process for a while and
//! write its flame graph, with the options they know.
//!
//! Input: the command line. A first argument `profile` makes the rest a
//! [`ProfileCommand`], rewritten into the equivalent main command line
//! ([`ProfileCommand::main_args`]: `-S timer=…hz -S offcpu=MIN_BLOCK`, filters, the
//! outputs, `--only-command -- CMD`), which `--explain` prints; anything
//! else is the main command line. Output: the [`Cli`] wprof runs.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use clap::error::ErrorKind;

use crate::cli::Cli;
use crate::cli_bpftrace;
use crate::cli_profile::ProfileOutputs;
use crate::render::format::whole_duration;
use crate::tracking::when::parse_duration;

/// The subcommand word.
pub const PROFILE: &str = "profile";

/// Profile a command or a process: on- and off-CPU stacks, then a flame graph.
#[derive(Debug, Parser)]
#[command(
    name = "wprof profile",
    bin_name = "wprof profile",
    after_help = "Examples:
  wprof profile -- ./my-program arg        # wall-clock flame graph of a command: profile.svg
  wprof profile -p 1234 -d 10s -F 99 -o p.svg --report -
  wprof profile -d 5s -U --profile cpu     # bcc `profile -U -F 49 5`: whole system, user stacks
  wprof profile --explain -p 1234          # the equivalent wprof command line"
)]
pub struct ProfileCommand {
    /// On-CPU sampling frequency (bcc -F, wall-clock profiler -f).
    #[arg(
        short = 'F',
        long = "frequency",
        value_name = "HZ",
        default_value_t = 49
    )]
    pub frequency: u64,

    /// Sample every COUNT nanoseconds of a CPU's time instead (bcc -c: the
    /// count of its cpu-clock event).
    #[arg(short = 'c', long = "count", value_name = "COUNT", conflicts_with = "frequency",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,

    /// Profile this process (repeatable); with one, the profile ends when it exits.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,

    /// Keep the samples taken on these CPUs (bcc -C; `0`, `0,2-3`), and
    /// the off-CPU time of threads that left them.
    #[arg(short = 'C', long = "cpu", value_name = "LIST")]
    pub cpu: Option<String>,

    /// Profile this thread (repeatable; bcc -L).
    #[arg(short = 'L', long = "tid", value_name = "TID")]
    pub tids: Vec<u32>,

    /// Profile threads or processes whose name matches this glob (repeatable).
    #[arg(short = 'n', long = "name", value_name = "GLOB")]
    pub names: Vec<String>,

    /// How long: 500ms, 10s, 2m (a unit is required: bare numbers are seconds to
    /// bcc and milliseconds to wprof).
    #[arg(short = 'd', long = "duration", value_name = "DURATION", value_parser = parse_unit_duration)]
    pub duration: Option<Duration>,

    /// The flame graph SVG.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "PATH",
        default_value = "profile.svg"
    )]
    pub output: PathBuf,

    #[command(flatten)]
    pub outputs: ProfileOutputs,

    /// User stacks only (bcc -U).
    #[arg(short = 'U', long = "user-only", conflicts_with = "kernel_only")]
    pub user_only: bool,

    /// Kernel stacks only (bcc -K).
    #[arg(short = 'K', long = "kernel-only")]
    pub kernel_only: bool,

    /// Off-CPU blocks shorter than this show without their stack (wall-clock
    /// profiler --min-block-us, with a unit: 1000us, 1ms; their time still
    /// counts). Decided in the kernel (`-S offcpu=DUR`): short blocks cost
    /// no stack walk; 0s keeps every block's stack.
    #[arg(short = 'm', long = "min-block", value_name = "DURATION", default_value = "1ms",
          value_parser = parse_unit_duration)]
    pub min_block: Duration,

    /// One flame graph (and folded file) per thread, named by tid and name.
    #[arg(long = "per-thread")]
    pub per_thread: bool,

    /// wall (on- and off-CPU, the default), cpu (on-CPU only, no off-CPU
    /// stacks are recorded), offcpu or wakeup.
    #[arg(long = "profile", value_name = "KIND", default_value = "wall",
          value_parser = ["wall", "cpu", "offcpu", "wakeup"])]
    pub profile: String,

    /// Include the idle CPUs' samples in a system-wide profile (bcc -I).
    #[arg(short = 'I', long = "idle")]
    pub idle: bool,

    /// The capture file written on the way.
    #[arg(short = 'D', value_name = "PATH", default_value = "wprof.data")]
    pub data: PathBuf,

    /// Print the equivalent wprof command line, and exit.
    #[arg(long = "explain")]
    pub explain: bool,

    /// The command to profile (with its descendants), after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

fn parse_unit_duration(text: &str) -> Result<Duration, String> {
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("give `{text}` a unit: {text}s, {text}ms"));
    }
    parse_duration(text)
}

impl ProfileCommand {
    /// The main command line that does what this one asks.
    pub fn main_args(&self) -> Vec<String> {
        let mut args: Vec<String> = vec!["wprof".into()];
        let mut push = |items: &[&str]| args.extend(items.iter().map(|s| s.to_string()));
        let timer = match self.count {
            Some(ns) => format!("timer={}", whole_duration(ns)),
            None => format!("timer={}hz", self.frequency),
        };
        push(&["-S", &timer]);
        if self.profile != "cpu" {
            // Decided in the kernel: short blocks cost no stack walk.
            let min_block_ns = self.min_block.as_nanos() as u64;
            match min_block_ns {
                0 => push(&["-S", "offcpu"]),
                ns => push(&["-S", &format!("offcpu={}", whole_duration(ns))]),
            }
        }
        // IRQ spans are not part of a profile.
        push(&["-f", "no-hardirq", "-f", "no-softirq"]);
        self.push_selection(&mut args);
        self.push_outputs(&mut args);
        if !self.command.is_empty() {
            args.extend(["--only-command".into(), "--".into()]);
            args.extend(self.command.iter().cloned());
        }
        args
    }

    /// The tasks and the time profiled.
    fn push_selection(&self, args: &mut Vec<String>) {
        let mut push = |flag: &str, value: String| args.extend([flag.to_owned(), value]);
        self.pids.iter().for_each(|pid| push("-p", pid.to_string()));
        self.tids
            .iter()
            .for_each(|tid| push("--tid", tid.to_string()));
        self.names.iter().for_each(|name| push("-n", name.clone()));
        let system_wide = self.pids.is_empty()
            && self.tids.is_empty()
            && self.names.is_empty()
            && self.command.is_empty();
        if system_wide && !self.idle {
            args.push("--no-idle".into());
        }
        if let Some(duration) = self.duration {
            let duration = whole_duration(duration.as_nanos() as u64);
            args.extend(["-d".into(), duration]);
        }
    }

    /// The capture, the profile and its options, and every output asked for.
    fn push_outputs(&self, args: &mut Vec<String>) {
        let path = |p: &PathBuf| p.display().to_string();
        args.extend(["-D".into(), path(&self.data)]);
        args.extend(["--profile".into(), self.profile.clone()]);
        args.extend(["--flamegraph".into(), path(&self.output)]);
        for (flag, value) in self.outputs.asked() {
            args.extend([flag.to_owned(), path(value)]);
        }
        if let Some(cpus) = &self.cpu {
            args.extend(["--cpu".into(), cpus.clone()]);
        }
        for (on, flag) in [
            (self.user_only, "--user-only"),
            (self.kernel_only, "--kernel-only"),
            (self.per_thread, "--per-thread"),
        ] {
            if on {
                args.push(flag.into());
            }
        }
    }
}

/// The command line wprof runs: `wprof profile …` rewritten, or the main
/// one. Usage errors, `--help` and `--explain` print and exit, as clap does.
pub fn parse_command_line() -> Cli {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_none_or(|first| first != PROFILE) {
        return crate::cli::try_parse(args).unwrap_or_else(|e| exit_with(e));
    }
    let command = ProfileCommand::parse_from(&args[1..]);
    let main = command.main_args();
    if command.explain {
        println!("{}", shell_words(&main));
        std::process::exit(0);
    }
    crate::cli::try_parse(main).unwrap_or_else(|e| exit_with(e))
}

/// Prints clap's help, version or usage error as clap does, with bpftrace's
/// headings (`USAGE:`, `ERROR:`), which wrapper scripts and bpftrace's own
/// tests look for, and exits with clap's status.
fn exit_with(error: clap::Error) -> ! {
    let as_bpftrace = cli_bpftrace::invoked_as_bpftrace();
    let bpftrace_text = as_bpftrace
        .then(|| cli_bpftrace::bpftrace_usage_error(&error))
        .flatten();
    let (text, code) = match (error.kind(), bpftrace_text) {
        (ErrorKind::DisplayVersion, _) if as_bpftrace => (cli_bpftrace::bpftrace_version(), 0),
        // bpftrace exits 1 on the values it refuses.
        (_, Some(text)) => (text, 1),
        _ => (
            bpftrace_headings(&error.render().to_string()),
            error.exit_code(),
        ),
    };
    let written = match error.use_stderr() {
        true => std::io::Write::write_all(&mut std::io::stderr(), text.as_bytes()),
        false => std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes()),
    };
    // Nothing more can be said when the terminal is gone.
    drop(written);
    std::process::exit(code)
}

/// `text` with clap's `Usage:` and `error:` line headings in bpftrace's capitals.
fn bpftrace_headings(text: &str) -> String {
    let lines = text.split_inclusive('\n').map(|line| {
        for (clap, bpftrace) in [("Usage: ", "USAGE: "), ("error: ", "ERROR: ")] {
            if let Some(rest) = line.strip_prefix(clap) {
                return format!("{bpftrace}{rest}");
            }
        }
        line.to_string()
    });
    lines.collect()
}

/// `args` as a shell would need them typed: plain words as they are.
fn shell_words(args: &[String]) -> String {
    let plain = |arg: &str| {
        !arg.is_empty()
            && (arg.chars()).all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    };
    let words: Vec<String> = (args.iter())
        .map(|arg| match plain(arg) {
            true => arg.clone(),
            false => shlex::try_quote(arg).map_or_else(|_| arg.clone(), |q| q.into_owned()),
        })
        .collect();
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn main_args(args: &[&str]) -> String {
        let command =
            ProfileCommand::try_parse_from(std::iter::once("profile").chain(args.iter().copied()))
                .expect("parses");
        command.main_args().join(" ")
    }

    /// bcc `profile` and wall-clock profiler options map onto the main
    /// command, which parses.
    #[test]
    fn maps_onto_the_main_command() {
        assert_eq!(
            main_args(&[
                "-F",
                "99",
                "-p",
                "42",
                "-d",
                "10s",
                "-U",
                "-m",
                "5ms",
                "--per-thread"
            ]),
            "wprof -S timer=99hz -S offcpu=5ms -f no-hardirq -f no-softirq -p 42 -d 10s \
             -D wprof.data --profile wall --flamegraph profile.svg --user-only --per-thread"
        );
        assert_eq!(
            main_args(&["--profile", "cpu", "-d", "1s", "--folded", "-"]),
            "wprof -S timer=49hz -f no-hardirq -f no-softirq --no-idle -d 1s -D wprof.data \
             --profile cpu --flamegraph profile.svg --folded -"
        );
        assert!(main_args(&["-c", "1000000"]).starts_with("wprof -S timer=1ms -S offcpu=1ms"));
        assert!(
            main_args(&["-C", "0-1", "--profile", "cpu"])
                .ends_with("--profile cpu --flamegraph profile.svg --cpu 0-1")
        );
        assert!(main_args(&["-c", "1234567"]).starts_with("wprof -S timer=1234567ns "));
        let both = ProfileCommand::try_parse_from(["profile", "-F", "99", "-c", "1000000"]);
        assert!(both.is_err(), "-F and -c exclude each other");
        let command = main_args(&["-o", "x.svg", "--", "./prog", "--flag"]);
        assert!(
            command.ends_with("--flamegraph x.svg --only-command -- ./prog --flag"),
            "{command}"
        );
        let argv: Vec<String> = command.split(' ').map(String::from).collect();
        let cli = Cli::try_parse_from(argv).expect("the main command parses");
        assert!(cli.profile.only_command);
        assert_eq!(cli.command_args, ["./prog", "--flag"]);
    }

    /// Words are quoted only when a shell needs it.
    #[test]
    fn quotes_for_the_shell() {
        let args = ["-S", "timer=99hz", "-n", "my prog*", ""].map(String::from);
        assert_eq!(shell_words(&args), "-S timer=99hz -n 'my prog*' ''");
    }

    /// Usage errors and help keep clap's text under bpftrace's headings.
    #[test]
    fn headings_as_bpftrace() {
        let error = crate::cli::try_parse(["wprof", "-idonotexist"]).expect_err("bad option");
        let text = bpftrace_headings(&error.render().to_string());
        assert!(
            text.starts_with("ERROR: unexpected argument '-i' found"),
            "{text}"
        );
        assert!(text.contains("\nUSAGE: wprof [OPTIONS]"), "{text}");
        let help = crate::cli::try_parse(["wprof", "-h"]).expect_err("help");
        let text = bpftrace_headings(&help.render().to_string());
        assert!(
            text.contains("\nUSAGE: wprof [OPTIONS]") && !text.contains("Usage:"),
            "{text}"
        );
        assert!(text.contains("\nOptions:\n"), "our own help stays: {text}");
    }

    /// A bare number of seconds is refused rather than read as milliseconds.
    #[test]
    fn durations_need_units() {
        let error = ProfileCommand::try_parse_from(["profile", "-d", "30"]).expect_err("no unit");
        assert!(
            error.to_string().contains("give `30` a unit: 30s, 30ms"),
            "{error}"
        );
        let error = ProfileCommand::try_parse_from(["profile", "-m", "1000"]).expect_err("no unit");
        assert!(error.to_string().contains("give `1000` a unit"), "{error}");
    }
}
