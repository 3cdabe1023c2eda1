//! `uprobe:BINARY:FUNCTION[+OFFSET]` and `uretprobe:` (also `u`, `ur`): user
//! functions, with wildcards, in a binary named by path, by program name in
//! `$PATH` or by library name (resolved as the dynamic loader would). The
//! context is `struct pt_regs`: `arg0..arg5` are the argument registers,
//! `retval` the return register.

use std::path::Path;

use libbpf_rs::{Link, ProgramMut, UprobeOpts};

use super::{
    ProbeType, Provider, Resolved, ResolvedProbe, Spec, explain, for_each_binary,
    parse_function_spec, register_arg, register_retval,
};
use crate::symbols::cpp_demangling;
use crate::vocab::{
    ArgRead, AttachPoint, Context, Environment, FunctionParam, FunctionTarget, KernelFeature,
};

pub struct Uprobe;

impl Provider for Uprobe {
    fn registers(&self) -> bool {
        true
    }

    fn types(&self) -> &'static [ProbeType] {
        &[
            ProbeType {
                name: "uprobe",
                aliases: &["u"],
            },
            ProbeType {
                name: "uretprobe",
                aliases: &["ur"],
            },
        ]
    }

    fn resolve(&self, ty: &str, spec: &Spec, env: &dyn Environment) -> Result<Resolved, String> {
        spec.expect_parts(2, "uprobe:BINARY:FUNCTION[+OFFSET]")?;
        let (pattern, extra) = parse_function_spec(spec.parts[1])?;
        let found = for_each_binary(env, spec.parts[0], |binary| {
            Site::new(ty, binary, pattern, extra).resolve(env)
        });
        match found {
            Ok(probes) => Ok(probes.into()),
            Err(why) => Site::new(ty, spec.parts[0], pattern, extra).absent(spec, env, why),
        }
    }

    fn target_missing(&self, spec: &Spec, env: &dyn Environment) -> bool {
        let [binary, function] = spec.parts[..] else {
            return false;
        };
        let Ok((pattern, _)) = parse_function_spec(function) else {
            return false;
        };
        matches!(address_of(pattern), Ok(None))
            && env.functions(binary, pattern).is_err()
            && env.functions(binary, "*").is_ok()
    }

    fn owns(&self, point: &AttachPoint) -> bool {
        matches!(point, AttachPoint::Uprobe { .. })
    }

    fn section(&self, point: &AttachPoint) -> String {
        match point {
            AttachPoint::Uprobe { retprobe: true, .. } => "uretprobe".into(),
            _ => "uprobe".into(),
        }
    }

    fn feature(&self, _point: &AttachPoint) -> Option<KernelFeature> {
        Some(KernelFeature::Uprobes)
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

    fn function_params(
        &self,
        probe: &ResolvedProbe,
        env: &dyn Environment,
    ) -> Option<Result<Vec<FunctionParam>, String>> {
        match &probe.attach {
            AttachPoint::Uprobe {
                binary,
                symbol,
                retprobe: false,
                ..
            } => Some(env.function_params(binary, symbol)),
            _ => None,
        }
    }

    fn attach(
        &self,
        prog: &ProgramMut<'_>,
        point: &AttachPoint,
        pid: i32,
    ) -> Result<Vec<Link>, String> {
        let AttachPoint::Uprobe {
            binary,
            offset,
            retprobe,
            ..
        } = point
        else {
            unreachable!("not a uprobe: {point:?}");
        };
        attach_uprobe(prog, pid, binary, *offset, 0, *retprobe)
    }
}

/// A uprobe spec in one binary: `TYPE:BINARY:PATTERN[+EXTRA]`.
struct Site<'a> {
    ty: &'a str,
    binary: &'a str,
    pattern: &'a str,
    extra: u64,
    retprobe: bool,
}

impl<'a> Site<'a> {
    fn new(ty: &'a str, binary: &'a str, pattern: &'a str, extra: u64) -> Self {
        Site {
            ty,
            binary,
            pattern,
            extra,
            retprobe: ty == "uretprobe",
        }
    }

    /// The probes of the functions the pattern names, or at its address.
    fn resolve(&self, env: &dyn Environment) -> Result<Vec<ResolvedProbe>, String> {
        let Site {
            ty,
            binary,
            pattern,
            extra,
            retprobe,
        } = *self;
        if let Some(address) = address_of(pattern)? {
            let (path, functions) = env.functions(binary, "*")?;
            let (target, into) = containing(&functions, address).ok_or_else(|| {
                format!(
                    "Could not resolve address: {binary}:{address:#x} (no function of {} holds it)",
                    path.display()
                )
            })?;
            let offset = offset_in(target, into + extra, &path)?;
            let name = format!("{ty}:{}:{address:#x}", path.display());
            let entry = !retprobe && into + extra == 0;
            return Ok(vec![uprobe(name, &path, target, offset, retprobe, entry)]);
        }
        let (path, targets) = env.functions(binary, pattern)?;
        if extra != 0 && targets.len() != 1 {
            return Err(format!(
                "an offset needs exactly one function, but `{pattern}` matches {}",
                targets.len()
            ));
        }
        targets
            .iter()
            .map(|target| {
                let offset = offset_in(target, extra, &path)?;
                let name = format!("{ty}:{}:{}", path.display(), target.name);
                let entry = !retprobe && extra == 0;
                Ok(uprobe(name, &path, target, offset, retprobe, entry))
            })
            .collect()
    }

    /// A function named exactly that the binary lacks (`why` says so): the
    /// error adds which library the binary loads defines it, and a
    /// compile-only run compiles the probe as written, with a warning, as
    /// `bpftrace -d` and `--emit-elf` do (a bpftrace 0.17 run drops such
    /// a probe silently; wprof refuses).
    fn absent(&self, spec: &Spec, env: &dyn Environment, why: String) -> Result<Resolved, String> {
        let (ty, binary, pattern, extra) = (self.ty, self.binary, self.pattern, self.extra);
        let exact = ![binary, pattern]
            .iter()
            .any(|part| part.contains(['*', '?', '[']));
        let missing = exact && matches!(address_of(pattern), Ok(None));
        let Some(missing) = missing
            .then(|| env.missing_function(binary, pattern))
            .flatten()
        else {
            return Err(why);
        };
        let why = match &missing.defined_in {
            Some(library) => format!(
                "{why} ({pattern} is in {}, which it loads: {ty}:{}:{pattern})",
                library.display(),
                library_name(library)
            ),
            None => why,
        };
        if !missing.compile_as_written {
            return Err(why);
        }
        let target = FunctionTarget {
            name: pattern.to_string(),
            address: 0,
            file_offset: 0,
            size: 0,
            demangled: None,
        };
        let name = format!("{ty}:{}:{pattern}", missing.binary.display());
        let entry = !self.retprobe && extra == 0;
        let probe = uprobe(name, &missing.binary, &target, extra, self.retprobe, entry);
        Ok(Resolved {
            probes: vec![probe],
            warnings: vec![format!(
                "`{spec}`: {why}: compiled as written, attaching it would fail"
            )],
        })
    }
}

/// A library's name as a uprobe spec names it: `libc` for `.../libc.so.6`.
fn library_name(path: &Path) -> String {
    let file = path.file_name().unwrap_or_default().to_string_lossy();
    match file.split_once(".so") {
        Some((name, _)) => name.to_string(),
        None => file.into_owned(),
    }
}

/// The probe at `offset` in `path`, inside `target`; `entry` when it is the
/// function's first instruction.
fn uprobe(
    name: String,
    path: &Path,
    target: &FunctionTarget,
    offset: u64,
    retprobe: bool,
    entry: bool,
) -> ResolvedProbe {
    let mut probe = ResolvedProbe::new(
        name,
        AttachPoint::Uprobe {
            binary: path.to_path_buf(),
            symbol: target.name.clone(),
            offset,
            retprobe,
        },
        Context::PtRegs,
    );
    // `func` names C++ functions as bpftrace prints them; `probe` keeps the symbol.
    let demangled = target.demangled.clone().filter(|_| cpp_demangling());
    probe.func = Some(demangled.unwrap_or_else(|| target.name.clone()));
    probe.user_memory = true;
    probe.is_return = retprobe;
    probe.function_entry = entry;
    probe
}

/// `0x401126` (or decimal) in the function part: a probe at an address.
/// Function names never start with a digit.
fn address_of(text: &str) -> Result<Option<u64>, String> {
    if !text.starts_with(|c: char| c.is_ascii_digit()) {
        return Ok(None);
    }
    super::parse_number(text)
        .map(Some)
        .ok_or_else(|| format!("`{text}` is neither a function name nor an address"))
}

/// The function whose code holds `address`, and how far into it.
fn containing(functions: &[FunctionTarget], address: u64) -> Option<(&FunctionTarget, u64)> {
    functions.iter().find_map(|f| {
        let into = address.checked_sub(f.address)?;
        (into < f.size.max(1)).then_some((f, into))
    })
}

/// The file offset `extra` bytes into `target`, which must stay inside the
/// function when the symbol table gives its size.
fn offset_in(target: &FunctionTarget, extra: u64, binary: &Path) -> Result<u64, String> {
    let outside = || {
        format!(
            "Offset outside the function bounds ('{}' size is {}): offset {extra:#x} in {}",
            target.name,
            target.size,
            binary.display()
        )
    };
    if target.size != 0 && extra >= target.size {
        return Err(outside());
    }
    target.file_offset.checked_add(extra).ok_or_else(outside)
}

/// Attaches a uprobe (or a USDT probe, with its semaphore's file offset as
/// `ref_ctr_offset`) at a file offset of `binary`, for `pid` or every process.
pub(super) fn attach_uprobe(
    prog: &ProgramMut<'_>,
    pid: i32,
    binary: &Path,
    offset: u64,
    ref_ctr_offset: u64,
    retprobe: bool,
) -> Result<Vec<Link>, String> {
    let to_usize = |v: u64| usize::try_from(v).map_err(|_| format!("offset {v:#x} too large"));
    let opts = UprobeOpts {
        ref_ctr_offset: to_usize(ref_ctr_offset)?,
        retprobe,
        ..Default::default()
    };
    prog.attach_uprobe_with_opts(pid, binary, to_usize(offset)?, opts)
        .map(|l| vec![l])
        .map_err(|e| {
            let advice = if ref_ctr_offset != 0 && e.kind() == libbpf_rs::ErrorKind::InvalidInput {
                // uprobe_register: one address, one ref_ctr_offset (Linux 4.20+).
                "another uprobe at this address may use a different semaphore offset".to_string()
            } else {
                format!(
                    "check that {} exists and is readable, and that the process (-p) is alive",
                    binary.display()
                )
            };
            explain(&e, &advice)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::fake_machine::FakeMachine;
    use crate::runtime::bpf::loader::{AttachOptions, load};
    use crate::runtime::bpf::test_support::*;
    use crate::vocab::{MapId, MapKind};

    fn spec<'a>(word: &'a str, function: &'a str) -> Spec<'a> {
        Spec {
            word,
            parts: vec!["/bin/x", function],
        }
    }

    /// A library is named in a spec by its file name up to `.so`.
    #[test]
    fn library_names() {
        let name = |path: &str| library_name(Path::new(path));
        assert_eq!(name("/lib/x86_64-linux-gnu/libc.so.6"), "libc");
        assert_eq!(name("/usr/lib/libssl.so"), "libssl");
        assert_eq!(name("/opt/app/plugin"), "plugin");
    }

    /// Offsets are added to the function's file offset, inside the function.
    #[test]
    fn offsets_inside_the_function() {
        let probes = Uprobe
            .resolve("uretprobe", &spec("ur", "f+0x10"), &FakeMachine)
            .unwrap()
            .probes;
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
        assert_eq!(Uprobe.section(&probes[0].attach), "uretprobe");
        let error = Uprobe
            .resolve("uprobe", &spec("u", "f+0x400"), &FakeMachine)
            .unwrap_err();
        assert_eq!(
            error,
            "Offset outside the function bounds ('f' size is 64): offset 0x400 in /bin/x"
        );
        let error = Uprobe
            .resolve("uprobe", &spec("u", "f+x"), &FakeMachine)
            .unwrap_err();
        assert!(error.contains("invalid offset in `f+x`"), "{error}");
    }

    /// An address names the function holding it; one outside every function is refused.
    #[test]
    fn addresses() {
        let probe = &Uprobe
            .resolve("uprobe", &spec("u", "0x401010"), &FakeMachine)
            .unwrap()
            .probes[0];
        assert_eq!(probe.name, "uprobe:/bin/x:0x401010");
        assert!(!probe.function_entry);
        assert!(matches!(
            probe.attach,
            AttachPoint::Uprobe { offset: 0x1010, .. }
        ));
        let error = Uprobe
            .resolve("uprobe", &spec("u", "4096"), &FakeMachine)
            .unwrap_err();
        assert!(
            error.starts_with("Could not resolve address: /bin/x:0x1000"),
            "{error}"
        );
        let error = Uprobe
            .resolve("uprobe", &spec("u", "0xzz"), &FakeMachine)
            .unwrap_err();
        assert!(
            error.contains("neither a function name nor an address"),
            "{error}"
        );
    }

    /// Arguments are the x86-64 argument registers; return probes have `retval`.
    #[test]
    fn registers() {
        let entry = &Uprobe
            .resolve("uprobe", &spec("u", "f"), &FakeMachine)
            .unwrap()
            .probes[0];
        assert!(entry.function_entry);
        assert_eq!(Uprobe.arg(entry, 1), Ok(ArgRead::Slot(104)));
        assert!(Uprobe.arg(entry, 6).is_err());
        assert_eq!(Uprobe.retval(entry), None);
        let ret = &Uprobe
            .resolve("uretprobe", &spec("ur", "f"), &FakeMachine)
            .unwrap()
            .probes[0];
        assert_eq!(Uprobe.retval(ret), Some(ArgRead::Slot(80)));
        assert!(Uprobe.arg(ret, 0).is_err());
    }

    const COUNTS: MapId = MapId(1);

    #[unsafe(no_mangle)]
    #[inline(never)]
    extern "C" fn wprof_loader_uprobe_target(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_add(1)
    }

    /// A uprobe on a function of the test binary counts its calls (pid filter on).
    #[test]
    fn uprobe_counts_calls() {
        let addr = wprof_loader_uprobe_target as *const () as usize;
        let (binary, offset) = self_file_offset(addr);
        let mut asm = Assembler::new();
        asm.count(COUNTS).ret0();
        let attach = AttachPoint::Uprobe {
            binary,
            symbol: "wprof_loader_uprobe_target".into(),
            offset,
            retprobe: false,
        };
        let prog = asm.program("up", "uprobe:self:wprof_loader_uprobe_target", attach);
        let counts = map("counts", MapKind::Array, 4, 8, 1);
        let mut loaded = load(&with_ring(vec![counts], vec![prog])).expect("load");
        let pid = i32::try_from(std::process::id()).expect("pid");
        loaded
            .attach_all(AttachOptions {
                pid: Some(pid),
                ..Default::default()
            })
            .expect("attach");
        for i in 0..4 {
            std::hint::black_box(wprof_loader_uprobe_target(i));
        }
        assert_eq!(sum_u64(&loaded.map_entries(COUNTS).expect("entries")), 4);
    }
}
