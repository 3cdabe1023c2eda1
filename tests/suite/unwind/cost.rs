//! What the unwinder costs: which loop the verifier accepts, and the
//! per-stack run time of each stack source from `bpf_stats`, measured in one
//! run where every source samples the same ticks.

use std::time::Duration;

use libbpf_rs::query::ProgInfoIter;
use wprof::runtime::bpf::loader::load;
use wprof::unwind::bpf::LoopKind;
use wprof::unwind::maps::{MAX_FRAMES, UnwindLimits};
use wprof::unwind::sampler::{StackSource, cpu_clock, sampler};

use super::kernel::{Sampling, mm_layout, short, spawn, symbolize, wait_until_mapped};
use super::proof::SERIAL;
use super::workloads::c_chain_with_frame_pointers;
use crate::require_bpf;

/// Whether a sampler with `source` loads, with its verified instruction
/// count or the verifier's reason.
fn try_load(source: StackSource) -> Result<u32, String> {
    let attach = cpu_clock(99);
    let (compiled, _) = sampler(
        std::process::id(),
        &attach,
        &[source],
        UnwindLimits::default(),
        mm_layout(),
    )
    .expect("assemble");
    let loaded = load(&compiled).map_err(|e| short(&e))?;
    let name = source.program_name();
    let insns = ProgInfoIter::default()
        .find(|p| p.name.to_str() == Some(name))
        .map_or(0, |p| p.verified_insns);
    drop(loaded);
    Ok(insns)
}

/// The largest bounded-loop depth (of 127, 64, 32, 16, 8) that verifies.
fn deepest_bounded_loop() -> Option<u32> {
    [MAX_FRAMES, 64, 32, 16, 8].into_iter().find(|&frames| {
        let result = try_load(StackSource::Table(LoopKind::Bounded { frames }));
        match &result {
            Ok(insns) => println!("bounded loop, {frames} frames: verified, {insns} insns"),
            Err(e) => {
                let why: Vec<&str> = e.lines().rev().take(2).collect();
                println!("bounded loop, {frames} frames: rejected: {why:?}");
            }
        }
        result.is_ok()
    })
}

/// `bpf_loop` verifies at the full 127 frames in a few thousand
/// instructions; a bounded loop only for short stacks (printed).
#[test]
fn loop_kinds_and_the_verifier() {
    require_bpf!();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let insns =
        try_load(StackSource::Table(LoopKind::BpfLoop)).expect("bpf_loop unwinder verifies");
    println!("bpf_loop, {MAX_FRAMES} frames: verified, {insns} insns");
    assert!(insns > 0 && insns < 100_000, "{insns} verified insns");
    println!(
        "deepest bounded loop that verifies: {:?}",
        deepest_bounded_loop()
    );
}

/// Per-stack cost of the table unwinder (both loops) against the kernel's
/// frame-pointer walk, on a workload with frame pointers so both find every
/// frame, printed for the docs: the median time each program spent getting
/// its stack (`bpf_ktime_get_ns` around it), and `bpf_stats` run time per
/// run above the baseline program's. The sources sample interleaved ticks
/// of one run. `bpf_stats` per run includes this VM's ~1.5-2 us of timing
/// and idle-wakeup overhead, mostly on ticks of other tasks, and varies by
/// 2x between runs; the in-program medians are the stable measure.
#[test]
fn cost_per_stack() {
    require_bpf!();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let bounded = deepest_bounded_loop().unwrap_or(8);
    let sources = [
        StackSource::Table(LoopKind::BpfLoop),
        StackSource::Table(LoopKind::Bounded { frames: bounded }),
        StackSource::KernelFramePointers,
        StackSource::Baseline,
    ];
    let workload = spawn(&c_chain_with_frame_pointers(), &["30000"]);
    let pid = workload.0.id();
    wait_until_mapped(pid, "libc.so");
    let stats = StatsOn::new();
    let mut sampling = Sampling::start_with(pid, &cpu_clock(999), &sources);
    let mut stacks = sampling.collect(Duration::from_millis(3000));
    let progs: Vec<_> = ProgInfoIter::default().collect();
    drop(stats);
    drop(sampling);
    let run = |s: StackSource| {
        let info = progs
            .iter()
            .find(|p| p.name.to_str() == Some(s.program_name()))
            .expect("program");
        (info.run_time_ns as f64, info.run_cnt as f64)
    };
    let (base_ns, base_runs) = run(StackSource::Baseline);
    let per_run_base = base_ns / base_runs.max(1.0);
    let mut medians = Vec::new();
    for (i, &source) in sources.iter().enumerate().take(3) {
        let got = stacks.remove(&(i as u32)).unwrap_or_default();
        let (ns, runs) = run(source);
        let extra = (ns - per_run_base * runs).max(0.0) / got.len().max(1) as f64;
        let mut durations: Vec<u64> = got.iter().map(|s| s.duration_ns).collect();
        durations.sort_unstable();
        let median = durations.get(durations.len() / 2).copied().unwrap_or(0);
        medians.push(median);
        let frames: Vec<Vec<u64>> = got.iter().map(|s| s.frames.clone()).collect();
        let names = symbolize(pid, &frames, false);
        let reach = names
            .iter()
            .filter(|s| s.iter().any(|f| f == "main"))
            .count();
        println!(
            "{source:?}: {} stacks, {reach} reach main, {:.1} frames each; median {median} ns \
             per stack in BPF; bpf_stats {:.0} ns per run, {extra:.0} ns per stack above the \
             baseline ({per_run_base:.0} ns per run)",
            got.len(),
            frames.iter().map(Vec::len).sum::<usize>() as f64 / got.len().max(1) as f64,
            ns / runs.max(1.0),
        );
        assert!(got.len() >= 100, "{source:?}: only {} stacks", got.len());
        assert!(
            reach * 100 >= got.len() * 95,
            "{source:?}: {reach} of {} reach main",
            got.len()
        );
    }
    println!(
        "table unwinder / frame pointers, per stack: bpf_loop {:.2}x, bounded {:.2}x",
        medians[0] as f64 / medians[2].max(1) as f64,
        medians[1] as f64 / medians[2].max(1) as f64
    );
}

/// Enables `bpf_stats` while alive (`BPF_ENABLE_STATS` returns an fd).
pub(crate) struct StatsOn(i32);

impl StatsOn {
    pub(crate) fn new() -> StatsOn {
        // SAFETY: a plain syscall wrapper taking no pointers.
        StatsOn(unsafe {
            libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
        })
    }
}

impl Drop for StatsOn {
    fn drop(&mut self) {
        if self.0 >= 0 {
            // SAFETY: closing the fd BPF_ENABLE_STATS gave us.
            unsafe { libc::close(self.0) };
        }
    }
}
