//! What a renderer reads: [`Captures`], the captures of one command line,
//! each a [`Capture`] (a [`CaptureSource`] with its path and the [`Filter`]
//! that selects its events). Most outputs read one capture; a comparison
//! reads the `main` captures against the `baselines`, and is computed once
//! for all the outputs and gates of a command line.

use std::cell::OnceCell;
use std::path::Path;

use crate::render::RenderError;
use crate::render::compare::{CompareOptions, Comparison};
use crate::render::filter::Filter;
use crate::render::source::CaptureSource;

/// One capture to render.
pub struct Capture<'a> {
    /// Where it was read from, for messages.
    pub path: &'a Path,
    pub source: &'a dyn CaptureSource,
    /// The window and task filters of this capture's events.
    pub filter: Filter,
}

/// The captures an output is made from.
pub struct Captures<'a> {
    /// The captures given with `-D`.
    pub main: Vec<Capture<'a>>,
    /// The captures a comparison measures `main` against; empty otherwise.
    pub baselines: Vec<Capture<'a>>,
    comparison: OnceCell<Comparison>,
}

impl<'a> Captures<'a> {
    /// The captures of an output that reads one.
    pub fn one(capture: Capture<'a>) -> Self {
        Self::new(vec![capture], Vec::new())
    }

    /// `main` (the candidate's runs) and the `baselines` to compare them with.
    pub fn new(main: Vec<Capture<'a>>, baselines: Vec<Capture<'a>>) -> Self {
        Captures {
            main,
            baselines,
            comparison: OnceCell::new(),
        }
    }

    /// The comparison of `main` with `baselines`, measured by the first
    /// output (or gate check) that asks; the others, which come from the
    /// same command line with the same options, get the same one.
    pub fn comparison(&self, options: &CompareOptions) -> Result<&Comparison, RenderError> {
        if let Some(comparison) = self.comparison.get() {
            return Ok(comparison);
        }
        let comparison = Comparison::of(&self.baselines, &self.main, options)?;
        Ok(self.comparison.get_or_init(|| comparison))
    }

    /// The capture of an output that reads exactly one; `output` names the
    /// output in the error otherwise.
    pub fn single(&self, output: &'static str) -> Result<&Capture<'a>, RenderError> {
        match (&self.main[..], self.baselines.len()) {
            ([capture], 0) => Ok(capture),
            (main, baselines) => Err(RenderError::Captures {
                output,
                problem: format!(
                    "renders one capture, not {} and {baselines} baselines",
                    main.len()
                ),
            }),
        }
    }
}

#[cfg(test)]
impl<'a> Capture<'a> {
    /// `source` as read from `test.data`, with `filter`.
    pub fn test(source: &'a dyn CaptureSource, filter: Filter) -> Self {
        Capture {
            path: Path::new("test.data"),
            source,
            filter,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::source::FakeCapture;

    /// An output of one capture refuses several, or baselines.
    #[test]
    fn single_means_one() {
        let fake = FakeCapture::sample();
        let one = Captures::one(Capture::test(&fake, Filter::default()));
        assert!(one.single("-T").is_ok());
        let two = Captures::new(
            vec![
                Capture::test(&fake, Filter::default()),
                Capture::test(&fake, Filter::default()),
            ],
            Vec::new(),
        );
        let error = two.single("-T").err().expect("two captures");
        assert_eq!(
            error.chain(),
            "-T renders one capture, not 2 and 0 baselines"
        );
    }
}
