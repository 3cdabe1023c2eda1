//! Probes on perf events: `profile:UNIT:N` (`p`; every CPU) and
//! `interval:UNIT:N` (`i`; one CPU) on the cpu-clock timer, with UNIT `hz`,
//! `s`, `ms` or `us`; `software:EVENT[:COUNT|:Nhz]` (`s`) and
//! `hardware:EVENT[:COUNT|:Nhz]` (`h`, also raw `rHEX` codes). The program
//! runs on each sample, with no arguments. Hardware events need a PMU.

use std::os::fd::{AsRawFd, IntoRawFd};
use std::time::Duration;

use libbpf_rs::{Link, ProgramMut};

use super::{ProbeType, Provider, Resolved, ResolvedProbe, Spec, explain, parse_number};
use crate::runtime::bpf::perf_event::open_per_cpu;
use crate::runtime::targets::features::online_cpus;
use crate::vocab::perf_events::{HARDWARE_EVENTS, SOFTWARE_EVENTS, event_names, find_event};
use crate::vocab::{
    AttachPoint, Context, Environment, KernelFeature, PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE,
    PerfEvent, PerfSample,
};

pub struct Perf;

impl Provider for Perf {
    fn memory_space_known(&self) -> bool {
        false
    }

    fn registers(&self) -> bool {
        true
    }

    fn types(&self) -> &'static [ProbeType] {
        &[
            ProbeType {
                name: "profile",
                aliases: &["p"],
            },
            ProbeType {
                name: "interval",
                aliases: &["i"],
            },
            ProbeType {
                name: "software",
                aliases: &["s"],
            },
            ProbeType {
                name: "hardware",
                aliases: &["h"],
            },
        ]
    }

    fn resolve(&self, ty: &str, spec: &Spec, _env: &dyn Environment) -> Result<Resolved, String> {
        let probe = match ty {
            "profile" => timer(spec, ty, true)?,
            "interval" => timer(spec, ty, false)?,
            "software" => counter(&spec.parts, PERF_TYPE_SOFTWARE)?,
            _ => counter(&spec.parts, PERF_TYPE_HARDWARE)?,
        };
        Ok(vec![probe].into())
    }

    fn owns(&self, point: &AttachPoint) -> bool {
        matches!(point, AttachPoint::PerfEvent { .. })
    }

    fn section(&self, _point: &AttachPoint) -> String {
        "perf_event".into()
    }

    fn counts_from_attach(&self, _point: &AttachPoint) -> bool {
        true
    }

    fn feature(&self, point: &AttachPoint) -> Option<KernelFeature> {
        match point {
            AttachPoint::PerfEvent { event, .. } if event.needs_pmu() => {
                Some(KernelFeature::HardwarePmu)
            }
            _ => None,
        }
    }

    fn context_type(&self, _point: &AttachPoint) -> Result<&'static str, String> {
        Ok("struct bpf_perf_event_data")
    }

    fn attach(
        &self,
        prog: &ProgramMut<'_>,
        point: &AttachPoint,
        _pid: i32,
    ) -> Result<Vec<Link>, String> {
        let AttachPoint::PerfEvent {
            event,
            sample,
            all_cpus,
        } = point
        else {
            unreachable!("not a perf event: {point:?}");
        };
        attach_perf_event(prog, *event, *sample, *all_cpus)
    }
}

/// `profile:UNIT:N` or `interval:UNIT:N`.
fn timer(spec: &Spec, ty: &str, all_cpus: bool) -> Result<ResolvedProbe, String> {
    let [unit, value] = spec.parts[..] else {
        return Err(format!(
            "`{spec}`: expected `{ty}:UNIT:N` (UNIT: hz, s, ms, us)"
        ));
    };
    let n = parse_number(value)
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{value}` is not a positive number"))?;
    let sample = match unit {
        "hz" => PerfSample::FrequencyHz(n),
        "s" => PerfSample::Period(n * 1_000_000_000),
        "ms" => PerfSample::Period(n * 1_000_000),
        "us" => PerfSample::Period(n * 1_000),
        _ => return Err(format!("unknown unit `{unit}` (expected hz, s, ms or us)")),
    };
    let attach = AttachPoint::PerfEvent {
        event: PerfEvent {
            type_: PERF_TYPE_SOFTWARE,
            config: PERF_COUNT_SW_CPU_CLOCK,
        },
        sample,
        all_cpus,
    };
    Ok(ResolvedProbe::new(
        format!("{ty}:{unit}:{n}"),
        attach,
        Context::Plain,
    ))
}

/// Samples per raw event when no count is given (as for `cycles`).
const RAW_DEFAULT_PERIOD: u64 = 1_000_000;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;

/// `software:EVENT[:RATE]` or `hardware:EVENT[:RATE]`.
fn counter(parts: &[&str], type_: u32) -> Result<ResolvedProbe, String> {
    let provider = if type_ == PERF_TYPE_HARDWARE {
        "hardware"
    } else {
        "software"
    };
    let (event, rate) = match parts {
        [event] => (*event, None),
        [event, rate] => (*event, Some(*rate)),
        _ => return Err(format!("expected `{provider}:EVENT[:COUNT|:Nhz]`")),
    };
    let (name, event, default_period) = event_named(event, type_)?;
    let sample = match rate {
        Some(text) => parse_rate(text)?,
        None => PerfSample::Period(default_period),
    };
    let shown_rate = match sample {
        PerfSample::FrequencyHz(hz) => format!("{hz}hz"),
        PerfSample::Period(period) => period.to_string(),
    };
    let attach = AttachPoint::PerfEvent {
        event,
        sample,
        all_cpus: true,
    };
    Ok(ResolvedProbe::new(
        format!("{provider}:{name}:{shown_rate}"),
        attach,
        Context::Plain,
    ))
}

/// The event of `name` (or a raw `rHEX` hardware code): its canonical
/// name, the event and its default period.
fn event_named(name: &str, type_: u32) -> Result<(String, PerfEvent, u64), String> {
    let (table, provider, raw) = match type_ {
        PERF_TYPE_HARDWARE => (HARDWARE_EVENTS, "hardware", ", rHEX"),
        _ => (SOFTWARE_EVENTS, "software", ""),
    };
    if let Some(found) = find_event(table, name) {
        return Ok((found.name.to_string(), found.event, found.default_period));
    }
    // A raw PMU code (`rXXXX`), as `--pmu` takes it.
    if type_ == PERF_TYPE_HARDWARE
        && let Some(event) = PerfEvent::raw(name)
    {
        return Ok((name.to_string(), event, RAW_DEFAULT_PERIOD));
    }
    Err(format!(
        "unknown {provider} event `{name}` (known: {}{raw})",
        event_names(table, "")
    ))
}

/// `COUNT` (a period) or `Nhz` (a frequency).
fn parse_rate(text: &str) -> Result<PerfSample, String> {
    Ok(match text.strip_suffix("hz") {
        Some(hz) => PerfSample::FrequencyHz(
            parse_number(hz)
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("`{text}` is not a positive rate"))?,
        ),
        None => PerfSample::Period(
            parse_number(text)
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("`{text}` is not a positive count"))?,
        ),
    })
}

/// Opens the event on the chosen CPUs and attaches `prog` to each; the
/// links own the event fds.
fn attach_perf_event(
    prog: &ProgramMut<'_>,
    event: PerfEvent,
    sample: PerfSample,
    all_cpus: bool,
) -> Result<Vec<Link>, String> {
    let cpus = if all_cpus { online_cpus() } else { vec![0] };
    let fds = open_per_cpu(event, sample, &cpus).map_err(|(cpu, e)| {
        let hint = if event.type_ == PERF_TYPE_HARDWARE {
            "hardware events are not available here (VM?); use a software event such as cpu-clock"
        } else {
            "check /proc/sys/kernel/perf_event_paranoid and perf_event_max_sample_rate"
        };
        format!("perf_event_open on CPU {cpu}: {e}; {hint}")
    })?;
    let stagger = stagger(event, sample, fds.len());
    let mut links = Vec::with_capacity(fds.len());
    for (index, fd) in fds.into_iter().enumerate() {
        if index > 0 {
            std::thread::sleep(stagger);
        }
        let link = prog
            .attach_perf_event(fd.as_raw_fd())
            .map_err(|e| explain(&e, "the perf event could not take a BPF program"))?;
        // libbpf's perf link owns the event fd from here on and closes it when
        // the link is destroyed (bpf_link_perf_detach, libbpf 1.x); on error
        // above, `fd` drops and closes instead.
        let _ = fd.into_raw_fd();
        links.push(link);
    }
    Ok(links)
}

/// Slowest sampling rate whose per-CPU starts are staggered: slower timers
/// would hold up attaching for too long.
const STAGGER_MIN_HZ: u64 = 50;

/// The pause between enabling consecutive CPUs' timers, so that `cpus`
/// timers at one rate fire spread over the period instead of all at once
/// (libbpf enables each event when it attaches the program).
fn stagger(event: PerfEvent, sample: PerfSample, cpus: usize) -> Duration {
    let slowest_period_ns = 1_000_000_000 / STAGGER_MIN_HZ;
    let period_ns = match sample {
        PerfSample::FrequencyHz(hz) if hz >= STAGGER_MIN_HZ => 1_000_000_000 / hz,
        PerfSample::Period(ns) if counts_nanoseconds(event) && ns <= slowest_period_ns => ns,
        _ => return Duration::ZERO,
    };
    match cpus {
        0 | 1 => Duration::ZERO,
        cpus => Duration::from_nanos(period_ns / cpus as u64),
    }
}

/// Whether the event's count is time: `cpu-clock` and `task-clock`, whose
/// periods are nanoseconds.
fn counts_nanoseconds(event: PerfEvent) -> bool {
    event.type_ == PERF_TYPE_SOFTWARE
        && matches!(
            event.config,
            PERF_COUNT_SW_CPU_CLOCK | PERF_COUNT_SW_TASK_CLOCK
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::fake_machine::FakeMachine;
    use crate::runtime::bpf::loader::{AttachOptions, load};
    use crate::runtime::bpf::test_support::*;
    use crate::vocab::{MapId, MapKind};
    use std::time::Instant;

    fn resolve(word: &str, ty: &str, parts: &[&str]) -> Result<ResolvedProbe, String> {
        let spec = Spec {
            word,
            parts: parts.to_vec(),
        };
        Perf.resolve(ty, &spec, &FakeMachine)
            .map(|mut p| p.probes.remove(0))
    }

    /// Timers become cpu-clock events: profile on every CPU, interval on one.
    #[test]
    fn timers() {
        let probe = resolve("p", "profile", &["hz", "99"]).unwrap();
        assert_eq!(probe.name, "profile:hz:99");
        assert!(matches!(
            probe.attach,
            AttachPoint::PerfEvent {
                sample: PerfSample::FrequencyHz(99),
                all_cpus: true,
                ..
            }
        ));
        let probe = resolve("i", "interval", &["ms", "100"]).unwrap();
        assert!(matches!(
            probe.attach,
            AttachPoint::PerfEvent {
                sample: PerfSample::Period(100_000_000),
                all_cpus: false,
                ..
            }
        ));
        let error = resolve("profile", "profile", &["min", "1"]).unwrap_err();
        assert!(error.contains("min"), "{error}");
    }

    /// Events by name or alias with default or given rates; raw codes need
    /// a PMU; unknown names are listed.
    #[test]
    fn counters() {
        let probe = resolve("s", "software", &["faults"]).unwrap();
        assert_eq!(probe.name, "software:page-faults:100");
        assert_eq!(Perf.feature(&probe.attach), None);
        let probe = resolve("h", "hardware", &["r003c", "99hz"]).unwrap();
        assert_eq!(probe.name, "hardware:r003c:99hz");
        assert_eq!(
            Perf.feature(&probe.attach),
            Some(KernelFeature::HardwarePmu)
        );
        let error = resolve("software", "software", &["nope"]).unwrap_err();
        assert!(
            error.starts_with("unknown software event `nope` (known: alignment-faults, "),
            "{error}"
        );
    }

    /// Timers start spread over one period (a rate's, or a clock event's
    /// period in ns); slow timers and counts of other events do not wait.
    #[test]
    fn staggers_fast_timers() {
        let event = |config| PerfEvent {
            type_: PERF_TYPE_SOFTWARE,
            config,
        };
        let (clock, faults) = (event(PERF_COUNT_SW_CPU_CLOCK), event(2));
        let cases = [
            (
                clock,
                PerfSample::FrequencyHz(100),
                2,
                Duration::from_millis(5),
            ),
            (clock, PerfSample::FrequencyHz(10), 2, Duration::ZERO),
            (clock, PerfSample::FrequencyHz(100), 1, Duration::ZERO),
            (
                clock,
                PerfSample::Period(10_000_000),
                2,
                Duration::from_millis(5),
            ),
            (clock, PerfSample::Period(100_000_000), 2, Duration::ZERO),
            (faults, PerfSample::Period(1000), 4, Duration::ZERO),
        ];
        for (event, sample, cpus, pause) in cases {
            assert_eq!(
                stagger(event, sample, cpus),
                pause,
                "{sample:?} on {cpus} CPUs"
            );
        }
    }

    const COUNTS: MapId = MapId(1);
    const HASH: MapId = MapId(2);

    /// A cpu-clock profile program on all CPUs fires while we spin, counting
    /// into an array and a (non-preallocated) per-CPU hash.
    #[test]
    fn perf_event_profile_fires() {
        let mut asm = Assembler::new();
        asm.count(COUNTS).count_hash(HASH).ret0();
        let attach = AttachPoint::PerfEvent {
            event: PerfEvent {
                type_: PERF_TYPE_SOFTWARE,
                config: PERF_COUNT_SW_CPU_CLOCK,
            },
            sample: PerfSample::FrequencyHz(999),
            all_cpus: true,
        };
        let prog = asm.program("prof", "profile:hz:999", attach);
        let counts = map("counts", MapKind::PerCpuArray, 4, 8, 1);
        let hash = map("hash", MapKind::PerCpuHash, 4, 8, 4096);
        let mut loaded = load(&with_ring(vec![counts, hash], vec![prog])).expect("load");
        loaded.attach_all(AttachOptions::default()).expect("attach");
        let cpus = online_cpus().len();
        assert_eq!(loaded.attached(), cpus);
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_millis(100) {
            std::hint::black_box(spin.elapsed());
        }
        assert!(sum_u64(&loaded.map_entries(COUNTS).expect("entries")) > 0);
        assert!(sum_u64(&loaded.map_entries(HASH).expect("entries")) > 0);
        loaded.detach_all();
        assert_eq!(loaded.attached(), 0);
    }
}
