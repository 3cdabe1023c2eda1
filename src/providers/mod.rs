//! Probe providers: everything about one kind of probe in one file, as ply's
//! providers. A provider turns a probe spec (`uprobe:libc:malloc+4`) into
//! attach points with their context, says how `argN` and `retval` are read
//! from that context, which kernel feature the probe needs, which libbpf
//! section (program type) it loads as, and attaches it.
//!
//! The stages ask here instead of matching on probe kinds: the checker
//! resolves specs and types arguments, codegen lowers the argument reads the
//! checker chose, the driver checks kernel support, the loader names sections
//! and attaches. Adding a probe type is a file here, its line in
//! [`PROVIDERS`] and its [`AttachPoint`] variant.

mod fentry;
mod iter;
mod kprobe;
mod perf;
mod raw_tracepoint;
mod special;
mod tp_btf;
mod tracepoint;
mod uprobe;
mod usdt;
mod watchpoint;

use std::fmt;

use libbpf_rs::{Link, ProgramMut};

use crate::capture::model::RecordOrigin;
use crate::vocab::{ArgRead, AttachPoint, Context, Environment, FunctionParam, KernelFeature};

/// One kind of probe, from spec to attached program.
pub trait Provider: Sync {
    /// The probe types this provider makes, as scripts name them.
    fn types(&self) -> &'static [ProbeType];

    /// Expands a spec whose word is one of this provider's types (`ty` is
    /// that type's name) into attach points; an error is a message for the spec.
    fn resolve(&self, ty: &str, spec: &Spec, env: &dyn Environment) -> Result<Resolved, String>;

    /// Whether `point` is one of this provider's attach points.
    fn owns(&self, point: &AttachPoint) -> bool;

    /// The libbpf section name, which selects the program type.
    fn section(&self, point: &AttachPoint) -> String;

    /// The kernel feature the probe cannot run without.
    fn feature(&self, _point: &AttachPoint) -> Option<KernelFeature> {
        None
    }

    /// How `argN` is read; an error says why there is no such argument.
    fn arg(&self, probe: &ResolvedProbe, _n: u32) -> Result<ArgRead, String> {
        Err(format!("`{}` probes have no arguments", probe.name))
    }

    /// How `retval` is read, where the probe has one.
    fn retval(&self, _probe: &ResolvedProbe) -> Option<ArgRead> {
        None
    }

    /// The probed function's parameters as its debug info names them
    /// (`args.NAME`), where the probe is on a function's entry.
    fn function_params(
        &self,
        _probe: &ResolvedProbe,
        _env: &dyn Environment,
    ) -> Option<Result<Vec<FunctionParam>, String>> {
        None
    }

    /// Whether the context starts with the interrupted task's registers
    /// (`struct pt_regs`), which `reg()` reads.
    fn registers(&self) -> bool {
        false
    }

    /// Whether pointers the probe gets are BTF-typed for the verifier
    /// (`BPF_PROG_TYPE_TRACING` with typed arguments): they can then be read
    /// directly and passed to helpers taking BTF pointers.
    fn btf_pointers(&self) -> bool {
        false
    }

    /// Whether an address cast to a pointer here (`(struct x *)arg0`) is
    /// known to be kernel or user memory. Where it is not (BEGIN/END, timers,
    /// perf events, watchpoints: they may interrupt either), it is read with
    /// `bpf_probe_read`, which picks the space by the address, as bpftrace does.
    fn memory_space_known(&self) -> bool {
        true
    }

    /// The C type `ctx` points to in this probe's programs.
    fn context_type(&self, _point: &AttachPoint) -> Result<&'static str, String> {
        Err("`ctx` is not available in these probes".into())
    }

    /// Code every program of this probe starts with.
    fn prologue(&self, _point: &AttachPoint) -> Prologue {
        Prologue::None
    }

    /// Whether the probe must be the only one attached besides BEGIN and
    /// END (an iterator runs once, then tracing ends).
    fn runs_alone(&self) -> bool {
        false
    }

    /// Whether the program runs in wprof's own thread (an iterator, as
    /// wprof reads it), so wprof's own events must not be ignored.
    fn fires_in_wprof(&self) -> bool {
        false
    }

    /// Whether the program runs once (BEGIN, END) instead of being attached.
    fn runs_once(&self) -> bool {
        false
    }

    /// Whether the probe fires every N events or nanoseconds counted from
    /// when it is attached (perf events): the session attaches it after
    /// BEGIN has run, so `interval:ms:500` fires 500 ms after BEGIN.
    fn counts_from_attach(&self, _point: &AttachPoint) -> bool {
        false
    }

    /// Whether the session attaches the program later, when it learns where
    /// (a watchpoint on a function's argument), instead of with the others.
    fn attached_later(&self, _point: &AttachPoint) -> bool {
        false
    }

    /// Where the kernel stack of a program of this kind starts: `None` at
    /// the registers its context holds (the traced event's: a tracepoint's
    /// caller, a kprobe's function, a sample's interrupted code; the user's
    /// for uprobes); `Some(slot)` above the tracer's own frames (the BPF
    /// program and the raw tracepoint glue), which the kernel is told to
    /// skip: their number, measured at start-up, is in that global.
    fn kernel_stack_skip(&self) -> Option<crate::vocab::GlobalSlot> {
        None
    }

    /// When the kernel refuses to load programs of this kind, the message
    /// to report at attach time instead of failing the whole load (so other
    /// probes still run); `None` makes the refusal a load error.
    fn deferred_refusal(&self, _reason: &str) -> Option<String> {
        None
    }

    /// Whether a spec that failed to resolve names a target missing from an
    /// existing binary (a function the library does not have): a block with
    /// other attach points then skips it with a warning.
    fn target_missing(&self, _spec: &Spec, _env: &dyn Environment) -> bool {
        false
    }

    /// Attaches the loaded program; the links keep it attached.
    fn attach(
        &self,
        prog: &ProgramMut<'_>,
        point: &AttachPoint,
        pid: i32,
    ) -> Result<Vec<Link>, String>;
}

/// Code a provider's programs start with, after the context is saved and
/// before the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prologue {
    None,
    /// BPF iterators: return unless the pointer at `object` in the context
    /// (the task) is set (the kernel makes one last call with none), then
    /// write one byte to the iterator's seq file, so that each `read()`
    /// covers a bounded batch of objects and the ring buffer is drained
    /// between batches.
    Iterator {
        object: u16,
    },
}

/// A probe type as scripts name it: `uprobe`, also written `u`.
#[derive(Clone, Copy, Debug)]
pub struct ProbeType {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
}

/// Every provider, in the order `unknown probe type` lists their types.
pub static PROVIDERS: &[&dyn Provider] = &[
    &special::Special,
    &uprobe::Uprobe,
    &usdt::Usdt,
    &tracepoint::Tracepoint,
    &raw_tracepoint::RawTracepoint,
    &tp_btf::TpBtf,
    &kprobe::Kprobe,
    &fentry::Fentry,
    &perf::Perf,
    &watchpoint::Watchpoint,
    &iter::Iter,
];

/// A probe spec as written: the probe type word and the parts after it, as
/// `uprobe:libc:malloc` is `uprobe` with `["libc", "malloc"]`.
#[derive(Clone, Debug)]
pub struct Spec<'a> {
    pub word: &'a str,
    pub parts: Vec<&'a str>,
}

impl fmt::Display for Spec<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word)?;
        for part in &self.parts {
            write!(f, ":{part}")?;
        }
        Ok(())
    }
}

impl Spec<'_> {
    /// `Ok` when the spec has `n` parts, else the error naming `form`.
    fn expect_parts(&self, n: usize, form: &str) -> Result<(), String> {
        if self.parts.len() == n {
            Ok(())
        } else {
            Err(format!("`{self}`: expected the form `{form}`"))
        }
    }
}

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

/// What one spec resolves to: its attach points, and what the user should
/// know about how they were found.
#[derive(Clone, Debug, Default)]
pub struct Resolved {
    pub probes: Vec<ResolvedProbe>,
    /// Sentences for stderr (`kernel functions are listed from /proc/kallsyms ...`).
    pub warnings: Vec<String>,
}

impl From<Vec<ResolvedProbe>> for Resolved {
    fn from(probes: Vec<ResolvedProbe>) -> Self {
        Resolved {
            probes,
            warnings: Vec::new(),
        }
    }
}

impl FromIterator<ResolvedProbe> for Resolved {
    fn from_iter<I: IntoIterator<Item = ResolvedProbe>>(probes: I) -> Self {
        Vec::from_iter(probes).into()
    }
}

/// Why a spec did not resolve.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolveError {
    pub message: String,
    pub help: Option<String>,
    /// The spec's binary exists but not what it names ([`Provider::target_missing`]).
    pub missing: bool,
}

/// Expands one spec into its attach points, through the provider of its word.
pub fn resolve(spec: &Spec, env: &dyn Environment) -> Result<Resolved, ResolveError> {
    let found = PROVIDERS.iter().find_map(|provider| {
        let ty = provider
            .types()
            .iter()
            .find(|ty| ty.name == spec.word || ty.aliases.contains(&spec.word))?;
        Some((*provider, ty.name))
    });
    let Some((provider, ty)) = found else {
        let names: Vec<&str> = PROVIDERS
            .iter()
            .flat_map(|p| p.types())
            .map(|ty| ty.name)
            .collect();
        return Err(ResolveError {
            message: format!("unknown probe type `{}`", spec.word),
            help: Some(format!("probe types: {}", names.join(", "))),
            missing: false,
        });
    };
    provider
        .resolve(ty, spec, env)
        .map_err(|message| ResolveError {
            message,
            help: None,
            missing: provider.target_missing(spec, env),
        })
}

/// `found` for each binary a uprobe or USDT target names ([`Environment::expand_binary`]),
/// joined. When a glob names several files, those where nothing matches are
/// passed over, as bpftrace does; the first error is kept for when none match.
pub fn for_each_binary<T>(
    env: &dyn Environment,
    binary: &str,
    mut found: impl FnMut(&str) -> Result<Vec<T>, String>,
) -> Result<Vec<T>, String> {
    let binaries = env.expand_binary(binary)?;
    if let [only] = binaries.as_slice() {
        return found(only);
    }
    let mut all = Vec::new();
    let mut first_error = None;
    for binary in &binaries {
        match found(binary) {
            Ok(items) => all.extend(items),
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    match (all.is_empty(), first_error) {
        (true, Some(error)) => Err(format!("{error} (nor in the other files `{binary}` names)")),
        _ => Ok(all),
    }
}

/// Whether `--only-command` keeps a probe of `origin` at `point` to the
/// command's process tree: the user's probes, but not those that fire in
/// wprof (iterators, BEGIN/END) nor timers, which fire in whichever task
/// they interrupt. The trackers apply the tree through `selected()`.
pub fn follows_command_tree(point: &AttachPoint, origin: RecordOrigin) -> bool {
    let timer = matches!(
        point,
        AttachPoint::PerfEvent {
            all_cpus: false,
            ..
        }
    );
    let provider = of(point);
    origin != RecordOrigin::Tracker && !provider.fires_in_wprof() && !provider.runs_once() && !timer
}

/// The provider of an attach point.
pub fn of(point: &AttachPoint) -> &'static dyn Provider {
    *PROVIDERS
        .iter()
        .find(|provider| provider.owns(point))
        .expect("every attach point has a provider")
}

/// `name+0x10` (or `name+16`) → the name and the offset; a plain name has
/// offset 0. Uprobe and kprobe specs share it.
pub fn parse_function_spec(spec: &str) -> Result<(&str, u64), String> {
    let Some((name, offset)) = spec.rsplit_once('+') else {
        return Ok((spec, 0));
    };
    let parsed = match offset
        .strip_prefix("0x")
        .or_else(|| offset.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => offset.parse().ok(),
    };
    match parsed {
        Some(offset) if !name.is_empty() => Ok((name, offset)),
        _ => Err(format!(
            "invalid offset in `{spec}`: expected `name+0x10` or `name+16`"
        )),
    }
}

/// A decimal or `0x` hexadecimal number.
fn parse_number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// `argN` of a probe on a function's entry (`pt_regs`): the x86-64
/// argument registers; return probes have `retval` instead.
fn register_arg(probe: &ResolvedProbe, n: u32) -> Result<ArgRead, String> {
    use crate::vocab::x86_64::ARGUMENTS;
    if probe.is_return {
        return Err("return probes have `retval` instead".into());
    }
    ARGUMENTS
        .get(n as usize)
        .map(|&offset| ArgRead::Slot(offset))
        .ok_or_else(|| "only arg0..arg5 are passed in registers".into())
}

/// `retval` of a return probe with a `pt_regs` context.
fn register_retval(probe: &ResolvedProbe) -> Option<ArgRead> {
    probe
        .is_return
        .then_some(ArgRead::Slot(crate::vocab::x86_64::RETURN_VALUE))
}

/// The error text plus advice keyed on the errno.
fn explain(err: &libbpf_rs::Error, advice: &str) -> String {
    use libbpf_rs::ErrorKind as K;
    let errno_hint = match err.kind() {
        K::PermissionDenied => "run as root (CAP_BPF and CAP_PERFMON are needed); ",
        K::NotFound => "the target does not exist; ",
        K::Unsupported => "this kernel lacks the feature; ",
        _ => "",
    };
    format!("{err:#}; {errno_hint}{advice}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::fake_machine::FakeMachine;

    fn spec<'a>(word: &'a str, parts: &[&'a str]) -> Spec<'a> {
        Spec {
            word,
            parts: parts.to_vec(),
        }
    }

    /// Every type name and alias belongs to one provider only, and every
    /// provider owns the attach points it resolves to.
    #[test]
    fn names_are_unique_and_points_owned() {
        let mut seen = std::collections::HashSet::new();
        for ty in PROVIDERS.iter().flat_map(|p| p.types()) {
            for name in std::iter::once(&ty.name).chain(ty.aliases) {
                assert!(seen.insert(*name), "`{name}` is claimed twice");
            }
        }
        let probes = resolve(&spec("ur", &["/bin/x", "f"]), &FakeMachine)
            .expect("resolves")
            .probes;
        assert_eq!(of(&probes[0].attach).types()[1].name, "uretprobe");
    }

    /// Unknown types are named, with every type in the help.
    #[test]
    fn unknown_type_lists_types() {
        let error = resolve(&spec("kprobez", &["x"]), &FakeMachine).unwrap_err();
        assert_eq!(error.message, "unknown probe type `kprobez`");
        assert_eq!(
            error.help.as_deref(),
            Some(
                "probe types: BEGIN, END, uprobe, uretprobe, usdt, tracepoint, rawtracepoint, \
                 tp_btf, kprobe, kretprobe, fentry, fexit, profile, interval, software, hardware, \
                 watchpoint, asyncwatchpoint, iter"
            )
        );
    }

    /// `name+OFF` in hex or decimal; junk and a missing name are errors.
    #[test]
    fn parses_function_offsets() {
        assert_eq!(parse_function_spec("malloc"), Ok(("malloc", 0)));
        assert_eq!(parse_function_spec("malloc+0x10"), Ok(("malloc", 16)));
        assert_eq!(parse_function_spec("malloc+16"), Ok(("malloc", 16)));
        assert!(parse_function_spec("malloc+zz").is_err());
        assert!(parse_function_spec("+4").is_err());
    }
}
