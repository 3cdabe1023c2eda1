//! `--pprof PATH`: a capture's profile as a gzipped `profile.proto` for
//! `go tool pprof`, Pyroscope, Parca (through `analysis::pprof`).
//!
//! Input: a [`Capture`] and [`ProfileOptions`]. Output: one sample per
//! distinct thread, stack and state with the profile's columns as sample
//! types (`samples/count` and `cpu/nanoseconds` for `cpu`; plus
//! `off_cpu/nanoseconds` and `wall/nanoseconds` for `wall`, the default
//! type; `blocks/count` and `off_cpu/nanoseconds` for `offcpu`; …), the
//! capture's frames as locations (kernel addresses, user file offsets with
//! their file and build id), and `thread`, `process`, `tid`, `pid` labels
//! (and `state`, `on-cpu` or `off-cpu`, in wall-clock profiles). The
//! threads stay apart through the labels: `go tool pprof -tagfocus
//! thread=worker`.

use ahash::AHashMap;

use crate::analysis::folded::CpuState;
use crate::analysis::pprof::{Frame, Label, LocationId, Module, ProfileBuilder, SampleType};
use crate::capture::model::FrameId;
use crate::render::frames::{Frames, NO_STACK};
use crate::render::profile::{Profile, ProfileKind, ProfileOptions, SampleStack};
use crate::render::{Capture, Captures, Destination, Render, RenderError};

/// The pprof renderer.
#[derive(Clone, Debug, Default)]
pub struct Pprof {
    pub options: ProfileOptions,
}

impl Render for Pprof {
    fn render(&self, captures: &Captures<'_>, to: &Destination) -> Result<(), RenderError> {
        let capture = captures.single("--pprof")?;
        let profile = Profile::build(capture, &self.options)?;
        let builder = self.build(capture, &profile)?;
        let mut bytes = Vec::new();
        builder.write(&mut bytes).map_err(error)?;
        let mut out = to.open()?;
        out.write_all(&bytes)?;
        out.flush()
    }
}

fn error(e: crate::analysis::pprof::PprofError) -> RenderError {
    RenderError::Captures {
        output: "--pprof",
        problem: format!("cannot be made: {e}"),
    }
}

impl Pprof {
    fn build(
        &self,
        capture: &Capture<'_>,
        profile: &Profile,
    ) -> Result<ProfileBuilder, RenderError> {
        let source = capture.source;
        let spec = &profile.spec;
        let types: Vec<SampleType<'_>> = (spec.columns.iter())
            .map(|c| SampleType {
                name: &c.name,
                unit: c.unit,
            })
            .collect();
        let mut builder = ProfileBuilder::new(&types);
        let info = source.info();
        let window = profile.window;
        let start = info.start_realtime_ns.saturating_add(window.start_ns);
        builder.set_time(start as i64, window.len_ns() as i64);
        if matches!(spec.kind, ProfileKind::Cpu | ProfileKind::Wall) && spec.period_ns > 0 {
            builder.set_period(types[1], spec.period_ns as i64);
        }
        builder.set_default_sample_type(&spec.columns[spec.weight].name);
        builder.add_comment(&format!("capture: {}", capture.path.display()));
        builder.add_comment(&format!("recorded with: {}", info.command_line.join(" ")));
        let frames = Frames::new(source, self.options.parts);
        let mut locations = Locations::default();
        let mut stack = Vec::new();
        for (key, values) in profile.sorted() {
            stack.clear();
            match key.stack {
                SampleStack::Recorded(id) => {
                    for frame in frames.leaf_first(id) {
                        stack.push(locations.of(&mut builder, &frames, frame));
                    }
                }
                SampleStack::ShortBlock => {
                    let name = profile.short_block_frame();
                    stack.push(locations.no_stack(&mut builder, &name));
                }
                SampleStack::Missing => stack.push(locations.no_stack(&mut builder, NO_STACK)),
            }
            let thread = source.thread(key.thread);
            let mut labels = vec![
                Label::str("thread", source.string(thread.name)),
                Label::str("process", source.string(thread.process_name)),
                Label::num("tid", thread.tid.into()),
                Label::num("pid", thread.pid.into()),
            ];
            if let Some(state) = key.state {
                let state = match state {
                    CpuState::OnCpu => "on-cpu",
                    CpuState::OffCpu => "off-cpu",
                };
                labels.push(Label::str("state", state));
            }
            let values: Vec<i64> = values[..types.len()].iter().map(|&v| v as i64).collect();
            builder
                .add_sample(&stack, &values, &labels)
                .map_err(error)?;
        }
        Ok(builder)
    }
}

/// Each capture frame's location, made once.
#[derive(Default)]
struct Locations {
    by_frame: AHashMap<FrameId, LocationId>,
    /// By the name of the frame shown instead.
    no_stack: AHashMap<String, LocationId>,
}

impl Locations {
    fn of(
        &mut self,
        builder: &mut ProfileBuilder,
        frames: &Frames<'_>,
        frame: FrameId,
    ) -> LocationId {
        *self.by_frame.entry(frame).or_insert_with(|| {
            let inlined = frames.inlined(frame);
            builder.location(&frames.pprof_frame(frame, &inlined))
        })
    }

    /// The location of samples without a stack, shown as `name`.
    fn no_stack(&mut self, builder: &mut ProfileBuilder, name: &str) -> LocationId {
        *self.no_stack.entry(name.to_owned()).or_insert_with(|| {
            builder.location(&Frame {
                function: Some(name),
                file: None,
                line: None,
                inlined: &[],
                module: Module::Unknown,
                address: 0,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::filter::Filter;
    use crate::render::system_fixture::{MS, system};

    /// The profile's totals are the folded totals, per sample type, and the
    /// default type is the weight.
    #[test]
    fn totals_are_the_profiles() {
        let (capture, _) = system();
        let capture = Capture::test(&capture, Filter::default());
        let profile = Profile::build(&capture, &ProfileOptions::default()).expect("wall");
        let builder = Pprof::default().build(&capture, &profile).expect("built");
        let totals: Vec<i64> = (0..4).map(|c| profile.total(c) as i64).collect();
        assert_eq!(builder.totals(), totals);
        assert_eq!(totals[1], (100 * MS) as i64);
        let message = builder.finish();
        let default = message.string_table[message.default_sample_type as usize].as_str();
        assert_eq!(default, "wall");
        assert_eq!(message.period, (10 * MS) as i64);
    }
}
