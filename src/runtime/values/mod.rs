//! Runtime, printed values: answers the printer's questions about the
//! machine ([`System`]) while a session runs: kernel symbols, user symbols
//! of live (and since exited) processes, the frames of `kstack`/`ustack`
//! values in their stack trace maps, user names, cgroup paths, boot time.
//! Input: the loaded stack maps and the `/proc`, `/etc` and cgroup files;
//! output: names and frames for `output::lookup`.
//!
//! Stacks and symbols of capture records are `runtime::recording`'s; this
//! module only serves what scripts print.

mod cgroup;
mod users;

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::codegen::program::Compiled;
use crate::output::lookup::System;
use crate::output::text::Frame;
use crate::runtime::bpf::loader::Loaded;
use crate::runtime::bpf::maps_read::MapError;
use crate::symbols::KernelSymbols;
use crate::vocab::StackType;
use users::UserSymbols;

/// What printed values need from this machine, looked up on demand and
/// remembered.
pub struct SystemValues {
    /// The stack trace maps of `kstack`/`ustack` values, by depth.
    stacks: Vec<(u32, MapHandle)>,
    kernel: KernelSymbols,
    kernel_known: RefCell<HashMap<u64, Option<(String, u64)>>>,
    users: RefCell<UserSymbols>,
    names: RefCell<Option<HashMap<u64, String>>>,
    cgroups: RefCell<cgroup::CgroupPaths>,
    boot_time_ns: u64,
    warned: RefCell<BTreeSet<String>>,
}

impl SystemValues {
    /// Values of `compiled`'s programs, whose maps `loaded` holds.
    pub fn new(compiled: &Compiled, loaded: &Loaded) -> Result<Self, MapError> {
        let mut stacks = Vec::new();
        for &(depth, map) in &compiled.value_stacks {
            let handle = loaded.map(map)?;
            let copy = MapHandle::try_from(handle).map_err(|e| MapError::Access {
                name: handle.name().to_string_lossy().into_owned(),
                op: "dup",
                reason: e.to_string(),
            })?;
            stacks.push((depth, copy));
        }
        Ok(SystemValues {
            stacks,
            kernel: KernelSymbols::default(),
            kernel_known: RefCell::default(),
            users: RefCell::default(),
            names: RefCell::default(),
            cgroups: RefCell::default(),
            boot_time_ns: boot_time_ns(),
            warned: RefCell::default(),
        })
    }

    /// Thread `tid` of process `tgid` took a user stack or address: keep its
    /// mappings, so its frames still resolve after it exits.
    pub fn remember_thread(&self, tid: u32, tgid: u32) {
        self.users.borrow_mut().remember(tid, tgid);
    }
}

impl System for SystemValues {
    fn kernel_symbol(&self, addr: u64) -> Option<(String, u64)> {
        let mut known = self.kernel_known.borrow_mut();
        known
            .entry(addr)
            .or_insert_with(|| {
                let found = self.kernel.symbolize(&[addr]).ok()?;
                let symbol = found.into_iter().next().flatten()?;
                Some((symbol.function, symbol.offset))
            })
            .clone()
    }

    fn user_frames(&self, pid: u32, addrs: &[u64]) -> Vec<Frame> {
        self.users.borrow_mut().frames(pid, addrs)
    }

    fn stack(&self, stack: StackType, id: u32) -> Option<Vec<u64>> {
        let (_, map) = self
            .stacks
            .iter()
            .find(|(depth, _)| *depth == stack.depth)?;
        let bytes = map.lookup(&id.to_ne_bytes(), MapFlags::ANY).ok()??;
        let addrs = bytes
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().expect("chunks of 8")))
            .take_while(|&addr| addr != 0)
            .collect();
        Some(addrs)
    }

    fn username(&self, uid: u64) -> Option<String> {
        let mut names = self.names.borrow_mut();
        let names = names.get_or_insert_with(read_passwd);
        names.get(&uid).cloned()
    }

    fn cgroup_paths(&self, id: u64) -> Vec<(String, String)> {
        self.cgroups.borrow_mut().paths(id)
    }

    fn boot_time_ns(&self) -> u64 {
        self.boot_time_ns
    }

    fn warn(&self, message: &str) {
        if self.warned.borrow_mut().insert(message.to_string()) {
            eprintln!("wprof: {message}");
        }
    }
}

/// User names by uid from `/etc/passwd` (`name:x:uid:...`).
fn read_passwd() -> HashMap<u64, String> {
    let text = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            let uid = fields.nth(1)?.parse().ok()?;
            Some((uid, name.to_string()))
        })
        .collect()
}

/// `CLOCK_REALTIME` minus `CLOCK_BOOTTIME`: the epoch time of boot, which
/// bpftrace adds to `nsecs` for `strftime()`.
fn boot_time_ns() -> u64 {
    let now = |clock| {
        let mut time = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime only writes the timespec we pass.
        unsafe { libc::clock_gettime(clock, &mut time) };
        time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64
    };
    now(libc::CLOCK_REALTIME).saturating_sub(now(libc::CLOCK_BOOTTIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// uid 0 is root in every `/etc/passwd`.
    #[test]
    fn names_root() {
        assert_eq!(read_passwd().get(&0).map(String::as_str), Some("root"));
    }

    /// Boot was in the past, after 2020.
    #[test]
    fn boot_time_is_plausible() {
        let boot = boot_time_ns() / 1_000_000_000;
        assert!(boot > 1_577_836_800, "{boot}");
    }
}
