//! `--flamegraph PATH` and `--folded PATH` of a comparison: the differential
//! profile of the candidate's captures against the baseline's, on-CPU time
//! unless `--profile` says otherwise. Each side's stacks are summed over its
//! runs and divided by their number (a run's average); threads are named
//! without their ids, which differ between runs. The SVG is inferno's
//! differential flame graph (frame widths are the candidate's; red grew,
//! blue shrank), normalized so that colors show shifts of proportion: timer
//! samples are lost in different shares in different runs. The folded output
//! is inferno's `diff-folded` format, `stack baseline candidate` per line.

use std::collections::BTreeMap;

use crate::analysis::flamegraph::{FlameGraphOptions, differential_lines, write_differential_svg};
use crate::analysis::folded::{Folded, FoldedLine};
use crate::render::profile::{Profile, ProfileOptions, ProfileSpec};
use crate::render::{Capture, Captures, Destination, Render, RenderError};

/// Which file a differential profile is written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileShape {
    /// A differential flame graph (`--flamegraph`).
    Svg,
    /// `diff-folded` lines (`--folded`).
    Folded,
}

impl ProfileShape {
    fn flag(self) -> &'static str {
        match self {
            ProfileShape::Svg => "--flamegraph",
            ProfileShape::Folded => "--folded",
        }
    }
}

/// The differential profile renderer.
#[derive(Clone, Debug)]
pub struct DifferentialProfile {
    pub shape: ProfileShape,
    /// `--profile`, `--weight` and the folding options; `cpu` by default.
    pub profile: ProfileOptions,
}

impl Render for DifferentialProfile {
    fn render(&self, captures: &Captures<'_>, to: &Destination) -> Result<(), RenderError> {
        if captures.baselines.is_empty() {
            return Err(RenderError::Captures {
                output: self.shape.flag(),
                problem: "of several captures needs --baseline captures to compare them with"
                    .to_owned(),
            });
        }
        let mut options = self.profile.clone();
        options.profile.get_or_insert_with(|| "cpu".to_owned());
        let (before, spec) = side(&captures.baselines, &options)?;
        let (after, _) = side(&captures.main, &options)?;
        let bytes = match self.shape {
            ProfileShape::Folded => {
                let lines = differential_lines(&before, &after, false);
                lines
                    .iter()
                    .map(|line| format!("{line}\n"))
                    .collect::<String>()
                    .into_bytes()
            }
            ProfileShape::Svg => svg(&before, &after, &spec, captures)?,
        };
        let mut out = to.open()?;
        out.write_all(&bytes)?;
        out.flush()
    }
}

/// The differential SVG, titled with the profile and the numbers of runs.
fn svg(
    before: &Folded,
    after: &Folded,
    spec: &ProfileSpec,
    captures: &Captures<'_>,
) -> Result<Vec<u8>, RenderError> {
    let options = FlameGraphOptions {
        title: format!(
            "{} — {} candidate against {} baseline captures",
            spec.title(),
            captures.main.len(),
            captures.baselines.len()
        ),
        subtitle: Some(
            "widths: the candidate; red grew, blue shrank (normalized to the candidate's total)"
                .to_owned(),
        ),
        count_name: spec.count_name(),
        coloring: spec.coloring(),
        width: None,
    };
    let mut svg = Vec::new();
    write_differential_svg(before, after, true, &options, &mut svg).map_err(|e| {
        RenderError::Captures {
            output: "--flamegraph",
            problem: format!("cannot draw: {e}"),
        }
    })?;
    Ok(svg)
}

/// One side's profile: each stack's weight averaged over the runs.
fn side(
    captures: &[Capture<'_>],
    options: &ProfileOptions,
) -> Result<(Folded, ProfileSpec), RenderError> {
    let mut sums: BTreeMap<String, u64> = BTreeMap::new();
    let mut spec = None;
    for capture in captures {
        let source = capture.source;
        let profile = Profile::build(capture, options)?;
        let folded = profile.fold_threads(
            source,
            options,
            |_| true,
            |id| source.string(source.thread(id).name).to_owned(),
        );
        for line in folded.lines() {
            let sum = sums.entry(line.stack.clone()).or_insert(0);
            *sum = sum.saturating_add(line.weight);
        }
        spec.get_or_insert(profile.spec);
    }
    let runs = captures.len() as u64;
    let lines = (sums.into_iter())
        .map(|(stack, weight)| FoldedLine {
            stack,
            weight: weight.saturating_add(runs / 2) / runs,
        })
        .filter(|line| line.weight > 0)
        .collect();
    let spec = spec.expect("a side has at least one capture");
    Ok((Folded::from_lines(lines), spec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::filter::Filter;
    use crate::render::source::FakeCapture;

    /// One run of `server` (a different tid each run): `parse` timer samples
    /// under `main`, and `render` samples under `main`.
    fn run(tid: u32, parse: u64, render: u64) -> FakeCapture {
        let mut capture = FakeCapture::new();
        let server = capture.add_thread(tid, tid, "server", "server");
        let timer = capture.add_tracker_schema("timer");
        let main = capture.add_user_frame("/bin/server", 0x100, "main", 0, None);
        let mut stack = |function: &str, at: u64| {
            let frame = capture.add_user_frame("/bin/server", at, function, 0, None);
            capture.add_stack(&[frame, main])
        };
        let (parse_stack, render_stack) = (stack("parse", 0x200), stack("render", 0x300));
        let samples = (0..parse)
            .map(|_| parse_stack)
            .chain((0..render).map(|_| render_stack));
        for (i, stack) in samples.enumerate() {
            let values = capture.values(timer, &[]);
            let event = capture.add_event(1_000 + i as u64 * 1_000, server, timer, values);
            event.stack = Some(stack);
        }
        capture
    }

    fn captures(fakes: &[FakeCapture]) -> Vec<Capture<'_>> {
        (fakes.iter())
            .map(|fake| Capture::test(fake, Filter::default()))
            .collect()
    }

    /// The folded output sums each side's runs, divides by their number and
    /// merges a thread's runs under its name: `stack baseline candidate`.
    #[test]
    fn folds_each_side_per_run() {
        let baseline = [run(10, 100, 50), run(11, 102, 50)];
        let candidate = [run(20, 130, 50), run(21, 131, 51), run(22, 129, 49)];
        let captures = Captures::new(captures(&candidate), captures(&baseline));
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("diff.folded");
        let render = DifferentialProfile {
            shape: ProfileShape::Folded,
            profile: ProfileOptions::default(),
        };
        render
            .render(&captures, &Destination::File(path.clone()))
            .expect("renders");
        let text = std::fs::read_to_string(path).expect("read back");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            ["server;main;parse 101 130", "server;main;render 50 50"]
        );
    }

    /// Runs of a hostile capture, whose stacks weigh up to u64::MAX ns, add
    /// up saturating (the baseline's two runs to u64::MAX, averaged to half
    /// that); the profiles are then scaled down by one factor to what
    /// inferno can add up: the candidate's two large stacks to half each.
    #[test]
    fn runs_of_a_hostile_capture() {
        let hostile = crate::render::system_fixture::hostile();
        let (baseline, candidate) = ([hostile.clone(), hostile.clone()], [hostile]);
        let captures = Captures::new(captures(&candidate), captures(&baseline));
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("diff");
        for shape in [ProfileShape::Svg, ProfileShape::Folded] {
            let render = DifferentialProfile {
                shape,
                profile: ProfileOptions {
                    profile: Some("wall".to_owned()),
                    ..ProfileOptions::default()
                },
            };
            let to = Destination::File(path.clone());
            render.render(&captures, &to).expect("renders");
        }
        let text = std::fs::read_to_string(path).expect("read back");
        let lines: Vec<&str> = text.lines().collect();
        let (quarter, half) = (u64::MAX / 4, u64::MAX / 2);
        assert_eq!(
            lines,
            [
                format!("sleeper;main_[o] {quarter} {}", half - 1),
                format!("worker;main_[c] {quarter} {half}"),
            ]
        );
    }
}
