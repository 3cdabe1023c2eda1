//! The records of the built-in trackers (`probes/*.wp`, docs/system-tracking.md)
//! as code reads them. Input: a capture's record schemas; output: [`Trackers`],
//! which says of each record whether it is a tracker's ([`Kind`]) and where
//! the fields code looks up by name ([`Field`]) and its PMU readings are.
//!
//! This is the one place Rust names a tracker record or field. The names are
//! what the compiled `.wp` scripts define: the tests compile the real
//! scripts and fail when a name here is not recorded, with the type declared
//! here; reading a field through [`TrackerSchema`] that its record's
//! [`Kind::fields`] does not list panics in debug builds, so a renderer test
//! fails when the renderer names a field its record does not have.

use crate::capture::model::{
    Event, FieldType, FieldValue, RecordOrigin, RecordSchema, StringId, ThreadId,
};

/// A tracker record, by its schema name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A task's identity; the recorder turns it into a thread, never an event.
    Task,
    Switch,
    Waking,
    WakeupNew,
    Fork,
    Exec,
    Rename,
    Exit,
    Free,
    HardIrq,
    SoftIrq,
    Wq,
    Timer,
    PmuSample,
    /// The user stack of long off-CPU blocks, taken at their system call's
    /// return (`-S offcpu=DUR`); the recorder joins it into their
    /// switches, never an event.
    OffcpuPending,
}

impl Kind {
    pub const ALL: [Kind; 15] = [
        Kind::Task,
        Kind::Switch,
        Kind::Waking,
        Kind::WakeupNew,
        Kind::Fork,
        Kind::Exec,
        Kind::Rename,
        Kind::Exit,
        Kind::Free,
        Kind::HardIrq,
        Kind::SoftIrq,
        Kind::Wq,
        Kind::Timer,
        Kind::PmuSample,
        Kind::OffcpuPending,
    ];

    /// The record's schema name, also the NDJSON `t` and the Perfetto event name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Task => "task",
            Kind::Switch => "switch",
            Kind::Waking => "waking",
            Kind::WakeupNew => "wakeup_new",
            Kind::Fork => "fork",
            Kind::Exec => "exec",
            Kind::Rename => "rename",
            Kind::Exit => "exit",
            Kind::Free => "free",
            Kind::HardIrq => "hardirq",
            Kind::SoftIrq => "softirq",
            Kind::Wq => "wq",
            Kind::Timer => "timer",
            Kind::PmuSample => "pmu_sample",
            Kind::OffcpuPending => "offcpu_pending",
        }
    }

    /// Whether the recorder consumes the record (into the thread table, or
    /// into other records' stacks): the capture holds none of its events,
    /// and listings of the capture's records leave it out.
    pub fn internal(self) -> bool {
        matches!(self, Kind::Task | Kind::OffcpuPending)
    }

    fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// The fields of the record that code reads by name (other fields are
    /// rendered generically, in schema order).
    pub fn fields(self) -> &'static [Field] {
        match self {
            Kind::Task => &IDENTITY,
            Kind::Switch => &[
                Field::Next,
                Field::PrevState,
                Field::Preempt,
                Field::NextPrio,
            ],
            Kind::Waking | Kind::WakeupNew => &[Field::Wakee, Field::TargetCpu],
            Kind::Fork => &[Field::Child],
            Kind::Rename | Kind::Free => &[Field::Task],
            Kind::HardIrq => &[Field::Action],
            Kind::SoftIrq => &[Field::Vec],
            Kind::Wq => &[Field::Func],
            Kind::Exec | Kind::Exit | Kind::Timer | Kind::PmuSample | Kind::OffcpuPending => &[],
        }
    }

    /// The thread field naming the second task of the event, if any.
    pub fn other_task(self) -> Option<Field> {
        match self {
            Kind::Switch => Some(Field::Next),
            Kind::Waking | Kind::WakeupNew => Some(Field::Wakee),
            Kind::Fork => Some(Field::Child),
            Kind::Rename | Kind::Free => Some(Field::Task),
            _ => None,
        }
    }
}

/// Whether `schema` is a tracker record the recorder consumes
/// ([`Kind::internal`]): not a probe of the capture to list.
pub fn is_internal(schema: &RecordSchema) -> bool {
    schema.origin == RecordOrigin::Tracker
        && Kind::from_name(&schema.name).is_some_and(Kind::internal)
}

/// The fields of the `task` record, which `identity(TASK)` expands to.
pub const IDENTITY: [Field; 6] = [
    Field::Tid,
    Field::Pid,
    Field::Ppid,
    Field::Comm,
    Field::Pcomm,
    Field::Kthread,
];

/// A field of a tracker record that code reads by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Tid,
    Pid,
    Ppid,
    Comm,
    Pcomm,
    Kthread,
    Next,
    PrevState,
    Preempt,
    NextPrio,
    Wakee,
    TargetCpu,
    Child,
    Task,
    Action,
    Vec,
    Func,
}

impl Field {
    const COUNT: usize = 17;

    pub fn name(self) -> &'static str {
        match self {
            Field::Tid => "tid",
            Field::Pid => "pid",
            Field::Ppid => "ppid",
            Field::Comm => "comm",
            Field::Pcomm => "pcomm",
            Field::Kthread => "kthread",
            Field::Next => "next",
            Field::PrevState => "prev_state",
            Field::Preempt => "preempt",
            Field::NextPrio => "next_prio",
            Field::Wakee => "wakee",
            Field::TargetCpu => "target_cpu",
            Field::Child => "child",
            Field::Task => "task",
            Field::Action => "action",
            Field::Vec => "vec",
            Field::Func => "func",
        }
    }

    /// The type the trackers record the field with.
    pub fn ty(self) -> FieldType {
        match self {
            Field::Tid | Field::Pid | Field::Ppid | Field::NextPrio => FieldType::Int,
            Field::Kthread | Field::PrevState | Field::Preempt | Field::TargetCpu | Field::Vec => {
                FieldType::UInt
            }
            Field::Comm | Field::Pcomm | Field::Action | Field::Func => FieldType::Str,
            Field::Next | Field::Wakee | Field::Child | Field::Task => FieldType::Thread,
        }
    }
}

/// The prefixes of a `pmu` record item's fields (`pmu:C`, `pmu:C:enabled`,
/// `pmu:C:running` per counter `C`), at a span's start and at its end.
pub const PMU_PREFIX: &str = "pmu:";
pub const PMU_END_PREFIX: &str = "pmu_end:";
/// The suffixes of a counter's time enabled and time running.
pub const PMU_ENABLED: &str = ":enabled";
pub const PMU_RUNNING: &str = ":running";

/// Where one counter's reading is in a record: `pmu:C`, `pmu:C:enabled`,
/// `pmu:C:running` (or the `pmu_end:` ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmuField {
    /// Index into [`Trackers::counters`].
    pub counter: usize,
    pub value: usize,
    pub enabled: usize,
    pub running: usize,
}

/// One counter reading, scaled for multiplexing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// `value × enabled / running`: the count had the counter run all the time.
    pub scaled: u64,
    /// The counter shared the PMU with others (running < enabled).
    pub multiplexed: bool,
}

/// Reads one counter of `event`; `None` when the values are not integers.
pub fn reading(event: &Event, field: &PmuField) -> Option<Reading> {
    let uint = |index: usize| match event.values.get(index)? {
        FieldValue::UInt(v) => Some(*v),
        _ => None,
    };
    let (value, enabled, running) = (
        uint(field.value)?,
        uint(field.enabled)?,
        uint(field.running)?,
    );
    let scaled = if running == 0 || running >= enabled {
        value
    } else {
        (u128::from(value) * u128::from(enabled) / u128::from(running)) as u64
    };
    Some(Reading {
        scaled,
        multiplexed: running < enabled,
    })
}

/// A count over an interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delta {
    pub count: u64,
    /// Either end was multiplexed, so the count is an estimate.
    pub multiplexed: bool,
}

pub fn delta(start: Reading, end: Reading) -> Delta {
    Delta {
        count: end.scaled.saturating_sub(start.scaled),
        multiplexed: start.multiplexed || end.multiplexed,
    }
}

/// The readings at the last switch on each CPU, by counter.
#[derive(Debug, Default)]
pub struct SwitchReadings {
    cpus: Vec<Vec<Option<Reading>>>,
}

impl SwitchReadings {
    /// Stores `now` for `cpu` and `counter`, returning the count since the
    /// previous switch there.
    pub fn exchange(&mut self, cpu: u32, counter: usize, now: Reading) -> Option<Delta> {
        let cpu = cpu as usize;
        if self.cpus.len() <= cpu {
            self.cpus.resize_with(cpu + 1, Vec::new);
        }
        let readings = &mut self.cpus[cpu];
        if readings.len() <= counter {
            readings.resize(counter + 1, None);
        }
        let before = readings[counter].replace(now)?;
        Some(delta(before, now))
    }
}

/// A tracker record's layout.
#[derive(Clone, Debug)]
pub struct TrackerSchema {
    pub kind: Kind,
    /// By `Field`: the field's index in the record, for the kind's fields.
    positions: [Option<usize>; Field::COUNT],
    pub pmu: Vec<PmuField>,
    pub pmu_end: Vec<PmuField>,
}

impl TrackerSchema {
    fn value<'e>(&self, event: &'e Event, field: Field) -> Option<&'e FieldValue> {
        debug_assert!(
            self.kind.fields().contains(&field),
            "the {} record has no field {} (tracking::records::Kind::fields)",
            self.kind.name(),
            field.name()
        );
        event.values.get(self.positions[field as usize]?)
    }

    pub fn uint(&self, event: &Event, field: Field) -> Option<u64> {
        match self.value(event, field)? {
            FieldValue::UInt(v) => Some(*v),
            _ => None,
        }
    }

    pub fn int(&self, event: &Event, field: Field) -> Option<i64> {
        match self.value(event, field)? {
            FieldValue::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn thread(&self, event: &Event, field: Field) -> Option<ThreadId> {
        match self.value(event, field)? {
            FieldValue::Thread(id) => Some(*id),
            _ => None,
        }
    }

    pub fn string(&self, event: &Event, field: Field) -> Option<StringId> {
        match self.value(event, field)? {
            FieldValue::Str(id) => Some(*id),
            _ => None,
        }
    }

    /// Whether field `index` of the record is `field`.
    pub fn is_field(&self, index: usize, field: Field) -> bool {
        self.positions[field as usize] == Some(index)
    }

    /// The index of `field` in the record, if the record has it.
    pub fn position(&self, field: Field) -> Option<usize> {
        self.positions[field as usize]
    }

    /// The second task of the event (`next`, `wakee`, `child`, `task`).
    pub fn other_task(&self, event: &Event) -> Option<ThreadId> {
        self.thread(event, self.kind.other_task()?)
    }

    /// Whether field `index` is a PMU reading (rendered as a counter, not as
    /// a plain field).
    pub fn is_pmu_field(&self, index: usize) -> bool {
        self.pmu
            .iter()
            .chain(&self.pmu_end)
            .any(|p| [p.value, p.enabled, p.running].contains(&index))
    }
}

/// The tracker records of a capture, by `RecordId`, and its PMU counters.
#[derive(Clone, Debug, Default)]
pub struct Trackers {
    by_record: Vec<Option<TrackerSchema>>,
    /// Counter names (`cpu-cycles`, ...) in order of first appearance.
    pub counters: Vec<String>,
}

impl Trackers {
    pub fn new(schemas: &[RecordSchema]) -> Self {
        let mut trackers = Trackers::default();
        trackers.by_record = schemas.iter().map(|s| trackers.schema(s)).collect();
        trackers
    }

    fn schema(&mut self, schema: &RecordSchema) -> Option<TrackerSchema> {
        if schema.origin != RecordOrigin::Tracker {
            return None;
        }
        let kind = Kind::from_name(&schema.name)?;
        let mut positions = [None; Field::COUNT];
        for &field in kind.fields() {
            positions[field as usize] =
                (schema.fields.iter()).position(|f| f.name == field.name() && f.ty == field.ty());
        }
        Some(TrackerSchema {
            kind,
            positions,
            pmu: self.pmu_fields(schema, PMU_PREFIX),
            pmu_end: self.pmu_fields(schema, PMU_END_PREFIX),
        })
    }

    fn pmu_fields(&mut self, schema: &RecordSchema, prefix: &str) -> Vec<PmuField> {
        let position = |name: &str| schema.fields.iter().position(|f| f.name == name);
        let mut fields = Vec::new();
        for (value, field) in schema.fields.iter().enumerate() {
            let Some(counter) = field.name.strip_prefix(prefix) else {
                continue;
            };
            if counter.ends_with(PMU_ENABLED) || counter.ends_with(PMU_RUNNING) {
                continue;
            }
            let (Some(enabled), Some(running)) = (
                position(&format!("{prefix}{counter}{PMU_ENABLED}")),
                position(&format!("{prefix}{counter}{PMU_RUNNING}")),
            ) else {
                continue;
            };
            let counter = match self.counters.iter().position(|c| c == counter) {
                Some(index) => index,
                None => {
                    self.counters.push(counter.to_owned());
                    self.counters.len() - 1
                }
            };
            fields.push(PmuField {
                counter,
                value,
                enabled,
                running,
            });
        }
        fields
    }

    /// Whether the capture has any tracker records.
    pub fn any(&self) -> bool {
        self.by_record.iter().any(Option::is_some)
    }

    /// The tracker layout of `event`'s record, `None` for user records.
    pub fn get(&self, event: &Event) -> Option<&TrackerSchema> {
        self.by_record.get(event.record.0 as usize)?.as_ref()
    }

    /// The tracker record of `kind` in the capture, with its index.
    pub fn find(&self, kind: Kind) -> Option<(usize, &TrackerSchema)> {
        self.by_record
            .iter()
            .enumerate()
            .find_map(|(index, t)| Some((index, t.as_ref().filter(|t| t.kind == kind)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracking::compiled::{COUNTER, schemas};

    /// Every kind is a record the compiled trackers define, and every record
    /// they define is a kind: renaming a record in a `.wp` file fails here.
    #[test]
    fn kinds_are_the_compiled_records() {
        let mut compiled: Vec<&str> = schemas().iter().map(|s| s.name.as_str()).collect();
        compiled.sort_unstable();
        let mut kinds: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
        kinds.sort_unstable();
        assert_eq!(compiled, kinds);
        assert!(schemas().iter().all(|s| s.origin == RecordOrigin::Tracker));
    }

    /// Every field code reads is recorded, with the declared type: renaming
    /// or retyping a field in a `.wp` file fails here.
    #[test]
    fn fields_are_recorded_with_their_types() {
        let trackers = Trackers::new(schemas());
        for kind in Kind::ALL {
            let (record, layout) = trackers.find(kind).expect("every kind is compiled");
            let schema = &schemas()[record];
            for &field in kind.fields() {
                let recorded = schema.fields.iter().find(|f| f.name == field.name());
                let recorded = recorded
                    .unwrap_or_else(|| panic!("{} records no field {}", kind.name(), field.name()));
                assert_eq!(recorded.ty, field.ty(), "{}.{}", kind.name(), field.name());
                assert!(layout.position(field).is_some());
            }
        }
    }

    /// A record as docs/system-tracking.md lists it: name, kind, and its
    /// fields with their type letters.
    type Documented = (String, String, Vec<(String, char)>);

    /// The records table of docs/system-tracking.md, from rows such as
    /// ``| `exec` (instant) | ... | `filename` S, `old_tid` I |``.
    fn documented_records() -> Vec<Documented> {
        let doc = include_str!("../../docs/system-tracking.md");
        let section = doc.split("## Records of the built-in trackers").nth(1);
        let rows = section.expect("the records section").lines();
        let rows = rows.filter_map(|row| row.strip_prefix("| `"));
        rows.map(|row| {
            let cells: Vec<&str> = row.split(" | ").collect();
            let (name, kind) = cells[0].split_once("` (").expect("`name` (kind)");
            let kind = kind
                .trim_end_matches(')')
                .split(',')
                .next()
                .unwrap_or_default();
            let pieces = cells[3].split('`').collect::<Vec<_>>();
            // Odd pieces are code spans; a field is one followed by " X" with X a type letter.
            let typed = pieces[1..].chunks(2).filter_map(|pair| {
                let [name, after] = pair else { return None };
                let mut rest = after.chars();
                let letter = (rest.next() == Some(' ')).then(|| rest.next()).flatten()?;
                let ends = rest.next().is_none_or(|c| !c.is_alphanumeric());
                ("UIST".contains(letter) && ends).then(|| (name.to_string(), letter))
            });
            (name.to_string(), kind.to_string(), typed.collect())
        })
        .collect()
    }

    /// The records table of docs/system-tracking.md lists every compiled
    /// record with its kind and its fields (but PMU readings) in order, typed.
    #[test]
    fn documented_records_are_the_compiled_ones() {
        let trackers = Trackers::new(schemas());
        let mut documented = documented_records();
        documented.sort();
        let mut compiled: Vec<Documented> = schemas()
            .iter()
            .enumerate()
            .map(|(index, schema)| {
                let layout = trackers.by_record[index].as_ref().expect("a tracker");
                let fields = (schema.fields.iter().enumerate())
                    .filter(|(index, _)| !layout.is_pmu_field(*index))
                    .map(|(_, field)| {
                        let letter = match field.ty {
                            FieldType::Int => 'I',
                            FieldType::UInt => 'U',
                            FieldType::Str => 'S',
                            FieldType::Thread => 'T',
                        };
                        (field.name.clone(), letter)
                    });
                let kind = match schema.kind {
                    crate::capture::model::RecordKind::Instant => "instant",
                    crate::capture::model::RecordKind::Span => "span",
                };
                (schema.name.clone(), kind.to_string(), fields.collect())
            })
            .collect();
        compiled.sort();
        assert_eq!(documented, compiled);
    }

    /// The `pmu` item's fields are found at a switch and at both ends of an IRQ span.
    #[test]
    fn finds_pmu_readings() {
        let trackers = Trackers::new(schemas());
        assert_eq!(trackers.counters, [COUNTER]);
        for (kind, ends) in [(Kind::Switch, 0), (Kind::HardIrq, 1), (Kind::SoftIrq, 1)] {
            let (_, layout) = trackers.find(kind).expect("compiled");
            assert_eq!(
                (layout.pmu.len(), layout.pmu_end.len()),
                (1, ends),
                "{kind:?}"
            );
            let fields = layout.pmu.iter().chain(&layout.pmu_end);
            for field in fields {
                for index in [field.value, field.enabled, field.running] {
                    assert!(layout.is_pmu_field(index));
                }
            }
        }
        let (_, waking) = trackers.find(Kind::Waking).expect("compiled");
        assert!(waking.pmu.is_empty());
    }

    /// A record of the script that happens to share a tracker's name is not a tracker's.
    #[test]
    fn script_records_are_not_trackers() {
        let mut switch = schemas().iter().find(|s| s.name == "switch").cloned();
        let switch = switch.as_mut().expect("compiled");
        switch.origin = RecordOrigin::Script;
        let trackers = Trackers::new(std::slice::from_ref(switch));
        assert!(!trackers.any());
    }

    /// A field of another type than declared is not found.
    #[test]
    fn mistyped_fields_are_absent() {
        let mut switch = schemas().iter().find(|s| s.name == "switch").cloned();
        let switch = switch.as_mut().expect("compiled");
        switch.fields[0].ty = FieldType::UInt;
        let trackers = Trackers::new(std::slice::from_ref(switch));
        let (_, layout) = trackers.find(Kind::Switch).expect("a tracker");
        assert_eq!(layout.position(Field::Next), None);
        assert_eq!(layout.position(Field::PrevState), Some(1));
    }

    /// Asking a record for a field its kind does not list is a bug, caught in debug builds.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "the fork record has no field next")]
    fn reading_an_undeclared_field_panics() {
        let trackers = Trackers::new(schemas());
        let (record, layout) = trackers.find(Kind::Fork).expect("compiled");
        let event = Event {
            record: crate::capture::model::RecordId(record as u32),
            ..Event::default()
        };
        layout.thread(&event, Field::Next);
    }

    /// Multiplexed counters are scaled up by enabled / running.
    #[test]
    fn scales_multiplexed_readings() {
        let event = Event {
            values: vec![
                FieldValue::UInt(100),
                FieldValue::UInt(40),
                FieldValue::UInt(10),
            ],
            ..Event::default()
        };
        let field = PmuField {
            counter: 0,
            value: 0,
            enabled: 1,
            running: 2,
        };
        let reading = reading(&event, &field).expect("integers");
        assert_eq!((reading.scaled, reading.multiplexed), (400, true));
    }

    /// Deltas are between consecutive switches on one CPU, flagged when
    /// either reading was multiplexed.
    #[test]
    fn deltas_between_switches() {
        let mut readings = SwitchReadings::default();
        let at = |scaled, multiplexed| Reading {
            scaled,
            multiplexed,
        };
        assert_eq!(readings.exchange(1, 0, at(100, false)), None);
        let d = readings
            .exchange(1, 0, at(150, true))
            .expect("a previous one");
        assert_eq!((d.count, d.multiplexed), (50, true));
        assert_eq!(readings.exchange(0, 0, at(7, false)), None);
    }
}
