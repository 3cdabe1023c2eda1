//! Runtime stage, first step: takes the compiler's [`Compiled`] output,
//! creates its maps, patches their fds into the programs, wraps the programs
//! in an in-memory ELF and loads it with libbpf; then attaches each program
//! through its probe provider ([`crate::providers`]). Output: a
//! [`Loaded`] that owns every kernel object and reads messages and maps (see
//! [`super::maps_read`]).
//!
//! libbpf's own printing is captured, never written to stderr (`libbpf_log.rs`):
//! the verifier log of a failing program becomes [`LoadError::Verifier`].

use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::{
    Link, MapCore, MapHandle, MapType, Object, ObjectBuilder, ProgramInput, ProgramMut,
};

use super::elf_object::{ElfProgram, write_elf};
use super::libbpf_log::{
    capture_debug_print, failed_program, install_print_capture, load_logs, verifier_log,
    with_captured_print,
};
use super::map_btf::{KEY_TYPE_ID, VALUE_TYPE_ID, load_storage_btf};
use super::maps_read::{MapError, Ring, Stopper};
use crate::codegen::program::{BpfProgram, Compiled};
use crate::providers;
use crate::vocab::{AttachPoint, MapId, MapKind, MapSpec, WatchTarget};

use super::libbpf_log::failing_insn;

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
    /// `--usdt-file-activation`: USDT probes attach to every process that
    /// maps their file, whatever `pid` says, so the kernel sets their
    /// semaphores in all of them (bpftrace's semantics).
    pub usdt_file_activation: bool,
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
    /// Watchpoints the session set on function arguments, by address.
    watch_links: Vec<(u64, Vec<Link>)>,
    object: Object,
    maps: Vec<MapHandle>,
    programs: Vec<ProgramMeta>,
    stopper: Stopper,
    /// With `-v`: each program's id and verifier log.
    pub reports: Vec<LoadReport>,
}

/// What a verbose load (`-v`) keeps of each program: bpftrace prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadReport {
    /// The probe as the user wrote it.
    pub probe: String,
    /// The kernel's id of the program.
    pub id: Option<u32>,
    /// The verifier's log (level 1).
    pub log: String,
}

/// Creates the maps, loads all programs and prepares the ring buffer reader.
pub fn load(compiled: &Compiled) -> Result<Loaded, LoadError> {
    load_with(compiled, false)
}

/// [`load`], keeping each program's verifier log and id when `verbose`
/// ([`Loaded::reports`]).
pub fn load_with(compiled: &Compiled, verbose: bool) -> Result<Loaded, LoadError> {
    match verbose {
        true => capture_debug_print(),
        false => install_print_capture(),
    }
    let maps = compiled
        .maps
        .iter()
        .map(create_map)
        .collect::<Result<Vec<_>, _>>()?;
    for (id, value) in &compiled.initial_values {
        write_initial_value(&compiled.maps, &maps, *id, value)?;
    }
    crate::timings::step("maps created");
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
    let (object, printed) = loop {
        match load_object(&programs, &insns, verbose) {
            Ok(loaded) => break loaded,
            Err(failure) => defer_or_fail(&mut programs, failure)?,
        }
    };
    crate::timings::step("programs loaded (verified)");
    let reports = match verbose {
        true => load_reports(&object, &programs, &printed),
        false => Vec::new(),
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
    crate::timings::step("ring buffer mapped");
    Ok(Loaded {
        ring,
        links: Vec::new(),
        watch_links: Vec::new(),
        object,
        maps,
        programs,
        stopper,
        reports,
    })
}

/// The programs as the ELF object libbpf loads (`--emit-elf`), without
/// map descriptors: a map reference holds the map's index (maps are
/// created when a session starts).
pub fn elf_image(compiled: &Compiled) -> Result<Vec<u8>, LoadError> {
    let programs: Vec<ElfProgram<'_>> = (compiled.programs.iter())
        .map(|p| ElfProgram {
            name: &p.name,
            section: providers::of(&p.attach).section(&p.attach),
            insns: &p.insns,
        })
        .collect();
    write_elf(&programs).map_err(|e| LoadError::Object {
        reason: format!("ELF writer: {e}"),
    })
}

/// Each loaded program's probe, id and verifier log, in program order.
fn load_reports(object: &Object, programs: &[ProgramMeta], printed: &str) -> Vec<LoadReport> {
    let logs = load_logs(printed);
    let ids: Vec<(String, Option<u32>)> = (object.progs())
        .map(|p| {
            let id = libbpf_rs::Program::id_from_fd(p.as_fd()).ok();
            (p.name().to_string_lossy().into_owned(), id)
        })
        .collect();
    (programs.iter())
        .filter(|meta| meta.refused.is_none())
        .map(|meta| LoadReport {
            probe: meta.probe.clone(),
            id: (ids.iter())
                .find(|(name, _)| *name == meta.name)
                .and_then(|(_, id)| *id),
            log: (logs.iter())
                .find(|(name, _)| *name == meta.name)
                .map(|(_, log)| log.clone())
                .unwrap_or_default(),
        })
        .collect()
}

/// A failed `bpf_object__load`, with what libbpf printed.
struct LoadFailure {
    program: Option<usize>,
    reason: String,
    log: Option<String>,
}

fn defer_or_fail(programs: &mut [ProgramMeta], failure: LoadFailure) -> Result<(), LoadError> {
    let Some(index) = failure.program else {
        return Err(LoadError::Object {
            reason: failure.reason,
        });
    };
    let meta = &mut programs[index];
    // A kind of probe this kernel cannot load is reported when it attaches,
    // so the other probes still run.
    let deferred = providers::of(&meta.attach).deferred_refusal(&failure.reason);
    if let Some(reason) = deferred.filter(|_| meta.refused.is_none()) {
        meta.refused = Some(reason);
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

/// The loaded object, and what libbpf printed while loading it.
fn load_object(
    programs: &[ProgramMeta],
    insns: &[Vec<u64>],
    verbose: bool,
) -> Result<(Object, String), LoadFailure> {
    let object_failure = |reason: String| LoadFailure {
        program: None,
        reason,
        log: None,
    };
    let elf_programs: Vec<ElfProgram<'_>> = programs
        .iter()
        .zip(insns)
        .filter(|(meta, _)| meta.refused.is_none())
        .map(|(meta, insns)| ElfProgram {
            name: &meta.name,
            section: providers::of(&meta.attach).section(&meta.attach),
            insns,
        })
        .collect();
    let elf = write_elf(&elf_programs).map_err(|e| object_failure(format!("ELF writer: {e}")))?;
    let (open, printed) = with_captured_print(|| ObjectBuilder::default().open_memory(&elf));
    let mut open = open.map_err(|e| object_failure(format!("{e:#}\n{printed}")))?;
    crate::timings::step("libbpf object opened");
    if verbose {
        open.progs_mut().for_each(|mut p| p.set_log_level(1));
    }
    let (loaded, printed) = with_captured_print(|| open.load());
    let loaded = loaded.map_err(|e| {
        let program =
            failed_program(&printed).and_then(|name| programs.iter().position(|p| p.name == name));
        LoadFailure {
            program,
            reason: format!("{e:#}"),
            log: verifier_log(&printed),
        }
    })?;
    Ok((loaded, printed))
}

fn create_map(spec: &MapSpec) -> Result<MapHandle, LoadError> {
    if spec.kind == MapKind::TaskStorage {
        return create_task_storage(spec);
    }
    let (ty, key_size, value_size) = match spec.kind {
        MapKind::Hash => (MapType::Hash, spec.key_size, spec.value_size),
        MapKind::PerCpuHash => (MapType::PercpuHash, spec.key_size, spec.value_size),
        MapKind::LruHash => (MapType::LruHash, spec.key_size, spec.value_size),
        MapKind::Array => (MapType::Array, 4, spec.value_size),
        MapKind::PerCpuArray => (MapType::PercpuArray, 4, spec.value_size),
        MapKind::RingBuf => (MapType::RingBuf, 0, 0),
        MapKind::PerfEventArray => (MapType::PerfEventArray, 4, 4),
        MapKind::StackTrace => (MapType::StackTrace, 4, spec.value_size),
        MapKind::TaskStorage => unreachable!("created by create_task_storage"),
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

/// Task storage maps need BTF for their key and value types; the kernel
/// keeps its own reference to the BTF, so its fd closes after creation.
fn create_task_storage(spec: &MapSpec) -> Result<MapHandle, LoadError> {
    let fail = |reason: String| LoadError::CreateMap {
        map: spec.name.clone(),
        reason,
    };
    let btf =
        load_storage_btf(spec.value_size).map_err(|e| fail(format!("cannot load its BTF: {e}")))?;
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: libbpf_rs::libbpf_sys::BPF_F_NO_PREALLOC,
        btf_fd: btf.as_raw_fd() as u32,
        btf_key_type_id: KEY_TYPE_ID,
        btf_value_type_id: VALUE_TYPE_ID,
        ..Default::default()
    };
    MapHandle::create(
        MapType::TaskStorage,
        Some(kernel_map_name(&spec.name)),
        4,
        spec.value_size,
        0,
        &opts,
    )
    .map_err(|e| fail(format!("{e:#}")))
}

/// Writes the value of one-element array `id`.
fn write_initial_value(
    specs: &[MapSpec],
    maps: &[MapHandle],
    id: MapId,
    value: &[u8],
) -> Result<(), LoadError> {
    let index = id.0 as usize;
    let fail = |reason: String| LoadError::CreateMap {
        map: specs
            .get(index)
            .map_or_else(|| id.0.to_string(), |s| s.name.clone()),
        reason,
    };
    let map = maps.get(index).ok_or_else(|| fail("no such map".into()))?;
    map.update(&0u32.to_ne_bytes(), value, libbpf_rs::MapFlags::ANY)
        .map_err(|e| fail(format!("cannot write its initial value: {e:#}")))
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

impl Loaded {
    /// Attaches every program except `BEGIN`/`END` and those the session
    /// attaches later; stops at the first failure (what is attached stays
    /// attached until drop).
    ///
    /// The kernel runs the programs of one tracepoint or uprobe newest first,
    /// so attaching in reverse makes them fire in script order, as bpftrace's do.
    pub fn attach_all(&mut self, opts: AttachOptions) -> Result<(), AttachError> {
        self.attach_where(opts, |_| true)
    }

    /// [`Loaded::attach_all`] for the programs whose attach point passes `wanted`.
    pub fn attach_where(
        &mut self,
        opts: AttachOptions,
        wanted: impl Fn(&AttachPoint) -> bool,
    ) -> Result<(), AttachError> {
        for index in (0..self.programs.len()).rev() {
            let attach = &self.programs[index].attach;
            let provider = providers::of(attach);
            if !provider.runs_once() && !provider.attached_later(attach) && wanted(attach) {
                self.attach(index, opts)?;
            }
        }
        Ok(())
    }

    /// Attaches one program (index into `Compiled::programs`).
    pub fn attach(&mut self, index: usize, opts: AttachOptions) -> Result<(), AttachError> {
        let point = self.meta(index)?.attach.clone();
        let new_links = self.attach_at(index, &point, opts)?;
        self.links.extend(new_links);
        Ok(())
    }

    /// Sets watchpoint program `index` (on a function's argument) on
    /// `address` of process `pid`.
    pub fn attach_watchpoint(
        &mut self,
        index: usize,
        address: u64,
        pid: i32,
    ) -> Result<(), AttachError> {
        let mut point = self.meta(index)?.attach.clone();
        if let AttachPoint::Watchpoint { target, .. } = &mut point {
            *target = WatchTarget::Address(address);
        }
        let new_links = self.attach_at(
            index,
            &point,
            AttachOptions {
                pid: Some(pid),
                ..Default::default()
            },
        )?;
        self.watch_links.push((address, new_links));
        Ok(())
    }

    /// Attaches iterator program `index` and opens it for reading; `None`
    /// when the iterator was pinned instead (its link stays pinned).
    pub fn open_iterator(&mut self, index: usize) -> Result<Option<libbpf_rs::Iter>, AttachError> {
        let point = self.meta(index)?.attach.clone();
        let mut links = self.attach_at(index, &point, AttachOptions::default())?;
        let link = links.pop().ok_or_else(|| AttachError {
            probe: self.programs[index].probe.clone(),
            reason: "attaching made no link".into(),
        })?;
        if matches!(point, AttachPoint::Iter { pin: Some(_), .. }) {
            self.links.push(link);
            return Ok(None);
        }
        let iterator = libbpf_rs::Iter::new(&link).map_err(|e| AttachError {
            probe: self.programs[index].probe.clone(),
            reason: format!("cannot open the iterator: {e:#}"),
        })?;
        self.links.push(link);
        Ok(Some(iterator))
    }

    /// Removes every watchpoint set on `address`; returns how many there were.
    pub fn unwatch(&mut self, address: u64) -> usize {
        let before = self.watch_links.len();
        self.watch_links.retain(|(watched, _)| *watched != address);
        before - self.watch_links.len()
    }

    /// Attaches program `index` at `point` and returns its links.
    fn attach_at(
        &self,
        index: usize,
        point: &AttachPoint,
        opts: AttachOptions,
    ) -> Result<Vec<Link>, AttachError> {
        let meta = self.meta(index)?;
        let fail = |reason: String| AttachError {
            probe: meta.probe.clone(),
            reason,
        };
        if let Some(reason) = &meta.refused {
            return Err(fail(reason.clone()));
        }
        let prog = find_program(&self.object, &meta.name).ok_or_else(|| fail(NOT_LOADED.into()))?;
        let every_process = opts.usdt_file_activation && matches!(point, AttachPoint::Usdt { .. });
        let pid = opts.pid.filter(|_| !every_process).unwrap_or(-1);
        let provider = providers::of(point);
        let (new_links, printed) = with_captured_print(|| provider.attach(&prog, point, pid));
        // libbpf often says more than the errno (which file, which step).
        let new_links = new_links.map_err(|reason| match printed.lines().last() {
            Some(line) => format!("{reason} [{}]", line.trim_start_matches("libbpf: ")),
            None => reason,
        });
        new_links.map_err(fail)
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
        self.watch_links.clear();
        self.links.clear();
    }

    /// Number of links currently attached.
    #[cfg(test)]
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

    /// The kernel map made for `map`.
    pub fn map(&self, map: crate::vocab::MapId) -> Result<&MapHandle, MapError> {
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

const NOT_LOADED: &str = "program was not loaded (loader bug)";

fn find_program<'o>(object: &'o Object, name: &str) -> Option<ProgramMut<'o>> {
    object.progs_mut().find(|p| p.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::asm::{AluOp, Reg};
    use crate::runtime::bpf::test_support::*;
    use crate::vocab::{MapId, PerfEvent, PerfSample};
    use std::ops::ControlFlow;
    use std::time::{Duration, Instant};

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
        let mut asm = Assembler::new();
        asm.only_thread(tid(), |body| {
            body.send_r6(RING);
        })
        .ret0();
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
        let mut asm = Assembler::new();
        asm.set_r6(42).send_r6(RING).ret0();
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

    /// A program reading an uninitialised register is a Verifier error with
    /// the log and the failing instruction.
    #[test]
    fn verifier_error_has_log_and_insn() {
        let mut asm = Assembler::new();
        // r0 += r5, with r5 never written.
        asm.mov64_imm(Reg::R0, 0);
        asm.alu64_reg(AluOp::Add, Reg::R0, Reg::R5);
        asm.exit();
        let ok = empty_program("fine", "BEGIN", AttachPoint::Begin);
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

    /// A fentry program the kernel refuses to load is reported at attach
    /// time; the other programs still load and attach.
    #[test]
    fn fentry_refusal_is_an_attach_error() {
        let attach = AttachPoint::Fentry {
            function: "do_nanosleep".into(),
            exit: false,
        };
        let fentry = empty_program("fe", "fentry:do_nanosleep", attach);
        let tp = empty_program(
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
        let mut tp = Assembler::new();
        tp.only_thread(tid(), |body| {
            body.send_r6(RING);
        })
        .ret0();
        let mut prof = Assembler::new();
        prof.count(COUNTS).ret0();
        let mut begin = Assembler::new();
        begin.set_r6(1).send_r6(RING).ret0();
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
            "load {load_time:?}; attach {attach_time:?}; BEGIN {begin_time:?}; total {:?}",
            t0.elapsed()
        );
    }
}
