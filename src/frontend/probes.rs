//! Probe specs → attach points: provider aliases, wildcard expansion, and the
//! context each attach point gives its program. Everything the checker needs to
//! know about the machine comes through [`Environment`].

use crate::frontend::ast::ProbeSpec;
use crate::frontend::diag::ScriptError;
use crate::frontend::pmu;
use crate::vocab::{AttachPoint, PerfEvent, PerfSample};
use crate::vocab::{Context, Environment};

/// One attach point of a probe block.
#[derive(Clone, Debug)]
pub struct ResolvedProbe {
    /// Full name, e.g. `tracepoint:syscalls:sys_enter_read`.
    pub name: String,
    pub attach: AttachPoint,
    pub context: Context,
    /// The function name for `func`, where known statically.
    pub func: Option<String>,
    /// Whether pointers in this context point into user memory.
    pub user_memory: bool,
    pub is_return: bool,
    /// A uprobe on a function's first instruction, where the caller's
    /// return address is still on top of the stack.
    pub function_entry: bool,
}

impl ResolvedProbe {
    fn new(name: String, attach: AttachPoint, context: Context) -> Self {
        ResolvedProbe {
            name,
            attach,
            context,
            func: None,
            user_memory: false,
            is_return: false,
            function_entry: false,
        }
    }
}

/// Expand one spec into its attach points.
pub fn resolve(spec: &ProbeSpec, env: &dyn Environment) -> Result<Vec<ResolvedProbe>, ScriptError> {
    let fail = |message: String| ScriptError::new(spec.span, message);
    let parts: Vec<&str> = spec.parts.iter().map(String::as_str).collect();
    let arity = |n: usize, form: &str| {
        if parts.len() == n {
            Ok(())
        } else {
            Err(fail(format!("`{spec}`: expected the form `{form}`")))
        }
    };
    match spec.provider.as_str() {
        "BEGIN" | "begin" | "END" | "end" => {
            arity(0, &spec.provider)?;
            let (name, attach) = if spec.provider.eq_ignore_ascii_case("begin") {
                ("BEGIN", AttachPoint::Begin)
            } else {
                ("END", AttachPoint::End)
            };
            Ok(vec![ResolvedProbe::new(name.into(), attach, Context::Plain)])
        }
        "tracepoint" | "t" => {
            arity(2, "tracepoint:CATEGORY:NAME")?;
            tracepoints(parts[0], parts[1], env).map_err(fail)
        }
        "rawtracepoint" | "rt" => {
            let name = match parts.as_slice() {
                [name] | [_, name] => *name,
                _ => return Err(fail(format!("`{spec}`: expected `rawtracepoint:NAME`"))),
            };
            let attach = AttachPoint::RawTracepoint { name: name.into() };
            Ok(vec![ResolvedProbe::new(
                format!("rawtracepoint:{name}"),
                attach,
                Context::U64Array,
            )])
        }
        "uprobe" | "u" | "uretprobe" | "ur" => {
            arity(2, "uprobe:BINARY:FUNCTION[+OFFSET]")?;
            let retprobe = spec.provider.starts_with("ur");
            uprobes(parts[0], parts[1], retprobe, env).map_err(fail)
        }
        "usdt" | "U" => {
            let (binary, provider, name) = match parts.as_slice() {
                [binary, name] => (*binary, None, *name),
                [binary, provider, name] => (*binary, Some(*provider), *name),
                _ => return Err(fail(format!("`{spec}`: expected `usdt:BINARY:[PROVIDER:]NAME`"))),
            };
            usdts(binary, provider, name, env).map_err(fail)
        }
        "kprobe" | "k" | "kretprobe" | "kr" => {
            arity(1, "kprobe:FUNCTION[+OFFSET]")?;
            let retprobe = spec.provider.starts_with("kr");
            let (function, offset) = split_offset(parts[0]).map_err(fail)?;
            let provider = if retprobe { "kretprobe" } else { "kprobe" };
            let mut probe = ResolvedProbe::new(
                format!("{provider}:{}", parts[0]),
                AttachPoint::Kprobe {
                    function: function.into(),
                    offset,
                    retprobe,
                },
                Context::PtRegs,
            );
            probe.func = Some(function.into());
            probe.is_return = retprobe;
            Ok(vec![probe])
        }
        "fentry" | "f" | "kfunc" | "fexit" | "fr" | "kretfunc" => {
            arity(1, "fentry:FUNCTION")?;
            let exit = matches!(spec.provider.as_str(), "fexit" | "fr" | "kretfunc");
            let provider = if exit { "fexit" } else { "fentry" };
            let mut probe = ResolvedProbe::new(
                format!("{provider}:{}", parts[0]),
                AttachPoint::Fentry {
                    function: parts[0].into(),
                    exit,
                },
                Context::U64Array,
            );
            probe.func = Some(parts[0].into());
            probe.is_return = exit;
            Ok(vec![probe])
        }
        "tp_btf" => {
            arity(1, "tp_btf:NAME")?;
            let args = env.tp_btf_args(parts[0]).map_err(fail)?;
            let attach = AttachPoint::TpBtf {
                name: parts[0].into(),
            };
            Ok(vec![ResolvedProbe::new(
                format!("tp_btf:{}", parts[0]),
                attach,
                Context::Btf(args),
            )])
        }
        "profile" | "p" => timer(spec, "profile", &parts, true).map_err(fail),
        "interval" | "i" => timer(spec, "interval", &parts, false).map_err(fail),
        "software" | "s" => perf_counter(&parts, PERF_TYPE_SOFTWARE, SOFTWARE_EVENTS).map_err(fail),
        "hardware" | "h" => perf_counter(&parts, PERF_TYPE_HARDWARE, HARDWARE_EVENTS).map_err(fail),
        other => Err(ScriptError::new(spec.span, format!("unknown probe type `{other}`"))
            .with_help("probe types: BEGIN, END, uprobe, uretprobe, usdt, tracepoint, rawtracepoint, tp_btf, kprobe, kretprobe, fentry, fexit, profile, interval, software, hardware")),
    }
}

fn tracepoints(
    category: &str,
    name: &str,
    env: &dyn Environment,
) -> Result<Vec<ResolvedProbe>, String> {
    let mut probes = Vec::new();
    for (category, name) in env.expand_tracepoints(category, name)? {
        let fields = env.tracepoint_fields(&category, &name)?;
        let mut probe = ResolvedProbe::new(
            format!("tracepoint:{category}:{name}"),
            AttachPoint::Tracepoint {
                category: category.clone(),
                name,
            },
            Context::Tracepoint(fields),
        );
        probe.user_memory = category == "syscalls";
        probes.push(probe);
    }
    Ok(probes)
}

fn uprobes(
    binary: &str,
    function: &str,
    retprobe: bool,
    env: &dyn Environment,
) -> Result<Vec<ResolvedProbe>, String> {
    let (pattern, extra) = split_offset(function)?;
    let (path, targets) = env.functions(binary, pattern)?;
    if extra != 0 && targets.len() != 1 {
        return Err(format!(
            "an offset needs exactly one function, but `{pattern}` matches {}",
            targets.len()
        ));
    }
    let provider = if retprobe { "uretprobe" } else { "uprobe" };
    Ok(targets
        .into_iter()
        .map(|target| {
            let mut probe = ResolvedProbe::new(
                format!("{provider}:{}:{}", path.display(), target.name),
                AttachPoint::Uprobe {
                    binary: path.clone(),
                    symbol: target.name.clone(),
                    offset: target.file_offset + extra,
                    retprobe,
                },
                Context::PtRegs,
            );
            probe.func = Some(target.name);
            probe.user_memory = true;
            probe.is_return = retprobe;
            probe.function_entry = !retprobe && extra == 0;
            probe
        })
        .collect())
}

fn usdts(
    binary: &str,
    provider: Option<&str>,
    name: &str,
    env: &dyn Environment,
) -> Result<Vec<ResolvedProbe>, String> {
    let (path, targets) = env.usdt(binary, provider, name)?;
    Ok(targets
        .into_iter()
        .map(|target| {
            let mut probe = ResolvedProbe::new(
                format!(
                    "usdt:{}:{}:{}",
                    path.display(),
                    target.provider,
                    target.name
                ),
                AttachPoint::Usdt {
                    binary: path.clone(),
                    provider: target.provider.clone(),
                    name: target.name.clone(),
                    offset: target.file_offset,
                    semaphore_offset: target.semaphore_offset,
                },
                Context::Usdt(target.args),
            );
            probe.func = Some(target.name);
            probe.user_memory = true;
            probe
        })
        .collect())
}

/// `name+0x10` → (`name`, 16).
fn split_offset(text: &str) -> Result<(&str, u64), String> {
    match text.split_once('+') {
        None => Ok((text, 0)),
        Some((name, offset)) => parse_number(offset)
            .map(|offset| (name, offset))
            .ok_or_else(|| format!("`{offset}` is not a valid offset")),
    }
}

fn parse_number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

fn timer(
    spec: &ProbeSpec,
    provider: &str,
    parts: &[&str],
    all_cpus: bool,
) -> Result<Vec<ResolvedProbe>, String> {
    let [unit, value] = parts else {
        return Err(format!(
            "`{spec}`: expected `{provider}:UNIT:N` (UNIT: hz, s, ms, us)"
        ));
    };
    let n = parse_number(value)
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{value}` is not a positive number"))?;
    let sample = match *unit {
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
    Ok(vec![ResolvedProbe::new(
        format!("{provider}:{unit}:{n}"),
        attach,
        Context::Plain,
    )])
}

const PERF_TYPE_HARDWARE: u32 = 0;
/// Samples per raw event when no count is given (as for `cycles`).
const RAW_DEFAULT_PERIOD: u64 = 1_000_000;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;

/// (names, perf config, default period)
type EventTable = &'static [(&'static [&'static str], u64, u64)];

const SOFTWARE_EVENTS: EventTable = &[
    (&["cpu-clock", "cpu"], 0, 1_000_000),
    (&["task-clock"], 1, 1_000_000),
    (&["page-faults", "faults"], 2, 100),
    (&["context-switches", "cs"], 3, 1_000),
    (&["cpu-migrations"], 4, 1),
    (&["minor-faults"], 5, 100),
    (&["major-faults"], 6, 1),
    (&["alignment-faults"], 7, 1),
    (&["emulation-faults"], 8, 1),
    (&["dummy"], 9, 1),
    (&["bpf-output"], 10, 1),
];

const HARDWARE_EVENTS: EventTable = &[
    (&["cpu-cycles", "cycles"], 0, 1_000_000),
    (&["instructions"], 1, 1_000_000),
    (&["cache-references"], 2, 1_000_000),
    (&["cache-misses"], 3, 1_000_000),
    (&["branch-instructions", "branches"], 4, 100_000),
    (&["branch-misses"], 5, 100_000),
    (&["bus-cycles"], 6, 100_000),
    (&["frontend-stalls"], 7, 1_000_000),
    (&["backend-stalls"], 8, 1_000_000),
    (&["ref-cycles"], 9, 1_000_000),
];

fn perf_counter(
    parts: &[&str],
    type_: u32,
    table: EventTable,
) -> Result<Vec<ResolvedProbe>, String> {
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
    let known = table.iter().find(|(names, _, _)| names.contains(&event));
    let (name, event, default_period) = match known {
        Some((names, config, period)) => (
            names[0].to_string(),
            PerfEvent {
                type_,
                config: *config,
            },
            *period,
        ),
        // A raw PMU code (`rXXXX`), as `--pmu` takes it.
        None if type_ == PERF_TYPE_HARDWARE
            && pmu::parse_counter(event).is_ok_and(|c| c.event.type_ == pmu::PERF_TYPE_RAW) =>
        {
            let counter = pmu::parse_counter(event)?;
            (counter.name, counter.event, RAW_DEFAULT_PERIOD)
        }
        None => {
            let known: Vec<&str> = table.iter().map(|(names, _, _)| names[0]).collect();
            return Err(format!(
                "unknown {provider} event `{event}` (known: {}{})",
                known.join(", "),
                if type_ == PERF_TYPE_HARDWARE {
                    ", rHEX"
                } else {
                    ""
                }
            ));
        }
    };
    let sample = match rate {
        Some(text) => match text.strip_suffix("hz") {
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
        },
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
    Ok(vec![ResolvedProbe::new(
        format!("{provider}:{name}:{shown_rate}"),
        attach,
        Context::Plain,
    )])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::ast::Span;
    use crate::frontend::fake_machine::FakeMachine;

    fn spec(provider: &str, parts: &[&str]) -> ProbeSpec {
        ProbeSpec {
            provider: provider.into(),
            parts: parts.iter().map(|p| p.to_string()).collect(),
            span: Span::new(0, 1),
        }
    }

    /// Aliases expand to full provider names and timers become perf events.
    #[test]
    fn aliases_and_timers() {
        let probes = resolve(&spec("p", &["hz", "99"]), &FakeMachine).unwrap();
        assert_eq!(probes[0].name, "profile:hz:99");
        assert!(matches!(
            probes[0].attach,
            AttachPoint::PerfEvent {
                sample: PerfSample::FrequencyHz(99),
                all_cpus: true,
                ..
            }
        ));
        let probes = resolve(&spec("i", &["ms", "100"]), &FakeMachine).unwrap();
        assert!(matches!(
            probes[0].attach,
            AttachPoint::PerfEvent {
                sample: PerfSample::Period(100_000_000),
                all_cpus: false,
                ..
            }
        ));
    }

    /// Uprobe offsets are added to the function's file offset.
    #[test]
    fn uprobe_offset() {
        let probes = resolve(&spec("uretprobe", &["/bin/x", "f+0x10"]), &FakeMachine).unwrap();
        assert_eq!(
            probes[0].attach,
            AttachPoint::Uprobe {
                binary: "/bin/x".into(),
                symbol: "f".into(),
                offset: 0x1010,
                retprobe: true
            }
        );
        assert_eq!(probes[0].func.as_deref(), Some("f"));
    }

    /// Unknown providers, units and events are diagnostics that name them.
    #[test]
    fn bad_specs() {
        let err = resolve(&spec("kprobez", &["x"]), &FakeMachine).unwrap_err();
        assert!(err.message.contains("kprobez"));
        let err = resolve(&spec("profile", &["min", "1"]), &FakeMachine).unwrap_err();
        assert!(err.message.contains("min"));
        let err = resolve(&spec("software", &["nope"]), &FakeMachine).unwrap_err();
        assert!(err.message.contains("nope"));
    }
}
