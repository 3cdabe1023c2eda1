//! Command line: clap definitions turned into plain options.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

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
  wprof -R -J - -n 'my-prog*'              # NDJSON of one program's events";

/// A system tracer with a bpftrace-compatible probe language compiled straight to BPF.
#[derive(Debug, Parser)]
#[command(name = "wprof", version, after_help = EXAMPLES)]
pub struct Cli {
    /// The probe program to run.
    #[arg(short = 'e', value_name = "PROGRAM")]
    pub program: Option<String>,

    /// A script file to run (when -e is not given); further arguments are $1, $2, ...
    #[arg(value_name = "SCRIPT")]
    pub script: Option<PathBuf>,

    /// Positional parameters for the script ($1, $2, ...).
    #[arg(value_name = "ARGS", trailing_var_arg = true)]
    pub params: Vec<String>,

    /// Run COMMAND after the probes are attached; stop tracing when it exits.
    #[arg(short = 'c', value_name = "COMMAND")]
    pub command: Option<String>,

    /// Trace only this process (uprobes); stop when it exits.
    #[arg(short = 'p', value_name = "PID")]
    pub pid: Option<i32>,

    /// Stop after this long: a number of milliseconds, or 500ms, 5s, 2m.
    #[arg(short = 'd', value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Print the generated BPF programs next to the script lines they came from, and exit.
    #[arg(long = "dump-bpf")]
    pub dump_bpf: bool,

    /// The capture file written by record blocks, and read by -R.
    #[arg(short = 'D', value_name = "PATH", default_value = "wprof.data")]
    pub data: PathBuf,

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

    /// Replay only processes whose name matches this glob (repeatable).
    #[arg(short = 'n', value_name = "NAME-GLOB")]
    pub process_names: Vec<String>,

    /// Print the JSON Schema of the NDJSON output, and exit.
    #[arg(long = "json-schema")]
    pub json_schema: bool,

    /// The command to trace, after `--` (like -c, without quoting).
    #[arg(last = true, value_name = "COMMAND")]
    pub command_args: Vec<String>,
}

/// `1500` (milliseconds), `500ms`, `5s`, `2m`, `250us`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (examples: 1500, 500ms, 5s, 2m)"))?;
    let duration = match unit {
        "" | "ms" => Duration::from_millis(value),
        "us" => Duration::from_micros(value),
        "s" => Duration::from_secs(value),
        "m" => Duration::from_secs(value * 60),
        "h" => Duration::from_secs(value * 3600),
        _ => {
            return Err(format!(
                "unknown duration unit `{unit}` in `{text}` (use ms, s, m or h)"
            ));
        }
    };
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bare numbers are milliseconds; units are honoured; junk is rejected.
    #[test]
    fn durations() {
        assert_eq!(parse_duration("1500"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("s").is_err());
    }
}
