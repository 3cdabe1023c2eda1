//! The named perf events: one table of the generic software and hardware
//! events with every name they go by (bpftrace's `software:`/`hardware:`
//! names and aliases, perf's names) and bpftrace's default sample periods.
//! `software:`/`hardware:` probes, `--pmu` counters and `-S pmu=` stacks all
//! look names up here, and `-l` lists them.

use super::attach::{PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE, PerfEvent};

/// One generic perf event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamedEvent {
    /// The name bpftrace lists it by.
    pub name: &'static str,
    /// Other names: bpftrace's short alias first (`cs`), then perf's spellings.
    pub aliases: &'static [&'static str],
    /// `perf_event_attr.type` and `.config`.
    pub event: PerfEvent,
    /// Events between samples when a probe gives no count (bpftrace's defaults).
    pub default_period: u64,
}

impl NamedEvent {
    /// Whether `name` is this event's name or one of its aliases.
    pub fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.contains(&name)
    }
}

const fn software(
    name: &'static str,
    aliases: &'static [&'static str],
    config: u64,
    default_period: u64,
) -> NamedEvent {
    NamedEvent {
        name,
        aliases,
        event: PerfEvent {
            type_: PERF_TYPE_SOFTWARE,
            config,
        },
        default_period,
    }
}

const fn hardware(
    name: &'static str,
    aliases: &'static [&'static str],
    config: u64,
    default_period: u64,
) -> NamedEvent {
    NamedEvent {
        name,
        aliases,
        event: PerfEvent {
            type_: PERF_TYPE_HARDWARE,
            config,
        },
        default_period,
    }
}

/// `PERF_COUNT_SW_*`, sorted by name as bpftrace lists them.
pub const SOFTWARE_EVENTS: &[NamedEvent] = &[
    software("alignment-faults", &[], 7, 1),
    software("bpf-output", &[], 10, 1),
    software("context-switches", &["cs"], 3, 1000),
    software("cpu-clock", &["cpu"], 0, 1_000_000),
    software("cpu-migrations", &["migrations"], 4, 1),
    software("dummy", &[], 9, 1),
    software("emulation-faults", &[], 8, 1),
    software("major-faults", &[], 6, 1),
    software("minor-faults", &[], 5, 100),
    software("page-faults", &["faults"], 2, 100),
    software("task-clock", &[], 1, 1),
];

/// `PERF_COUNT_HW_*`, sorted by name as bpftrace lists them.
pub const HARDWARE_EVENTS: &[NamedEvent] = &[
    hardware(
        "backend-stalls",
        &["stalled-cycles-backend", "idle-cycles-backend"],
        8,
        1_000_000,
    ),
    hardware("branch-instructions", &["branches"], 4, 100_000),
    hardware("branch-misses", &[], 5, 100_000),
    hardware("bus-cycles", &[], 6, 100_000),
    hardware("cache-misses", &[], 3, 1_000_000),
    hardware("cache-references", &[], 2, 1_000_000),
    hardware("cpu-cycles", &["cycles"], 0, 1_000_000),
    hardware(
        "frontend-stalls",
        &["stalled-cycles-frontend", "idle-cycles-frontend"],
        7,
        1_000_000,
    ),
    hardware("instructions", &[], 1, 1_000_000),
    hardware("ref-cycles", &[], 9, 1_000_000),
];

/// The event called `name` in `table`.
pub fn find_event(table: &'static [NamedEvent], name: &str) -> Option<&'static NamedEvent> {
    table.iter().find(|event| event.answers_to(name))
}

/// Every name of `table` for a message: `cpu-cycles (cycles), instructions`,
/// each prefixed by `prefix`.
pub fn event_names(table: &[NamedEvent], prefix: &str) -> String {
    let names: Vec<String> = table
        .iter()
        .map(|event| match event.aliases {
            [] => format!("{prefix}{}", event.name),
            aliases => format!("{prefix}{} ({})", event.name, aliases.join(", ")),
        })
        .collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name and alias is unique within its table, and configs are distinct.
    #[test]
    fn names_are_unique() {
        for table in [SOFTWARE_EVENTS, HARDWARE_EVENTS] {
            let mut names = std::collections::HashSet::new();
            let mut configs = std::collections::HashSet::new();
            for event in table {
                assert!(configs.insert(event.event.config), "{}", event.name);
                for name in std::iter::once(&event.name).chain(event.aliases) {
                    assert!(names.insert(*name), "`{name}` twice");
                }
            }
        }
    }

    /// bpftrace's aliases and perf's spellings find the same event.
    #[test]
    fn aliases_find_their_event() {
        let cs = find_event(SOFTWARE_EVENTS, "cs").expect("cs");
        assert_eq!(
            (cs.name, cs.event.config, cs.default_period),
            ("context-switches", 3, 1000)
        );
        let stalls = find_event(HARDWARE_EVENTS, "stalled-cycles-frontend").expect("perf name");
        assert_eq!(stalls.name, "frontend-stalls");
        assert_eq!(
            find_event(HARDWARE_EVENTS, "cycles").map(|e| e.event.config),
            Some(0)
        );
        assert!(find_event(SOFTWARE_EVENTS, "cycles").is_none());
    }

    /// Messages list names with their aliases.
    #[test]
    fn lists_names_with_aliases() {
        let text = event_names(HARDWARE_EVENTS, "");
        assert!(
            text.contains("cpu-cycles (cycles), frontend-stalls ("),
            "{text}"
        );
        assert!(event_names(SOFTWARE_EVENTS, "sw:").starts_with("sw:alignment-faults, "));
    }
}
