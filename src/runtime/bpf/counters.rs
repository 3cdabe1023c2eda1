//! The `--pmu` counters of a loaded program: each counter is opened as a
//! counting perf event on every online CPU (all tasks) and stored in its perf
//! event array, where `pmu` record items read it on the current CPU.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use libbpf_rs::libbpf_sys::{
    PERF_FORMAT_TOTAL_TIME_ENABLED, PERF_FORMAT_TOTAL_TIME_RUNNING, perf_event_attr,
};
use libbpf_rs::{MapCore, MapFlags};

use super::loader::Loaded;
use crate::codegen::program::CounterMap;
use crate::runtime::targets::features::online_cpus;
use crate::sys;
use crate::vocab::PerfEvent;

/// Why a counter could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot count --pmu {counter} on CPU {cpu}: {reason}")]
pub struct CounterError {
    /// The `--pmu` name.
    pub counter: String,
    pub cpu: u32,
    /// The kernel's reason, with what it means here.
    pub reason: String,
}

/// Opens every counter on every online CPU and stores the events in their
/// maps. The maps keep the events open; the fds close on return.
pub fn install(loaded: &Loaded, counters: &[CounterMap]) -> Result<(), CounterError> {
    for counter in counters {
        let fail = |cpu: u32, reason: String| CounterError {
            counter: counter.name.clone(),
            cpu,
            reason,
        };
        let map = loaded
            .map(counter.map)
            .map_err(|e| fail(0, e.to_string()))?;
        for cpu in online_cpus() {
            let fd = open(counter.event, cpu).map_err(|e| fail(cpu, explain(counter.event, &e)))?;
            let value = u32::try_from(fd.as_raw_fd()).expect("open fds are not negative");
            map.update(&cpu.to_ne_bytes(), &value.to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| fail(cpu, format!("cannot store it in its map: {e:#}")))?;
        }
    }
    Ok(())
}

/// A counting (not sampling) event of every task on `cpu`.
fn open(event: PerfEvent, cpu: u32) -> io::Result<OwnedFd> {
    let attr = perf_event_attr {
        type_: event.type_,
        size: std::mem::size_of::<perf_event_attr>() as u32,
        config: event.config,
        read_format: u64::from(PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING),
        ..Default::default()
    };
    let cpu = i32::try_from(cpu).map_err(io::Error::other)?;
    sys::perf_event_open(&attr, -1, cpu)
}

/// `perf_event_open`'s errno with what it means for a counter.
fn explain(event: PerfEvent, error: &io::Error) -> String {
    let missing = matches!(
        error.raw_os_error(),
        Some(libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV)
    );
    match (missing, event.type_) {
        (true, 1) => format!("this kernel does not have this software event ({error})"),
        (true, _) => format!(
            "no hardware PMU on this machine ({error}); use a software event such as sw:cpu-clock"
        ),
        (false, _) => {
            format!("perf_event_open: {error}; check /proc/sys/kernel/perf_event_paranoid")
        }
    }
}
