//! The records of wprof's built-in trackers (docs/system-tracking.md) as
//! renderers see them: which record is which tracker kind, where its fields
//! are, its PMU readings, and the decoding of `prev_state` and softirq
//! vectors. Built once per render from the capture's schemas.

use crate::capture::model::{Event, FieldValue, RecordOrigin, RecordSchema, StringId, ThreadId};

/// A tracker record, by its schema name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
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
}

impl Kind {
    pub const ALL: [Kind; 13] = [
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
    ];

    /// The record's schema name, also the NDJSON `t` and the Perfetto event name.
    pub fn name(self) -> &'static str {
        match self {
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
        }
    }

    fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.name() == name)
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

/// A named field of a tracker record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Next,
    PrevState,
    Preempt,
    Wakee,
    TargetCpu,
    Child,
    Task,
    Irq,
    Action,
    Vec,
    NextPrio,
    Func,
}

impl Field {
    const ALL: [Field; 12] = [
        Field::Next,
        Field::PrevState,
        Field::Preempt,
        Field::Wakee,
        Field::TargetCpu,
        Field::Child,
        Field::Task,
        Field::Irq,
        Field::Action,
        Field::Vec,
        Field::NextPrio,
        Field::Func,
    ];

    fn name(self) -> &'static str {
        match self {
            Field::Next => "next",
            Field::PrevState => "prev_state",
            Field::Preempt => "preempt",
            Field::Wakee => "wakee",
            Field::TargetCpu => "target_cpu",
            Field::Child => "child",
            Field::Task => "task",
            Field::Irq => "irq",
            Field::Action => "action",
            Field::Vec => "vec",
            Field::NextPrio => "next_prio",
            Field::Func => "func",
        }
    }
}

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

/// A tracker record's layout.
#[derive(Clone, Debug)]
pub struct TrackerSchema {
    pub kind: Kind,
    positions: [Option<usize>; Field::ALL.len()],
    pub pmu: Vec<PmuField>,
    pub pmu_end: Vec<PmuField>,
}

impl TrackerSchema {
    fn value<'e>(&self, event: &'e Event, field: Field) -> Option<&'e FieldValue> {
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

/// The capture's tracker records, by `RecordId`, and its PMU counters.
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
        let position = |name: &str| schema.fields.iter().position(|f| f.name == name);
        Some(TrackerSchema {
            kind,
            positions: Field::ALL.map(|field| position(field.name())),
            pmu: self.pmu_fields(schema, "pmu:"),
            pmu_end: self.pmu_fields(schema, "pmu_end:"),
        })
    }

    fn pmu_fields(&mut self, schema: &RecordSchema, prefix: &str) -> Vec<PmuField> {
        let position = |name: &str| schema.fields.iter().position(|f| f.name == name);
        let mut fields = Vec::new();
        for (value, field) in schema.fields.iter().enumerate() {
            let Some(counter) = field.name.strip_prefix(prefix) else {
                continue;
            };
            if counter.ends_with(":enabled") || counter.ends_with(":running") {
                continue;
            }
            let (Some(enabled), Some(running)) = (
                position(&format!("{prefix}{counter}:enabled")),
                position(&format!("{prefix}{counter}:running")),
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
}

/// `TASK_*` bits of `prev->__state` (include/linux/sched.h, Linux 6.x).
const TASK_UNINTERRUPTIBLE: u64 = 0x2;
const TASK_DEAD: u64 = 0x80;
const TASK_NOLOAD: u64 = 0x400;
const TASK_RTLOCK_WAIT: u64 = 0x1000;
/// The bits the kernel reports (`TASK_REPORT`): S D T t X Z P.
const TASK_REPORT: u64 = 0x7f;
/// What `sched_switch`'s `prev_state` says for an idle-waiting task.
pub const TASK_REPORT_IDLE: u64 = TASK_REPORT + 1;
/// What `sched_switch`'s `prev_state` says for a preempted task (`R+`).
pub const TASK_REPORT_MAX: u64 = TASK_REPORT_IDLE << 1;

/// `prev_state` and `preempt` of a switch as the kernel's `sched_switch`
/// tracepoint reports them (`__trace_sched_switch_state`): one bit per
/// state, `TASK_REPORT_MAX` when preempted. Perfetto decodes this form.
pub fn reported_state(prev_state: u64, preempt: bool) -> u64 {
    if preempt {
        return TASK_REPORT_MAX;
    }
    if prev_state == TASK_UNINTERRUPTIBLE | TASK_NOLOAD {
        return TASK_REPORT_IDLE;
    }
    // A dying task's last switch: its exit_state (X or Z) is not recorded.
    let mut state = prev_state & TASK_REPORT;
    if prev_state & TASK_DEAD != 0 {
        state |= 0x10;
    }
    if prev_state & TASK_RTLOCK_WAIT != 0 {
        state |= TASK_UNINTERRUPTIBLE;
    }
    match state {
        0 => 0,
        // The kernel reports the highest state bit (`fls`).
        state => 1 << (63 - state.leading_zeros()),
    }
}

/// The off-CPU state letter of a switch, as `ps` and the tracepoint print it:
/// `R` runnable, `R+` preempted, `S` sleeping, `D` uninterruptible, `T`
/// stopped, `t` traced, `X` dead, `Z` zombie, `P` parked, `I` idle.
pub fn state_letter(prev_state: u64, preempt: bool) -> &'static str {
    match reported_state(prev_state, preempt) {
        TASK_REPORT_MAX => "R+",
        TASK_REPORT_IDLE => "I",
        0 => "R",
        bit => ["S", "D", "T", "t", "X", "Z", "P"][bit.trailing_zeros() as usize],
    }
}

/// The softirq vector's name (`TIMER`, `NET_RX`, ...).
pub fn softirq_name(vec: u64) -> &'static str {
    const NAMES: [&str; 10] = [
        "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER",
        "RCU",
    ];
    NAMES.get(vec as usize).copied().unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every state the kernel reports gets its `ps` letter; preemption wins.
    #[test]
    fn decodes_prev_state() {
        let cases = [
            (0, false, "R"),
            (1, true, "R+"),
            (0, true, "R+"),
            (0x1, false, "S"),
            (0x2, false, "D"),
            (0x102, false, "D"),
            (0x402, false, "I"),
            (0x4, false, "T"),
            (0x104, false, "T"),
            (0x8, false, "t"),
            (0x10, false, "X"),
            (0x20, false, "Z"),
            (0x40, false, "P"),
            (0x80, false, "X"),
            (0x1000, false, "D"),
            (0x2001, false, "S"),
        ];
        for (raw, preempt, letter) in cases {
            assert_eq!(state_letter(raw, preempt), letter, "{raw:#x} {preempt}");
        }
        assert_eq!(reported_state(0x1, true), 0x100);
        assert_eq!(reported_state(0x402, false), 0x80);
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
}
