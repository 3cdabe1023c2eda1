//! `tracepoint:CATEGORY:NAME` (also `t`): classic tracepoints, with
//! wildcards, whose `args.FIELD` come from the tracefs `format` file.

use libbpf_rs::{Link, ProgramMut, TracepointCategory};

use super::{ProbeType, Provider, Resolved, ResolvedProbe, Spec, explain};
use crate::vocab::{AttachPoint, Context, Environment, KernelFeature};

pub struct Tracepoint;

impl Provider for Tracepoint {
    fn types(&self) -> &'static [ProbeType] {
        &[ProbeType {
            name: "tracepoint",
            aliases: &["t"],
        }]
    }

    fn resolve(&self, _ty: &str, spec: &Spec, env: &dyn Environment) -> Result<Resolved, String> {
        spec.expect_parts(2, "tracepoint:CATEGORY:NAME")?;
        let mut probes = Vec::new();
        for (category, name) in env.expand_tracepoints(spec.parts[0], spec.parts[1])? {
            let fields = env.tracepoint_fields(&category, &name)?;
            let mut probe = ResolvedProbe::new(
                format!("tracepoint:{category}:{name}"),
                AttachPoint::Tracepoint {
                    category: category.clone(),
                    name,
                },
                Context::Tracepoint(fields),
            );
            // Syscall arguments point into the calling process.
            probe.user_memory = category == "syscalls";
            probes.push(probe);
        }
        Ok(probes.into())
    }

    fn owns(&self, point: &AttachPoint) -> bool {
        matches!(point, AttachPoint::Tracepoint { .. })
    }

    fn section(&self, point: &AttachPoint) -> String {
        match point {
            AttachPoint::Tracepoint { category, name } => format!("tracepoint/{category}/{name}"),
            _ => unreachable!("not a tracepoint: {point:?}"),
        }
    }

    fn feature(&self, _point: &AttachPoint) -> Option<KernelFeature> {
        Some(KernelFeature::Tracepoints)
    }

    fn arg(&self, _probe: &ResolvedProbe, _n: u32) -> Result<crate::vocab::ArgRead, String> {
        Err("tracepoints have `args.FIELD` instead".into())
    }

    fn context_type(&self, _point: &AttachPoint) -> Result<&'static str, String> {
        Err("use args instead of ctx in tracepoint probes: `args.NAME`".into())
    }

    fn attach(
        &self,
        prog: &ProgramMut<'_>,
        point: &AttachPoint,
        _pid: i32,
    ) -> Result<Vec<Link>, String> {
        let AttachPoint::Tracepoint { category, name } = point else {
            unreachable!("not a tracepoint: {point:?}");
        };
        prog.attach_tracepoint(TracepointCategory::Custom(category.clone()), name)
            .map(|l| vec![l])
            .map_err(|e| {
                explain(
                    &e,
                    &format!("check /sys/kernel/tracing/events/{category}/{name} exists"),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::fake_machine::FakeMachine;

    /// A wildcard expands to every matching tracepoint, each with its fields;
    /// syscall arguments are user memory.
    #[test]
    fn expands_wildcards() {
        let spec = Spec {
            word: "t",
            parts: vec!["syscalls", "sys_enter_*"],
        };
        let probes = Tracepoint
            .resolve("tracepoint", &spec, &FakeMachine)
            .unwrap()
            .probes;
        let names: Vec<&str> = probes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "tracepoint:syscalls:sys_enter_openat",
                "tracepoint:syscalls:sys_enter_write"
            ]
        );
        assert!(probes.iter().all(|p| p.user_memory));
        assert!(matches!(&probes[0].context, Context::Tracepoint(fields) if !fields.is_empty()));
        assert_eq!(
            Tracepoint.section(&probes[0].attach),
            "tracepoint/syscalls/sys_enter_openat"
        );
    }
}
