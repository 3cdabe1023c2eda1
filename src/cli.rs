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
  wprof --dump-bpf -e 'BEGIN { printf(\"hi\\n\"); exit(); }'";

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
