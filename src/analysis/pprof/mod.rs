//! pprof profiles (`profile.proto`, gzipped) for `go tool pprof`, Pyroscope,
//! Parca and other pprof readers.
//!
//! Input: already-symbolized frames ([`Frame`]: function, file:line,
//! inlined calls, module path and build id, address) interned once each by
//! [`ProfileBuilder::location`], then weighted samples ([`add_sample`]) as
//! leaf-first lists of those locations with one value per sample type and
//! labels (thread, process, tid). Output: [`ProfileBuilder::write`] writes the
//! gzipped message; identical samples are merged by summing their values.
//!
//! Addresses: kernel frames keep their addresses; user frames carry the
//! offset in their file (the capture normalizes them so they outlive the
//! process). Each module becomes one mapping spanning the addresses seen, with
//! `file_offset = memory_start`, so `address − memory_start + file_offset` is
//! the file offset pprof's symbolizer would look up by build id. Mappings say
//! which symbol information they carry, so readers do not re-symbolize.
//!
//! Inlining: a location lists the innermost inlined function first and the
//! real function last, as `profile.proto` specifies; the frame's file:line
//! (that of the instruction) goes to the innermost one.
//!
//! [`add_sample`]: ProfileBuilder::add_sample

pub mod proto;
mod tables;

use std::io::{self, Write};

use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;
use thiserror::Error;

use tables::{Interned, Mappings, Samples};

/// A sample value's meaning: `samples/count`, `cpu/nanoseconds`,
/// `off_cpu/nanoseconds`, `malloc/bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleType<'a> {
    pub name: &'a str,
    pub unit: &'a str,
}

/// Where a frame's code lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Module<'a> {
    /// The kernel image; addresses are kernel addresses.
    Kernel,
    /// A file (executable or library); the address is an offset in it.
    File {
        path: &'a str,
        build_id: Option<&'a [u8]>,
    },
    /// No file known (JIT code, exited process): the raw address, no mapping.
    Unknown,
}

/// A symbolized frame, as the capture stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The (outer) function, `None` when the address did not resolve.
    pub function: Option<&'a str>,
    /// Source file and line of the instruction (innermost inlined call).
    pub file: Option<&'a str>,
    pub line: Option<u32>,
    /// Functions inlined at this address, outermost first.
    pub inlined: &'a [&'a str],
    pub module: Module<'a>,
    /// Kernel address, file offset, or raw address (see [`Module`]).
    pub address: u64,
}

/// An interned frame, valid in the builder that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LocationId(u64);

/// A sample label: a string (`thread=worker`) or a number (`tid=42`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label<'a> {
    pub key: &'a str,
    pub value: LabelValue<'a>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelValue<'a> {
    Str(&'a str),
    /// A number with an optional unit (`bytes`, `nanoseconds`).
    Num {
        value: i64,
        unit: Option<&'a str>,
    },
}

impl<'a> Label<'a> {
    pub fn str(key: &'a str, value: &'a str) -> Self {
        Label {
            key,
            value: LabelValue::Str(value),
        }
    }

    pub fn num(key: &'a str, value: i64) -> Self {
        Label {
            key,
            value: LabelValue::Num { value, unit: None },
        }
    }
}

/// Why a sample or a profile was refused.
#[derive(Debug, Error, miette::Diagnostic)]
pub enum PprofError {
    #[error("a sample has {got} values but the profile has {expected} sample types")]
    ValueCount { expected: usize, got: usize },
    #[error("location {0:?} was not made by this profile")]
    UnknownLocation(LocationId),
    #[error("cannot write the pprof profile")]
    Write(#[source] io::Error),
}

/// Builds one pprof profile.
#[derive(Debug)]
pub struct ProfileBuilder {
    interned: Interned,
    mappings: Mappings,
    samples: Samples,
    profile: proto::Profile,
}

impl ProfileBuilder {
    /// A profile whose samples carry one value per entry of `sample_types`;
    /// readers show the last one by default.
    pub fn new(sample_types: &[SampleType<'_>]) -> Self {
        let mut interned = Interned::default();
        let sample_type = sample_types
            .iter()
            .map(|t| interned.value_type(t))
            .collect();
        ProfileBuilder {
            interned,
            mappings: Mappings::default(),
            samples: Samples::default(),
            profile: proto::Profile {
                sample_type,
                ..proto::Profile::default()
            },
        }
    }

    /// When the profile starts (ns since the Unix epoch) and how long it is.
    pub fn set_time(&mut self, start_unix_ns: i64, duration_ns: i64) {
        self.profile.time_nanos = start_unix_ns;
        self.profile.duration_nanos = duration_ns;
    }

    /// The sampling period, e.g. `cpu/nanoseconds` 10 ms for 100 Hz.
    pub fn set_period(&mut self, period_type: SampleType<'_>, period: i64) {
        self.profile.period_type = Some(self.interned.value_type(&period_type));
        self.profile.period = period;
    }

    /// The sample type readers show first (by name, e.g. `cpu`).
    pub fn set_default_sample_type(&mut self, name: &str) {
        self.profile.default_sample_type = self.interned.string(name);
    }

    /// A free-form comment (the capture, the command line).
    pub fn add_comment(&mut self, text: &str) {
        let id = self.interned.string(text);
        self.profile.comment.push(id);
    }

    /// Interns `frame`, once per distinct module, address and function.
    pub fn location(&mut self, frame: &Frame<'_>) -> LocationId {
        let mapping = self.mappings.add(&mut self.interned, frame);
        LocationId(self.interned.location(frame, mapping))
    }

    /// Adds `values` (one per sample type) to the stack `stack` (leaf first)
    /// with `labels`; identical stacks and labels are summed.
    pub fn add_sample(
        &mut self,
        stack: &[LocationId],
        values: &[i64],
        labels: &[Label<'_>],
    ) -> Result<(), PprofError> {
        let expected = self.profile.sample_type.len();
        if values.len() != expected {
            return Err(PprofError::ValueCount {
                expected,
                got: values.len(),
            });
        }
        if let Some(unknown) = stack.iter().find(|id| !self.interned.has_location(id.0)) {
            return Err(PprofError::UnknownLocation(*unknown));
        }
        let labels = labels
            .iter()
            .map(|label| self.interned.label(label))
            .collect();
        self.samples
            .add(stack.iter().map(|id| id.0).collect(), labels, values);
        Ok(())
    }

    /// The sum of each sample type's values so far.
    pub fn totals(&self) -> Vec<i64> {
        self.samples.totals(self.profile.sample_type.len())
    }

    /// The finished message.
    pub fn finish(self) -> proto::Profile {
        let ProfileBuilder {
            interned,
            mappings,
            samples,
            mut profile,
        } = self;
        profile.sample = samples.into_samples();
        profile.mapping = mappings.into_mappings();
        let (strings, functions, locations) = interned.into_tables();
        profile.string_table = strings;
        profile.function = functions;
        profile.location = locations;
        profile
    }

    /// Writes the gzipped profile.
    pub fn write(self, out: impl Write) -> Result<(), PprofError> {
        let bytes = self.finish().encode_to_vec();
        let mut gzip = GzEncoder::new(out, Compression::default());
        gzip.write_all(&bytes).map_err(PprofError::Write)?;
        gzip.finish().map_err(PprofError::Write)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
