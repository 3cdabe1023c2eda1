//! `kprobe:FUNCTION[+OFFSET]` and `kretprobe:` (also `k`, `kr`): kernel
//! functions. Needs `CONFIG_KPROBES`; where the kernel has none, scripts
//! still compile (`--dump-bpf`) and fail naming the missing feature. The
//! context is `struct pt_regs`, as for uprobes.

use libbpf_rs::{Link, ProgramMut};

use super::{
    ProbeType, Provider, ResolvedProbe, Spec, explain, parse_function_spec, register_arg,
    register_retval,
};
use crate::vocab::{ArgRead, AttachPoint, Context, Environment, KernelFeature};

pub struct Kprobe;

impl Provider for Kprobe {
    fn registers(&self) -> bool {
        true
    }

    fn types(&self) -> &'static [ProbeType] {
        &[
            ProbeType {
                name: "kprobe",
                aliases: &["k"],
            },
            ProbeType {
                name: "kretprobe",
                aliases: &["kr"],
            },
        ]
    }

    fn resolve(
        &self,
        ty: &str,
        spec: &Spec,
        _env: &dyn Environment,
    ) -> Result<Vec<ResolvedProbe>, String> {
        spec.expect_parts(1, "kprobe:FUNCTION[+OFFSET]")?;
        let retprobe = ty == "kretprobe";
        let (function, offset) = parse_function_spec(spec.parts[0])?;
        let mut probe = ResolvedProbe::new(
            format!("{ty}:{}", spec.parts[0]),
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

    fn owns(&self, point: &AttachPoint) -> bool {
        matches!(point, AttachPoint::Kprobe { .. })
    }

    fn section(&self, point: &AttachPoint) -> String {
        match point {
            AttachPoint::Kprobe { retprobe: true, .. } => "kretprobe".into(),
            _ => "kprobe".into(),
        }
    }

    fn feature(&self, _point: &AttachPoint) -> Option<KernelFeature> {
        Some(KernelFeature::Kprobes)
    }

    fn arg(&self, probe: &ResolvedProbe, n: u32) -> Result<ArgRead, String> {
        register_arg(probe, n)
    }

    fn retval(&self, probe: &ResolvedProbe) -> Option<ArgRead> {
        register_retval(probe)
    }

    fn attach(
        &self,
        prog: &ProgramMut<'_>,
        point: &AttachPoint,
        _pid: i32,
    ) -> Result<Vec<Link>, String> {
        let AttachPoint::Kprobe {
            function,
            offset,
            retprobe,
        } = point
        else {
            unreachable!("not a kprobe: {point:?}");
        };
        if *offset != 0 {
            return Err("kprobes at an offset inside a function are not supported".into());
        }
        let kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists()
            || std::path::Path::new("/sys/kernel/tracing/kprobe_events").exists();
        prog.attach_kprobe(*retprobe, function)
            .map(|l| vec![l])
            .map_err(|e| {
                if kprobes {
                    explain(
                        &e,
                        &format!("check `{function}` is in /proc/kallsyms and not inlined"),
                    )
                } else {
                    explain(
                        &e,
                        "this kernel has no kprobes (CONFIG_KPROBES is off); use a tracepoint instead",
                    )
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::fake_machine::FakeMachine;
    use crate::runtime::bpf::loader::{AttachOptions, load};
    use crate::runtime::bpf::test_support::*;

    /// `func` is the function without its offset; kretprobes have `retval`.
    #[test]
    fn functions_and_offsets() {
        let spec = Spec {
            word: "kr",
            parts: vec!["vfs_read+0x4"],
        };
        let probes = Kprobe.resolve("kretprobe", &spec, &FakeMachine).unwrap();
        assert_eq!(probes[0].name, "kretprobe:vfs_read+0x4");
        assert_eq!(probes[0].func.as_deref(), Some("vfs_read"));
        assert!(matches!(
            probes[0].attach,
            AttachPoint::Kprobe {
                offset: 4,
                retprobe: true,
                ..
            }
        ));
        assert_eq!(Kprobe.section(&probes[0].attach), "kretprobe");
        assert!(Kprobe.retval(&probes[0]).is_some());
    }

    /// Attaching a kprobe fails with an AttachError naming the probe.
    #[test]
    fn kprobe_attach_error_names_probe() {
        let attach = AttachPoint::Kprobe {
            function: "wprof_no_such_function".into(),
            offset: 0,
            retprobe: false,
        };
        let prog = empty_program("kp", "kprobe:wprof_no_such_function", attach);
        let mut loaded = load(&with_ring(vec![], vec![prog])).expect("load");
        let err = loaded
            .attach_all(AttachOptions::default())
            .expect_err("kprobe attached");
        assert_eq!(err.probe, "kprobe:wprof_no_such_function");
        assert!(!err.reason.is_empty());
        println!("kprobe: {err}");
    }
}
