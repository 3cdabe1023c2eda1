//! Opens perf events: one per CPU given, sampling by frequency or by period,
//! for the probes on perf events (`providers::perf` attaches programs to
//! them) and the `--pmu` counters; and hardware breakpoints for
//! `providers::watchpoint`. The returned fds close on drop.

use std::io;
use std::os::fd::OwnedFd;

use crate::sys;
use crate::vocab::{PerfEvent, PerfSample, WatchMode};

/// `PERF_TYPE_BREAKPOINT` of `perf_event_attr.type`.
const PERF_TYPE_BREAKPOINT: u32 = 5;

/// Opens a hardware breakpoint on `len` bytes at `address`, sampling every
/// hit, for process `pid` on any CPU (`cpu` -1) or for every process on `cpu`
/// (`pid` -1). ENOSPC means every debug register is taken.
pub fn open_breakpoint(
    address: u64,
    len: u8,
    mode: WatchMode,
    pid: i32,
    cpu: i32,
) -> io::Result<OwnedFd> {
    let mut attr = libbpf_rs::libbpf_sys::perf_event_attr {
        type_: PERF_TYPE_BREAKPOINT,
        size: std::mem::size_of::<libbpf_rs::libbpf_sys::perf_event_attr>() as u32,
        bp_type: mode.0,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = 1;
    attr.__bindgen_anon_3.bp_addr = address;
    attr.__bindgen_anon_4.bp_len = u64::from(len);
    sys::perf_event_open(&attr, pid, cpu)
}

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

    /// Breakpoints on our own variables open until the debug registers run
    /// out (x86-64 has 4), which is ENOSPC.
    #[test]
    fn breakpoints_until_enospc() {
        static WATCHED: [u64; 8] = [0; 8];
        let pid = i32::try_from(std::process::id()).expect("pid");
        let mut opened = Vec::new();
        let error = loop {
            let address = &raw const WATCHED[opened.len()] as u64;
            match open_breakpoint(address, 8, WatchMode(WatchMode::WRITE), pid, -1) {
                Ok(fd) if opened.len() < 7 => opened.push(fd),
                Ok(_) => panic!("8 breakpoints opened"),
                Err(error) => break error,
            }
        };
        assert!(!opened.is_empty(), "no breakpoint opened: {error}");
        assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{error}");
    }
}
