//! Command line of the profile, report and metrics outputs: clap
//! definitions flattened into [`Cli`](crate::cli::Cli), turned into the plain
//! options of their renderers.

use std::path::PathBuf;

use clap::Args;

use crate::analysis::folded::FoldOptions;
use crate::render::frames::StackParts;
use crate::render::metrics::MetricsOptions;
use crate::render::profile::ProfileOptions;
use crate::render::report::{ReportOptions, SortKey};
use crate::tracking::when::parse_duration;

/// The outputs of a profile besides its flame graph, on the main command
/// line and on `wprof profile`.
#[derive(Clone, Debug, Default, Args)]
pub struct ProfileOutputs {
    /// Write the profile as folded stacks (`-` for standard output).
    #[arg(long = "folded", value_name = "PATH")]
    pub folded: Option<PathBuf>,

    /// Write the profile as a gzipped pprof profile (go tool pprof).
    #[arg(long = "pprof", value_name = "PATH")]
    pub pprof: Option<PathBuf>,

    /// Write the wall-clock report of processes and threads (`-` for standard output).
    #[arg(long = "report", value_name = "PATH")]
    pub report: Option<PathBuf>,

    /// Write the wall-clock report as JSON (`-` for standard output).
    #[arg(long = "report-json", value_name = "PATH")]
    pub report_json: Option<PathBuf>,
}

impl ProfileOutputs {
    /// Each output asked for, as its flag and path.
    pub fn asked(&self) -> impl Iterator<Item = (&'static str, &PathBuf)> {
        [
            ("--folded", &self.folded),
            ("--pprof", &self.pprof),
            ("--report", &self.report),
            ("--report-json", &self.report_json),
        ]
        .into_iter()
        .filter_map(|(flag, path)| Some((flag, path.as_ref()?)))
    }
}

/// Profiles (`--folded`, `--flamegraph`, `--pprof`), the wall-clock report
/// and metrics.
#[derive(Clone, Debug, Default, Args)]
pub struct ProfileArgs {
    /// Write the profile as a flame graph SVG.
    #[arg(long = "flamegraph", value_name = "PATH")]
    pub flamegraph: Option<PathBuf>,

    #[command(flatten)]
    pub outputs: ProfileOutputs,

    /// Write the capture's metrics as JSON (`-` for standard output).
    #[arg(long = "metrics", value_name = "PATH")]
    pub metrics: Option<PathBuf>,

    /// What the profile shows: wall (on- and off-CPU; the default with off-CPU
    /// stacks), cpu, offcpu, wakeup, or the name of a record with a stack.
    #[arg(long = "profile", value_name = "KIND")]
    pub profile: Option<String>,

    /// A stack's weight: samples or ns (cpu); ns (offcpu, wall, wakeup); count,
    /// a numeric field or duration (records).
    #[arg(long = "weight", value_name = "FIELD")]
    pub weight: Option<String>,

    /// One folded or SVG file per thread: PATH's stem, then -TID-NAME.
    #[arg(long = "per-thread")]
    pub per_thread: bool,

    /// Off-CPU blocks shorter than this show as `[no stack]` (their time still counts).
    #[arg(long = "min-block", value_name = "DURATION", value_parser = parse_duration)]
    pub min_block: Option<std::time::Duration>,

    /// Profiles keep the samples taken on these CPUs (`0`, `0,2-3`; bcc -C)
    /// and the off-CPU time of threads that left them.
    #[arg(long = "cpu", value_name = "LIST", value_parser = parse_cpus)]
    pub cpu: Option<CpuList>,

    /// Profiles keep user frames only (bcc -U).
    #[arg(long = "user-only", conflicts_with = "kernel_only")]
    pub user_only: bool,

    /// Profiles keep kernel frames only (bcc -K).
    #[arg(long = "kernel-only")]
    pub kernel_only: bool,

    /// Folded stacks start with the code, without the thread frame.
    #[arg(long = "no-thread-frame")]
    pub no_thread_frame: bool,

    /// No `-` frame between user and kernel frames.
    #[arg(long = "no-delimiter")]
    pub no_delimiter: bool,

    /// No `_[k]` (kernel) and `_[i]` (inlined) suffixes on frames.
    #[arg(long = "no-annotate")]
    pub no_annotate: bool,

    /// Order of the report's rows: oncpu, offcpu, total, sleeping,
    /// uninterruptible, runnable, wakeup, switches, samples, coverage, name, id.
    #[arg(long = "sort", value_name = "KEY", value_parser = SortKey::parse, default_value = "oncpu")]
    pub sort: SortKey,

    /// Rows per report table (0 for all).
    #[arg(long = "top", value_name = "N", default_value_t = 20)]
    pub top: usize,

    /// Only the metrics whose name matches this glob (repeatable), e.g. 'span:*'.
    #[arg(long = "metric", value_name = "GLOB", value_parser = parse_metric_glob)]
    pub metric: Vec<glob::Pattern>,

    /// Outputs show only the command wprof runs (-c or --) and its descendants;
    /// saved in the capture, so replays do too (at replay: the capture's command).
    #[arg(long = "only-command")]
    pub only_command: bool,
}

/// `--cpu`'s CPUs, sorted (one value to clap, not one per CPU).
#[derive(Clone, Debug)]
pub struct CpuList(Vec<u32>);

fn parse_cpus(text: &str) -> Result<CpuList, String> {
    crate::runtime::targets::features::parse_cpu_list(text)
        .filter(|cpus| !cpus.is_empty())
        .map(CpuList)
        .ok_or_else(|| format!("`{text}` is not a CPU list (examples: 0, 0,2-3)"))
}

fn parse_metric_glob(text: &str) -> Result<glob::Pattern, String> {
    glob::Pattern::new(text).map_err(|e| format!("`{text}` is not a glob: {e}"))
}

impl ProfileArgs {
    pub fn profile_options(&self) -> ProfileOptions {
        let parts = match (self.user_only, self.kernel_only) {
            (true, _) => StackParts::UserOnly,
            (_, true) => StackParts::KernelOnly,
            _ => StackParts::Both,
        };
        ProfileOptions {
            profile: self.profile.clone(),
            weight: self.weight.clone(),
            parts,
            fold: FoldOptions {
                thread_frame: !self.no_thread_frame,
                delimiter: !self.no_delimiter,
                annotate: !self.no_annotate,
            },
            min_block_ns: self.min_block.map_or(0, |d| d.as_nanos() as u64),
            per_thread: self.per_thread,
            cpus: self.cpu.as_ref().map(|list| list.0.clone()),
        }
    }

    pub fn report_options(&self) -> ReportOptions {
        ReportOptions {
            sort: self.sort,
            top: self.top,
        }
    }

    pub fn metrics_options(&self) -> MetricsOptions {
        MetricsOptions {
            select: self.metric.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::Cli;
    use crate::render::frames::StackParts;
    use crate::render::report::SortKey;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("wprof").chain(args.iter().copied()))
    }

    /// The flags become the renderers' options.
    #[test]
    fn flags_become_options() {
        let cli = parse(&[
            "--folded",
            "-",
            "--profile",
            "malloc",
            "--weight",
            "size",
            "--user-only",
            "--no-thread-frame",
            "--no-annotate",
            "--min-block",
            "2ms",
            "--per-thread",
            "--cpu",
            "1,3-4",
            "--sort",
            "wakeup",
            "--top",
            "5",
            "--metric",
            "span:*",
        ])
        .expect("parses");
        let options = cli.profile.profile_options();
        assert_eq!(options.profile.as_deref(), Some("malloc"));
        assert_eq!(options.weight.as_deref(), Some("size"));
        assert_eq!(options.parts, StackParts::UserOnly);
        assert!(!options.fold.thread_frame && !options.fold.annotate && options.fold.delimiter);
        assert_eq!(
            (options.min_block_ns, options.per_thread),
            (2_000_000, true)
        );
        assert_eq!(options.cpus, Some(vec![1, 3, 4]));
        let report = cli.profile.report_options();
        assert_eq!((report.sort, report.top), (SortKey::Wakeup, 5));
        assert!(cli.profile.metrics_options().select[0].matches("span:request.p99"));
    }

    /// Contradictions and bad values are usage errors naming the value.
    #[test]
    fn bad_values() {
        assert!(parse(&["--user-only", "--kernel-only"]).is_err());
        let error = parse(&["--sort", "cpu"])
            .expect_err("unknown key")
            .to_string();
        assert!(error.contains("unknown sort key `cpu`"), "{error}");
        let error = parse(&["--metric", "[x"])
            .expect_err("bad glob")
            .to_string();
        assert!(error.contains("`[x` is not a glob"), "{error}");
        let error = parse(&["--cpu", "2-1"]).expect_err("bad list").to_string();
        assert!(error.contains("`2-1` is not a CPU list"), "{error}");
        let error = parse(&["--min-block", "1x"])
            .expect_err("bad duration")
            .to_string();
        assert!(error.contains("`1x`"), "{error}");
    }
}
