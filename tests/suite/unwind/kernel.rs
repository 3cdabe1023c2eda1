//! The BPF unwinder on the real kernel: a CPU-clock sampler records the
//! stacks of a workload spinning at the bottom of a known call chain with
//! each stack source at once (table unwinder with `bpf_loop`, with a bounded
//! loop, and the kernel's frame-pointer walk), and the stacks are checked
//! against the chain and against `perf record --call-graph dwarf`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::ops::ControlFlow;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use blazesym::Pid;
use blazesym::symbolize::source::{Process, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use wprof::runtime::bpf::loader::{AttachOptions, Loaded, load};
use wprof::runtime::targets::environment::SystemEnvironment;
use wprof::unwind::bpf::LoopKind;
use wprof::unwind::layout::MmLayout;
use wprof::unwind::manager::TableManager;
use wprof::unwind::maps::{UnwindLimits, UnwindMaps, flags};
use wprof::unwind::sampler::{MapStore, SampledStack, StackSource, cpu_clock, sampler};
use wprof::vocab::AttachPoint;

/// Every stack source, in the sampler's order.
pub const SOURCES: [StackSource; 2] = [
    StackSource::Table(LoopKind::BpfLoop),
    StackSource::KernelFramePointers,
];

/// This kernel's `task_struct`/`mm_struct` offsets, for the unwinder.
pub fn mm_layout() -> MmLayout {
    MmLayout::resolve(&SystemEnvironment::default()).expect("kernel BTF")
}

/// A workload process killed when dropped.
pub struct Workload(pub Child);

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `path args` with stdin and stdout piped.
#[track_caller]
pub fn spawn(path: &Path, args: &[&str]) -> Workload {
    let child = Command::new(path)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", path.display()));
    Workload(child)
}

/// Waits (up to 10 s) until `pid` maps a file whose path contains `name`:
/// the dynamic loader has run, so the manager sees every library.
#[track_caller]
pub fn wait_until_mapped(pid: u32, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        if maps.contains(name) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("process {pid} never mapped {name}");
}

/// The sampler loaded for `pid` (attached), its maps and table manager.
pub struct Sampling {
    pub loaded: Loaded,
    pub maps: UnwindMaps,
    pub manager: TableManager,
}

impl Sampling {
    /// Samples `pid` at `hz` with [`SOURCES`].
    #[track_caller]
    pub fn start(pid: u32, hz: u64) -> Sampling {
        Sampling::start_with(pid, &cpu_clock(hz), &SOURCES)
    }

    #[track_caller]
    pub fn start_with(pid: u32, attach: &AttachPoint, sources: &[StackSource]) -> Sampling {
        let limits = UnwindLimits::default();
        let (compiled, maps) =
            sampler(pid, attach, sources, limits, mm_layout()).expect("assemble the sampler");
        let mut loaded =
            load(&compiled).unwrap_or_else(|e| panic!("load the sampler: {}", short(&e)));
        let mut manager = TableManager::building_in_place(limits);
        let report = manager
            .add_process(
                &mut MapStore {
                    loaded: &loaded,
                    maps,
                },
                pid,
            )
            .expect("add the process");
        println!("mappings of {pid}: {report:?}");
        loaded.attach_all(AttachOptions::default()).expect("attach");
        Sampling {
            loaded,
            maps,
            manager,
        }
    }

    /// Re-reads the process's mappings (after a `dlopen`).
    pub fn refresh(&mut self, pid: u32) {
        let mut store = MapStore {
            loaded: &self.loaded,
            maps: self.maps,
        };
        let report = self.manager.add_process(&mut store, pid).expect("refresh");
        println!("mappings of {pid} again: {report:?}");
    }

    /// Stacks received for `time`, by source index.
    pub fn collect(&mut self, time: Duration) -> HashMap<u32, Vec<SampledStack>> {
        let mut out: HashMap<u32, Vec<SampledStack>> = HashMap::new();
        let deadline = Instant::now() + time;
        while Instant::now() < deadline {
            let _ = self
                .loaded
                .poll(Duration::from_millis(50), |record| {
                    if let Some(stack) = SampledStack::parse(record) {
                        out.entry(stack.source).or_default().push(stack);
                    }
                    ControlFlow::Continue(())
                })
                .expect("poll the ring buffer");
        }
        out
    }
}

/// Function names of each frame (return addresses looked up at `ra - 1`),
/// `?` where blazesym finds none. Demangling is for Rust: it would read C's
/// `c` as the mangled type `char`.
pub fn symbolize(pid: u32, stacks: &[Vec<u64>], demangle: bool) -> Vec<Vec<String>> {
    let mut lookups: Vec<u64> = stacks
        .iter()
        .flat_map(|s| {
            s.iter()
                .enumerate()
                .map(|(i, &a)| if i == 0 { a } else { a.saturating_sub(1) })
        })
        .collect();
    lookups.sort_unstable();
    lookups.dedup();
    let source = Source::Process(Process::new(Pid::from(pid)));
    let symbolizer = Symbolizer::builder().enable_demangling(demangle).build();
    let results = symbolizer
        .symbolize(&source, Input::AbsAddr(&lookups))
        .expect("symbolize");
    let names: HashMap<u64, String> = lookups
        .iter()
        .zip(results)
        .map(|(&addr, sym)| match sym {
            Symbolized::Sym(sym) => (addr, sym.name.to_string()),
            Symbolized::Unknown(_) => (addr, "?".to_string()),
        })
        .collect();
    stacks
        .iter()
        .map(|s| {
            s.iter()
                .enumerate()
                .map(|(i, &a)| names[&if i == 0 { a } else { a.saturating_sub(1) }].clone())
                .collect()
        })
        .collect()
}

/// Share of stacks whose frames include `name`.
pub fn reach_share(stacks: &[Vec<String>], name: &str) -> f64 {
    let hits = stacks
        .iter()
        .filter(|s| s.iter().any(|f| f == name))
        .count();
    hits as f64 / stacks.len().max(1) as f64
}

/// Average frames per stack.
pub fn mean_depth(stacks: &[SampledStack]) -> f64 {
    stacks.iter().map(|s| s.frames.len()).sum::<usize>() as f64 / stacks.len().max(1) as f64
}

/// The most common of `stacks`.
pub fn modal<T: Clone + Eq + std::hash::Hash>(stacks: impl Iterator<Item = Vec<T>>) -> Vec<T> {
    let mut counts: HashMap<Vec<T>, usize> = HashMap::new();
    for stack in stacks {
        *counts.entry(stack).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(s, _)| s)
        .unwrap_or_default()
}

/// Runs `perf record --call-graph dwarf` on `pid` for `time` and returns
/// the function names of each sample's call chain, innermost first, one per
/// physical frame (`--no-inline`).
pub fn perf_dwarf_stacks(pid: u32, time: Duration) -> Option<Vec<Vec<String>>> {
    let dir = crate::common::scratch_dir("unwind");
    let data = dir.join(format!("perf-{pid}.data"));
    let record = Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "-F",
            "499",
            "--call-graph",
            "dwarf",
            "-p",
        ])
        .arg(pid.to_string())
        .arg("-o")
        .arg(&data)
        .args(["--", "sleep"])
        .arg(format!("{}", time.as_secs_f64()))
        .output()
        .ok()?;
    if !record.status.success() {
        println!(
            "perf record failed: {}",
            String::from_utf8_lossy(&record.stderr)
        );
        return None;
    }
    let script = Command::new("perf")
        .args(["script", "--no-inline", "-F", "ip,sym", "-i"])
        .arg(&data)
        .output()
        .ok()?;
    let _ = std::fs::remove_file(&data);
    let text = String::from_utf8_lossy(&script.stdout);
    let stacks = text
        .split("\n\n")
        .map(|block| {
            block
                .lines()
                .filter_map(|l| {
                    l.trim()
                        .split_once(' ')
                        .map(|(_, sym)| sym.trim().to_string())
                })
                .collect::<Vec<String>>()
        })
        .filter(|s| !s.is_empty())
        .collect();
    Some(stacks)
}

/// Sends a line to the workload's stdin (the dlopen workload waits for it).
pub fn poke(workload: &mut Workload) {
    let stdin = workload.0.stdin.as_mut().expect("stdin is piped");
    stdin.write_all(b"go\n").expect("write to the workload");
    stdin.flush().expect("flush");
}

/// Waits for `line` on the workload's stdout.
#[track_caller]
pub fn wait_for_line(workload: &mut Workload, line: &str) {
    let stdout = workload.0.stdout.as_mut().expect("stdout is piped");
    let mut reader = BufReader::new(stdout);
    let mut got = String::new();
    reader
        .read_line(&mut got)
        .expect("read the workload's stdout");
    assert_eq!(got.trim(), line, "unexpected workload output");
}

/// Whether a stack ended in a way that is not an error.
pub fn clean_end(stack: &SampledStack) -> bool {
    stack.flags & (flags::READ_FAILED | flags::NO_PROGRESS | flags::TRUNCATED) == 0
}

/// A load error without the whole verifier log (the last lines say why).
pub fn short(e: &wprof::runtime::bpf::loader::LoadError) -> String {
    match e {
        wprof::runtime::bpf::loader::LoadError::Verifier { log, .. } => {
            let tail: Vec<&str> = log.lines().rev().take(12).collect();
            format!(
                "{e}:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        }
        other => other.to_string(),
    }
}
