//! Rendering captures, after a capture or with `-R`: open `wprof.data`, apply
//! the window and task filters, and run every renderer the command line asks
//! for (`OUTPUTS`).

use std::path::Path;

use wprof::capture::files::check_output;
use wprof::capture::model::{CaptureInfo, CaptureStats, DropReason};
use wprof::capture::reader::CaptureReader;
use wprof::cli::{Cli, task_filter_from_args};
use wprof::driver::Source;
use wprof::frontend::options::TaskFilter;
use wprof::render::filter::{Filter, TaskSelector, descendants};
use wprof::render::flamegraph::FlameGraph;
use wprof::render::folded::FoldedStacks;
use wprof::render::metrics::Metrics;
use wprof::render::ndjson::Ndjson;
use wprof::render::perfetto::Perfetto;
use wprof::render::pprof::Pprof;
use wprof::render::report::{Report, ReportJson};
use wprof::render::summary::Summary;
use wprof::render::{Capture, Captures, Destination, Render, RenderError};

use crate::Failure;

/// An output the command line can ask for.
struct OutputKind {
    /// Its option, and an example of its value, for messages.
    flag: &'static str,
    example: &'static str,
    /// Its destination (a path, `-` for standard output) when asked for.
    asked: fn(&Cli) -> Option<&Path>,
    /// Its renderer, with the options the command line gives.
    renderer: fn(&Cli) -> Box<dyn Render>,
}

/// Every output, in the order they are written. A new output is one entry.
const OUTPUTS: [OutputKind; 9] = [
    OutputKind {
        flag: "-T",
        example: " trace.pb",
        asked: |cli| cli.trace.as_deref(),
        renderer: |_| Box::new(Perfetto::default()),
    },
    OutputKind {
        flag: "-J",
        example: " out.json (or -J -)",
        asked: |cli| cli.json.as_deref(),
        renderer: |_| Box::new(Ndjson::default()),
    },
    OutputKind {
        flag: "-I",
        example: "",
        asked: |cli| cli.summary.then_some(Path::new("-")),
        renderer: |_| Box::new(Summary::default()),
    },
    OutputKind {
        flag: "--folded",
        example: " out.folded",
        asked: |cli| cli.profile.outputs.folded.as_deref(),
        renderer: |cli| {
            Box::new(FoldedStacks {
                options: cli.profile.profile_options(),
            })
        },
    },
    OutputKind {
        flag: "--flamegraph",
        example: " out.svg",
        asked: |cli| cli.profile.flamegraph.as_deref(),
        renderer: |cli| {
            Box::new(FlameGraph {
                options: cli.profile.profile_options(),
            })
        },
    },
    OutputKind {
        flag: "--pprof",
        example: " out.pb.gz",
        asked: |cli| cli.profile.outputs.pprof.as_deref(),
        renderer: |cli| {
            Box::new(Pprof {
                options: cli.profile.profile_options(),
            })
        },
    },
    OutputKind {
        flag: "--report",
        example: " -",
        asked: |cli| cli.profile.outputs.report.as_deref(),
        renderer: |cli| {
            Box::new(Report {
                options: cli.profile.report_options(),
            })
        },
    },
    OutputKind {
        flag: "--report-json",
        example: " report.json",
        asked: |cli| cli.profile.outputs.report_json.as_deref(),
        renderer: |cli| {
            Box::new(ReportJson {
                options: cli.profile.report_options(),
            })
        },
    },
    OutputKind {
        flag: "--metrics",
        example: " metrics.json",
        asked: |cli| cli.profile.metrics.as_deref(),
        renderer: |cli| {
            Box::new(Metrics {
                options: cli.profile.metrics_options(),
            })
        },
    },
];

/// Whether the command line asks for any output.
pub fn any_output(cli: &Cli) -> bool {
    OUTPUTS.iter().any(|output| (output.asked)(cli).is_some())
}

/// Whether the command line asks for a capture (then the built-in trackers
/// run): `-D`, or an output.
pub fn wants_capture(cli: &Cli) -> bool {
    cli.data.is_some() || any_output(cli)
}

/// Checks before recording that the capture `data` and every output asked
/// for (but standard output) can be written.
pub fn check_outputs(cli: &Cli, data: &Path) -> Result<(), Failure> {
    let outputs = OUTPUTS.iter().filter_map(|output| (output.asked)(cli));
    for path in std::iter::once(data).chain(outputs) {
        if path.as_os_str() != "-" {
            check_output(path).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// The error of outputs asked for without a capture to render.
pub fn nothing_to_render() -> String {
    let flags: Vec<&str> = OUTPUTS.iter().map(|output| output.flag).collect();
    let (last, others) = flags.split_last().expect("outputs");
    format!(
        "{} and {last} render captures: the script has no record block (`< ... >`) or span",
        others.join(", ")
    )
}

/// `-R`: render the capture in `-D` with the options given.
pub fn replay(cli: &Cli) -> Result<(), Failure> {
    if !any_output(cli) {
        let options: Vec<String> = (OUTPUTS.iter())
            .map(|output| format!("{}{}", output.flag, output.example))
            .collect();
        let (last, others) = options.split_last().expect("outputs");
        let options = format!("{}, or {last}", others.join(", "));
        return Err(format!("-R needs an output: {options}").into());
    }
    let window = Filter {
        start_ns: cli.replay_start.map(|d| d.as_nanos() as u64),
        // In replay, -d is the window's length from the start.
        end_ns: cli.replay_end.or(cli.duration).map(|d| d.as_nanos() as u64),
        tasks: Vec::new(),
    };
    render_outputs(cli, window)
}

/// Write every output asked for from the capture at `-D`, in `window`, for
/// the tasks selected both by the capture's own filters and by the command line's.
pub fn render_outputs(cli: &Cli, window: Filter) -> Result<(), Failure> {
    let path = cli.data_path();
    let reader = CaptureReader::open(path).map_err(|e| RenderError::from(e).chain())?;
    if let Some(damage) = reader.damage() {
        eprintln!("wprof: {}: {damage}", path.display());
    }
    let filter = capture_filter(cli, &reader, window).map_err(|e| e.chain())?;
    let captures = Captures::one(Capture {
        path,
        source: &reader,
        filter,
    });
    for output in &OUTPUTS {
        if let Some(destination) = (output.asked)(cli) {
            (output.renderer)(cli)
                .render(&captures, &Destination::new(destination))
                .map_err(|e| e.chain())?;
        }
    }
    Ok(())
}

/// `window` with the task filters saved in the capture and those given.
fn capture_filter(
    cli: &Cli,
    reader: &CaptureReader,
    window: Filter,
) -> Result<Filter, RenderError> {
    let path = cli.data_path();
    let error = |message| RenderError::Filter {
        path: path.to_path_buf(),
        message,
    };
    let recorded = task_filter_from_args(&reader.info().settings.filters)
        .map_err(|e| error(format!("bad saved filter: {e}")))?;
    let mut filters = vec![recorded, cli.task_filter()];
    if cli.profile.only_command {
        filters.push(command_tree(cli, reader).map_err(error)?);
    }
    let tasks = filters
        .iter()
        .filter(|f| !f.is_empty())
        .map(TaskSelector::new)
        .collect::<Result<_, _>>()
        .map_err(error)?;
    Ok(Filter { tasks, ..window })
}

/// `--only-command`: the processes of the command this wprof ran, found by
/// their parent pid (this process) and their descendants'.
fn command_tree(cli: &Cli, reader: &CaptureReader) -> Result<TaskFilter, String> {
    if cli.replay {
        return Err(
            "--only-command applies to the command a capture runs; at replay select \
                    its processes with -p or -n"
                .into(),
        );
    }
    if cli.command.is_none() && cli.command_args.is_empty() {
        return Err("--only-command needs a command to run (-c or after --)".into());
    }
    let pids = descendants(reader.threads(), std::process::id());
    if pids.is_empty() {
        return Err("the command's processes do not appear in the capture".into());
    }
    Ok(TaskFilter {
        pids,
        ..TaskFilter::default()
    })
}

/// What a capture made now by this command line says about itself (start
/// times come later); `source` is the user's script, if any.
pub fn capture_info(source: Option<&Source>) -> CaptureInfo {
    // SAFETY: utsname is plain C data, valid when zeroed; uname fills it in.
    let uname = unsafe {
        let mut uname: libc::utsname = std::mem::zeroed();
        libc::uname(&mut uname);
        uname
    };
    let field = |raw: &[libc::c_char]| {
        let bytes: Vec<u8> = raw
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    CaptureInfo {
        command_line: std::env::args().collect(),
        script: source.map(|s| s.text.clone()).unwrap_or_default(),
        script_name: source.map(|s| s.name.clone()).unwrap_or_default(),
        hostname: field(&uname.nodename),
        kernel_release: field(&uname.release),
        cpus: wprof::runtime::targets::features::online_cpus().len() as u32,
        start_monotonic_ns: 0,
        start_realtime_ns: 0,
        wprof_version: env!("CARGO_PKG_VERSION").to_string(),
        settings: Default::default(),
    }
}

/// Say so at the end of a capture when events were lost.
pub fn warn_about_drops(stats: &CaptureStats) {
    if stats.drops.is_empty() {
        return;
    }
    let reasons: Vec<String> = stats
        .drops
        .iter()
        .map(|(reason, count)| {
            let why = match reason {
                DropReason::RingBufferFull => "ring buffer full",
                DropReason::StackLost => "stack not captured",
                DropReason::UnmatchedSpanEnd => "span end without a start",
            };
            format!("{count} ({why})")
        })
        .collect();
    eprintln!("wprof: warning: events lost: {}", reasons.join(", "));
}
