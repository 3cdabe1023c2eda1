//! `--flamegraph PATH`: a capture's profile as a flame graph SVG (inferno,
//! through `analysis::flamegraph`), titled with the profile and the capture,
//! the window and filters under the title, the weight's unit in every
//! tooltip; on-CPU frames red and off-CPU frames blue in wall-clock graphs.
//! With `--per-thread`, one SVG per thread, named by tid and thread name.
//!
//! Input: a [`Capture`] and [`ProfileOptions`]; output: SVG of the same
//! folded stacks `--folded` writes.

use crate::analysis::flamegraph::{FlameGraphOptions, write_svg};
use crate::analysis::folded::Folded;
use crate::render::format::{describe_tasks, whole_duration};
use crate::render::profile::{Profile, ProfileKind, ProfileOptions, thread_frame};
use crate::render::{Capture, Captures, Destination, Render, RenderError};

/// The flame graph renderer.
#[derive(Clone, Debug, Default)]
pub struct FlameGraph {
    pub options: ProfileOptions,
}

impl Render for FlameGraph {
    fn render(&self, captures: &Captures<'_>, to: &Destination) -> Result<(), RenderError> {
        let capture = captures.single("--flamegraph")?;
        let source = capture.source;
        let profile = Profile::build(capture, &self.options)?;
        for file in profile.files(source, &self.options, to, "--flamegraph")? {
            let thread = file.thread.map(|id| thread_frame(source, id));
            self.write(capture, &profile, &file.folded, thread.as_deref(), &file.to)?;
        }
        Ok(())
    }
}

impl FlameGraph {
    fn write(
        &self,
        capture: &Capture<'_>,
        profile: &Profile,
        folded: &Folded,
        thread: Option<&str>,
        to: &Destination,
    ) -> Result<(), RenderError> {
        let file = capture.path.file_name().unwrap_or(capture.path.as_os_str());
        let mut title = format!("{} — {}", profile.spec.title(), file.to_string_lossy());
        if let Some(thread) = thread {
            title = format!("{title} — {thread}");
        }
        let options = FlameGraphOptions {
            title,
            subtitle: Some(self.subtitle(capture, profile)),
            count_name: profile.spec.count_name(),
            coloring: profile.spec.coloring(),
            width: None,
        };
        let mut svg = Vec::new();
        write_svg(folded, &options, &mut svg).map_err(|e| RenderError::Captures {
            output: "--flamegraph",
            problem: format!("cannot draw: {e}"),
        })?;
        let mut out = to.open()?;
        out.write_all(&svg)?;
        out.flush()
    }

    /// The window, the filters, and what has no stack.
    fn subtitle(&self, capture: &Capture<'_>, profile: &Profile) -> String {
        let window = profile.window;
        let mut parts = vec![format!(
            "{:.3}–{:.3} s",
            window.start_ns as f64 / 1e9,
            window.end_ns as f64 / 1e9
        )];
        parts.extend(describe_tasks(&capture.filter));
        let off_cpu = !matches!(
            profile.spec.kind,
            ProfileKind::Cpu | ProfileKind::Record { .. }
        );
        if off_cpu && profile.min_block_ns > 0 {
            let min = whole_duration(profile.min_block_ns);
            parts.push(format!("blocks under {min} without stacks"));
        }
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::flamegraph::{Coloring, frame_color};
    use crate::render::filter::Filter;
    use crate::render::system_fixture::system;

    /// The SVG names the profile and the capture, shows the window, and
    /// colors on-CPU frames apart from off-CPU ones.
    #[test]
    fn wall_clock_svg() {
        let (capture, _) = system();
        let captures = Captures::one(Capture::test(&capture, Filter::default()));
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("wall.svg");
        let graph = FlameGraph {
            options: ProfileOptions {
                min_block_ns: 2_000_000,
                ..ProfileOptions::default()
            },
        };
        graph
            .render(&captures, &Destination::File(path.clone()))
            .expect("drawn");
        let svg = std::fs::read_to_string(&path).expect("read back");
        assert!(
            svg.contains("Wall clock (on-CPU red, off-CPU blue) — test.data"),
            "title"
        );
        assert!(
            svg.contains("0.000–0.600 s; blocks under 2ms without stacks"),
            "subtitle"
        );
        let fill = |name: &str| {
            let color = frame_color(name, Coloring::Wall);
            format!("fill=\"rgb({},{},{})\"", color.r, color.g, color.b)
        };
        for frame in ["main_[c]", "main_[o]"] {
            let drawn = svg
                .split("<g>")
                .find(|g| g.contains(&format!("<title>{frame} (")));
            let drawn = drawn.unwrap_or_else(|| panic!("no {frame} frame"));
            assert!(drawn.contains(&fill(frame)), "{frame}: {drawn}");
        }
        assert!(svg.contains(" ns, "), "the unit in tooltips");
        let again = dir.path().join("again.svg");
        graph
            .render(&captures, &Destination::File(again.clone()))
            .expect("drawn");
        assert_eq!(std::fs::read(again).expect("read back"), svg.as_bytes());
    }
}
