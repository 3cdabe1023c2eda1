//! Opens the perf events a `profile`/`interval` probe attaches to: one event
//! per online CPU (or CPU 0 only), sampling by frequency or by period. The
//! returned fds close on drop, or belong to the links `attach` makes.

use std::io;
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};
use std::time::Duration;

use libbpf_rs::{Link, ProgramMut};

use super::attach::explain;
use crate::runtime::targets::features::online_cpus;
use crate::sys;
use crate::vocab::{PerfEvent, PerfSample};

/// Opens `event` on every CPU in `cpus`, system-wide (all processes).
/// Returns `(cpu, error)` for the first CPU that fails.
pub fn open_per_cpu(
    event: PerfEvent,
    sample: PerfSample,
    cpus: &[u32],
) -> Result<Vec<OwnedFd>, (u32, io::Error)> {
    let attr = attr_for(event, sample);
    cpus.iter()
        .map(|&cpu| {
            let cpu_arg = i32::try_from(cpu).map_err(|e| (cpu, io::Error::other(e)))?;
            sys::perf_event_open(&attr, -1, cpu_arg).map_err(|e| (cpu, e))
        })
        .collect()
}

fn attr_for(event: PerfEvent, sample: PerfSample) -> libbpf_rs::libbpf_sys::perf_event_attr {
    let mut attr = libbpf_rs::libbpf_sys::perf_event_attr {
        type_: event.type_,
        size: std::mem::size_of::<libbpf_rs::libbpf_sys::perf_event_attr>() as u32,
        config: event.config,
        ..Default::default()
    };
    match sample {
        PerfSample::FrequencyHz(hz) => {
            attr.__bindgen_anon_1.sample_freq = hz;
            attr.set_freq(1);
        }
        PerfSample::Period(period) => attr.__bindgen_anon_1.sample_period = period,
    }
    attr
}

/// Opens the event on the chosen CPUs and attaches `prog` to each; the
/// links own the event fds.
pub(super) fn attach(
    prog: &ProgramMut<'_>,
    event: PerfEvent,
    sample: PerfSample,
    all_cpus: bool,
) -> Result<Vec<Link>, String> {
    let cpus = if all_cpus { online_cpus() } else { vec![0] };
    let fds = open_per_cpu(event, sample, &cpus).map_err(|(cpu, e)| {
        let hint = if event.type_ == 0 {
            "hardware events are not available here (VM?); use a software event such as cpu-clock"
        } else {
            "check /proc/sys/kernel/perf_event_paranoid and perf_event_max_sample_rate"
        };
        format!("perf_event_open on CPU {cpu}: {e}; {hint}")
    })?;
    let stagger = stagger(sample, fds.len());
    let mut links = Vec::with_capacity(fds.len());
    for (index, fd) in fds.into_iter().enumerate() {
        if index > 0 {
            std::thread::sleep(stagger);
        }
        let link = prog
            .attach_perf_event(fd.as_raw_fd())
            .map_err(|e| explain(&e, "the perf event could not take a BPF program"))?;
        // libbpf's perf link owns the event fd from here on and closes it when
        // the link is destroyed (bpf_link_perf_detach, libbpf 1.x); on error
        // above, `fd` drops and closes instead.
        let _ = fd.into_raw_fd();
        links.push(link);
    }
    Ok(links)
}

/// Slowest sampling rate whose per-CPU starts are staggered: slower timers
/// would hold up attaching for too long.
const STAGGER_MIN_HZ: u64 = 50;

/// The pause between enabling consecutive CPUs' timers, so that `cpus`
/// timers at one rate fire spread over the period instead of all at once
/// (libbpf enables each event when it attaches the program).
fn stagger(sample: PerfSample, cpus: usize) -> Duration {
    match sample {
        PerfSample::FrequencyHz(hz) if hz >= STAGGER_MIN_HZ && cpus > 1 => {
            Duration::from_nanos(1_000_000_000 / hz / cpus as u64)
        }
        _ => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::bpf::loader::{AttachOptions, load};
    use crate::runtime::bpf::test_support::*;
    use crate::vocab::{AttachPoint, MapId, MapKind};
    use std::time::Instant;

    /// Timers start spread over one period; slow timers and periods do not wait.
    #[test]
    fn staggers_fast_timers() {
        assert_eq!(
            stagger(PerfSample::FrequencyHz(100), 2),
            Duration::from_millis(5)
        );
        assert_eq!(stagger(PerfSample::FrequencyHz(10), 2), Duration::ZERO);
        assert_eq!(stagger(PerfSample::FrequencyHz(100), 1), Duration::ZERO);
        assert_eq!(stagger(PerfSample::Period(1000), 4), Duration::ZERO);
    }

    const COUNTS: MapId = MapId(1);
    const HASH: MapId = MapId(2);

    /// A software cpu-clock event opens on every online CPU.
    #[test]
    fn opens_cpu_clock_everywhere() {
        let cpus = online_cpus();
        let event = PerfEvent {
            type_: 1,
            config: 0,
        };
        let fds = open_per_cpu(event, PerfSample::FrequencyHz(99), &cpus).expect("open");
        assert_eq!(fds.len(), cpus.len());
    }

    /// A cpu-clock profile program on all CPUs fires while we spin, counting
    /// into an array and a (non-preallocated) per-CPU hash.
    #[test]
    fn perf_event_profile_fires() {
        let mut asm = Assembler::new();
        asm.count(COUNTS).count_hash(HASH).ret0();
        let attach = AttachPoint::PerfEvent {
            event: PerfEvent {
                type_: 1,
                config: 0,
            },
            sample: PerfSample::FrequencyHz(999),
            all_cpus: true,
        };
        let prog = asm.program("prof", "profile:hz:999", attach);
        let counts = map("counts", MapKind::PerCpuArray, 4, 8, 1);
        let hash = map("hash", MapKind::PerCpuHash, 4, 8, 4096);
        let mut loaded = load(&with_ring(vec![counts, hash], vec![prog])).expect("load");
        loaded.attach_all(AttachOptions::default()).expect("attach");
        let cpus = online_cpus().len();
        assert_eq!(loaded.attached(), cpus);
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_millis(100) {
            std::hint::black_box(spin.elapsed());
        }
        assert!(sum_u64(&loaded.map_entries(COUNTS).expect("entries")) > 0);
        assert!(sum_u64(&loaded.map_entries(HASH).expect("entries")) > 0);
        loaded.detach_all();
        assert_eq!(loaded.attached(), 0);
    }
}
