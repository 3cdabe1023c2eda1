//! Rendering captures, after a capture or with `-R`: open `wprof.data`, apply
//! the window and task filters, write the Perfetto trace, NDJSON and summary.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use wprof::capture::model::{CaptureInfo, CaptureStats, DropReason};
use wprof::capture::reader::CaptureReader;
use wprof::cli::{Cli, task_filter_from_args};
use wprof::driver::Source;
use wprof::render::filter::{Filter, TaskSelector};
use wprof::render::{ndjson, perfetto, summary};

use crate::Failure;

/// `-R`: render the capture in `-D` with the options given.
pub fn replay(cli: &Cli) -> Result<(), Failure> {
    if cli.trace.is_none() && cli.json.is_none() && !cli.summary {
        return Err(
            "-R needs an output: -T trace.pb, -J out.json (or -J -), or -I"
                .to_string()
                .into(),
        );
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
    let reader = CaptureReader::open(cli.data_path()).map_err(|e| e.to_string())?;
    if let Some(damage) = reader.damage() {
        eprintln!("wprof: {}: {damage}", cli.data_path().display());
    }
    let recorded = task_filter_from_args(&reader.info().settings.filters)
        .map_err(|e| format!("{}: bad saved filter: {e}", cli.data_path().display()))?;
    let filter = Filter {
        tasks: [recorded, cli.task_filter()]
            .iter()
            .filter(|f| !f.is_empty())
            .map(TaskSelector::new)
            .collect::<Result<_, _>>()?,
        ..window
    };
    let filter = &filter;
    if let Some(path) = &cli.trace {
        let mut out = create(path)?;
        perfetto::render(&reader, filter, &mut out).map_err(|e| match e {
            perfetto::RenderError::Write(e) => format!("cannot write {}: {e}", path.display()),
            other => format!("cannot read {}: {other}", cli.data_path().display()),
        })?;
        out.flush()
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if let Some(path) = &cli.json {
        let result = if path.as_os_str() == "-" {
            let mut out = io::stdout().lock();
            ndjson::render(&reader, filter, &mut out).and_then(|_| out.flush())
        } else {
            let mut out = create(path)?;
            ndjson::render(&reader, filter, &mut out).and_then(|_| out.flush())
        };
        result.map_err(|e| output_error(e, path, cli.data_path()))?;
    }
    if cli.summary {
        let mut out = io::stdout().lock();
        summary::render_summary(&reader, filter, &mut out)
            .map_err(|e| output_error(e, Path::new("-"), cli.data_path()))?;
    }
    Ok(())
}

/// Renderers report a capture that cannot be read as `InvalidData`.
fn output_error(error: io::Error, output: &Path, capture: &Path) -> String {
    if error.kind() == io::ErrorKind::InvalidData {
        format!("cannot read {}: {error}", capture.display())
    } else {
        format!("cannot write {}: {error}", output.display())
    }
}

fn create(path: &Path) -> Result<BufWriter<File>, Failure> {
    File::create(path)
        .map(BufWriter::new)
        .map_err(|e| format!("cannot create {}: {e}", path.display()).into())
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
