//! Rendering: captures → outputs (Perfetto trace, NDJSON, summary, ...).
//!
//! capture file → `CaptureReader` (a [`CaptureSource`]) → [`Capture`] (with
//! the [`Filter`](filter::Filter) of the replay window and task filters) →
//! [`Captures`] → [`Render::render`] → [`Output`] (the file or standard output
//! of a [`Destination`]). Renderers see only `CaptureSource`, so live output
//! (rendered from the capture just written) and replay agree.
//!
//! Every output is a type implementing [`Render`], built from its module's
//! `Options`; the replay runs the list of those the command line asks for.

pub mod captures;
pub mod compare;
pub mod drops;
pub mod error;
pub mod filter;
pub mod flamegraph;
pub mod folded;
pub mod format;
pub mod frames;
pub mod metrics;
pub mod ndjson;
pub mod output;
pub mod perfetto;
pub mod pprof;
pub mod profile;
pub mod recorded;
pub mod report;
pub mod sched;
pub mod source;
pub mod summary;
#[cfg(test)]
pub mod system_fixture;
pub mod tracker;

pub use captures::{Capture, Captures};
pub use error::RenderError;
pub use output::{Destination, Output};
pub use source::CaptureSource;

/// One kind of output made from captures.
///
/// An output may read its captures as often as it needs (each
/// `for_each_event` starts over), read several (`Captures::main` and
/// `Captures::baselines`), and open several files from its destination.
pub trait Render {
    /// Writes the output of `captures` to `to`.
    fn render(&self, captures: &Captures<'_>, to: &Destination) -> Result<(), RenderError>;
}

#[cfg(test)]
mod tests {
    use std::ops::ControlFlow;

    use super::*;
    use crate::render::filter::Filter;
    use crate::render::source::FakeCapture;

    /// An output of the shapes to come: it reads its captures twice (the
    /// first event, then the count of later ones), compares `main` with
    /// `baselines`, and writes one file per capture beside its destination.
    struct EventsPerCapture;

    impl Render for EventsPerCapture {
        fn render(&self, captures: &Captures<'_>, to: &Destination) -> Result<(), RenderError> {
            let Destination::File(path) = to else {
                return Err(RenderError::Captures {
                    output: "events",
                    problem: "writes files, not standard output".into(),
                });
            };
            let all = captures.main.iter().chain(&captures.baselines);
            for (index, capture) in all.enumerate() {
                let mut first = None;
                capture.source.for_each_event(&mut |event| {
                    first = Some(event.ts_ns);
                    ControlFlow::Break(())
                })?;
                let mut later = 0;
                capture.source.for_each_event(&mut |event| {
                    later += u64::from(Some(event.ts_ns) > first);
                    ControlFlow::Continue(())
                })?;
                let file = Destination::File(path.with_extension(index.to_string()));
                let mut out = file.open()?;
                out.write_all(format!("{first:?} {later}").as_bytes())?;
                out.flush()?;
            }
            Ok(())
        }
    }

    /// The trait carries multi-pass, multi-capture and multi-file outputs,
    /// and their read failures.
    #[test]
    fn carries_outputs_of_every_shape() {
        let (sample, empty) = (FakeCapture::sample(), FakeCapture::new());
        let captures = Captures::new(
            vec![Capture::test(&sample, Filter::default())],
            vec![Capture::test(&empty, Filter::default())],
        );
        let dir = tempfile::tempdir().expect("temporary directory");
        let to = Destination::File(dir.path().join("counts"));
        EventsPerCapture.render(&captures, &to).expect("renders");
        let read = |name| std::fs::read_to_string(dir.path().join(name)).expect("written");
        assert_eq!(read("counts.0"), "Some(1234567890) 3");
        assert_eq!(read("counts.1"), "None 0");
        let mut damaged = FakeCapture::sample();
        damaged.read_error = Some((4096, "bad block".into()));
        let captures = Captures::one(Capture::test(&damaged, Filter::default()));
        let error = EventsPerCapture
            .render(&captures, &to)
            .expect_err("damaged");
        assert_eq!(
            error.chain(),
            "test.data is corrupt at byte 4096: bad block"
        );
    }

    /// Every output renders a hostile capture (each of its sums overflows
    /// u64) without panicking, as the replay fuzzer demands; each profile
    /// kind draws it.
    #[test]
    fn every_output_renders_a_hostile_capture() {
        let capture = system_fixture::hostile();
        let captures = Captures::one(Capture::test(&capture, Filter::default()));
        let profile = |kind: &str| profile::ProfileOptions {
            profile: Some(kind.to_owned()),
            ..profile::ProfileOptions::default()
        };
        let sorted_by_total = report::ReportOptions {
            sort: report::SortKey::Total,
            top: 0,
        };
        let mut outputs: Vec<Box<dyn Render>> = vec![
            Box::new(summary::Summary::default()),
            Box::new(metrics::Metrics::default()),
            Box::new(report::Report {
                options: sorted_by_total,
            }),
            Box::new(report::ReportJson::default()),
            Box::new(ndjson::Ndjson::default()),
            Box::new(perfetto::Perfetto::default()),
        ];
        for kind in ["cpu", "offcpu", "wall", "wakeup"] {
            outputs.push(Box::new(flamegraph::FlameGraph {
                options: profile(kind),
            }));
            outputs.push(Box::new(folded::FoldedStacks {
                options: profile(kind),
            }));
            outputs.push(Box::new(pprof::Pprof {
                options: profile(kind),
            }));
        }
        let dir = tempfile::tempdir().expect("temporary directory");
        for (index, output) in outputs.iter().enumerate() {
            let to = Destination::File(dir.path().join(index.to_string()));
            output.render(&captures, &to).expect("rendered");
        }
    }
}
