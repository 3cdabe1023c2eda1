//! Runtime stage, first step: takes the compiler's [`Compiled`] output,
//! creates its maps, patches their fds into the programs, wraps the programs
//! in an in-memory ELF and loads it with libbpf; then attaches each program
//! through its probe provider ([`crate::providers`]). Output: a
//! [`Loaded`] that owns every kernel object and reads messages and maps (see
//! [`super::maps_read`]).
//!
//! libbpf's own printing is captured, never written to stderr (`libbpf_log.rs`):
//! the verifier log of a failing program becomes [`LoadError::Verifier`].

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};

use libbpf_rs::{Link, MapHandle, Object, ObjectBuilder, ProgramMut};

pub use super::attach::{AttachError, AttachOptions};
use super::direct;
use super::elf_object::{ElfProgram, write_elf};
use super::libbpf_log::{
    capture_debug_print, failed_program, failing_insn, install_print_capture, load_logs,
    verifier_log, with_captured_print,
};
use super::maps_create::{create_map, patch_relocs, write_initial_value};
use super::maps_read::{MapError, Ring, Stopper};
use crate::codegen::program::Compiled;
use crate::providers;
use crate::vocab::AttachPoint;

/// The BTF id of each `btf_trace_NAME` typedef, by tracepoint name: a
/// `tp_btf` program whose tracepoint is here is loaded without libbpf
/// parsing the kernel's BTF again to find it.
pub type TracepointIds = BTreeMap<String, u32>;

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

/// What the loader keeps of each program.
#[derive(Debug)]
pub(super) struct ProgramMeta {
    pub(super) name: String,
    pub(super) probe: String,
    pub(super) attach: AttachPoint,
    /// Set when the kernel refused to load this kind of program (fentry here):
    /// reported when the probe is attached.
    pub(super) refused: Option<String>,
    /// The program's fd when it was loaded by itself ([`direct`]), not
    /// through libbpf's object.
    pub(super) direct: Option<OwnedFd>,
}

/// Everything loaded into the kernel. Fields drop in order: the ring reader,
/// then the links (detaching), then the programs, then the maps.
pub struct Loaded {
    ring: Option<Ring>,
    /// Raw tracepoint links of the programs loaded by themselves.
    pub(super) direct_links: Vec<OwnedFd>,
    pub(super) links: Vec<Link>,
    /// Watchpoints the session set on function arguments, by address.
    pub(super) watch_links: Vec<(u64, Vec<Link>)>,
    pub(super) object: Object,
    maps: Vec<MapHandle>,
    pub(super) programs: Vec<ProgramMeta>,
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
    load_with(compiled, false, &TracepointIds::new())
}

/// [`load`], keeping each program's verifier log and id when `verbose`
/// ([`Loaded::reports`]), and loading the `tp_btf` programs whose
/// tracepoint is in `tracepoint_ids` by themselves (not when `verbose`:
/// libbpf's object gives the reports).
pub fn load_with(
    compiled: &Compiled,
    verbose: bool,
    tracepoint_ids: &TracepointIds,
) -> Result<Loaded, LoadError> {
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
            direct: None,
        })
        .collect();
    if !verbose && !tracepoint_ids.is_empty() {
        load_tp_btf_directly(&mut programs, &insns, tracepoint_ids);
        crate::timings::step("tp_btf programs loaded by id (verified, in parallel)");
    }
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
        direct_links: Vec::new(),
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

/// Loads each `tp_btf` program whose tracepoint id is known by itself, the
/// programs shared out over the CPUs (the kernel verifies them in parallel);
/// the others, and any that fails here, go through libbpf's object.
fn load_tp_btf_directly(programs: &mut [ProgramMeta], insns: &[Vec<u64>], ids: &TracepointIds) {
    let wanted: Vec<(usize, u32)> = (programs.iter().enumerate())
        .filter_map(|(index, meta)| match &meta.attach {
            AttachPoint::TpBtf { name } => Some((index, *ids.get(name)?)),
            _ => None,
        })
        .collect();
    if wanted.is_empty() {
        return;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_thread = wanted.len().div_ceil(threads);
    let names: Vec<&str> = programs.iter().map(|p| p.name.as_str()).collect();
    let loaded: Vec<(usize, Option<OwnedFd>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (wanted.chunks(per_thread))
            .map(|chunk| {
                let names = &names;
                scope.spawn(move || {
                    (chunk.iter())
                        .map(|&(index, id)| {
                            (index, direct::load_tp_btf(names[index], &insns[index], id))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        (workers.into_iter())
            .flat_map(|worker| worker.join().unwrap_or_default())
            .collect()
    });
    for (index, fd) in loaded {
        programs[index].direct = fd;
    }
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
        .filter(|(meta, _)| meta.refused.is_none() && meta.direct.is_none())
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

impl Loaded {
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
}

/// The program named `name` in libbpf's object.
pub(super) fn find_program<'o>(object: &'o Object, name: &str) -> Option<ProgramMut<'o>> {
    object.progs_mut().find(|p| p.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::asm::{AluOp, Reg};
    use crate::runtime::bpf::maps_create::kernel_map_name;
    use crate::runtime::bpf::test_support::*;
    use crate::vocab::{MapId, MapKind, PerfEvent, PerfSample};
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
