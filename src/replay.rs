//! Rendering captures, after a capture or with `-R`: open `wprof.data` (or
//! the candidate and baseline captures of a comparison), apply the window and
//! task filters, run every renderer the command line asks for (`OUTPUTS`),
//! then check the gates (`--fail-if`, `--budget`).

use std::path::{Path, PathBuf};

use wprof::capture::files::check_output;
use wprof::capture::model::{CaptureInfo, CaptureStats, RecordSchema};
use wprof::capture::reader::CaptureReader;
use wprof::cli::{Cli, task_filter_from_args};
use wprof::driver::Source;
use wprof::frontend::options::TaskFilter;
use wprof::render::compare::{
    CompareError, CompareJson, CompareTable, DifferentialProfile, ProfileShape, TableFormat,
};
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
/// Comparing captures (`Cli::compares`), `--folded`, `--flamegraph`,
/// `--report` (standard output by default) and `--metrics` show the
/// comparison instead of one capture.
const OUTPUTS: [OutputKind; 10] = [
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
        renderer: |cli| match cli.compares() {
            true => Box::new(DifferentialProfile {
                shape: ProfileShape::Folded,
                profile: cli.profile.profile_options(),
            }),
            false => Box::new(FoldedStacks {
                options: cli.profile.profile_options(),
            }),
        },
    },
    OutputKind {
        flag: "--flamegraph",
        example: " out.svg",
        asked: |cli| cli.profile.flamegraph.as_deref(),
        renderer: |cli| match cli.compares() {
            true => Box::new(DifferentialProfile {
                shape: ProfileShape::Svg,
                profile: cli.profile.profile_options(),
            }),
            false => Box::new(FlameGraph {
                options: cli.profile.profile_options(),
            }),
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
        asked: |cli| {
            let report = cli.profile.outputs.report.as_deref();
            report.or_else(|| (cli.compares() && !stdout_taken(cli)).then_some(Path::new("-")))
        },
        renderer: |cli| match cli.compares() {
            true => Box::new(CompareTable {
                format: TableFormat::Text,
                options: cli.compare.options(&cli.profile.metric),
            }),
            false => Box::new(Report {
                options: cli.profile.report_options(),
            }),
        },
    },
    OutputKind {
        flag: "--report-md",
        example: " summary.md",
        asked: |cli| cli.compare.report_md.as_deref(),
        renderer: |cli| {
            Box::new(CompareTable {
                format: TableFormat::Markdown,
                options: cli.compare.options(&cli.profile.metric),
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
        renderer: |cli| match cli.compares() {
            true => Box::new(CompareJson {
                options: cli.compare.options(&cli.profile.metric),
            }),
            false => Box::new(Metrics {
                options: cli.profile.metrics_options(),
            }),
        },
    },
];

/// Whether the command line asks for any output.
pub fn any_output(cli: &Cli) -> bool {
    OUTPUTS.iter().any(|output| (output.asked)(cli).is_some())
}

/// Whether an output other than the comparison's text table was asked to
/// write to standard output (then the table is only written with `--report`).
fn stdout_taken(cli: &Cli) -> bool {
    let others = OUTPUTS.iter().filter(|output| output.flag != "--report");
    others
        .filter_map(|output| (output.asked)(cli))
        .any(|path| path == Path::new("-"))
}

/// Whether the command line asks for a capture (then the built-in trackers
/// run): `-D`, an output, or a gate.
pub fn wants_capture(cli: &Cli) -> bool {
    !cli.data.is_empty() || any_output(cli) || cli.compare.gating()
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

/// `-R`: render the captures in `-D` with the options given.
pub fn replay(cli: &Cli) -> Result<(), Failure> {
    if !any_output(cli) && !cli.compare.gating() {
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

/// Write every output asked for from the captures at `-D` (and
/// `--baseline`), in `window`, for the tasks selected both by each capture's
/// own filters and by the command line's; then check the gates.
pub fn render_outputs(cli: &Cli, window: Filter) -> Result<(), Failure> {
    let candidates = match cli.replay {
        true => cli.replay_captures(),
        false => vec![cli.data_path().to_path_buf()],
    };
    let baselines = &cli.compare.baseline;
    let (main, base) = (open(cli, &candidates)?, open(cli, baselines)?);
    let captures = Captures::new(
        select(cli, &candidates, &main, &window)?,
        select(cli, baselines, &base, &window)?,
    );
    for output in &OUTPUTS {
        if let Some(destination) = (output.asked)(cli) {
            let rendered = (output.renderer)(cli).render(&captures, &Destination::new(destination));
            match rendered {
                Err(RenderError::StdoutClosed) | Ok(()) => {}
                Err(error) => return Err(message(error)),
            }
        }
    }
    if cli.compare.gating() {
        check_gates(cli, &captures)?;
    }
    Ok(())
}

/// Opens the captures at `paths`; a damaged one (read up to its damage) is
/// reported, or, when gating, left for the comparison to refuse.
fn open(cli: &Cli, paths: &[PathBuf]) -> Result<Vec<CaptureReader>, Failure> {
    (paths.iter())
        .map(|path| {
            let reader = CaptureReader::open(path).map_err(|e| RenderError::from(e).chain())?;
            if let (Some(damage), false) = (reader.damage(), cli.compare.gating()) {
                eprintln!("wprof: {}: {damage}", path.display());
            }
            Ok(reader)
        })
        .collect()
}

/// Each capture with its window and task filters.
fn select<'a>(
    cli: &Cli,
    paths: &'a [PathBuf],
    readers: &'a [CaptureReader],
    window: &Filter,
) -> Result<Vec<Capture<'a>>, Failure> {
    (paths.iter().zip(readers))
        .map(|(path, reader)| {
            let filter =
                capture_filter(cli, path, reader, window.clone()).map_err(|e| e.chain())?;
            Ok(Capture {
                path,
                source: reader,
                filter,
            })
        })
        .collect()
}

/// An error as wprof prints it; a gate's with its expression and a caret.
fn message(error: RenderError) -> Failure {
    match error {
        RenderError::Compare(CompareError::Gate(gate)) => Failure::Message(gate.render()),
        other => Failure::Message(other.chain()),
    }
}

/// Prints every gate's outcome on standard error; a failed gate is a
/// regression (exit status 1).
fn check_gates(cli: &Cli, captures: &Captures<'_>) -> Result<(), Failure> {
    let options = cli.compare.options(&cli.profile.metric);
    let comparison = captures.comparison(&options).map_err(message)?;
    let warnings = comparison.power_warning().into_iter();
    for warning in warnings.chain(comparison.thin_tails.iter().cloned()) {
        eprintln!("wprof: warning: {warning}");
    }
    for gate in &comparison.gates {
        let (head, details) = gate.summary();
        eprintln!("wprof: {head}: {}", details.join("; "));
    }
    let failed = comparison.failed_gates().count();
    match failed {
        0 => Ok(()),
        _ => Err(Failure::Regression(format!(
            "{failed} of {} gates failed",
            comparison.gates.len()
        ))),
    }
}

/// `window` with the task filters saved in the capture at `path` and those given.
fn capture_filter(
    cli: &Cli,
    path: &Path,
    reader: &CaptureReader,
    window: Filter,
) -> Result<Filter, RenderError> {
    let error = |message| RenderError::Filter {
        path: path.to_path_buf(),
        message,
    };
    let saved = &reader.info().settings.filters;
    let recorded =
        task_filter_from_args(saved).map_err(|e| error(format!("bad saved filter: {e}")))?;
    let mut filters = vec![recorded, cli.task_filter()];
    if cli.profile.only_command || saved.iter().any(|f| f == ONLY_COMMAND) {
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

/// `--only-command` as the capture saves it among its filters.
pub const ONLY_COMMAND: &str = "--only-command";

/// `--only-command`: the process of the command the capture's wprof ran
/// (saved in the capture) and its descendants.
fn command_tree(cli: &Cli, reader: &CaptureReader) -> Result<TaskFilter, String> {
    let Some(command) = reader.info().command_pid else {
        return Err(match cli.replay {
            true => "--only-command: the capture names no command (recorded without -c or \
                     `--`, or by a wprof older than format 2.3): select its processes with \
                     -p or -n"
                .into(),
            false => "--only-command needs a command to run (-c or after --)".into(),
        });
    };
    let threads = reader.threads();
    if !threads.iter().any(|t| t.pid == command) {
        return Err(format!(
            "the command's process ({command}) does not appear in the capture"
        ));
    }
    let mut pids = descendants(threads, command);
    pids.push(command);
    pids.sort_unstable();
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
        command_pid: None,
    }
}

/// Say so at the end of a capture when events were lost.
pub fn warn_about_drops(stats: &CaptureStats, schemas: &[RecordSchema]) {
    if let Some(warning) = wprof::render::drops::warning(stats, schemas) {
        eprintln!("wprof: warning: {warning}");
    }
}
