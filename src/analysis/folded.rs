//! Folded stacks, the input of `flamegraph.pl` and inferno: one line per
//! distinct stack, `frame;frame;… weight`, root first.
//!
//! Input: weighted samples under a caller-chosen key (e.g. thread, stack id
//! and on/off-CPU state), summed by [`Folder::add`] — a hash-map increment, so
//! millions of samples per second. Output: [`Folded`], built once per distinct
//! key by asking the caller to describe that key's frames to a
//! [`StackBuilder`]. Keys that describe to the same text are merged, and lines
//! are sorted by stack text, so the output does not depend on input order.
//!
//! Conventions (bcc `profile -f`, the wall-clock profiler):
//! - the thread (or process) name is the first frame, unless turned off;
//! - user frames, then a `-` delimiter frame, then kernel frames, when the
//!   stack has both parts and [`FoldOptions::delimiter`] is on;
//! - with [`FoldOptions::annotate`], kernel frames end in `_[k]` and inlined
//!   functions in `_[i]`;
//! - a stack tagged with a [`CpuState`] marks every code frame `_[c]`
//!   (on-CPU) or `_[o]` (off-CPU) instead, so that a wall-clock flame graph
//!   splits on and off-CPU time right below the thread frame.
//!
//! Escaping ([`push_frame`]): a `;` in a name becomes `:` (it would split the
//! frame, as stackcollapse-perf does); control characters (newlines, tabs)
//! become spaces; surrounding spaces are trimmed; a name ending in a space and
//! a number has that space turned into `_` (inferno would read the number as
//! a second weight column); an empty name becomes `[unknown]`.

use std::hash::Hash;
use std::io::{self, Write};

use ahash::AHashMap;

/// What a folded line shows beyond the code frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoldOptions {
    /// Start each stack with the thread (or process) name.
    pub thread_frame: bool,
    /// Put a `-` frame between the user and the kernel frames.
    pub delimiter: bool,
    /// Mark kernel frames `_[k]` and inlined functions `_[i]`.
    pub annotate: bool,
}

impl Default for FoldOptions {
    fn default() -> Self {
        FoldOptions {
            thread_frame: true,
            delimiter: true,
            annotate: true,
        }
    }
}

/// Whether a wall-clock stack was running or waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CpuState {
    /// Running on a CPU: frames end in `_[c]`.
    OnCpu,
    /// Blocked or waiting for a CPU: frames end in `_[o]`.
    OffCpu,
}

impl CpuState {
    /// The annotation of this state's frames.
    pub fn annotation(self) -> &'static str {
        match self {
            CpuState::OnCpu => "_[c]",
            CpuState::OffCpu => "_[o]",
        }
    }
}

/// The delimiter frame between user and kernel frames (bcc `profile -d`).
pub const DELIMITER: &str = "-";

/// What an empty name or an empty stack shows.
pub const UNKNOWN: &str = "[unknown]";

/// Sums weights per distinct stack key.
#[derive(Clone, Debug)]
pub struct Folder<K> {
    weights: AHashMap<K, u64>,
}

impl<K: Hash + Eq> Default for Folder<K> {
    fn default() -> Self {
        Folder {
            weights: AHashMap::new(),
        }
    }
}

impl<K: Hash + Eq> Folder<K> {
    /// An empty aggregator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `weight` (a count, nanoseconds, bytes) to the stack `key`.
    pub fn add(&mut self, key: K, weight: u64) {
        let total = self.weights.entry(key).or_insert(0);
        *total = total.saturating_add(weight);
    }

    /// The number of distinct keys seen.
    pub fn distinct(&self) -> usize {
        self.weights.len()
    }

    /// The folded lines: `describe` tells the frames of each distinct key.
    pub fn fold(
        self,
        options: FoldOptions,
        mut describe: impl FnMut(&K, &mut StackBuilder<'_>),
    ) -> Folded {
        // Distinct keys can describe the same text (two addresses in one
        // function): merge by text before sorting the (fewer) lines.
        let mut by_text: AHashMap<String, u64> = AHashMap::new();
        let mut text = String::new();
        for (key, weight) in self.weights {
            let mut builder = StackBuilder::new(&mut text, options);
            describe(&key, &mut builder);
            builder.finish();
            match by_text.get_mut(text.as_str()) {
                Some(total) => *total = total.saturating_add(weight),
                None => {
                    by_text.insert(text.clone(), weight);
                }
            }
        }
        let lines = by_text
            .into_iter()
            .map(|(stack, weight)| FoldedLine { stack, weight })
            .collect();
        Folded::from_lines(lines)
    }
}

/// One line of folded output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoldedLine {
    /// `frame;frame;…`, root first.
    pub stack: String,
    pub weight: u64,
}

/// Folded stacks, sorted by stack text, each text once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Folded {
    lines: Vec<FoldedLine>,
}

impl Folded {
    /// Sorts `lines` and merges those with the same stack text.
    pub fn from_lines(mut lines: Vec<FoldedLine>) -> Self {
        lines.sort_unstable_by(|a, b| a.stack.cmp(&b.stack));
        lines.dedup_by(|later, kept| {
            let same = later.stack == kept.stack;
            if same {
                kept.weight = kept.weight.saturating_add(later.weight);
            }
            same
        });
        Folded { lines }
    }

    pub fn lines(&self) -> &[FoldedLine] {
        &self.lines
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The sum of all weights.
    pub fn total(&self) -> u64 {
        self.lines
            .iter()
            .fold(0u64, |sum, line| sum.saturating_add(line.weight))
    }

    /// Writes `stack weight` lines.
    pub fn write(&self, mut out: impl Write) -> io::Result<()> {
        for line in &self.lines {
            writeln!(out, "{} {}", line.stack, line.weight)?;
        }
        Ok(())
    }

    /// The folded text, as [`Folded::write`] writes it.
    pub fn to_text(&self) -> String {
        let mut out = Vec::new();
        self.write(&mut out).expect("writing to memory cannot fail");
        String::from_utf8(out).expect("frames are escaped UTF-8")
    }
}

/// Which part of a stack the builder is in; parts only move forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    Start,
    Thread,
    User,
    Kernel,
}

/// Builds one stack's text; frames must come thread, user (root to leaf),
/// then kernel (entry to leaf).
pub struct StackBuilder<'a> {
    text: &'a mut String,
    options: FoldOptions,
    state: Option<CpuState>,
    part: Part,
}

impl<'a> StackBuilder<'a> {
    fn new(text: &'a mut String, options: FoldOptions) -> Self {
        text.clear();
        StackBuilder {
            text,
            options,
            state: None,
            part: Part::Start,
        }
    }

    /// Tags the stack on- or off-CPU (wall-clock profiles); call it before
    /// pushing code frames.
    pub fn state(&mut self, state: CpuState) -> &mut Self {
        self.state = Some(state);
        self
    }

    /// The thread or process frame (dropped unless
    /// [`FoldOptions::thread_frame`]).
    pub fn thread(&mut self, name: &str) -> &mut Self {
        debug_assert!(self.part == Part::Start, "the thread frame comes first");
        if self.options.thread_frame {
            self.push(name, "");
        }
        self.part = Part::Thread;
        self
    }

    /// A user function, callers first.
    pub fn user(&mut self, function: &str) -> &mut Self {
        self.code(Part::User, function, false)
    }

    /// A user function inlined into the previous frame.
    pub fn inlined(&mut self, function: &str) -> &mut Self {
        self.code(Part::User, function, true)
    }

    /// A kernel function, callers first; the first one after user frames is
    /// preceded by the delimiter.
    pub fn kernel(&mut self, function: &str) -> &mut Self {
        if self.part == Part::User && self.options.delimiter {
            self.push(DELIMITER, "");
        }
        self.code(Part::Kernel, function, false)
    }

    fn code(&mut self, part: Part, function: &str, inlined: bool) -> &mut Self {
        debug_assert!(self.part <= part, "user frames come before kernel frames");
        self.part = part;
        let annotation = match (self.state, part) {
            (Some(state), _) => state.annotation(),
            (None, Part::Kernel) if self.options.annotate => "_[k]",
            (None, _) if inlined && self.options.annotate => "_[i]",
            _ => "",
        };
        self.push(function, annotation);
        self
    }

    fn push(&mut self, name: &str, annotation: &str) {
        if !self.text.is_empty() {
            self.text.push(';');
        }
        push_frame(self.text, name);
        self.text.push_str(annotation);
    }

    fn finish(self) {
        if self.text.is_empty() {
            self.text.push_str(UNKNOWN);
        }
    }
}

/// Appends `name` to `out`, escaped as the module docs describe.
pub fn push_frame(out: &mut String, name: &str) {
    let name = name.trim_matches(|c: char| c.is_whitespace() || c.is_control());
    if name.is_empty() {
        out.push_str(UNKNOWN);
        return;
    }
    let start = out.len();
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b';' || b == b' ');
    if plain {
        out.push_str(name);
    } else {
        out.extend(name.chars().map(|c| match c {
            ';' => ':',
            c if c.is_control() => ' ',
            c => c,
        }));
    }
    let frame = &out[start..];
    if let Some(space) = frame.rfind(' ') {
        let tail = &frame[space + 1..];
        if tail.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            out.replace_range(start + space..start + space + 1, "_");
        }
    }
}

#[cfg(test)]
mod tests;
