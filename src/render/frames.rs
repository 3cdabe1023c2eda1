//! Capture stacks as profiles show them: which frames a profile keeps (user,
//! kernel or both: bcc `profile -U/-K`), and what each frame is called.
//!
//! Input: a [`CaptureSource`]'s stacks (innermost frame first), frames and
//! symbols. Output: frames pushed root first onto a folded-stack builder
//! ([`Frames::describe`]), the function names of a frame for per-function
//! times ([`Frames::functions`]), and pprof frames ([`Frames::pprof_frame`]).
//!
//! Stacks are shown as captured: the kernel leaves out the tracer's own
//! frames when it takes them (`docs/unwinding.md`); captures of older
//! wprof versions still show them.
//!
//! Names: a symbolized frame is its function, followed by the functions
//! inlined at its address (outermost first); a user frame in a known file
//! without a symbol is `[file+0xoffset]`; anything else is `[unknown]`.

use crate::analysis::folded::{StackBuilder, UNKNOWN};
use crate::analysis::pprof::{self, Module};
use crate::capture::model::{FrameAddr, FrameId, StackId, Symbol};
use crate::render::source::CaptureSource;

/// Which parts of a stack a profile keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StackParts {
    #[default]
    Both,
    /// User frames only (bcc `-U`).
    UserOnly,
    /// Kernel frames only (bcc `-K`).
    KernelOnly,
}

/// The frame names of a profile without a stack: an off-CPU block shorter
/// than the off-CPU stack threshold, or a sample whose stack was lost.
pub const NO_STACK: &str = "[no stack]";

/// Names the frames of one capture.
#[derive(Clone, Copy)]
pub struct Frames<'s> {
    source: &'s dyn CaptureSource,
    parts: StackParts,
}

impl<'s> Frames<'s> {
    pub fn new(source: &'s dyn CaptureSource, parts: StackParts) -> Self {
        Frames { source, parts }
    }

    /// The kept frames of `stack`, innermost first.
    pub fn leaf_first(&self, stack: StackId) -> impl DoubleEndedIterator<Item = FrameId> + '_ {
        (self.source.stack(stack).frames.iter())
            .copied()
            .filter(move |&frame| self.keeps(frame))
    }

    fn keeps(&self, frame: FrameId) -> bool {
        let kernel = self.is_kernel(frame);
        match self.parts {
            StackParts::Both => true,
            StackParts::UserOnly => !kernel,
            StackParts::KernelOnly => kernel,
        }
    }

    pub fn is_kernel(&self, frame: FrameId) -> bool {
        matches!(self.source.frame(frame), FrameAddr::Kernel { .. })
    }

    /// Pushes the kept frames of `stack` (or [`NO_STACK`]) root first.
    pub fn describe(&self, stack: Option<StackId>, builder: &mut StackBuilder<'_>) {
        let Some(stack) = stack else {
            builder.user(NO_STACK);
            return;
        };
        // User frames (the outer part of a real stack) first, whatever the
        // order of a malformed stack.
        let mut names = Vec::new();
        for kernel in [false, true] {
            let part = self.leaf_first(stack).rev();
            for frame in part.filter(|&frame| self.is_kernel(frame) == kernel) {
                names.clear();
                self.functions(frame, &mut names);
                for (index, name) in names.iter().enumerate() {
                    match (kernel, index) {
                        (true, _) => builder.kernel(name),
                        (false, 0) => builder.user(name),
                        (false, _) => builder.inlined(name),
                    };
                }
            }
        }
    }

    /// The functions at `frame`, outermost first: the function, then those
    /// inlined at the address; one name for an unsymbolized frame.
    pub fn functions(&self, frame: FrameId, out: &mut Vec<String>) {
        match self.symbol_function(frame) {
            Some((symbol, function)) => {
                out.push(function.to_owned());
                out.extend(
                    symbol
                        .inlined
                        .iter()
                        .map(|&id| self.source.string(id).to_owned()),
                );
            }
            None => out.push(self.unsymbolized(frame)),
        }
    }

    /// The innermost function at `frame` (the last inlined one, if any).
    pub fn innermost_function(&self, frame: FrameId) -> String {
        match self.symbol_function(frame) {
            Some((symbol, function)) => match symbol.inlined.last() {
                Some(&inlined) => self.source.string(inlined).to_owned(),
                None => function.to_owned(),
            },
            None => self.unsymbolized(frame),
        }
    }

    fn symbol_function(&self, frame: FrameId) -> Option<(&'s Symbol, &'s str)> {
        let symbol = self.source.symbol(frame)?;
        Some((symbol, self.source.string(symbol.function?)))
    }

    fn unsymbolized(&self, frame: FrameId) -> String {
        match self.source.frame(frame) {
            FrameAddr::User {
                module,
                file_offset,
                ..
            } => {
                let path = self.source.string(*module);
                let file = path.rsplit('/').next().unwrap_or(path);
                format!("[{file}+{file_offset:#x}]")
            }
            FrameAddr::Kernel { .. } | FrameAddr::UnknownUser { .. } => UNKNOWN.to_owned(),
        }
    }

    /// `frame` for a pprof profile; `inlined` receives the names the frame
    /// borrows.
    pub fn pprof_frame<'a>(&'a self, frame: FrameId, inlined: &'a [&'a str]) -> pprof::Frame<'a> {
        let symbol = self.source.symbol(frame);
        let string = |id| self.source.string(id);
        let (module, address) = match self.source.frame(frame) {
            FrameAddr::Kernel { addr } => (Module::Kernel, *addr),
            FrameAddr::User {
                module,
                build_id,
                file_offset,
            } => {
                let path = string(*module);
                let build_id = build_id.as_deref();
                (Module::File { path, build_id }, *file_offset)
            }
            FrameAddr::UnknownUser { addr } => (Module::Unknown, *addr),
        };
        pprof::Frame {
            function: symbol.and_then(|s| s.function).map(string),
            file: symbol.and_then(|s| s.file).map(string),
            line: symbol.and_then(|s| s.line),
            inlined,
            module,
            address,
        }
    }

    /// The inlined function names of `frame`, for [`Frames::pprof_frame`].
    pub fn inlined(&self, frame: FrameId) -> Vec<&'s str> {
        let source = self.source;
        (source.symbol(frame).iter())
            .flat_map(|symbol| symbol.inlined.iter().map(|&id| source.string(id)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::folded::{FoldOptions, Folder};
    use crate::render::source::FakeCapture;

    /// Folded text of each stack of the sample capture under `parts`.
    fn folded(parts: StackParts) -> Vec<String> {
        let capture = FakeCapture::sample();
        let frames = Frames::new(&capture, parts);
        let stacks = (0..capture.stacks.len() as u32).map(|i| Some(StackId(i)));
        let mut lines = Vec::new();
        for stack in stacks.chain([None]) {
            let mut folder = Folder::new();
            folder.add(stack, 1);
            let text = folder.fold(FoldOptions::default(), |stack, builder| {
                builder.thread("t");
                frames.describe(*stack, builder);
            });
            lines.push(text.to_text());
        }
        lines
    }

    /// Frames come root first with inlined calls, unsymbolized frames by
    /// file and offset, and a delimiter before kernel frames.
    #[test]
    fn names_frames_root_first() {
        assert_eq!(
            folded(StackParts::Both),
            [
                "t;func;outer_[i];inner_[i];-;do_sys_open_[k] 1\n",
                "t;[libbar.so+0x1234];[unknown];-;[unknown]_[k] 1\n",
                "t;[no stack] 1\n",
            ]
        );
    }

    /// `-U` and `-K` keep one part.
    #[test]
    fn keeps_one_part() {
        assert_eq!(
            folded(StackParts::UserOnly)[..2],
            [
                "t;func;outer_[i];inner_[i] 1\n",
                "t;[libbar.so+0x1234];[unknown] 1\n"
            ]
        );
        assert_eq!(
            folded(StackParts::KernelOnly)[..2],
            ["t;do_sys_open_[k] 1\n", "t;[unknown]_[k] 1\n"]
        );
    }

    /// The innermost function of a frame with inlined calls is the last one.
    #[test]
    fn innermost_function_is_the_last_inlined() {
        let capture = FakeCapture::sample();
        let frames = Frames::new(&capture, StackParts::Both);
        let user = capture.stacks[0].frames[0];
        assert_eq!(frames.innermost_function(user), "inner");
        let mut names = Vec::new();
        frames.functions(user, &mut names);
        assert_eq!(names, ["func", "outer", "inner"]);
    }
}
