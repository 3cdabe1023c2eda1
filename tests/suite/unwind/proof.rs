//! Proof on the real kernel: stacks of programs without frame pointers reach
//! `main` with the table unwinder (and not with frame pointers), match
//! `perf --call-graph dwarf`, follow a `dlopen`ed library, and cost what
//! `bpf_stats` says.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use wprof::unwind::bpf::LoopKind;
use wprof::unwind::maps::flags;
use wprof::unwind::sampler::StackSource;
use wprof::vocab::AttachPoint;

use super::kernel::{
    SOURCES, Sampling, clean_end, mean_depth, modal, perf_dwarf_stacks, poke, reach_share, spawn,
    symbolize, wait_for_line, wait_until_mapped,
};
use super::workloads::{c_chain, dlopen_main, rust_chain, spin_lib};
use crate::require_bpf;

/// One sampler at a time: program names identify `bpf_stats` entries, and
/// timings need the CPUs.
pub static SERIAL: Mutex<()> = Mutex::new(());

const HZ: u64 = 499;

/// What the stacks of one source looked like.
struct SourceResult {
    source: StackSource,
    stacks: usize,
    reach_main: f64,
    depth: f64,
    names: Vec<Vec<String>>,
}

/// Samples `pid` for `time` with every source; symbolized results by source.
fn sample(sampling: &mut Sampling, pid: u32, time: Duration, rust: bool) -> Vec<SourceResult> {
    let mut by_source = sampling.collect(time);
    SOURCES
        .iter()
        .enumerate()
        .map(|(i, &source)| {
            let stacks = by_source.remove(&(i as u32)).unwrap_or_default();
            let addresses: Vec<Vec<u64>> = stacks.iter().map(|s| s.frames.clone()).collect();
            let names = symbolize(pid, &addresses, rust);
            let clean = stacks.iter().filter(|s| clean_end(s)).count();
            let mut endings: Vec<u32> = stacks.iter().map(|s| s.flags).collect();
            endings.sort_unstable();
            endings.dedup();
            let result = SourceResult {
                source,
                stacks: stacks.len(),
                reach_main: reach_share(&names, "main"),
                depth: mean_depth(&stacks),
                names,
            };
            println!(
                "{:?}: {} stacks, {:.1}% reach main, {:.1} frames on average, {clean} ended cleanly \
                 (flags seen {endings:?}); first: {:?}",
                source,
                result.stacks,
                100.0 * result.reach_main,
                result.depth,
                result.names.first()
            );
            result
        })
        .collect()
}

/// Asserts the table sources reached main in 95% of at least 50 stacks and
/// that their innermost frames are `chain` (innermost first) in 95%.
#[track_caller]
fn assert_tables_reach_main(results: &[SourceResult], chain: &[&str]) {
    for r in results
        .iter()
        .filter(|r| matches!(r.source, StackSource::Table(_)))
    {
        assert!(r.stacks >= 50, "{:?}: only {} stacks", r.source, r.stacks);
        assert!(
            r.reach_main >= 0.95,
            "{:?}: {:.1}% reach main",
            r.source,
            100.0 * r.reach_main
        );
        let exact = r
            .names
            .iter()
            .filter(|s| s.len() >= chain.len() && s[..chain.len()] == *chain);
        let share = exact.count() as f64 / r.stacks as f64;
        assert!(
            share >= 0.95,
            "{:?}: {:.1}% start with {chain:?}",
            r.source,
            100.0 * share
        );
    }
}

/// The kernel's frame-pointer walk, on the same samples, rarely gets past
/// the first frames.
#[track_caller]
fn assert_frame_pointers_fail(results: &[SourceResult]) {
    let fp = results
        .iter()
        .find(|r| r.source == StackSource::KernelFramePointers)
        .expect("frame-pointer source");
    assert!(fp.stacks >= 50, "frame pointers: only {} stacks", fp.stacks);
    assert!(
        fp.reach_main < 0.5,
        "frame pointers reached main in {:.1}%",
        100.0 * fp.reach_main
    );
    assert!(
        fp.depth <= 3.0,
        "frame pointers found {:.1} frames on average",
        fp.depth
    );
}

/// The most common stack agrees with perf's (DWARF unwinding in user
/// space, physical frames): the same frames by name from the sampled
/// function to `main`, then as many frames up to the same outermost one.
/// Past `main` names may differ by alias: perf names libc's frame from the
/// symbol table (`__libc_start_main@@GLIBC_2.34`), blazesym from DWARF
/// (`__libc_start_main_impl`).
#[track_caller]
fn assert_matches_perf(results: &[SourceResult], perf: Option<Vec<Vec<String>>>) {
    let Some(perf) = perf else {
        println!("perf could not record here: comparison skipped");
        return;
    };
    let theirs = modal(perf.into_iter());
    let main_at = |s: &[String]| s.iter().position(|f| f == "main");
    let perf_main =
        main_at(&theirs).unwrap_or_else(|| panic!("perf never reached main: {theirs:?}"));
    for r in results
        .iter()
        .filter(|r| matches!(r.source, StackSource::Table(_)))
    {
        let ours = modal(r.names.iter().cloned());
        println!("{:?}: ours {ours:?}\n    perf {theirs:?}", r.source);
        assert_eq!(
            main_at(&ours),
            Some(perf_main),
            "{:?}: main at another depth",
            r.source
        );
        assert_eq!(
            ours[..=perf_main],
            theirs[..=perf_main],
            "{:?} differs from perf",
            r.source
        );
        assert_eq!(
            ours.len(),
            theirs.len(),
            "{:?}: frames past main differ",
            r.source
        );
        assert_eq!(
            ours.last(),
            theirs.last(),
            "{:?}: outermost frame differs",
            r.source
        );
    }
}

/// Runs `path args`, samples it with every source for 2 s while perf
/// records it for 1.5 s; the results and perf's stacks.
fn sample_with_perf(
    path: &Path,
    args: &[&str],
    rust: bool,
) -> (Vec<SourceResult>, Option<Vec<Vec<String>>>) {
    let workload = spawn(path, args);
    let pid = workload.0.id();
    wait_until_mapped(pid, "libc.so");
    let mut sampling = Sampling::start(pid, HZ);
    let perf = std::thread::spawn(move || perf_dwarf_stacks(pid, Duration::from_millis(1500)));
    let results = sample(&mut sampling, pid, Duration::from_millis(2000), rust);
    (results, perf.join().expect("perf thread"))
}

/// C, -O2 -fomit-frame-pointer: main → a → b → c with the tables in ≥ 95%
/// of samples, 1-2 frames with frame pointers, perf agrees.
#[test]
fn c_without_frame_pointers() {
    require_bpf!();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (results, perf) = sample_with_perf(&c_chain(), &["30000"], false);
    assert_tables_reach_main(&results, &["c", "b", "a", "main"]);
    assert_frame_pointers_fail(&results);
    assert_matches_perf(&results, perf);
}

/// A Rust release binary (rustc -C opt-level=2): the chain and `main`, as
/// perf finds them; frame pointers get 1-2 frames.
#[test]
fn rust_release_binary() {
    require_bpf!();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (results, perf) = sample_with_perf(&rust_chain(), &["30000"], true);
    assert_tables_reach_main(
        &results,
        &["chain::c", "chain::b", "chain::a", "chain::main"],
    );
    assert_matches_perf(&results, perf);
    assert_frame_pointers_fail(&results);
}

/// A library `dlopen`ed after sampling began: once its mapping is loaded
/// (the process is added again), stacks go through it to `main`.
#[test]
fn dlopened_library() {
    require_bpf!();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let lib = spin_lib();
    let mut workload = spawn(
        &dlopen_main(),
        &[lib.to_str().expect("UTF-8 path"), "30000"],
    );
    let pid = workload.0.id();
    wait_until_mapped(pid, "libc.so");
    let mut sampling = Sampling::start(pid, HZ);
    poke(&mut workload);
    wait_for_line(&mut workload, "loaded");
    sampling.refresh(pid);
    let results = sample(&mut sampling, pid, Duration::from_millis(1500), false);
    assert_tables_reach_main(
        &results,
        &["lib_spin", "lib_middle", "lib_entry", "run_library", "main"],
    );
}

/// The file offset of `name@plt` in `binary`, from objdump's disassembly.
fn plt_entry_offset(binary: &Path, name: &str) -> u64 {
    let out = std::process::Command::new("objdump")
        .args(["-d", "--section=.plt"])
        .arg(binary)
        .output()
        .expect("run objdump");
    let text = String::from_utf8_lossy(&out.stdout);
    let label = format!("<{name}@plt>:");
    let address = text
        .lines()
        .find(|l| l.trim_end().ends_with(&label))
        .and_then(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok())
        .unwrap_or_else(|| panic!("no {label} in {}", binary.display()));
    let elf = std::fs::read(binary).expect("read the binary");
    let file = object::File::parse(&*elf).expect("parse the binary");
    use object::{Object as _, ObjectSection as _};
    let plt = file.section_by_name(".plt").expect(".plt");
    let (plt_offset, _) = plt.file_range().expect(".plt is in the file");
    address - plt.address() + plt_offset
}

/// A uprobe on the PLT entry `clock_gettime@plt`: the first frame uses the
/// PLT's expression rule (CFA rsp+8 before the entry's push), and the stack
/// goes on through c, b, a to main.
#[test]
fn uprobe_in_a_plt_entry() {
    require_bpf!();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let chain = c_chain();
    let attach = AttachPoint::Uprobe {
        binary: chain.clone(),
        symbol: "clock_gettime@plt".into(),
        offset: plt_entry_offset(&chain, "clock_gettime"),
        retprobe: false,
    };
    let workload = spawn(&chain, &["30000"]);
    let pid = workload.0.id();
    wait_until_mapped(pid, "libc.so");
    let mut sampling = Sampling::start_with(pid, &attach, &[StackSource::Table(LoopKind::BpfLoop)]);
    let stacks = sampling
        .collect(Duration::from_millis(1000))
        .remove(&0)
        .unwrap_or_default();
    let frames: Vec<Vec<u64>> = stacks.iter().map(|s| s.frames.clone()).collect();
    let names = symbolize(pid, &frames, false);
    println!(
        "{} stacks at clock_gettime@plt, first: {:?}",
        names.len(),
        names.first()
    );
    assert!(names.len() >= 20, "only {} uprobe hits", names.len());
    let through = names
        .iter()
        .filter(|s| s.len() >= 5 && s[1..5] == ["c", "b", "a", "main"]);
    let share = through.count() as f64 / names.len() as f64;
    assert!(
        share >= 0.95,
        "{:.1}% go through c, b, a, main",
        100.0 * share
    );
    let by_frame_pointer = stacks
        .iter()
        .filter(|s| s.flags & flags::FRAME_POINTER != 0)
        .count();
    assert_eq!(
        by_frame_pointer, 0,
        "the PLT frame fell back to frame pointers"
    );
}
