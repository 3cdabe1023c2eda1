//! `kprobe:[MODULE:]FUNCTION[+OFFSET]` and `kretprobe:[MODULE:]FUNCTION`
//! (also `k`, `kr`): kernel functions, with wildcards, from the kernel's
//! traceable functions (or `/proc/kallsyms` where tracefs hides them, said in
//! a warning). Needs `CONFIG_KPROBES`; where the kernel has none, scripts
//! still compile and load (the verifier checks them) and fail at attach
//! naming the missing feature. The context is `struct pt_regs`.

use libbpf_rs::{Link, ProgramMut};

use super::{
    ProbeType, Provider, Resolved, ResolvedProbe, Spec, explain, parse_function_spec, register_arg,
    register_retval,
};
use crate::vocab::{ArgRead, AttachPoint, Context, Environment, KernelFeature, KernelFunction};

pub struct Kprobe;

/// Functions whose kretprobe can deadlock the machine (the return probe
/// takes the locks they implement); bpftrace refuses them too.
const BANNED_KRETPROBES: [&str; 4] = [
    "_raw_spin_lock",
    "_raw_spin_lock_irqsave",
    "_raw_spin_unlock_irqrestore",
    "queued_spin_lock_slowpath",
];

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

    fn resolve(&self, ty: &str, spec: &Spec, env: &dyn Environment) -> Result<Resolved, String> {
        let retprobe = ty == "kretprobe";
        let (module, function) = match spec.parts[..] {
            [function] => (None, function),
            [module, function] => (Some(module), function),
            _ => return Err(wrong_parts(ty, spec)),
        };
        let (pattern, offset) = parse_function_spec(function)?;
        // Refused whether or not this kernel has the function, as bpftrace does.
        if retprobe {
            banned(pattern)?;
        }
        if retprobe && offset != 0 {
            return Err(format!(
                "`{spec}`: kretprobes fire when the function returns, so they take no offset"
            ));
        }
        let found = env
            .kernel_functions(module, pattern)
            .map_err(|why| match module {
                Some(module) if why.contains("module") => format!(
                    "{ty} probe type requires 1 argument, or 2 when the first is a kernel \
                 module: `{module}` is not one ({why})"
                ),
                _ => format!("`{spec}`: {why}"),
            })?;
        if offset != 0 && found.functions.len() != 1 {
            return Err(format!(
                "an offset needs exactly one function, but `{pattern}` matches {}",
                found.functions.len()
            ));
        }
        let probes = (found.functions.iter())
            .map(|f| probe(ty, f, offset, module.is_some()))
            .collect::<Result<Vec<_>, _>>()?;
        // Which functions a wildcard reaches depends on where the list came from.
        let wildcard = pattern.contains(['*', '?', '[']) || module.is_some_and(|m| m.contains('*'));
        let absent = found.absent.map(|why| format!("`{spec}`: {why}"));
        Ok(Resolved {
            probes,
            warnings: found
                .note
                .filter(|_| wildcard)
                .into_iter()
                .chain(absent)
                .collect(),
        })
    }

    /// A function this kernel does not have (renamed, inlined, or a
    /// `.constprop` clone that was not made), as bpftrace skips in a block
    /// with other attach points: `kprobe:blk_account_io_start,
    /// kprobe:__blk_account_io_start`.
    fn target_missing(&self, spec: &Spec, env: &dyn Environment) -> bool {
        let (module, function) = match spec.parts[..] {
            [function] => (None, function),
            [module, function] => (Some(module), function),
            _ => return false,
        };
        let Ok((pattern, _)) = parse_function_spec(function) else {
            return false;
        };
        env.kernel_functions(module, pattern).is_err() && env.kernel_functions(module, "*").is_ok()
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

    fn context_type(&self, _point: &AttachPoint) -> Result<&'static str, String> {
        Ok("struct pt_regs")
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
            module,
            offset,
            retprobe,
        } = point
        else {
            unreachable!("not a kprobe: {point:?}");
        };
        // The kernel looks `MODULE:FUNCTION` up in that module's symbols.
        let symbol = match module {
            Some(module) => format!("{module}:{function}"),
            None => function.clone(),
        };
        let kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists()
            || std::path::Path::new("/sys/kernel/tracing/kprobe_events").exists();
        crate::sys::attach_kprobe(prog, *retprobe, &symbol, *offset)
            .map(|l| vec![l])
            .map_err(|e| match (kprobes, e.kind()) {
                (false, _) => explain(
                    &e,
                    "this kernel has no kprobes (CONFIG_KPROBES is off); use a tracepoint instead",
                ),
                (true, libbpf_rs::ErrorKind::InvalidInput) if *offset != 0 => explain(
                    &e,
                    "possible attachment attempt in the middle of an instruction, \
                     try a different offset",
                ),
                (true, _) => explain(
                    &e,
                    &format!("check `{symbol}` is in /proc/kallsyms and not inlined"),
                ),
            })
    }
}

/// One attach point: the function's probe, its offset checked against its size.
fn probe(
    ty: &str,
    function: &KernelFunction,
    offset: u64,
    named_module: bool,
) -> Result<ResolvedProbe, String> {
    let retprobe = ty == "kretprobe";
    let name = &function.name;
    if retprobe {
        banned(name)?;
    }
    if function.size != 0 && offset >= function.size {
        return Err(format!(
            "Offset outside the function bounds ('{name}' size is {}): +{offset:#x} is past \
             its end (sizes from /proc/kallsyms)",
            function.size
        ));
    }
    let mut shown = match (&function.module, named_module) {
        (Some(module), true) => format!("{ty}:{module}:{name}"),
        _ => format!("{ty}:{name}"),
    };
    if offset != 0 {
        shown.push_str(&format!("+{offset}"));
    }
    let mut probe = ResolvedProbe::new(
        shown,
        AttachPoint::Kprobe {
            function: name.clone(),
            module: function.module.clone(),
            offset,
            retprobe,
        },
        Context::PtRegs,
    );
    probe.func = Some(name.clone());
    probe.is_return = retprobe;
    Ok(probe)
}

/// The spinlock functions whose kretprobes bpftrace refuses: `Err` for them.
fn banned(function: &str) -> Result<(), String> {
    match BANNED_KRETPROBES.contains(&function) {
        true => Err(format!(
            "kretprobe:{function} can't be used as it might lock up your system."
        )),
        false => Ok(()),
    }
}

/// The error for a spec with too many or too few parts, as bpftrace words it.
fn wrong_parts(ty: &str, spec: &Spec) -> String {
    format!(
        "`{spec}`: {ty} probe type requires 1 argument (`{ty}:FUNCTION[+OFFSET]`), \
         or 2 as `{ty}:MODULE:FUNCTION`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::fake_machine::FakeMachine;
    use crate::runtime::bpf::loader::{AttachOptions, load};
    use crate::runtime::bpf::test_support::*;

    fn resolve(word: &str, parts: &[&str]) -> Result<Resolved, String> {
        let ty = match word {
            "kr" | "kretprobe" => "kretprobe",
            _ => "kprobe",
        };
        let spec = Spec {
            word,
            parts: parts.to_vec(),
        };
        Kprobe.resolve(ty, &spec, &FakeMachine)
    }

    /// `func` is the function without its offset; kretprobes have `retval`.
    #[test]
    fn functions_and_offsets() {
        let probes = resolve("k", &["vfs_read+0x4"]).unwrap().probes;
        assert_eq!(probes[0].name, "kprobe:vfs_read+4");
        assert_eq!(probes[0].func.as_deref(), Some("vfs_read"));
        assert!(matches!(
            probes[0].attach,
            AttachPoint::Kprobe {
                offset: 4,
                retprobe: false,
                ..
            }
        ));
        let probes = resolve("kr", &["vfs_read"]).unwrap().probes;
        assert_eq!(Kprobe.section(&probes[0].attach), "kretprobe");
        assert!(Kprobe.retval(&probes[0]).is_some());
        let error = resolve("kr", &["vfs_read+4"]).unwrap_err();
        assert!(error.contains("take no offset"), "{error}");
        let error = resolve("k", &["vfs_read+64"]).unwrap_err();
        assert!(
            error.starts_with("Offset outside the function bounds ('vfs_read' size is 64)"),
            "{error}"
        );
    }

    /// Wildcards expand to every matching function; `vmlinux:` is the kernel.
    #[test]
    fn wildcards_and_modules() {
        let probes = resolve("kprobe", &["vmlinux", "vfs_read*"]).unwrap().probes;
        let names: Vec<&str> = probes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["kprobe:vfs_read", "kprobe:vfs_readv"]);
        let error = resolve("kprobe", &["syscalls", "sys_exit_nanosleep"]).unwrap_err();
        assert!(
            error.contains("kprobe probe type requires 1 argument"),
            "{error}"
        );
        assert!(error.contains("no kernel module `syscalls`"), "{error}");
        let error = resolve("kprobe", &["a", "b", "c"]).unwrap_err();
        assert!(error.contains("requires 1 argument"), "{error}");
    }

    /// The spinlock kretprobes bpftrace bans are refused when resolving.
    #[test]
    fn banned_kretprobes() {
        for name in BANNED_KRETPROBES {
            let error = resolve("kretprobe", &[name]).unwrap_err();
            assert_eq!(
                error,
                format!("kretprobe:{name} can't be used as it might lock up your system.")
            );
            assert!(resolve("kprobe", &[name]).is_ok());
        }
    }

    /// Attaching a kprobe fails with an AttachError naming the probe.
    #[test]
    fn kprobe_attach_error_names_probe() {
        let attach = AttachPoint::Kprobe {
            function: "wprof_no_such_function".into(),
            module: None,
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
