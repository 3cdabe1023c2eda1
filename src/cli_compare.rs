//! Command line of comparisons and gates: `--baseline`, `--fail-if`,
//! `--budget`, `--report-md`, `--alpha` and `--allow-different-scripts`,
//! flattened into [`Cli`](crate::cli::Cli) and turned into the plain
//! [`CompareOptions`] of the comparison's renderers. Gates are parsed here,
//! so a malformed one is a usage error (exit status 2) before any work.

use std::path::PathBuf;

use clap::{ArgAction, Args};

use crate::analysis::gate::{Gate, parse, parse_budget};
use crate::render::compare::CompareOptions;

/// Comparisons of captures and the gates of a CI job.
#[derive(Clone, Debug, Default, Args)]
pub struct CompareArgs {
    /// Compare the captures (-D) with these baseline captures (repeatable;
    /// several may follow one flag, as a shell glob gives them).
    #[arg(long = "baseline", value_name = "PATH", num_args = 1.., action = ArgAction::Append)]
    pub baseline: Vec<PathBuf>,

    /// Fail (exit status 1) when this holds, a change only when significant
    /// (repeatable): 'span:request.p99 > +10%', 'func:parse.total > +5%'.
    #[arg(long = "fail-if", value_name = "EXPR", value_parser = parse_fail_if)]
    pub fail_if: Vec<Gate>,

    /// Fail (exit status 1) unless this holds for the captures (repeatable):
    /// 'span:request.p99 < 5ms'.
    #[arg(long = "budget", value_name = "EXPR", value_parser = parse_budget_arg)]
    pub budget: Vec<Gate>,

    /// Write the comparison (or the metrics and budgets) as Markdown, for a
    /// pull-request comment or a CI job summary.
    #[arg(long = "report-md", value_name = "PATH")]
    pub report_md: Option<PathBuf>,

    /// The i-th candidate capture was recorded next to the i-th baseline
    /// capture (runs taking turns, as examples/ci/regress.sh records them):
    /// test the pairs' differences, which a machine slowing both runs of a
    /// pair alike does not disturb. Needs as many captures a side.
    #[arg(long = "paired")]
    pub paired: bool,

    /// Significance level of the comparison's tests.
    #[arg(long = "alpha", value_name = "P", default_value_t = 0.05, value_parser = parse_alpha)]
    pub alpha: f64,

    /// Compare captures of different scripts on the metrics they share.
    #[arg(long = "allow-different-scripts")]
    pub allow_different_scripts: bool,
}

fn parse_fail_if(text: &str) -> Result<Gate, String> {
    parse(text).map_err(|e| format!("\n{}", e.render()))
}

fn parse_budget_arg(text: &str) -> Result<Gate, String> {
    parse_budget(text).map_err(|e| format!("\n{}", e.render()))
}

fn parse_alpha(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(alpha) if alpha > 0.0 && alpha < 0.5 => Ok(alpha),
        _ => Err(format!(
            "`{text}` is not a significance level: give a number between 0 and 0.5, e.g. 0.05"
        )),
    }
}

impl CompareArgs {
    /// Whether the exit status reports the gates: 1 when one fails, 2 for
    /// any other error.
    pub fn gating(&self) -> bool {
        !self.baseline.is_empty() || !self.fail_if.is_empty() || !self.budget.is_empty()
    }

    /// The comparison's options; `select` is `--metric`.
    pub fn options(&self, select: &[glob::Pattern]) -> CompareOptions {
        CompareOptions {
            alpha: self.alpha,
            paired: self.paired,
            allow_different_scripts: self.allow_different_scripts,
            gates: self.fail_if.iter().chain(&self.budget).cloned().collect(),
            select: select.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::analysis::gate::GateKind;
    use crate::cli::Cli;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("wprof").chain(args.iter().copied()))
    }

    /// Several baselines after one flag or repeated flags; gates of both
    /// kinds, fail-ifs first.
    #[test]
    fn flags_become_options() {
        let cli = parse(&[
            "-R",
            "--baseline",
            "a.data",
            "b.data",
            "--baseline",
            "c.data",
            "--budget",
            "span:r.p99 < 5ms",
            "--fail-if",
            "span:r.p50 > +5%",
            "--alpha",
            "0.01",
            "--paired",
        ])
        .expect("parses");
        let compare = &cli.compare;
        assert_eq!(compare.baseline.len(), 3);
        assert!(compare.gating());
        let options = compare.options(&[]);
        assert_eq!(options.alpha, 0.01);
        assert!(options.paired);
        let kinds: Vec<GateKind> = options.gates.iter().map(|g| g.kind).collect();
        assert_eq!(kinds, [GateKind::FailIf, GateKind::Budget]);
        assert!(!parse(&["-R"]).expect("parses").compare.gating());
    }

    /// Malformed gates, budgets on changes and bad levels are usage errors
    /// that show where the problem is.
    #[test]
    fn bad_values_are_usage_errors() {
        let error = parse(&["--fail-if", "span:r.p99 >> 5ms"]).expect_err("malformed");
        assert_eq!(error.exit_code(), 2);
        let text = error.to_string();
        assert!(text.contains("expected a threshold"), "{text}");
        assert!(text.contains("span:r.p99 >> 5ms"), "{text}");
        let text = parse(&["--budget", "span:r.p99 < +10%"])
            .expect_err("a change")
            .to_string();
        assert!(
            text.contains("a budget compares a value, not a change"),
            "{text}"
        );
        let text = parse(&["--alpha", "0.7"]).expect_err("too big").to_string();
        assert!(text.contains("`0.7` is not a significance level"), "{text}");
    }
}
