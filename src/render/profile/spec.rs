//! `--profile KIND` and `--weight FIELD` resolved against one capture: which
//! events become samples, the values each sample carries (pprof's sample
//! types) and which of them is the weight of folded stacks and flame graphs;
//! or an error saying what the capture lacks and how to record it.

use crate::analysis::flamegraph::Coloring;
use crate::analysis::gate::Dimension;
use crate::capture::model::{FieldType, RecordId, RecordKind, RecordOrigin};
use crate::render::metrics::field_dimension;
use crate::render::recorded::RecordedStacks;
use crate::render::source::CaptureSource;
use crate::tracking::records::{Kind, Trackers};

/// What a profile's samples are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProfileKind {
    /// On-CPU timer samples.
    Cpu,
    /// Off-CPU intervals, weighted by their duration.
    OffCpu,
    /// Both, on-CPU frames tagged `_[c]`, off-CPU ones `_[o]`.
    Wall,
    /// Off-CPU intervals weighted by their wait for a CPU after the wake-up.
    Wakeup,
    /// Events of the script's record `name` (every schema of that name).
    Record {
        name: String,
        records: Vec<RecordId>,
        weight: RecordWeight,
    },
}

/// What one record event weighs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordWeight {
    Count,
    /// A numeric field, by its index in each of the records' schemas.
    Field {
        name: String,
        indexes: Vec<usize>,
        dimension: Dimension,
    },
    /// A span's duration.
    Duration,
}

/// One value of every sample: a pprof sample type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    /// `count`, `nanoseconds`, `bytes`.
    pub unit: &'static str,
}

/// The profile names `--profile` takes besides record names.
pub const PROFILE_KINDS: [&str; 4] = ["wall", "cpu", "offcpu", "wakeup"];

/// Why a profile cannot be made from a capture.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ProfileError {
    #[error(
        "--profile `{name}` is neither a profile ({}) nor a record with a stack in the capture ({})",
        PROFILE_KINDS.join(", "),
        list(records)
    )]
    UnknownProfile { name: String, records: Vec<String> },
    #[error(
        "--profile {record}: the record has no stack; add `ustack` (or `stack`, `kstack`) to its record block"
    )]
    RecordWithoutStack { record: String },
    #[error("--weight `{weight}` does not apply to the {profile} profile; its weights: {}", choices.join(", "))]
    UnknownWeight {
        weight: String,
        profile: String,
        choices: Vec<String>,
    },
    #[error(
        "the {profile} profile needs timer samples, and the capture has none: record with -S timer (or -S)"
    )]
    NoTimerSamples { profile: String },
    #[error(
        "the {profile} profile needs context switches with off-CPU stacks, and the capture has none: record with -S offcpu (or -S), and the sched tracker on"
    )]
    NoOffCpuStacks { profile: String },
    #[error(
        "the capture has no stacks to profile: record with -S (timer and off-CPU stacks), or name a record with a stack with --profile"
    )]
    NoStacks,
    #[error("the {profile} profile is empty: nothing in the window for the selected tasks")]
    Empty { profile: String },
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

/// A profile kind resolved against a capture, with its columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileSpec {
    pub kind: ProfileKind,
    pub columns: Vec<Column>,
    /// The column folded stacks and flame graphs weigh by.
    pub weight: usize,
    /// The timer period, for `cpu`'s and `wall`'s nanoseconds.
    pub period_ns: u64,
}

impl ProfileSpec {
    /// Resolves `--profile` (`None`: `wall` when the capture has off-CPU
    /// stacks and timer samples, else whichever of the two it has) and
    /// `--weight`.
    pub fn resolve(
        source: &dyn CaptureSource,
        profile: Option<&str>,
        weight: Option<&str>,
    ) -> Result<ProfileSpec, ProfileError> {
        let recorded = RecordedStacks::of(&source.info().settings);
        let trackers = Trackers::new(source.schemas());
        let has_timer = trackers.find(Kind::Timer).is_some();
        let has_offcpu = recorded.offcpu.is_some() && trackers.find(Kind::Switch).is_some();
        let name = match profile {
            Some(name) => name,
            None if has_offcpu && has_timer => "wall",
            None if has_timer => "cpu",
            None if has_offcpu => "offcpu",
            None => return Err(ProfileError::NoStacks),
        };
        let kind = match name {
            "cpu" => ProfileKind::Cpu,
            "offcpu" => ProfileKind::OffCpu,
            "wall" => ProfileKind::Wall,
            "wakeup" => ProfileKind::Wakeup,
            record => record_kind(source, record, weight)?,
        };
        let needs_timer = matches!(kind, ProfileKind::Cpu | ProfileKind::Wall);
        let needs_offcpu = matches!(
            kind,
            ProfileKind::OffCpu | ProfileKind::Wall | ProfileKind::Wakeup
        );
        let profile = name.to_owned();
        if needs_timer && !has_timer {
            return Err(ProfileError::NoTimerSamples { profile });
        }
        if needs_offcpu && !has_offcpu {
            return Err(ProfileError::NoOffCpuStacks { profile });
        }
        let (columns, weight) = columns(&kind, weight)?;
        Ok(ProfileSpec {
            kind,
            columns,
            weight,
            period_ns: recorded.timer_period_ns().unwrap_or(0),
        })
    }

    /// The profile's name as `--profile` gives it.
    pub fn name(&self) -> &str {
        match &self.kind {
            ProfileKind::Cpu => "cpu",
            ProfileKind::OffCpu => "offcpu",
            ProfileKind::Wall => "wall",
            ProfileKind::Wakeup => "wakeup",
            ProfileKind::Record { name, .. } => name,
        }
    }

    /// What the profile shows, for titles.
    pub fn title(&self) -> String {
        match &self.kind {
            ProfileKind::Cpu => "On-CPU".to_owned(),
            ProfileKind::OffCpu => "Off-CPU".to_owned(),
            ProfileKind::Wall => "Wall clock (on-CPU red, off-CPU blue)".to_owned(),
            ProfileKind::Wakeup => "Wake-up latency".to_owned(),
            ProfileKind::Record { name, .. } => format!("Record {name}"),
        }
    }

    pub fn coloring(&self) -> Coloring {
        match self.kind {
            ProfileKind::Cpu => Coloring::Cpu,
            ProfileKind::OffCpu => Coloring::OffCpu,
            ProfileKind::Wall => Coloring::Wall,
            ProfileKind::Wakeup => Coloring::Wakeup,
            ProfileKind::Record { .. } => Coloring::Records,
        }
    }

    /// The weight's unit in flame graph tooltips.
    pub fn count_name(&self) -> String {
        let column = &self.columns[self.weight];
        let record = matches!(self.kind, ProfileKind::Record { .. });
        match column.unit {
            "nanoseconds" => "ns".to_owned(),
            "bytes" => "bytes".to_owned(),
            _ if record && self.weight == 0 => "events".to_owned(),
            _ => column.name.clone(),
        }
    }
}

/// The script's record `name` as a profile.
fn record_kind(
    source: &dyn CaptureSource,
    name: &str,
    weight: Option<&str>,
) -> Result<ProfileKind, ProfileError> {
    let schemas = source.schemas();
    let script = |index: &usize| schemas[*index].origin == RecordOrigin::Script;
    let records: Vec<usize> = (0..schemas.len())
        .filter(script)
        .filter(|&i| schemas[i].name == name)
        .collect();
    if records.is_empty() {
        let mut with_stacks: Vec<String> = (0..schemas.len())
            .filter(script)
            .filter(|&i| schemas[i].has_stack)
            .map(|i| schemas[i].name.clone())
            .collect();
        with_stacks.dedup();
        return Err(ProfileError::UnknownProfile {
            name: name.to_owned(),
            records: with_stacks,
        });
    }
    if records.iter().any(|&i| !schemas[i].has_stack) {
        return Err(ProfileError::RecordWithoutStack {
            record: name.to_owned(),
        });
    }
    let weight = record_weight(source, name, &records, weight)?;
    Ok(ProfileKind::Record {
        name: name.to_owned(),
        records: records.into_iter().map(|i| RecordId(i as u32)).collect(),
        weight,
    })
}

/// What `--weight` makes each event of `records` (schema indexes) weigh.
fn record_weight(
    source: &dyn CaptureSource,
    name: &str,
    records: &[usize],
    weight: Option<&str>,
) -> Result<RecordWeight, ProfileError> {
    let schemas = source.schemas();
    let spans = records.iter().all(|&i| schemas[i].kind == RecordKind::Span);
    let field = match weight {
        None | Some("count") => return Ok(RecordWeight::Count),
        Some("duration") if spans => return Ok(RecordWeight::Duration),
        Some(field) => field,
    };
    let numeric = |i: &usize| {
        (schemas[*i].fields.iter())
            .position(|f| f.name == field && matches!(f.ty, FieldType::Int | FieldType::UInt))
    };
    match records.iter().map(numeric).collect::<Option<Vec<_>>>() {
        Some(indexes) => Ok(RecordWeight::Field {
            name: field.to_owned(),
            indexes,
            dimension: field_dimension(field),
        }),
        None => Err(ProfileError::UnknownWeight {
            weight: field.to_owned(),
            profile: name.to_owned(),
            choices: record_weights(source, records),
        }),
    }
}

/// `count`, the numeric fields every one of `records` has, and `duration`
/// for spans.
fn record_weights(source: &dyn CaptureSource, records: &[usize]) -> Vec<String> {
    let schemas = source.schemas();
    let first = &schemas[records[0]];
    let mut choices = vec!["count".to_owned()];
    for field in &first.fields {
        let numeric = |i: &usize| {
            (schemas[*i].fields.iter())
                .any(|f| f.name == field.name && matches!(f.ty, FieldType::Int | FieldType::UInt))
        };
        if records.iter().all(numeric) {
            choices.push(field.name.clone());
        }
    }
    if records.iter().all(|&i| schemas[i].kind == RecordKind::Span) {
        choices.push("duration".to_owned());
    }
    choices
}

fn column(name: &str, unit: &'static str) -> Column {
    Column {
        name: name.to_owned(),
        unit,
    }
}

/// The columns of `kind` and the index of the weight `--weight` picks.
fn columns(kind: &ProfileKind, weight: Option<&str>) -> Result<(Vec<Column>, usize), ProfileError> {
    let time_only = |profile: &str, columns: Vec<Column>| {
        let last = columns.len() - 1;
        match weight {
            None | Some("ns") => Ok((columns, last)),
            Some(other) => Err(ProfileError::UnknownWeight {
                weight: other.to_owned(),
                profile: profile.to_owned(),
                choices: vec!["ns".to_owned()],
            }),
        }
    };
    match kind {
        ProfileKind::Cpu => {
            let columns = vec![column("samples", "count"), column("cpu", "nanoseconds")];
            match weight {
                None | Some("samples") => Ok((columns, 0)),
                Some("ns") => Ok((columns, 1)),
                Some(other) => Err(ProfileError::UnknownWeight {
                    weight: other.to_owned(),
                    profile: "cpu".to_owned(),
                    choices: vec!["samples".to_owned(), "ns".to_owned()],
                }),
            }
        }
        ProfileKind::OffCpu => time_only(
            "offcpu",
            vec![column("blocks", "count"), column("off_cpu", "nanoseconds")],
        ),
        ProfileKind::Wakeup => time_only(
            "wakeup",
            vec![column("wakeups", "count"), column("wakeup", "nanoseconds")],
        ),
        ProfileKind::Wall => time_only(
            "wall",
            vec![
                column("samples", "count"),
                column("cpu", "nanoseconds"),
                column("off_cpu", "nanoseconds"),
                column("wall", "nanoseconds"),
            ],
        ),
        ProfileKind::Record { name, weight, .. } => {
            let count = column(name, "count");
            Ok(match weight {
                RecordWeight::Count => (vec![count], 0),
                RecordWeight::Duration => (vec![count, column("duration", "nanoseconds")], 1),
                RecordWeight::Field {
                    name, dimension, ..
                } => {
                    let unit = match dimension {
                        Dimension::Bytes => "bytes",
                        Dimension::Time => "nanoseconds",
                        Dimension::Number | Dimension::Ratio => "count",
                    };
                    (vec![count, column(name, unit)], 1)
                }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::source::FakeCapture;
    use crate::render::system_fixture::system;

    fn resolve(
        source: &dyn CaptureSource,
        profile: Option<&str>,
        weight: Option<&str>,
    ) -> Result<ProfileSpec, String> {
        ProfileSpec::resolve(source, profile, weight).map_err(|e| e.to_string())
    }

    /// Without --profile a capture with both kinds of stacks is a wall-clock
    /// profile, weighed in nanoseconds; `cpu` counts samples unless asked
    /// for nanoseconds.
    #[test]
    fn defaults_to_wall_clock() {
        let (capture, _) = system();
        let wall = resolve(&capture, None, None).expect("resolves");
        assert_eq!(
            (wall.name(), wall.weight, wall.period_ns),
            ("wall", 3, 10_000_000)
        );
        assert_eq!(wall.count_name(), "ns");
        let cpu = resolve(&capture, Some("cpu"), None).expect("resolves");
        assert_eq!((cpu.count_name(), cpu.weight), ("samples".to_owned(), 0));
        let cpu_ns = resolve(&capture, Some("cpu"), Some("ns")).expect("resolves");
        assert_eq!(cpu_ns.count_name(), "ns");
        let mut timer_only = capture.clone();
        timer_only.info.settings.stacks = vec!["timer=100hz".into()];
        assert_eq!(resolve(&timer_only, None, None).expect("cpu").name(), "cpu");
    }

    /// Records with stacks profile by count or by a numeric field.
    #[test]
    fn records_weigh_by_count_or_field() {
        let capture = FakeCapture::sample();
        let count = resolve(&capture, Some("malloc"), None).expect("resolves");
        assert_eq!(count.count_name(), "events");
        let size = resolve(&capture, Some("malloc"), Some("size")).expect("resolves");
        assert_eq!(size.count_name(), "bytes");
        assert_eq!(size.columns[1], column("size", "bytes"));
        let ProfileKind::Record { records, .. } = &size.kind else {
            panic!("a record profile")
        };
        assert_eq!(records, &[RecordId(0)]);
    }

    /// Bad names say what exists and how to record what is missing.
    #[test]
    fn errors_name_the_choices() {
        let capture = FakeCapture::sample();
        let cases = [
            (
                Some("mallok"),
                None,
                "--profile `mallok` is neither a profile (wall, cpu, offcpu, wakeup) nor a record with a stack in the capture (malloc)",
            ),
            (
                Some("lock"),
                None,
                "--profile lock: the record has no stack; add `ustack` (or `stack`, `kstack`) to its record block",
            ),
            (
                Some("malloc"),
                Some("bytes"),
                "--weight `bytes` does not apply to the malloc profile; its weights: count, size",
            ),
            (
                Some("cpu"),
                None,
                "the cpu profile needs timer samples, and the capture has none: record with -S timer (or -S)",
            ),
            (
                None,
                None,
                "the capture has no stacks to profile: record with -S (timer and off-CPU stacks), or name a record with a stack with --profile",
            ),
        ];
        for (profile, weight, message) in cases {
            assert_eq!(resolve(&capture, profile, weight).unwrap_err(), message);
        }
        let (system, _) = system();
        assert_eq!(
            resolve(&system, Some("wall"), Some("samples")).unwrap_err(),
            "--weight `samples` does not apply to the wall profile; its weights: ns"
        );
        let mut no_offcpu = system.clone();
        no_offcpu.info.settings.stacks.clear();
        assert!(
            resolve(&no_offcpu, Some("offcpu"), None)
                .unwrap_err()
                .contains("record with -S offcpu")
        );
    }
}
