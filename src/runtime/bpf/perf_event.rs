//! Opens perf events: one per CPU given, sampling by frequency or by period,
//! for the probes on perf events (`providers::perf` attaches programs to
//! them) and the `--pmu` counters. The returned fds close on drop.

use std::io;
use std::os::fd::OwnedFd;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::targets::features::online_cpus;

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
}
