//! The system description packets for the native scheduling view: a
//! `ProcessTree` from the capture's thread table (so the pids of
//! `compact_sched` map to processes, kernel threads grouped as on their
//! tracks) and a `SystemInfo` whose kernel release tells Perfetto how to
//! decode `prev_state`.

use std::collections::BTreeMap;

use super::SEQUENCE_ID;
use super::proto::{ProcessTree, SystemInfo, TracePacket, TreeProcess, TreeThread, Utsname};
use super::tracks::{KTHREADS_PID, group_pid};
use crate::capture::model::Thread;
use crate::render::source::CaptureSource;

/// The process tree of the threads `selected` keeps (idle tasks excluded:
/// Perfetto knows tid 0), at trace time `timestamp`.
pub fn process_tree(
    source: &dyn CaptureSource,
    selected: &dyn Fn(&Thread) -> bool,
    timestamp: u64,
) -> TracePacket {
    // First name wins: renames show on the tracks and in compact_sched.
    let mut threads = BTreeMap::new();
    let mut processes = BTreeMap::new();
    for thread in source.threads() {
        if thread.tid == 0 || !selected(thread) {
            continue;
        }
        let pid = group_pid(thread);
        threads
            .entry(thread.tid)
            .or_insert_with(|| (pid, source.string(thread.name)));
        let (ppid, name) = match pid {
            KTHREADS_PID => (0, "kernel threads"),
            _ => (thread.ppid, source.string(thread.process_name)),
        };
        processes.entry(pid).or_insert((ppid, name));
    }
    let tree = ProcessTree {
        processes: (processes.into_iter())
            .map(|(pid, (ppid, name))| TreeProcess {
                pid: Some(pid as i32),
                ppid: Some(ppid as i32),
                cmdline: vec![name.to_owned()],
            })
            .collect(),
        threads: (threads.into_iter())
            .map(|(tid, (pid, name))| TreeThread {
                tid: Some(tid as i32),
                name: Some(name.to_owned()),
                tgid: Some(pid as i32),
            })
            .collect(),
    };
    TracePacket {
        timestamp: Some(timestamp),
        trusted_packet_sequence_id: Some(SEQUENCE_ID),
        process_tree: Some(tree),
        ..TracePacket::default()
    }
}

/// The machine: Linux, its kernel release and CPU count.
pub fn system_info(source: &dyn CaptureSource) -> TracePacket {
    let info = source.info();
    TracePacket {
        trusted_packet_sequence_id: Some(SEQUENCE_ID),
        system_info: Some(SystemInfo {
            utsname: Some(Utsname {
                sysname: Some("Linux".into()),
                release: Some(info.kernel_release.clone()),
            }),
            num_cpus: Some(info.cpus),
        }),
        ..TracePacket::default()
    }
}
