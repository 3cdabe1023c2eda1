//! `--folded PATH` (`-` for standard output): a capture's profile as folded
//! stacks, the input of `flamegraph.pl` and inferno (`frame;frame;… weight`,
//! root first, one line per distinct stack, sorted). With `--per-thread`,
//! one file per thread (`Profile::files`).
//!
//! Input: a [`Capture`](crate::render::Capture) and [`ProfileOptions`];
//! output: the lines of [`Profile::fold`], weighed by the profile's weight.

use crate::render::profile::{Profile, ProfileOptions};
use crate::render::{Captures, Destination, Render, RenderError};

/// The folded-stacks renderer.
#[derive(Clone, Debug, Default)]
pub struct FoldedStacks {
    pub options: ProfileOptions,
}

impl Render for FoldedStacks {
    fn render(&self, captures: &Captures<'_>, to: &Destination) -> Result<(), RenderError> {
        let capture = captures.single("--folded")?;
        let profile = Profile::build(capture, &self.options)?;
        for file in profile.files(capture.source, &self.options, to, "--folded")? {
            let mut out = file.to.open()?;
            out.write_all(file.folded.to_text().as_bytes())?;
            out.flush()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::Capture;
    use crate::render::filter::Filter;
    use crate::render::system_fixture::{MS, system};

    fn wall() -> FoldedStacks {
        FoldedStacks {
            options: ProfileOptions {
                profile: Some("wall".into()),
                ..ProfileOptions::default()
            },
        }
    }

    /// One file has every thread; `--per-thread` writes one per thread,
    /// each with its own stacks only, named by tid and thread name.
    #[test]
    fn writes_one_file_or_one_per_thread() {
        let (capture, _) = system();
        let captures = Captures::one(Capture::test(&capture, Filter::default()));
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("wall.folded");
        wall()
            .render(&captures, &Destination::File(path.clone()))
            .expect("written");
        let all = std::fs::read_to_string(&path).expect("read back");
        assert!(
            all.contains(&format!("sleeper-300/300;main_[c] {}\n", 100 * MS)),
            "{all}"
        );
        assert!(all.contains("spinner-400/400;main_[o]"), "{all}");
        let mut per_thread = wall();
        per_thread.options.per_thread = true;
        per_thread
            .render(&captures, &Destination::File(path))
            .expect("written");
        let sleeper = dir.path().join("wall-300-sleeper.folded");
        let sleeper = std::fs::read_to_string(sleeper).expect("the sleeper's file");
        assert!(
            sleeper.lines().all(|l| l.starts_with("sleeper-300/300;")),
            "{sleeper}"
        );
        let kworker = dir.path().join("wall-20-kworker_1_0.folded");
        assert!(kworker.exists(), "names are made safe for file names");
        let error = per_thread
            .render(&captures, &Destination::Stdout)
            .expect_err("stdout");
        assert_eq!(
            error.chain(),
            "--folded with --per-thread writes one file per thread: give a path, not -"
        );
    }
}
