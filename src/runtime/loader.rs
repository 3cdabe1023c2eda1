//! Runtime stage, first step: takes the compiler's [`Compiled`] output,
//! creates its maps, patches their fds into the programs, wraps the programs
//! in an in-memory ELF and loads it with libbpf; then attaches each program
//! by its [`AttachPoint`]. Output: a [`Loaded`] that owns every kernel object
//! and reads messages and maps (see [`super::maps_read`]).
//!
//! libbpf's own printing is captured, never written to stderr: the verifier
//! log of a failing program becomes [`LoadError::Verifier`].

use std::cell::RefCell;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Once;
use std::time::{Duration, Instant};

use libbpf_rs::{
    Link, MapHandle, MapType, Object, ObjectBuilder, PrintLevel, ProgramInput, ProgramMut,
    TracepointCategory, UprobeOpts,
};

use super::elf_object::{ElfProgram, write_elf};
use super::maps_read::{MapError, Ring, Stopper};
use super::perf_event;
use crate::codegen::program::{AttachPoint, BpfProgram, Compiled, MapKind, MapSpec};

/// Why loading failed. Nothing stays loaded after an error.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The kernel refused to create a map.
    #[error("cannot create map `{map}`: {reason}")]
    CreateMap {
        /// The map's script or internal name.
        map: String,
        /// errno text.
        reason: String,
    },
    /// A `MapReloc` does not point at a map-fd `ld_imm64`: a compiler bug.
    #[error("program `{program}`: bad map relocation at instruction {insn}: {reason}")]
    BadReloc {
        /// Symbol name of the program.
        program: String,
        /// Slot index of the relocation.
        insn: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// Writing or opening the in-memory ELF failed: a loader bug.
    #[error("cannot build the BPF object: {reason}")]
    Object {
        /// libbpf's or the ELF writer's message.
        reason: String,
    },
    /// The verifier rejected a program.
    #[error("the BPF verifier rejected `{probe}` (program {program})")]
    Verifier {
        /// Symbol name of the program.
        program: String,
        /// The probe as the user wrote it.
        probe: String,
        /// The verifier's log (level 1), for the diagnostic's help.
        log: String,
        /// The last instruction the verifier looked at before failing.
        failing_insn: Option<usize>,
    },
    /// The kernel refused a program for another reason than the verifier.
    #[error("cannot load `{probe}` (program {program}): {reason}")]
    Load {
        /// Symbol name of the program.
        program: String,
        /// The probe as the user wrote it.
        probe: String,
        /// libbpf's error chain with the errno text.
        reason: String,
    },
}

/// Why a probe could not be attached or run.
#[derive(Debug, thiserror::Error)]
#[error("cannot attach `{probe}`: {reason}")]
pub struct AttachError {
    /// The probe as the user wrote it.
    pub probe: String,
    /// The kernel's reason and what to do about it.
    pub reason: String,
}

/// Options that apply to every attach.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttachOptions {
    /// Only trace this process (uprobes and USDT; `-p PID`).
    pub pid: Option<i32>,
}

/// Time spent in each loading step.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadTimings {
    /// Creating every map.
    pub maps: Duration,
    /// Writing the in-memory ELF.
    pub elf: Duration,
    /// `bpf_object__open_mem`.
    pub open: Duration,
    /// `bpf_object__load` (feature probes and the verifier).
    pub load: Duration,
}

/// What the loader keeps of each program.
#[derive(Clone, Debug)]
struct ProgramMeta {
    name: String,
    probe: String,
    attach: AttachPoint,
    /// Set when the kernel refused to load this kind of program (fentry here):
    /// reported when the probe is attached.
    refused: Option<String>,
}

/// Everything loaded into the kernel. Fields drop in order: the ring reader,
/// then the links (detaching), then the programs, then the maps.
pub struct Loaded {
    ring: Option<Ring>,
    links: Vec<Link>,
    object: Object,
    maps: Vec<MapHandle>,
    programs: Vec<ProgramMeta>,
    stopper: Stopper,
    /// How long `load` took, step by step.
    pub timings: LoadTimings,
}

/// Creates the maps, loads all programs and prepares the ring buffer reader.
pub fn load(compiled: &Compiled) -> Result<Loaded, LoadError> {
    install_print_capture();
    let mut timings = LoadTimings::default();
    let t = Instant::now();
    let maps = compiled
        .maps
        .iter()
        .map(create_map)
        .collect::<Result<Vec<_>, _>>()?;
    timings.maps = t.elapsed();
    let insns = compiled
        .programs
        .iter()
        .map(|p| patch_relocs(p, &maps))
        .collect::<Result<Vec<_>, _>>()?;
    let mut programs: Vec<ProgramMeta> = compiled
        .programs
        .iter()
        .map(|p| ProgramMeta {
            name: p.name.clone(),
            probe: p.probe.clone(),
            attach: p.attach.clone(),
            refused: None,
        })
        .collect();
    let object = loop {
        match load_object(&programs, &insns, &mut timings) {
            Ok(object) => break object,
            Err(failure) => defer_or_fail(&mut programs, failure)?,
        }
    };
    let stopper = Stopper::new().map_err(|e| LoadError::Object {
        reason: format!("eventfd: {e}"),
    })?;
    let ring = match compiled.ringbuf {
        Some(id) => {
            let map = maps.get(id.0 as usize).ok_or_else(|| LoadError::Object {
                reason: format!("ring buffer map {} does not exist", id.0),
            })?;
            Some(Ring::new(map).map_err(|e| LoadError::Object {
                reason: e.to_string(),
            })?)
        }
        None => None,
    };
    Ok(Loaded {
        ring,
        links: Vec::new(),
        object,
        maps,
        programs,
        stopper,
        timings,
    })
}

/// A failed `bpf_object__load`, with what libbpf printed.
struct LoadFailure {
    program: Option<usize>,
    reason: String,
    log: Option<String>,
}

/// Kinds whose load failure is an unsupported kernel feature, reported at
/// attach time so the other probes still run.
fn refusal_is_deferred(attach: &AttachPoint) -> bool {
    matches!(attach, AttachPoint::Fentry { .. })
}

fn defer_or_fail(programs: &mut [ProgramMeta], failure: LoadFailure) -> Result<(), LoadError> {
    let Some(index) = failure.program else {
        return Err(LoadError::Object {
            reason: failure.reason,
        });
    };
    let meta = &mut programs[index];
    if refusal_is_deferred(&meta.attach) && meta.refused.is_none() {
        meta.refused = Some(format!(
            "the kernel refused to load it ({}); fentry/fexit need BPF trampolines \
             (CONFIG_FUNCTION_TRACER, CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS): \
             use a kprobe or tracepoint instead",
            failure.reason
        ));
        return Ok(());
    }
    Err(match failure.log {
        Some(log) => LoadError::Verifier {
            program: meta.name.clone(),
            probe: meta.probe.clone(),
            failing_insn: failing_insn(&log),
            log,
        },
        None => LoadError::Load {
            program: meta.name.clone(),
            probe: meta.probe.clone(),
            reason: failure.reason,
        },
    })
}

fn load_object(
    programs: &[ProgramMeta],
    insns: &[Vec<u64>],
    timings: &mut LoadTimings,
) -> Result<Object, LoadFailure> {
    let object_failure = |reason: String| LoadFailure {
        program: None,
        reason,
        log: None,
    };
    let t = Instant::now();
    let elf_programs: Vec<ElfProgram<'_>> = programs
        .iter()
        .zip(insns)
        .filter(|(meta, _)| meta.refused.is_none())
        .map(|(meta, insns)| ElfProgram {
            name: &meta.name,
            section: meta.attach.section(),
            insns,
        })
        .collect();
    let elf = write_elf(&elf_programs).map_err(|e| object_failure(format!("ELF writer: {e}")))?;
    timings.elf = t.elapsed();
    let t = Instant::now();
    let (open, printed) = with_captured_print(|| ObjectBuilder::default().open_memory(&elf));
    let open = open.map_err(|e| object_failure(format!("{e:#}\n{printed}")))?;
    timings.open = t.elapsed();
    let t = Instant::now();
    let (loaded, printed) = with_captured_print(|| open.load());
    timings.load = t.elapsed();
    loaded.map_err(|e| {
        let program =
            failed_program(&printed).and_then(|name| programs.iter().position(|p| p.name == name));
        LoadFailure {
            program,
            reason: format!("{e:#}"),
            log: verifier_log(&printed),
        }
    })
}

fn create_map(spec: &MapSpec) -> Result<MapHandle, LoadError> {
    let (ty, key_size, value_size) = match spec.kind {
        MapKind::Hash => (MapType::Hash, spec.key_size, spec.value_size),
        MapKind::PerCpuHash => (MapType::PercpuHash, spec.key_size, spec.value_size),
        MapKind::Array => (MapType::Array, 4, spec.value_size),
        MapKind::PerCpuArray => (MapType::PercpuArray, 4, spec.value_size),
        MapKind::RingBuf => (MapType::RingBuf, 0, 0),
        MapKind::StackTrace => (MapType::StackTrace, 4, spec.value_size),
    };
    let fail = |reason: String| LoadError::CreateMap {
        map: spec.name.clone(),
        reason,
    };
    if spec.kind == MapKind::RingBuf && !spec.max_entries.is_power_of_two() {
        return Err(fail(format!(
            "ring buffer size {} is not a power of two",
            spec.max_entries
        )));
    }
    // Hash maps are not preallocated: preallocating a 4096-entry per-CPU
    // hash took ~1.7 ms on 2 CPUs here and grows with the CPU count, which
    // alone would break the 10 ms start budget on big machines. Since Linux
    // 6.1 (bpf_mem_alloc) non-preallocated hash maps are safe in tracing and
    // perf_event programs; older verifiers reject them in perf_event programs.
    let map_flags = match spec.kind {
        MapKind::Hash | MapKind::PerCpuHash => libbpf_rs::libbpf_sys::BPF_F_NO_PREALLOC,
        _ => 0,
    };
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags,
        ..Default::default()
    };
    MapHandle::create(
        ty,
        Some(kernel_map_name(&spec.name)),
        key_size,
        value_size,
        spec.max_entries,
        &opts,
    )
    .map_err(|e| fail(format!("{e:#}")))
}

/// Kernel map names are at most 15 characters of `[A-Za-z0-9_.]`.
fn kernel_map_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(15)
        .collect()
}

/// Copies the program and writes each relocated map's fd into its `ld_imm64`.
fn patch_relocs(prog: &BpfProgram, maps: &[MapHandle]) -> Result<Vec<u64>, LoadError> {
    let mut insns = prog.insns.clone();
    for reloc in &prog.map_relocs {
        let bad = |reason: &str| LoadError::BadReloc {
            program: prog.name.clone(),
            insn: reloc.insn,
            reason: reason.into(),
        };
        let map = maps
            .get(reloc.map.0 as usize)
            .ok_or_else(|| bad("no such map"))?;
        if reloc.insn + 1 >= insns.len() {
            return Err(bad("ld_imm64 runs past the end"));
        }
        let slot = insns[reloc.insn];
        // BPF_LD | BPF_IMM | BPF_DW with src_reg = BPF_PSEUDO_MAP_FD or BPF_PSEUDO_MAP_VALUE.
        if slot & 0xff != 0x18 || !matches!((slot >> 12) & 0xf, 1 | 2) {
            return Err(bad("not an ld_imm64 of a map fd or map value"));
        }
        let fd = u32::try_from(map.as_fd().as_raw_fd()).map_err(|_| bad("negative fd"))?;
        insns[reloc.insn] = (slot & 0xffff_ffff) | (u64::from(fd) << 32);
    }
    Ok(insns)
}

thread_local! {
    /// libbpf output printed on this thread while a capture is active.
    static CAPTURED: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn capture_print(_level: PrintLevel, msg: String) {
    CAPTURED.with(|c| {
        if let Some(buf) = c.borrow_mut().as_mut() {
            buf.push_str(&msg);
        }
    });
}

/// Routes libbpf's printing (warnings and worse) to [`CAPTURED`]: silent
/// unless a capture is active on the printing thread.
fn install_print_capture() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        libbpf_rs::set_print(Some((PrintLevel::Warn, capture_print)));
    });
}

fn with_captured_print<T>(f: impl FnOnce() -> T) -> (T, String) {
    CAPTURED.with(|c| *c.borrow_mut() = Some(String::new()));
    let out = f();
    let printed = CAPTURED.with(|c| c.borrow_mut().take()).unwrap_or_default();
    (out, printed)
}

/// The program named in libbpf's `prog 'NAME': failed to load` line.
fn failed_program(printed: &str) -> Option<&str> {
    printed.lines().rev().find_map(|line| {
        let rest = line.strip_prefix("libbpf: ").unwrap_or(line);
        let rest = rest.strip_prefix("prog '")?;
        let (name, tail) = rest.split_once("': ")?;
        tail.starts_with("failed to load").then_some(name)
    })
}

/// The verifier log libbpf printed between its BEGIN/END markers.
fn verifier_log(printed: &str) -> Option<String> {
    const BEGIN: &str = "-- BEGIN PROG LOAD LOG --\n";
    const END: &str = "-- END PROG LOAD LOG --";
    let start = printed.rfind(BEGIN)? + BEGIN.len();
    let len = printed[start..].find(END)?;
    let log = printed[start..start + len].trim_end();
    (!log.is_empty()).then(|| log.to_string())
}

/// The index of the last `N: (op) ...` instruction line of a verifier log.
pub fn failing_insn(log: &str) -> Option<usize> {
    log.lines().rev().find_map(|line| {
        let (index, rest) = line.split_once(": (")?;
        let op = rest.get(..3)?;
        (op.ends_with(')') && op[..2].chars().all(|c| c.is_ascii_hexdigit()))
            .then(|| index.trim().parse().ok())
            .flatten()
    })
}

impl Loaded {
    /// Attaches every program except `BEGIN`/`END`; stops at the first
    /// failure (what is attached stays attached until drop).
    ///
    /// The kernel runs the programs of one tracepoint or uprobe newest first,
    /// so attaching in reverse makes them fire in script order, as bpftrace's do.
    pub fn attach_all(&mut self, opts: AttachOptions) -> Result<(), AttachError> {
        for index in (0..self.programs.len()).rev() {
            if !matches!(
                self.programs[index].attach,
                AttachPoint::Begin | AttachPoint::End
            ) {
                self.attach(index, opts)?;
            }
        }
        Ok(())
    }

    /// Attaches one program (index into `Compiled::programs`).
    pub fn attach(&mut self, index: usize, opts: AttachOptions) -> Result<(), AttachError> {
        let meta = self.meta(index)?;
        let fail = |reason: String| AttachError {
            probe: meta.probe.clone(),
            reason,
        };
        if let Some(reason) = &meta.refused {
            return Err(fail(reason.clone()));
        }
        let prog = find_program(&self.object, &meta.name).ok_or_else(|| fail(NOT_LOADED.into()))?;
        let pid = opts.pid.unwrap_or(-1);
        let (new_links, printed) = with_captured_print(|| attach_point(&prog, &meta.attach, pid));
        // libbpf often says more than the errno (which file, which step).
        let new_links = new_links.map_err(|reason| match printed.lines().last() {
            Some(line) => format!("{reason} [{}]", line.trim_start_matches("libbpf: ")),
            None => reason,
        });
        let new_links = new_links.map_err(fail)?;
        self.links.extend(new_links);
        Ok(())
    }

    /// Runs a `BEGIN`/`END` (raw_tp) program once with `BPF_PROG_TEST_RUN`
    /// and returns its return value.
    pub fn run_once(&self, index: usize) -> Result<u32, AttachError> {
        let meta = self.meta(index)?;
        let fail = |reason: String| AttachError {
            probe: meta.probe.clone(),
            reason,
        };
        let prog = find_program(&self.object, &meta.name).ok_or_else(|| fail(NOT_LOADED.into()))?;
        // raw_tp programs take an array of u64 arguments; BEGIN/END read none.
        let mut ctx = [0u8; 8 * 4];
        let input = ProgramInput {
            context_in: Some(&mut ctx),
            ..Default::default()
        };
        prog.test_run(input)
            .map(|out| out.return_value)
            .map_err(|e| fail(format!("BPF_PROG_TEST_RUN failed: {e:#}")))
    }

    /// Indices of the programs attached at `point`'s kind (`Begin` or `End`).
    pub fn programs_at(&self, point: &AttachPoint) -> Vec<usize> {
        (0..self.programs.len())
            .filter(|&i| {
                std::mem::discriminant(&self.programs[i].attach) == std::mem::discriminant(point)
            })
            .collect()
    }

    /// Detaches every probe; programs and maps stay (so `END` can still run
    /// and maps can still be printed).
    pub fn detach_all(&mut self) {
        self.links.clear();
    }

    /// Number of links currently attached.
    pub fn attached(&self) -> usize {
        self.links.len()
    }

    /// A handle another thread (or a signal handler thread) uses to make
    /// [`Loaded::poll`] return promptly.
    pub fn stopper(&self) -> Stopper {
        self.stopper.clone()
    }

    pub(super) fn ring_mut(&mut self) -> (Option<&mut Ring>, &Stopper) {
        (self.ring.as_mut(), &self.stopper)
    }

    pub(super) fn map(&self, map: crate::codegen::program::MapId) -> Result<&MapHandle, MapError> {
        self.maps
            .get(map.0 as usize)
            .ok_or(MapError::NoSuchMap { map: map.0 })
    }

    fn meta(&self, index: usize) -> Result<&ProgramMeta, AttachError> {
        self.programs.get(index).ok_or_else(|| AttachError {
            probe: format!("program #{index}"),
            reason: "no such program".into(),
        })
    }
}

/// Attaches `prog` by the kind of `point`.
fn attach_point(prog: &ProgramMut<'_>, point: &AttachPoint, pid: i32) -> Result<Vec<Link>, String> {
    match point {
        AttachPoint::Begin | AttachPoint::End => {
            Err("BEGIN/END probes run with run_once, not attach".into())
        }
        AttachPoint::Tracepoint { category, name } => attach_tracepoint(prog, category, name),
        AttachPoint::RawTracepoint { name } => prog
            .attach_raw_tracepoint(name)
            .map(|l| vec![l])
            .map_err(|e| {
                explain(
                    &e,
                    "list raw tracepoints in /sys/kernel/tracing/available_events",
                )
            }),
        AttachPoint::Uprobe {
            binary,
            offset,
            retprobe,
            ..
        } => attach_uprobe(prog, pid, binary, *offset, 0, *retprobe),
        AttachPoint::Usdt {
            binary,
            offset,
            semaphore_offset,
            ..
        } => attach_uprobe(prog, pid, binary, *offset, *semaphore_offset, false),
        AttachPoint::Kprobe {
            function,
            offset,
            retprobe,
        } => attach_kprobe(prog, function, *offset, *retprobe),
        AttachPoint::Fentry { .. } => prog.attach_trace().map(|l| vec![l]).map_err(|e| {
            explain(
                &e,
                "fentry/fexit need BPF trampolines; use a kprobe or tracepoint",
            )
        }),
        AttachPoint::PerfEvent {
            event,
            sample,
            all_cpus,
        } => perf_event::attach(prog, *event, *sample, *all_cpus),
    }
}

const NOT_LOADED: &str = "program was not loaded (loader bug)";

fn find_program<'o>(object: &'o Object, name: &str) -> Option<ProgramMut<'o>> {
    object.progs_mut().find(|p| p.name() == name)
}

/// The error text plus advice keyed on the errno.
pub(super) fn explain(err: &libbpf_rs::Error, advice: &str) -> String {
    use libbpf_rs::ErrorKind as K;
    let errno_hint = match err.kind() {
        K::PermissionDenied => "run as root (CAP_BPF and CAP_PERFMON are needed); ",
        K::NotFound => "the target does not exist; ",
        K::Unsupported => "this kernel lacks the feature; ",
        _ => "",
    };
    format!("{err:#}; {errno_hint}{advice}")
}

fn attach_tracepoint(
    prog: &ProgramMut<'_>,
    category: &str,
    name: &str,
) -> Result<Vec<Link>, String> {
    prog.attach_tracepoint(TracepointCategory::Custom(category.into()), name)
        .map(|l| vec![l])
        .map_err(|e| {
            explain(
                &e,
                &format!("check /sys/kernel/tracing/events/{category}/{name} exists"),
            )
        })
}

fn attach_uprobe(
    prog: &ProgramMut<'_>,
    pid: i32,
    binary: &std::path::Path,
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

fn attach_kprobe(
    prog: &ProgramMut<'_>,
    function: &str,
    offset: u64,
    retprobe: bool,
) -> Result<Vec<Link>, String> {
    if offset != 0 {
        return Err("kprobes at an offset inside a function are not supported".into());
    }
    let kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists()
        || std::path::Path::new("/sys/kernel/tracing/kprobe_events").exists();
    prog.attach_kprobe(retprobe, function)
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

/// Hand-assembled programs for the runtime's kernel tests (the real
/// assembler lives in codegen; these stay minimal on purpose).
#[cfg(test)]
pub(crate) mod test_support {
    use crate::codegen::program::{
        AttachPoint, BpfProgram, Compiled, MapId, MapKind, MapReloc, MapSpec,
    };

    /// One raw instruction slot.
    pub fn ins(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
        u64::from(op)
            | u64::from(dst) << 8
            | u64::from(src) << 12
            | u64::from(off as u16) << 16
            | u64::from(imm as u32) << 32
    }
    pub fn mov_imm(dst: u8, imm: i32) -> u64 {
        ins(0xb7, dst, 0, 0, imm)
    }
    pub fn mov_reg(dst: u8, src: u8) -> u64 {
        ins(0xbf, dst, src, 0, 0)
    }
    pub fn exit() -> u64 {
        ins(0x95, 0, 0, 0, 0)
    }
    pub fn call(helper: i32) -> u64 {
        ins(0x85, 0, 0, 0, helper)
    }

    /// A program under construction: slots plus map relocations.
    #[derive(Default)]
    pub struct Asm {
        pub insns: Vec<u64>,
        pub relocs: Vec<MapReloc>,
    }

    impl Asm {
        pub fn push(&mut self, insns: &[u64]) -> &mut Self {
            self.insns.extend_from_slice(insns);
            self
        }
        /// `dst = map` as a pseudo map-fd `ld_imm64`.
        pub fn ld_map(&mut self, dst: u8, map: MapId) -> &mut Self {
            self.relocs.push(MapReloc {
                insn: self.insns.len(),
                map,
            });
            self.push(&[ins(0x18, dst, 1, 0, 0), 0])
        }
        /// Skips `body` unless the current thread id is `tid`; leaves
        /// pid_tgid in r6.
        pub fn only_thread(&mut self, tid: i32, body: Asm) -> &mut Self {
            self.push(&[call(14), mov_reg(6, 0), ins(0xbc, 0, 0, 0, 0)]);
            let len = i16::try_from(body.insns.len()).expect("short body");
            self.push(&[ins(0x55, 0, 0, len, tid)]);
            self.append(body)
        }
        pub fn append(&mut self, body: Asm) -> &mut Self {
            let base = self.insns.len();
            self.relocs.extend(body.relocs.iter().map(|r| MapReloc {
                insn: r.insn + base,
                map: r.map,
            }));
            self.push(&body.insns)
        }
        /// Sends r6 as an 8-byte ring buffer record.
        pub fn send_r6(&mut self, ring: MapId) -> &mut Self {
            self.push(&[ins(0x7b, 10, 6, -8, 0)]).ld_map(1, ring);
            self.push(&[
                mov_reg(2, 10),
                ins(0x07, 2, 0, 0, -8),
                mov_imm(3, 8),
                mov_imm(4, 0),
                call(130),
            ])
        }
        /// Atomically adds 1 to the u64 at key 0 of an array map.
        pub fn count(&mut self, map: MapId) -> &mut Self {
            self.push(&[ins(0x62, 10, 0, -4, 0)]).ld_map(1, map);
            self.push(&[
                mov_reg(2, 10),
                ins(0x07, 2, 0, 0, -4),
                call(1),
                ins(0x15, 0, 0, 2, 0),
                mov_imm(1, 1),
                ins(0xdb, 0, 1, 0, 0),
            ])
        }
        /// Adds 1 to the u64 at key 0 (u32) of a hash map, inserting it first.
        pub fn count_hash(&mut self, map: MapId) -> &mut Self {
            self.push(&[ins(0x62, 10, 0, -4, 0)]).ld_map(1, map);
            self.push(&[
                mov_reg(2, 10),
                ins(0x07, 2, 0, 0, -4),
                call(1),
                ins(0x15, 0, 0, 3, 0),
                mov_imm(1, 1),
                ins(0xdb, 0, 1, 0, 0),
                ins(0x05, 0, 0, 9, 0),
                ins(0x7a, 10, 0, -16, 1),
            ])
            .ld_map(1, map);
            self.push(&[
                mov_reg(2, 10),
                ins(0x07, 2, 0, 0, -4),
                mov_reg(3, 10),
                ins(0x07, 3, 0, 0, -16),
                mov_imm(4, 0),
                call(2),
            ])
        }
        /// `return 0`.
        pub fn ret0(&mut self) -> &mut Self {
            self.push(&[mov_imm(0, 0), exit()])
        }
        pub fn program(&self, name: &str, probe: &str, attach: AttachPoint) -> BpfProgram {
            BpfProgram {
                name: name.into(),
                probe: probe.into(),
                attach,
                insns: self.insns.clone(),
                map_relocs: self.relocs.clone(),
                spans: vec![None; self.insns.len()],
                comments: vec![None; self.insns.len()],
            }
        }
    }

    pub fn map(name: &str, kind: MapKind, key: u32, value: u32, entries: u32) -> MapSpec {
        MapSpec {
            name: name.into(),
            kind,
            key_size: key,
            value_size: value,
            max_entries: entries,
            script_map: None,
        }
    }

    /// A `Compiled` with a 64 KiB ring buffer as map 0 and `maps` after it.
    pub fn with_ring(maps: Vec<MapSpec>, programs: Vec<BpfProgram>) -> Compiled {
        let mut all = vec![map("ring", MapKind::RingBuf, 0, 0, 1 << 16)];
        all.extend(maps);
        Compiled {
            programs,
            maps: all,
            ringbuf: Some(MapId(0)),
            ..Default::default()
        }
    }

    /// The calling thread's id.
    pub fn tid() -> i32 {
        let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
        let tid = link.file_name().expect("tid").to_string_lossy();
        tid.parse().expect("numeric tid")
    }

    /// Sums the u64 at the start of each per-CPU value of every entry.
    pub fn sum_u64(entries: &[(Vec<u8>, Vec<Vec<u8>>)]) -> u64 {
        entries
            .iter()
            .flat_map(|(_, values)| values)
            .map(|v| u64::from_ne_bytes(v[..8].try_into().expect("8 bytes")))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use crate::codegen::program::{MapId, PerfEvent, PerfSample};
    use std::ops::ControlFlow;

    const RING: MapId = MapId(0);
    const COUNTS: MapId = MapId(1);

    fn tracepoint(name: &str) -> AttachPoint {
        AttachPoint::Tracepoint {
            category: "syscalls".into(),
            name: name.into(),
        }
    }

    /// Collects ring records until `want` arrived or a second passed.
    fn collect(loaded: &mut Loaded, want: usize) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(1);
        while got.len() < want && Instant::now() < deadline {
            let _ = loaded
                .poll(Duration::from_millis(50), |r| {
                    got.push(r.to_vec());
                    ControlFlow::Continue(())
                })
                .expect("poll");
        }
        got
    }

    /// The test assembler agrees with bpf_ins on a few encodings.
    #[test]
    fn test_asm_matches_bpf_ins() {
        use bpf_ins::{Instruction, Register};
        assert_eq!(
            mov_imm(0, 5),
            Instruction::mov64(Register::R0, 5).encode().0
        );
        assert_eq!(
            mov_reg(2, 10),
            Instruction::movx64(Register::R2, Register::R10).encode().0
        );
        assert_eq!(call(130), Instruction::call(130).encode().0);
        assert_eq!(exit(), Instruction::exit().encode().0);
    }

    /// Verifier line parsing finds the last instruction before the error.
    #[test]
    fn parses_failing_insn() {
        let log = "0: R1=ctx() R10=fp0\n0: (b7) r0 = 0                        ; R0_w=0\n\
                   1: (0f) r0 += r5\nR5 !read_ok\nprocessed 2 insns";
        assert_eq!(failing_insn(log), Some(1));
        assert_eq!(failing_insn("nothing here"), None);
        assert_eq!(kernel_map_name("@counts_by_pid_long"), "_counts_by_pid_");
    }

    /// A getppid tracepoint sends exactly one ring record per call by this thread.
    #[test]
    fn tracepoint_sends_ring_records() {
        let mut body = Asm::default();
        body.send_r6(RING);
        let mut asm = Asm::default();
        asm.only_thread(tid(), body).ret0();
        let prog = asm.program(
            "tp",
            "tracepoint:syscalls:sys_enter_getppid",
            tracepoint("sys_enter_getppid"),
        );
        let mut loaded = load(&with_ring(vec![], vec![prog])).expect("load");
        loaded.attach_all(AttachOptions::default()).expect("attach");
        for _ in 0..3 {
            let _ = std::os::unix::process::parent_id();
        }
        let got = collect(&mut loaded, 3);
        let mut extra = 0;
        let _ = loaded
            .consume(|_| {
                extra += 1;
                ControlFlow::Continue(())
            })
            .expect("consume");
        assert_eq!((got.len(), extra), (3, 0));
        for record in got {
            let pid_tgid = u64::from_ne_bytes(record[..8].try_into().expect("8 bytes"));
            assert_eq!(pid_tgid >> 32, u64::from(std::process::id()));
        }
    }

    /// A BEGIN program run through BPF_PROG_TEST_RUN sends one record.
    #[test]
    fn begin_runs_once() {
        let mut asm = Asm::default();
        asm.push(&[mov_imm(6, 42)]).send_r6(RING).ret0();
        let prog = asm.program("begin", "BEGIN", AttachPoint::Begin);
        let mut loaded = load(&with_ring(vec![], vec![prog])).expect("load");
        assert_eq!(loaded.programs_at(&AttachPoint::Begin), vec![0]);
        assert_eq!(loaded.run_once(0).expect("run"), 0);
        let got = collect(&mut loaded, 1);
        assert_eq!(got, vec![42u64.to_ne_bytes().to_vec()]);
        // END runs the same way once everything is detached.
        loaded.detach_all();
        assert_eq!(loaded.run_once(0).expect("run after detach"), 0);
    }

    #[unsafe(no_mangle)]
    #[inline(never)]
    extern "C" fn wprof_loader_uprobe_target(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_add(1)
    }

    /// File offset of a function of this binary, from /proc/self/maps.
    fn self_file_offset(addr: usize) -> (std::path::PathBuf, u64) {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        for line in maps.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (start, end) = fields[0].split_once('-').expect("range");
            let start = usize::from_str_radix(start, 16).expect("hex");
            let end = usize::from_str_radix(end, 16).expect("hex");
            if (start..end).contains(&addr) {
                let off = u64::from_str_radix(fields[2], 16).expect("hex");
                return (fields[5].into(), (addr - start) as u64 + off);
            }
        }
        panic!("address {addr:#x} not mapped");
    }

    /// A uprobe on a function of the test binary counts its calls (pid filter on).
    #[test]
    fn uprobe_counts_calls() {
        let addr = wprof_loader_uprobe_target as *const () as usize;
        let (binary, offset) = self_file_offset(addr);
        let mut asm = Asm::default();
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
            .attach_all(AttachOptions { pid: Some(pid) })
            .expect("attach");
        for i in 0..4 {
            std::hint::black_box(wprof_loader_uprobe_target(i));
        }
        assert_eq!(sum_u64(&loaded.map_entries(COUNTS).expect("entries")), 4);
    }

    #[unsafe(no_mangle)]
    #[inline(never)]
    extern "C" fn wprof_loader_usdt_site(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(3)
    }

    /// A USDT-style semaphore: non-zero initial value keeps it in `.data`,
    /// which is file-backed (the kernel only counts in file-backed pages).
    #[unsafe(no_mangle)]
    static WPROF_LOADER_SEMAPHORE: std::sync::atomic::AtomicU16 =
        std::sync::atomic::AtomicU16::new(0x100);

    /// A USDT attach bumps the semaphore through ref_ctr_offset while attached.
    #[test]
    fn usdt_semaphore_counts_attach() {
        use std::sync::atomic::Ordering;
        let (binary, offset) = self_file_offset(wprof_loader_usdt_site as *const () as usize);
        let sem_addr = &raw const WPROF_LOADER_SEMAPHORE as usize;
        let (_, semaphore_offset) = self_file_offset(sem_addr);
        let attach = AttachPoint::Usdt {
            binary,
            provider: "wprof".into(),
            name: "test".into(),
            offset,
            semaphore_offset,
        };
        let prog = Asm::default()
            .ret0()
            .program("usdt", "usdt:self:wprof:test", attach);
        let mut loaded = load(&with_ring(vec![], vec![prog])).expect("load");
        let pid = i32::try_from(std::process::id()).expect("pid");
        loaded
            .attach_all(AttachOptions { pid: Some(pid) })
            .expect("attach");
        assert_eq!(WPROF_LOADER_SEMAPHORE.load(Ordering::SeqCst), 0x101);
        // The kernel refuses a second probe at one address with another
        // ref_ctr_offset (EINVAL), hence a site of its own.
        std::hint::black_box(wprof_loader_usdt_site(1));
        loaded.detach_all();
        assert_eq!(WPROF_LOADER_SEMAPHORE.load(Ordering::SeqCst), 0x100);
    }

    /// A program reading an uninitialised register is a Verifier error with
    /// the log and the failing instruction.
    #[test]
    fn verifier_error_has_log_and_insn() {
        let mut asm = Asm::default();
        asm.push(&[mov_imm(0, 0), ins(0x0f, 0, 5, 0, 0), exit()]);
        let ok = Asm::default()
            .ret0()
            .program("fine", "BEGIN", AttachPoint::Begin);
        let bad = asm.program(
            "bad",
            "tracepoint:syscalls:sys_enter_getppid",
            tracepoint("sys_enter_getppid"),
        );
        match load(&with_ring(vec![], vec![ok, bad])) {
            Err(LoadError::Verifier {
                program,
                probe,
                log,
                failing_insn,
            }) => {
                assert_eq!(program, "bad");
                assert_eq!(probe, "tracepoint:syscalls:sys_enter_getppid");
                assert!(log.contains("R5 !read_ok"), "log: {log}");
                assert_eq!(failing_insn, Some(1));
            }
            Err(other) => panic!("wrong error: {other}"),
            Ok(_) => panic!("invalid program loaded"),
        }
    }

    /// Attaching a kprobe fails with an AttachError naming the probe.
    #[test]
    fn kprobe_attach_error_names_probe() {
        let attach = AttachPoint::Kprobe {
            function: "wprof_no_such_function".into(),
            offset: 0,
            retprobe: false,
        };
        let prog = Asm::default()
            .ret0()
            .program("kp", "kprobe:wprof_no_such_function", attach);
        let mut loaded = load(&with_ring(vec![], vec![prog])).expect("load");
        let err = loaded
            .attach_all(AttachOptions::default())
            .expect_err("kprobe attached");
        assert_eq!(err.probe, "kprobe:wprof_no_such_function");
        assert!(!err.reason.is_empty());
        println!("kprobe: {err}");
    }

    /// A fentry program the kernel refuses to load is reported at attach
    /// time; the other programs still load and attach.
    #[test]
    fn fentry_refusal_is_an_attach_error() {
        let attach = AttachPoint::Fentry {
            function: "do_nanosleep".into(),
            exit: false,
        };
        let fentry = Asm::default()
            .ret0()
            .program("fe", "fentry:do_nanosleep", attach);
        let tp = Asm::default().ret0().program(
            "tp",
            "tracepoint:syscalls:sys_enter_getppid",
            tracepoint("sys_enter_getppid"),
        );
        let mut loaded = load(&with_ring(vec![], vec![fentry, tp])).expect("load");
        loaded
            .attach(1, AttachOptions::default())
            .expect("tracepoint attach");
        match loaded.attach(0, AttachOptions::default()) {
            Ok(()) => println!("fentry works on this kernel"),
            Err(err) => {
                assert_eq!(err.probe, "fentry:do_nanosleep");
                println!("fentry: {err}");
            }
        }
    }

    /// Load and attach times of three small programs (run with --nocapture).
    #[test]
    fn load_and_attach_timings() {
        let t0 = Instant::now();
        let mut body = Asm::default();
        body.send_r6(RING);
        let mut tp = Asm::default();
        tp.only_thread(tid(), body).ret0();
        let mut prof = Asm::default();
        prof.count(COUNTS).ret0();
        let mut begin = Asm::default();
        begin.push(&[mov_imm(6, 1)]).send_r6(RING).ret0();
        let programs = vec![
            tp.program(
                "tp",
                "tracepoint:syscalls:sys_enter_getppid",
                tracepoint("sys_enter_getppid"),
            ),
            prof.program(
                "prof",
                "profile:hz:99",
                AttachPoint::PerfEvent {
                    event: PerfEvent {
                        type_: 1,
                        config: 0,
                    },
                    sample: PerfSample::FrequencyHz(99),
                    all_cpus: true,
                },
            ),
            begin.program("begin", "BEGIN", AttachPoint::Begin),
        ];
        let counts = map("counts", MapKind::PerCpuArray, 4, 8, 1);
        let compiled = with_ring(vec![counts], programs);
        let t_load = Instant::now();
        let mut loaded = load(&compiled).expect("load");
        let load_time = t_load.elapsed();
        let t_attach = Instant::now();
        loaded.attach_all(AttachOptions::default()).expect("attach");
        let attach_time = t_attach.elapsed();
        let t_begin = Instant::now();
        loaded.run_once(2).expect("begin");
        let begin_time = t_begin.elapsed();
        println!(
            "load {load_time:?} (maps {:?}, elf {:?}, open {:?}, load {:?}); attach {attach_time:?}; \
             BEGIN {begin_time:?}; total {:?}",
            loaded.timings.maps,
            loaded.timings.elf,
            loaded.timings.open,
            loaded.timings.load,
            t0.elapsed()
        );
    }
}
