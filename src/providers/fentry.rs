//! `fentry:[MODULE:]FUNCTION` and `fexit:` (also `f`, `kfunc`, `fr`,
//! `kretfunc`): kernel functions through BPF trampolines
//! (`BPF_PROG_TYPE_TRACING`), with wildcards. The context is the function's
//! arguments, typed from kernel BTF (`args.file`), one u64 slot each; fexit
//! has the return value in the next slot (`retval`, typed too). Kernels
//! without trampolines refuse the program at load time; that is reported
//! when the probe attaches, so the other probes still run.

use libbpf_rs::{Link, ProgramMut};

use super::{ProbeType, Provider, Resolved, ResolvedProbe, Spec, explain};
use crate::vocab::{ArgRead, AttachPoint, BtfFunction, Context, Environment, KernelFeature};

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

    fn resolve(&self, ty: &str, spec: &Spec, env: &dyn Environment) -> Result<Resolved, String> {
        let exit = ty == "fexit";
        let pattern = match spec.parts[..] {
            [function] => function,
            [module, function] if glob_matches(module, "vmlinux") => function,
            [module, _] => {
                return Err(format!(
                    "`{spec}`: only functions of the kernel itself (`vmlinux`) are typed \
                     here; `{module}` has no BTF in /sys/kernel/btf"
                ));
            }
            _ => {
                return Err(format!(
                    "`{spec}`: {ty} probe type requires 1 or 2 arguments \
                     (`{ty}:FUNCTION` or `{ty}:vmlinux:FUNCTION`)"
                ));
            }
        };
        let functions = env
            .btf_functions(pattern)
            .map_err(|why| format!("`{spec}`: {why}"))?;
        Ok(functions.into_iter().map(|f| probe(ty, exit, f)).collect())
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

    fn arg(&self, _probe: &ResolvedProbe, _n: u32) -> Result<ArgRead, String> {
        Err("fentry and fexit probes name their arguments: `args.NAME`".into())
    }

    fn retval(&self, probe: &ResolvedProbe) -> Option<ArgRead> {
        match &probe.context {
            Context::Function { args, .. } if probe.is_return => {
                Some(ArgRead::Slot(8 * args.len() as u16))
            }
            _ => None,
        }
    }

    fn btf_pointers(&self) -> bool {
        true
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

/// Whether `text` matches the glob `pattern` (an invalid glob matches nothing).
fn glob_matches(pattern: &str, text: &str) -> bool {
    glob::Pattern::new(pattern).is_ok_and(|p| p.matches(text))
}

fn probe(ty: &str, exit: bool, function: BtfFunction) -> ResolvedProbe {
    let mut probe = ResolvedProbe::new(
        format!("{ty}:{}", function.name),
        AttachPoint::Fentry {
            function: function.name.clone(),
            exit,
        },
        Context::Function {
            args: function.args,
            ret: function.ret,
        },
    );
    probe.func = Some(function.name);
    probe.is_return = exit;
    probe
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::fake_machine::FakeMachine;

    fn resolve(ty: &str, parts: &[&str]) -> Result<Resolved, String> {
        let spec = Spec {
            word: ty,
            parts: parts.to_vec(),
        };
        Fentry.resolve(ty, &spec, &FakeMachine)
    }

    /// fexit's return value follows the arguments; the section names the function.
    #[test]
    fn arguments_and_return_value() {
        let probes = resolve("fexit", &["vmlinux", "vfs_read"]).unwrap().probes;
        assert_eq!(probes[0].name, "fexit:vfs_read");
        assert_eq!(Fentry.section(&probes[0].attach), "fexit/vfs_read");
        assert_eq!(Fentry.retval(&probes[0]), Some(ArgRead::Slot(32)));
        assert!(Fentry.arg(&probes[0], 0).is_err());
        let entry = resolve("fentry", &["vfs_*"]).unwrap().probes;
        assert_eq!(entry.len(), 3);
        assert_eq!(Fentry.retval(&entry[0]), None);
        let error = resolve("fentry", &["nf_tables", "f"]).unwrap_err();
        assert!(error.contains("`nf_tables` has no BTF"), "{error}");
    }
}
