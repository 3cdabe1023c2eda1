//! `--pmu` counter names → [`PmuCounter`]: hardware events by perf's names,
//! software events with an `sw:` prefix, raw events as `rHEX`.

use super::options::PmuCounter;
use crate::vocab::PerfEvent;
use crate::vocab::perf_events::{
    HARDWARE_EVENTS, NamedEvent, SOFTWARE_EVENTS, event_names, find_event,
};

/// At most this many `--pmu` counters.
pub const MAX_COUNTERS: usize = 16;

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
        Some(software) => find_event(SOFTWARE_EVENTS, software)
            .map(|e| e.event)
            .ok_or_else(|| unknown(name, "software event", SOFTWARE_EVENTS, "sw:"))?,
        None => match PerfEvent::raw(name) {
            Some(event) => event,
            None => find_event(HARDWARE_EVENTS, name)
                .map(|e| e.event)
                .ok_or_else(|| unknown(name, "event", HARDWARE_EVENTS, ""))?,
        },
    };
    Ok(PmuCounter {
        name: name.to_owned(),
        event,
    })
}

fn unknown(name: &str, what: &str, table: &[NamedEvent], prefix: &str) -> String {
    let others = match prefix {
        "" => "; software events are written sw:NAME, raw events rHEX",
        _ => "",
    };
    format!(
        "unknown --pmu {what} `{name}`: use one of {}{others}",
        event_names(table, prefix)
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
        assert_eq!(event("backend-stalls"), event("stalled-cycles-backend"));
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
        assert_eq!(event("sw:cs"), event("sw:context-switches"));
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
        assert!(error.contains("cpu-cycles (cycles), "), "{error}");
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
