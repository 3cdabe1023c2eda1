//! `rawtracepoint:NAME` (also `rt`, and `rawtracepoint:CATEGORY:NAME`):
//! raw tracepoints, whose arguments are the raw u64 array `arg0..arg11`.

use libbpf_rs::{Link, ProgramMut};

use super::{ProbeType, Provider, Resolved, ResolvedProbe, Spec, explain};
use crate::vocab::{ArgRead, AttachPoint, Context, Environment};

/// Raw tracepoints pass at most this many arguments.
const MAX_ARGS: u32 = 12;

pub struct RawTracepoint;

impl Provider for RawTracepoint {
    fn types(&self) -> &'static [ProbeType] {
        &[ProbeType {
            name: "rawtracepoint",
            aliases: &["rt"],
        }]
    }

    fn kernel_stack_skip(&self) -> Option<crate::vocab::GlobalSlot> {
        Some(crate::vocab::GlobalSlot::RawTracepointStackSkip)
    }

    fn resolve(&self, _ty: &str, spec: &Spec, env: &dyn Environment) -> Result<Resolved, String> {
        let name = match spec.parts.as_slice() {
            [name] | [_, name] => *name,
            _ => return Err(format!("`{spec}`: expected `rawtracepoint:NAME`")),
        };
        check_exists(name, env)?;
        let attach = AttachPoint::RawTracepoint { name: name.into() };
        Ok(vec![ResolvedProbe::new(
            format!("rawtracepoint:{name}"),
            attach,
            Context::U64Array,
        )]
        .into())
    }

    fn owns(&self, point: &AttachPoint) -> bool {
        matches!(point, AttachPoint::RawTracepoint { .. })
    }

    fn section(&self, point: &AttachPoint) -> String {
        match point {
            AttachPoint::RawTracepoint { name } => format!("raw_tp/{name}"),
            _ => unreachable!("not a raw tracepoint: {point:?}"),
        }
    }

    fn arg(&self, probe: &ResolvedProbe, n: u32) -> Result<ArgRead, String> {
        u64_slot(probe, n)
    }

    fn attach(
        &self,
        prog: &ProgramMut<'_>,
        point: &AttachPoint,
        _pid: i32,
    ) -> Result<Vec<Link>, String> {
        let AttachPoint::RawTracepoint { name } = point else {
            unreachable!("not a raw tracepoint: {point:?}");
        };
        prog.attach_raw_tracepoint(name)
            .map(|l| vec![l])
            .map_err(|e| {
                explain(
                    &e,
                    "list raw tracepoints in /sys/kernel/tracing/available_events",
                )
            })
    }
}

/// Refuses a raw tracepoint the kernel does not have, before anything is
/// loaded: it is in kernel BTF (`btf_trace_NAME`) or, for modules, in
/// tracefs under any category. Without BTF the attach decides.
fn check_exists(name: &str, env: &dyn Environment) -> Result<(), String> {
    if !env.has_btf() {
        return Ok(());
    }
    let Err(missing) = env.tp_btf_args(name) else {
        return Ok(());
    };
    if env
        .expand_tracepoints("*", name)
        .is_ok_and(|found| !found.is_empty())
    {
        return Ok(());
    }
    Err(format!(
        "`rawtracepoint:{name}`: {missing}; raw tracepoints are the kernel's tracepoints \
         (`wprof -l 'tracepoint:*'` lists them)"
    ))
}

/// Argument `n` of a context that is an array of u64 (raw tracepoints,
/// fentry).
pub(super) fn u64_slot(probe: &ResolvedProbe, n: u32) -> Result<ArgRead, String> {
    if n < MAX_ARGS {
        Ok(ArgRead::Slot(8 * n as u16))
    } else {
        Err(format!(
            "`{}` passes at most {MAX_ARGS} arguments, arg0..arg{}",
            probe.name,
            MAX_ARGS - 1
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::fake_machine::FakeMachine;

    /// The category is optional; arguments are u64 slots of the context.
    #[test]
    fn names_and_slots() {
        let spec = Spec {
            word: "rt",
            parts: vec!["sched", "sched_switch"],
        };
        let probes = RawTracepoint
            .resolve("rawtracepoint", &spec, &FakeMachine)
            .unwrap()
            .probes;
        assert_eq!(probes[0].name, "rawtracepoint:sched_switch");
        assert_eq!(
            RawTracepoint.section(&probes[0].attach),
            "raw_tp/sched_switch"
        );
        assert_eq!(RawTracepoint.arg(&probes[0], 2), Ok(ArgRead::Slot(16)));
        assert!(RawTracepoint.arg(&probes[0], 12).is_err());
    }
}
