//! Command line: clap definitions turned into plain options.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use clap::builder::StyledStr;
use clap::error::{ContextKind, ContextValue, ErrorKind};

use crate::cli_bpftrace::{BpftraceArgs, parse_pid};
use crate::frontend::options::{Includes, TaskFilter};
use crate::output::printer::OutputFormat;
use crate::tracking::Tracking;
use crate::tracking::options::{
    FeatureSwitch, StackKind, features, parse_feature_switch, parse_stack_arg, stack_kinds,
};
use crate::tracking::when::{When, parse_duration, parse_when};

const EXAMPLES: &str = "\
Examples:
  wprof -e 'tracepoint:sched:sched_switch { @[comm] = count(); }' -d 1s
  wprof -e 'uprobe:libc:malloc { @bytes = hist(arg0); }' -c './my-program'
  wprof -e 'tracepoint:syscalls:sys_enter_openat { printf(\"%s %s\\n\", comm, str(args.filename)); }'
  wprof script.bt 42          # $1 is 42 inside the script
  wprof --dump-bpf -e 'BEGIN { printf(\"hi\\n\"); exit(); }'

Captures (record blocks `< ... >` and spans write wprof.data):
  wprof -e 'uprobe:libc:malloc < size = arg0; stack >' -d 1s -T trace.pb
  wprof -e 'span io { tracepoint:syscalls:sys_enter_read < fd = args.fd > tracepoint:syscalls:sys_exit_read < ret = args.ret > }' -- ./my-program
  wprof -R -T trace-500ms.pb -d 500ms      # replay the first 500 ms of wprof.data
  wprof -R -I -D wprof.data                # what a capture holds
  wprof -R -J - -n 'my-prog*'              # NDJSON of one program's events

Profiles (flame graphs, pprof, a per-thread wall-clock report):
  wprof -S -d 5s --flamegraph wall.svg --report -      # on- and off-CPU time of every thread
  wprof -R --pprof cpu.pb.gz --profile cpu -p 1234     # from an existing capture
  wprof profile -F 99 -p 1234 -d 10s -o profile.svg    # bcc profile-like front door

System tracking (built-in trackers; no script needed):
  wprof -d1000 -T trace.pb                 # 1 s of scheduling, wakeups, task life, IRQs
  wprof -S -f wq -N 'kworker*' -d 5s -T trace.pb
  wprof --prepare +1s --activate /10s -d 5s -T trace.pb";

/// `wprof --version`: the version and the language it speaks.
pub const VERSION: &str = concat!("v", env!("CARGO_PKG_VERSION"), " (bpftrace 0.17 language)");

/// A system tracer with a bpftrace-compatible probe language compiled straight to BPF.
#[derive(Debug, Parser)]
#[command(name = "wprof", version = VERSION, after_help = EXAMPLES)]
pub struct Cli {
    /// The probe program to run (taken whatever it starts with: `-e '->x'`).
    #[arg(short = 'e', value_name = "PROGRAM", allow_hyphen_values = true)]
    pub program: Option<String>,

    /// A script file to run (when -e is not given; `-` reads it from standard
    /// input); further arguments are $1, $2, ...
    #[arg(value_name = "SCRIPT")]
    pub script: Option<PathBuf>,

    /// Positional parameters for the script ($1, $2, ...).
    #[arg(value_name = "ARGS")]
    pub params: Vec<String>,

    /// Run COMMAND after the probes are attached; stop tracing when it exits
    /// (and end its process group when tracing ends).
    #[arg(short = 'c', value_name = "COMMAND")]
    pub command: Option<String>,

    /// Only this process (repeatable); with one -p, uprobes attach to it alone and
    /// tracing stops when it exits.
    #[arg(short = 'p', value_name = "PID", value_parser = parse_pid)]
    pub pids: Vec<u32>,

    /// Not this process (repeatable).
    #[arg(short = 'P', value_name = "PID", value_parser = parse_pid)]
    pub no_pids: Vec<u32>,

    /// Only threads or processes whose name matches this glob (repeatable).
    #[arg(short = 'n', value_name = "NAME-GLOB", value_parser = parse_glob)]
    pub names: Vec<String>,

    /// Not threads or processes whose name matches this glob (repeatable).
    #[arg(short = 'N', value_name = "NAME-GLOB", value_parser = parse_glob)]
    pub no_names: Vec<String>,

    /// Only this thread (repeatable).
    #[arg(long = "tid", value_name = "TID")]
    pub tids: Vec<u32>,

    /// Not this thread (repeatable).
    #[arg(long = "no-tid", value_name = "TID")]
    pub no_tids: Vec<u32>,

    /// Include the idle tasks (tid 0).
    #[arg(long = "idle", overrides_with = "no_idle")]
    pub idle: bool,

    /// Exclude the idle tasks.
    #[arg(long = "no-idle", overrides_with = "idle")]
    pub no_idle: bool,

    /// Include kernel threads.
    #[arg(long = "kthread", overrides_with = "no_kthread")]
    pub kthread: bool,

    /// Exclude kernel threads.
    #[arg(long = "no-kthread", overrides_with = "kthread")]
    pub no_kthread: bool,

    /// Output format: `text` (the default) or `json` (bpftrace's JSON lines); any
    /// other NAME turns a built-in tracker on (NAME) or off (no-NAME): sched, wakeup,
    /// task-life, hardirq, softirq (on by default), wq (off); `none` turns all off, `all` on.
    #[arg(short = 'f', value_name = "FORMAT|[no-]NAME", value_parser = parse_format_or_feature)]
    pub features: Vec<FormatOrFeature>,

    /// Capture stacks (repeatable): timer[=Nhz|PERIOD[,dither=K]], offcpu[=MIN_BLOCK, e.g. offcpu=1ms],
    /// waker, probe, pmu=EVENT[@RATE]; bare -S is timer + offcpu. unwind=fp: user
    /// stacks by frame pointers only (no .eh_frame tables).
    #[arg(short = 'S', value_name = "KIND", num_args = 0..=1, default_missing_value = "",
          value_parser = parse_stack_kinds)]
    pub stacks: Vec<StackKinds>,

    /// Read this counter at every context switch and IRQ boundary (repeatable, up to 16):
    /// cpu-cycles, instructions, sw:page-faults, rXXXX, ...
    #[arg(long = "pmu", value_name = "EVENT")]
    pub pmu: Vec<String>,

    /// Load and attach at this time (@now, @HH:MM[:SS], @YYYY-MM-DDTHH:MM[:SS], +DUR, /DUR).
    #[arg(long = "prepare", value_name = "WHEN", value_parser = parse_when)]
    pub prepare: Option<When>,

    /// Start recording (time 0) at this time; -d counts from here.
    #[arg(long = "activate", value_name = "WHEN", value_parser = parse_when)]
    pub activate: Option<When>,

    /// Stop after this long: a number of milliseconds, or 500ms, 5s, 2m.
    #[arg(short = 'd', value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Allow built-ins that act on the system: system(), signal(), override().
    #[arg(long = "unsafe")]
    pub unsafe_builtins: bool,

    /// Attach USDT probes to every process that maps their file, even with
    /// -p or -c, so their semaphores are set in all of them (bpftrace's option).
    #[arg(long = "usdt-file-activation")]
    pub usdt_file_activation: bool,

    /// Print the generated BPF programs next to the script lines they came from, and exit.
    #[arg(long = "dump-bpf")]
    pub dump_bpf: bool,

    /// Search DIR for the script's `#include <...>` headers before the system
    /// directories (repeatable; bpftrace's `-I`).
    #[arg(long = "include-dir", value_name = "DIR")]
    pub include_dirs: Vec<PathBuf>,

    /// Read FILE's macros before the script, as `#include "FILE"` (repeatable).
    #[arg(long = "include", value_name = "FILE")]
    pub include_files: Vec<PathBuf>,

    /// The capture file written by record blocks, and read by -R (with -R,
    /// repeatable: the candidate's runs of a comparison).
    #[arg(short = 'D', value_name = "PATH [default: wprof.data]", action = clap::ArgAction::Append)]
    pub data: Vec<PathBuf>,

    /// Write a Perfetto trace of the capture.
    #[arg(short = 'T', value_name = "PATH")]
    pub trace: Option<PathBuf>,

    /// Write the capture as NDJSON (`-` for standard output).
    #[arg(short = 'J', value_name = "PATH")]
    pub json: Option<PathBuf>,

    /// Print a summary of the capture.
    #[arg(short = 'I')]
    pub summary: bool,

    /// Replay: render an existing capture (-D) instead of tracing; needs no root.
    #[arg(short = 'R')]
    pub replay: bool,

    /// Replay from this time after the capture's start (e.g. 200ms).
    #[arg(long = "replay-start", value_name = "DURATION", value_parser = parse_duration)]
    pub replay_start: Option<Duration>,

    /// Replay up to this time after the capture's start.
    #[arg(long = "replay-end", value_name = "DURATION", value_parser = parse_duration)]
    pub replay_end: Option<Duration>,

    /// Options as bpftrace has them.
    #[command(flatten)]
    pub bpftrace: BpftraceArgs,

    /// Profiles, the wall-clock report and metrics.
    #[command(flatten)]
    pub profile: crate::cli_profile::ProfileArgs,

    /// Comparisons of captures and the gates of a CI job.
    #[command(flatten)]
    pub compare: crate::cli_compare::CompareArgs,

    /// Compile the built-in trackers instead of reading them from the
    /// compile cache, and leave the cache as it is (also WPROF_NO_CACHE=1).
    #[arg(long = "no-cache")]
    pub no_cache: bool,

    /// Print the JSON Schema of the NDJSON output, and exit.
    #[arg(long = "json-schema")]
    pub json_schema: bool,

    /// List the built-in variables and functions of the language, and exit.
    #[arg(long = "builtins")]
    pub builtins: bool,

    /// The command to trace, after `--` (like -c, without quoting).
    #[arg(last = true, value_name = "COMMAND")]
    pub command_args: Vec<String>,
}

/// One `-f`: an output format (bpftrace's meaning) or a tracker switch.
#[derive(Clone, Debug, PartialEq)]
pub enum FormatOrFeature {
    Format(OutputFormat),
    Feature(FeatureSwitch),
}

fn parse_format_or_feature(text: &str) -> Result<FormatOrFeature, String> {
    match text {
        "text" => Ok(FormatOrFeature::Format(OutputFormat::Text)),
        "json" => Ok(FormatOrFeature::Format(OutputFormat::Json)),
        _ => parse_feature_switch(text)
            .map(FormatOrFeature::Feature)
            .map_err(|e| format!("{e}; output formats are `text` and `json`")),
    }
}

/// The stack kinds of one `-S`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackKinds(pub Vec<StackKind>);

fn parse_stack_kinds(text: &str) -> Result<StackKinds, String> {
    parse_stack_arg(text).map(StackKinds)
}

fn parse_glob(text: &str) -> Result<String, String> {
    glob::Pattern::new(text)
        .map(|_| text.to_string())
        .map_err(|e| format!("`{text}` is not a glob: {e}"))
}

impl Cli {
    /// `--include-dir` and `--include`.
    pub fn includes(&self) -> Includes {
        Includes {
            dirs: self.include_dirs.clone(),
            files: self.include_files.clone(),
        }
    }

    /// The task filters given.
    pub fn task_filter(&self) -> TaskFilter {
        let flag = |on: bool, off: bool| match (on, off) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        };
        TaskFilter {
            pids: self.pids.clone(),
            no_pids: self.no_pids.clone(),
            tids: self.tids.clone(),
            no_tids: self.no_tids.clone(),
            names: self.names.clone(),
            no_names: self.no_names.clone(),
            idle: flag(self.idle, self.no_idle),
            kthread: flag(self.kthread, self.no_kthread),
            command: false,
        }
    }

    /// What the command line asks of system tracking.
    pub fn tracking(&self) -> Result<Tracking, String> {
        if self.pmu.len() > crate::tracking::MAX_PMU_COUNTERS {
            return Err(format!(
                "at most {} --pmu counters, not {}",
                crate::tracking::MAX_PMU_COUNTERS,
                self.pmu.len()
            ));
        }
        let stacks: Vec<Vec<StackKind>> = self.stacks.iter().map(|s| s.0.clone()).collect();
        Ok(Tracking {
            features: features(&self.feature_switches()),
            stacks: stack_kinds(&stacks),
            pmu: self.pmu.clone(),
            filter: self.task_filter(),
            prepare: self.prepare,
            activate: self.activate,
        })
    }

    /// The tracker switches among the `-f` values.
    fn feature_switches(&self) -> Vec<FeatureSwitch> {
        let switches = self.features.iter().filter_map(|f| match f {
            FormatOrFeature::Feature(switch) => Some(*switch),
            FormatOrFeature::Format(_) => None,
        });
        switches.collect()
    }

    /// The output format: the last `-f text` or `-f json`.
    pub fn output_format(&self) -> OutputFormat {
        let mut formats = self.features.iter().filter_map(|f| match f {
            FormatOrFeature::Format(format) => Some(*format),
            FormatOrFeature::Feature(_) => None,
        });
        formats.next_back().unwrap_or_default()
    }

    /// The capture file: the first `-D`, or `wprof.data`.
    pub fn data_path(&self) -> &Path {
        self.data
            .first()
            .map_or(Path::new("wprof.data"), PathBuf::as_path)
    }

    /// The captures `-R` renders: every `-D` and, with -R, every further
    /// argument (`-D new-*.data` expands to one `-D` and the rest of the
    /// files); `wprof.data` when none is given.
    pub fn replay_captures(&self) -> Vec<PathBuf> {
        let mut captures = self.data.clone();
        if self.replay {
            captures.extend(self.script.iter().cloned());
            captures.extend(self.params.iter().map(PathBuf::from));
        }
        if captures.is_empty() {
            captures.push(PathBuf::from("wprof.data"));
        }
        captures
    }

    /// Whether the outputs compare captures: baselines, or several captures.
    pub fn compares(&self) -> bool {
        !self.compare.baseline.is_empty() || self.replay_captures().len() > 1
    }

    /// The process uprobes attach to and whose exit stops tracing: the only `-p`.
    pub fn target_pid(&self) -> Option<i32> {
        match self.pids[..] {
            [pid] => i32::try_from(pid).ok(),
            _ => None,
        }
    }
}

/// Parses the main command line (`args` starts with the program name);
/// usage errors carry hints that hold for wprof.
pub fn try_parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Cli::try_parse_from(args).map_err(correct_value_hint)
}

/// clap suggests `-- -x` to pass a value starting with `-`, but wprof's `--`
/// starts the traced command: suggest what works here instead.
fn correct_value_hint(mut error: clap::Error) -> clap::Error {
    if error.kind() != ErrorKind::UnknownArgument {
        return error;
    }
    let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg).cloned() else {
        return error;
    };
    let Some(ContextValue::StyledStrs(hints)) = error.remove(ContextKind::Suggested) else {
        return error;
    };
    let hints = (hints.into_iter())
        .map(
            |hint| match hint.to_string().contains("as a value, use '-- ") {
                true => StyledStr::from(format!(
                    "to pass '{arg}' as an option's value, attach it: '-n={arg}'; \
                 a script file of that name is './{arg}' ('--' starts the command to trace)"
                )),
                false => hint,
            },
        )
        .collect();
    error.insert(ContextKind::Suggested, ContextValue::StyledStrs(hints));
    error
}

/// The filter that `args` (as `filter_args` writes them, e.g. `-p 42`,
/// `--no-idle`) give on a command line.
pub fn task_filter_from_args(args: &[String]) -> Result<TaskFilter, String> {
    let argv = args.iter().flat_map(|arg| match arg.split_once(' ') {
        Some((flag, value)) => vec![flag, value],
        None => vec![arg.as_str()],
    });
    Cli::try_parse_from(std::iter::once("wprof").chain(argv))
        .map(|cli| cli.task_filter())
        .map_err(|e| e.kind().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("wprof").chain(args.iter().copied()))
    }

    /// Filters, features, stacks and specs become one `Tracking`.
    #[test]
    fn system_tracking_options() {
        let cli = parse(&[
            "-p",
            "1",
            "-p",
            "2",
            "-P",
            "3",
            "-n",
            "ba*",
            "-N",
            "kworker*",
            "--tid",
            "4",
            "--no-tid",
            "5",
            "--no-idle",
            "--kthread",
            "-f",
            "no-sched",
            "-f",
            "wq",
            "-S",
            "-S",
            "waker",
            "--pmu",
            "sw:page-faults",
            "--prepare",
            "+1s",
            "--activate",
            "/10s",
            "-d",
            "2s",
        ])
        .unwrap();
        let tracking = cli.tracking().unwrap();
        let settings = tracking.settings();
        assert_eq!(
            settings.features,
            ["wakeup", "task-life", "hardirq", "softirq", "wq"]
        );
        assert_eq!(settings.stacks, ["timer=100hz", "offcpu", "waker"]);
        assert_eq!(settings.pmu, ["sw:page-faults"]);
        assert_eq!(
            settings.filters,
            [
                "-p 1",
                "-p 2",
                "-P 3",
                "--tid 4",
                "--no-tid 5",
                "-n ba*",
                "-N kworker*",
                "--no-idle",
                "--kthread"
            ]
        );
        assert_eq!(settings.prepare.as_deref(), Some("+1000ms"));
        assert_eq!(settings.activate.as_deref(), Some("/10000ms"));
        assert_eq!(cli.target_pid(), None);
        assert_eq!(parse(&["-p", "9"]).unwrap().target_pid(), Some(9));
    }

    /// Saved filter arguments parse back to the same filter.
    #[test]
    fn filters_round_trip() {
        let cli = parse(&["-p", "1", "-N", "a b*", "--tid", "3", "--no-kthread"]).unwrap();
        let args = crate::tracking::options::filter_args(&cli.task_filter());
        assert_eq!(task_filter_from_args(&args), Ok(cli.task_filter()));
        assert!(task_filter_from_args(&["--bogus".into()]).is_err());
    }

    /// A later --idle / --no-idle wins; bare -S before a flag takes no value.
    #[test]
    fn switches_override() {
        let cli = parse(&["--idle", "--no-idle", "-S", "-d", "1"]).unwrap();
        assert_eq!(cli.task_filter().idle, Some(false));
        assert_eq!(cli.stacks, [StackKinds(parse_stack_arg("").unwrap())]);
    }

    /// `-e` takes a program starting with `-`; a stray `-x` is hinted at
    /// without clap's `-- -x`, which here would start a command.
    #[test]
    fn values_starting_with_a_dash() {
        let cli = parse(&["-e", "->x", "-d", "1"]).expect("-e takes ->x");
        assert_eq!(cli.program.as_deref(), Some("->x"));
        let error = try_parse(["wprof", "-x"])
            .expect_err("-x is unknown")
            .to_string();
        assert!(error.contains("'-n=-x'"), "{error}");
        assert!(error.contains("'./-x'"), "{error}");
        assert!(!error.contains("'-- -x'"), "{error}");
        let cli = try_parse(["wprof", "-n=-x*"]).expect("attached values parse");
        assert_eq!(cli.names, ["-x*"]);
    }

    /// Bad values are clap errors naming the value.
    #[test]
    fn bad_values_are_named() {
        for (args, bad) in [
            (&["-f", "nope"][..], "`nope`"),
            (&["-S", "stack"], "`stack`"),
            (&["--activate", "14:00"], "`14:00`"),
            (&["-n", "[a"], "`[a`"),
            (&["-p", "x"], "'x'"),
        ] {
            let error = parse(args).unwrap_err().to_string();
            assert!(error.contains(bad), "{args:?}: {error}");
        }
        let many: Vec<String> = (0..17)
            .flat_map(|i| ["--pmu".into(), format!("r{i}")])
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(
            parse(&many)
                .unwrap()
                .tracking()
                .unwrap_err()
                .contains("at most 16")
        );
    }
}
