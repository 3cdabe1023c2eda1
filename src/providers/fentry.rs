//! `fentry:FUNCTION` and `fexit:` (also `f`, `kfunc`, `fr`, `kretfunc`):
//! kernel functions through BPF trampolines (`BPF_PROG_TYPE_TRACING`). The
//! context is the function's arguments as an array of u64. Kernels without
//! trampolines refuse the program at load time; that is reported when the
//! probe attaches, so the other probes still run.

use libbpf_rs::{Link, ProgramMut};

use super::raw_tracepoint::u64_slot;
use super::{ProbeType, Provider, ResolvedProbe, Spec, explain};
use crate::vocab::{ArgRead, AttachPoint, Context, Environment, KernelFeature, x86_64};

pub struct Fentry;

impl Provider for Fentry {
    fn types(&self) -> &'static [ProbeType] {
        &[
            ProbeType {
                name: "fentry",
                aliases: &["f", "kfunc"],
            },
            ProbeType {
                name: "fexit",
                aliases: &["fr", "kretfunc"],
            },
        ]
    }

    fn resolve(
        &self,
        ty: &str,
        spec: &Spec,
        _env: &dyn Environment,
    ) -> Result<Vec<ResolvedProbe>, String> {
        spec.expect_parts(1, "fentry:FUNCTION")?;
        let exit = ty == "fexit";
        let function = spec.parts[0];
        let mut probe = ResolvedProbe::new(
            format!("{ty}:{function}"),
            AttachPoint::Fentry {
                function: function.into(),
                exit,
            },
            Context::U64Array,
        );
        probe.func = Some(function.into());
        probe.is_return = exit;
        Ok(vec![probe])
    }

    fn owns(&self, point: &AttachPoint) -> bool {
        matches!(point, AttachPoint::Fentry { .. })
    }

    fn section(&self, point: &AttachPoint) -> String {
        match point {
            AttachPoint::Fentry { function, exit } => {
                format!("{}/{function}", if *exit { "fexit" } else { "fentry" })
            }
            _ => unreachable!("not a fentry probe: {point:?}"),
        }
    }

    fn feature(&self, _point: &AttachPoint) -> Option<KernelFeature> {
        Some(KernelFeature::Fentry)
    }

    fn arg(&self, probe: &ResolvedProbe, n: u32) -> Result<ArgRead, String> {
        u64_slot(probe, n)
    }

    fn retval(&self, probe: &ResolvedProbe) -> Option<ArgRead> {
        // fexit's return value is the u64 after the function's arguments,
        // which only BTF tells (issue 13 types fentry arguments); until then
        // this reads slot 10, as wprof always has.
        probe
            .is_return
            .then_some(ArgRead::Slot(x86_64::RETURN_VALUE))
    }

    fn deferred_refusal(&self, reason: &str) -> Option<String> {
        Some(format!(
            "the kernel refused to load it ({reason}); fentry/fexit need BPF trampolines \
             (CONFIG_FUNCTION_TRACER, CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS): \
             use a kprobe or tracepoint instead"
        ))
    }

    fn attach(
        &self,
        prog: &ProgramMut<'_>,
        _point: &AttachPoint,
        _pid: i32,
    ) -> Result<Vec<Link>, String> {
        prog.attach_trace().map(|l| vec![l]).map_err(|e| {
            explain(
                &e,
                "fentry/fexit need BPF trampolines; use a kprobe or tracepoint",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::fake_machine::FakeMachine;

    /// `kretfunc` is fexit, with its section named after the function.
    #[test]
    fn aliases_and_section() {
        let spec = Spec {
            word: "kretfunc",
            parts: vec!["vfs_read"],
        };
        let probes = Fentry.resolve("fexit", &spec, &FakeMachine).unwrap();
        assert_eq!(probes[0].name, "fexit:vfs_read");
        assert_eq!(Fentry.section(&probes[0].attach), "fexit/vfs_read");
        assert_eq!(Fentry.arg(&probes[0], 1), Ok(ArgRead::Slot(8)));
    }
}
