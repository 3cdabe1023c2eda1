//! `tp_btf:NAME`: BTF-typed raw tracepoints (`BPF_PROG_TYPE_TRACING`,
//! `BPF_TRACE_RAW_TP`). Each argument is one u64 slot of the context, typed
//! from the kernel's `btf_trace_NAME`; the verifier knows the pointers, so
//! `args.next->comm` is a direct load.

use libbpf_rs::{Link, ProgramMut};

use super::{ProbeType, Provider, Resolved, ResolvedProbe, Spec, explain};
use crate::vocab::{ArgRead, AttachPoint, Context, Environment, KernelFeature};

pub struct TpBtf;

impl Provider for TpBtf {
    fn types(&self) -> &'static [ProbeType] {
        &[ProbeType {
            name: "tp_btf",
            aliases: &[],
        }]
    }

    fn resolve(&self, _ty: &str, spec: &Spec, env: &dyn Environment) -> Result<Resolved, String> {
        spec.expect_parts(1, "tp_btf:NAME")?;
        let name = spec.parts[0];
        let args = env.tp_btf_args(name)?;
        Ok(vec![ResolvedProbe::new(
            format!("tp_btf:{name}"),
            AttachPoint::TpBtf { name: name.into() },
            Context::Btf(args),
        )]
        .into())
    }

    fn owns(&self, point: &AttachPoint) -> bool {
        matches!(point, AttachPoint::TpBtf { .. })
    }

    fn section(&self, point: &AttachPoint) -> String {
        match point {
            AttachPoint::TpBtf { name } => format!("tp_btf/{name}"),
            _ => unreachable!("not a tp_btf probe: {point:?}"),
        }
    }

    fn feature(&self, _point: &AttachPoint) -> Option<KernelFeature> {
        Some(KernelFeature::Btf)
    }

    fn arg(&self, _probe: &ResolvedProbe, _n: u32) -> Result<ArgRead, String> {
        Err("tracepoints have `args.FIELD` instead".into())
    }

    fn btf_pointers(&self) -> bool {
        true
    }

    fn attach(
        &self,
        prog: &ProgramMut<'_>,
        point: &AttachPoint,
        _pid: i32,
    ) -> Result<Vec<Link>, String> {
        let AttachPoint::TpBtf { name } = point else {
            unreachable!("not a tp_btf probe: {point:?}");
        };
        prog.attach_trace().map(|l| vec![l]).map_err(|e| {
            explain(
                &e,
                &format!("check that `btf_trace_{name}` is in /sys/kernel/btf/vmlinux"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::fake_machine::FakeMachine;

    /// Arguments come from the tracepoint's BTF; unknown names are errors.
    #[test]
    fn typed_arguments() {
        let spec = |name| Spec {
            word: "tp_btf",
            parts: vec![name],
        };
        let probes = TpBtf
            .resolve("tp_btf", &spec("sched_switch"), &FakeMachine)
            .unwrap()
            .probes;
        assert!(matches!(&probes[0].context, Context::Btf(args) if args.len() == 4));
        assert_eq!(TpBtf.section(&probes[0].attach), "tp_btf/sched_switch");
        assert!(
            TpBtf
                .resolve("tp_btf", &spec("nope"), &FakeMachine)
                .is_err()
        );
    }
}
