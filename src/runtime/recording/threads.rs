//! Thread identities while recording: who a tid is *now*. The trackers'
//! `task` records set a tid's identity (with ppid and kthread); event headers
//! (tid, pid, comm) and thread fields (a tid) are resolved against it, with
//! `/proc` filling in what the kernel did not send.

use std::collections::HashMap;
use std::io::Write;

use crate::capture::model::{ThreadId, ThreadInfo};
use crate::capture::writer::CaptureWriter;

/// `comm` as the kernel sends it: up to 16 bytes, NUL-padded.
pub type Comm = [u8; 16];

/// The thread table's view of the tasks seen so far.
#[derive(Debug, Default)]
pub struct ThreadTable {
    /// The latest identity of each tid.
    current: HashMap<u32, Current>,
}

#[derive(Clone, Copy, Debug)]
struct Current {
    id: ThreadId,
    comm: Comm,
}

/// What `/proc` says about a task.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct ProcTask {
    pid: u32,
    ppid: u32,
    kthread: bool,
    name: String,
    process_name: String,
}

/// PF_KTHREAD in `task_struct.flags` (include/linux/sched.h).
const PF_KTHREAD: u64 = 0x0020_0000;

impl ThreadTable {
    /// A `task` record: this is who `info.tid` is from now on.
    pub fn set_identity<W: Write>(
        &mut self,
        writer: &mut CaptureWriter<W>,
        info: &ThreadInfo,
    ) -> ThreadId {
        let id = writer.thread(info);
        self.current.insert(
            info.tid,
            Current {
                id,
                comm: comm_bytes(info.name),
            },
        );
        id
    }

    /// The thread of an event header: the current identity when its name
    /// still matches, else a new one (from `/proc` for ppid and kthread).
    pub fn of_header<W: Write>(
        &mut self,
        writer: &mut CaptureWriter<W>,
        tid: u32,
        pid: u32,
        comm: &Comm,
    ) -> ThreadId {
        if let Some(current) = self.current.get(&tid).filter(|c| &c.comm == comm) {
            return current.id;
        }
        let name = comm_str(comm);
        let proc = proc_task(tid).unwrap_or_default();
        let process_name = if tid == pid {
            name.clone()
        } else {
            proc_task(pid).map_or_else(|| name.clone(), |p| p.name)
        };
        let info = ThreadInfo {
            tid,
            pid,
            ppid: proc.ppid,
            kthread: proc.kthread || tid == 0,
            name: &name,
            process_name: &process_name,
        };
        self.set_identity(writer, &info)
    }

    /// The thread a thread field names: its current identity, else what
    /// `/proc` says, else the bare tid.
    pub fn of_field<W: Write>(&mut self, writer: &mut CaptureWriter<W>, tid: u32) -> ThreadId {
        if let Some(current) = self.current.get(&tid) {
            return current.id;
        }
        let proc = proc_task(tid).unwrap_or_default();
        let info = ThreadInfo {
            tid,
            pid: if proc.pid == 0 { tid } else { proc.pid },
            ppid: proc.ppid,
            kthread: proc.kthread || tid == 0,
            name: &proc.name,
            process_name: &proc.process_name,
        };
        self.set_identity(writer, &info)
    }
}

fn comm_bytes(name: &str) -> Comm {
    let mut comm = [0u8; 16];
    let len = name.len().min(15);
    comm[..len].copy_from_slice(&name.as_bytes()[..len]);
    comm
}

fn comm_str(comm: &Comm) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

/// A live task from `/proc/TID/stat` and `status` (any tid, not only
/// process ids, resolves under `/proc`).
fn proc_task(tid: u32) -> Option<ProcTask> {
    let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp session tty tpgid flags ...`; comm may hold
    // spaces and parentheses, so split after the last `)`.
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let flags: u64 = fields.get(6)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let pid = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())?;
    let process_name = if pid == tid {
        name.clone()
    } else {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map_or_else(|_| name.clone(), |n| n.trim_end().to_string())
    };
    Some(ProcTask {
        pid,
        ppid,
        kthread: flags & PF_KTHREAD != 0,
        name,
        process_name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::model::CaptureInfo;

    /// A tid no live task has (above PID_MAX_LIMIT).
    const GONE: u32 = 5_000_000;

    fn writer() -> CaptureWriter<Vec<u8>> {
        CaptureWriter::new(Vec::new(), &CaptureInfo::default(), &[]).expect("writer")
    }

    fn identity(tid: u32, name: &'static str) -> ThreadInfo<'static> {
        ThreadInfo {
            tid,
            pid: tid,
            ppid: 1,
            kthread: false,
            name,
            process_name: name,
        }
    }

    /// Thread fields and headers use the identity a `task` record set, until
    /// a new one (exec, rename) replaces it.
    #[test]
    fn identities_follow_task_records() {
        let (mut w, mut table) = (writer(), ThreadTable::default());
        let first = table.set_identity(&mut w, &identity(GONE, "sh"));
        assert_eq!(table.of_field(&mut w, GONE), first);
        assert_eq!(
            table.of_header(&mut w, GONE, GONE, &comm_bytes("sh")),
            first
        );
        let after_exec = table.set_identity(&mut w, &identity(GONE, "cat"));
        assert_ne!(after_exec, first);
        assert_eq!(table.of_field(&mut w, GONE), after_exec);
        assert_eq!(
            table.of_header(&mut w, GONE, GONE, &comm_bytes("cat")),
            after_exec
        );
    }

    /// A header whose name differs from the known identity (a rename the
    /// trackers did not see) makes a new thread entry.
    #[test]
    fn header_with_new_name_makes_new_thread() {
        let (mut w, mut table) = (writer(), ThreadTable::default());
        let known = table.set_identity(&mut w, &identity(GONE, "sh"));
        let renamed = table.of_header(&mut w, GONE, GONE, &comm_bytes("worker"));
        assert_ne!(renamed, known);
        assert_eq!(table.of_field(&mut w, GONE), renamed);
    }

    /// Unknown tids come from /proc while they live, else bare.
    #[test]
    fn unknown_tids_from_proc() {
        let (mut w, mut table) = (writer(), ThreadTable::default());
        let me = std::process::id();
        let id = table.of_field(&mut w, me);
        let proc = proc_task(me).expect("our own task");
        assert_eq!(proc.pid, me);
        assert!(!proc.kthread);
        assert_eq!(proc.ppid, std::os::unix::process::parent_id());
        assert_eq!(table.of_field(&mut w, me), id);
        let kthreadd = proc_task(2).expect("kthreadd");
        assert!(kthreadd.kthread);
        assert_eq!(proc_task(GONE), None);
        let bare = table.of_field(&mut w, GONE);
        assert_ne!(bare, id);
    }

    /// Long names are cut to the kernel's 15 bytes.
    #[test]
    fn comm_round_trip() {
        assert_eq!(
            comm_str(&comm_bytes("a-very-long-thread-name")),
            "a-very-long-thr"
        );
        assert_eq!(comm_str(&comm_bytes("sh")), "sh");
    }
}
