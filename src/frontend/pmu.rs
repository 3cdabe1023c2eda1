//! `--pmu` counter names → [`PmuCounter`]: hardware events by perf's names,
//! software events with an `sw:` prefix, raw events as `rHEX`.

use super::options::PmuCounter;
use crate::vocab::{PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE, PerfEvent};

/// At most this many `--pmu` counters.
pub const MAX_COUNTERS: usize = 16;

/// `PERF_COUNT_HW_*`, with perf's aliases.
const HARDWARE: &[(&str, u64)] = &[
    ("cpu-cycles", 0),
    ("cycles", 0),
    ("instructions", 1),
    ("cache-references", 2),
    ("cache-misses", 3),
    ("branch-instructions", 4),
    ("branches", 4),
    ("branch-misses", 5),
    ("bus-cycles", 6),
    ("stalled-cycles-frontend", 7),
    ("stalled-cycles-backend", 8),
    ("ref-cycles", 9),
];

/// `PERF_COUNT_SW_*`, named after `sw:`.
const SOFTWARE: &[(&str, u64)] = &[
    ("cpu-clock", 0),
    ("task-clock", 1),
    ("page-faults", 2),
    ("context-switches", 3),
    ("cpu-migrations", 4),
    ("minor-faults", 5),
    ("major-faults", 6),
    ("alignment-faults", 7),
    ("emulation-faults", 8),
];

/// Parses every name of `--pmu`, in order; names must be distinct.
pub fn parse_counters(names: &[String]) -> Result<Vec<PmuCounter>, String> {
    if names.len() > MAX_COUNTERS {
        return Err(format!(
            "{} --pmu counters given; at most {MAX_COUNTERS} are supported",
            names.len()
        ));
    }
    let mut counters: Vec<PmuCounter> = Vec::with_capacity(names.len());
    for name in names {
        if counters.iter().any(|c| c.name == *name) {
            return Err(format!("--pmu {name} is given twice"));
        }
        counters.push(parse_counter(name)?);
    }
    Ok(counters)
}

/// One `--pmu` name.
pub fn parse_counter(name: &str) -> Result<PmuCounter, String> {
    let event = match name.strip_prefix("sw:") {
        Some(software) => lookup(SOFTWARE, software, PERF_TYPE_SOFTWARE)
            .ok_or_else(|| unknown(name, "software event", SOFTWARE, "sw:"))?,
        None => match PerfEvent::raw(name) {
            Some(event) => event,
            None => lookup(HARDWARE, name, PERF_TYPE_HARDWARE)
                .ok_or_else(|| unknown(name, "event", HARDWARE, ""))?,
        },
    };
    Ok(PmuCounter {
        name: name.to_owned(),
        event,
    })
}

fn lookup(table: &[(&str, u64)], name: &str, type_: u32) -> Option<PerfEvent> {
    let (_, config) = table.iter().find(|(known, _)| *known == name)?;
    Some(PerfEvent {
        type_,
        config: *config,
    })
}

fn unknown(name: &str, what: &str, table: &[(&str, u64)], prefix: &str) -> String {
    let known: Vec<String> = table.iter().map(|(n, _)| format!("{prefix}{n}")).collect();
    let others = match prefix {
        "" => "; software events are written sw:NAME, raw events rHEX",
        _ => "",
    };
    format!(
        "unknown --pmu {what} `{name}`: use one of {}{others}",
        known.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str) -> PerfEvent {
        parse_counter(name).expect("a known name").event
    }

    /// Hardware names and their aliases map to `PERF_COUNT_HW_*`.
    #[test]
    fn parses_hardware_names() {
        assert_eq!(event("cpu-cycles"), event("cycles"));
        assert_eq!(
            event("cycles"),
            PerfEvent {
                type_: 0,
                config: 0
            }
        );
        assert_eq!(event("instructions").config, 1);
        assert_eq!(event("cache-misses").config, 3);
        assert_eq!(event("branch-misses").config, 5);
        assert_eq!(event("ref-cycles").config, 9);
        assert_eq!(event("stalled-cycles-backend").config, 8);
    }

    /// `sw:` names map to `PERF_COUNT_SW_*` and keep their prefix in the name.
    #[test]
    fn parses_software_names() {
        let counter = parse_counter("sw:page-faults").expect("known");
        assert_eq!(counter.name, "sw:page-faults");
        assert_eq!(
            counter.event,
            PerfEvent {
                type_: 1,
                config: 2
            }
        );
        assert_eq!(event("sw:cpu-clock").config, 0);
        assert_eq!(event("sw:context-switches").config, 3);
        assert_eq!(event("sw:emulation-faults").config, 8);
    }

    /// `rHEX` is a raw event; `r` alone or non-hex is not.
    #[test]
    fn parses_raw_events() {
        assert_eq!(
            event("r003c"),
            PerfEvent {
                type_: 4,
                config: 0x3c
            }
        );
        assert!(parse_counter("r").is_err());
        assert!(parse_counter("rxyz").is_err());
    }

    /// Unknown names list the valid ones of their kind.
    #[test]
    fn unknown_names_list_valid_ones() {
        let error = parse_counter("cylces").expect_err("unknown");
        assert!(error.contains("`cylces`"), "{error}");
        assert!(
            error.contains("cpu-cycles, cycles, instructions"),
            "{error}"
        );
        assert!(error.contains("sw:NAME"), "{error}");
        let error = parse_counter("sw:cycles").expect_err("unknown");
        assert!(error.contains("sw:page-faults"), "{error}");
        assert!(!error.contains("instructions"), "{error}");
    }

    /// At most 16 counters, each once.
    #[test]
    fn limits_counters() {
        let many: Vec<String> = (0..17).map(|i| format!("r{i:x}")).collect();
        assert!(
            parse_counters(&many)
                .expect_err("too many")
                .contains("at most 16")
        );
        assert_eq!(parse_counters(&many[..16]).expect("16 are fine").len(), 16);
        let twice = ["sw:cpu-clock".to_owned(), "sw:cpu-clock".to_owned()];
        assert!(parse_counters(&twice).expect_err("twice").contains("twice"));
    }
}
