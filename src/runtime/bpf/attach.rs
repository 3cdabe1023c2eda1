//! Runtime, loading step two: attaches loaded programs through their probe
//! providers ([`crate::providers`]), or runs `BEGIN`/`END` once; the links
//! stay in [`Loaded`] until detached or dropped.

use std::os::fd::AsFd;

use libbpf_rs::{Link, ProgramInput};

use super::direct;

use super::libbpf_log::with_captured_print;
use super::loader::{Loaded, ProgramMeta, find_program};
use crate::providers;
use crate::vocab::{AttachPoint, WatchTarget};

/// Why a probe could not be attached or run.
#[derive(Debug, thiserror::Error)]
#[error("cannot attach `{probe}`: {reason}")]
pub struct AttachError {
    /// The probe as the user wrote it.
    pub probe: String,
    /// The kernel's reason and what to do about it.
    pub reason: String,
}

/// Options that apply to every attach.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttachOptions {
    /// Only trace this process (uprobes and USDT; `-p PID`).
    pub pid: Option<i32>,
    /// The `-c` command: USDT probes and watchpoints attach to it alone,
    /// uprobes to every process (bpftrace's semantics: its children are
    /// traced too, and a script filters with `pid == cpid` where it wants the
    /// command alone).
    pub command_pid: Option<i32>,
    /// `--usdt-file-activation`: USDT probes attach to every process that
    /// maps their file, whatever `pid` says, so the kernel sets their
    /// semaphores in all of them (bpftrace's semantics).
    pub usdt_file_activation: bool,
}

impl Loaded {
    /// Attaches every program except `BEGIN`/`END` and those the session
    /// attaches later; stops at the first failure (what is attached stays
    /// attached until drop).
    ///
    /// The kernel runs the programs of one tracepoint or uprobe newest first,
    /// so attaching in reverse makes them fire in script order, as bpftrace's do.
    pub fn attach_all(&mut self, opts: AttachOptions) -> Result<(), AttachError> {
        self.attach_where(opts, |_| true)
    }

    /// [`Loaded::attach_all`] for the programs whose attach point passes `wanted`.
    pub fn attach_where(
        &mut self,
        opts: AttachOptions,
        wanted: impl Fn(&AttachPoint) -> bool,
    ) -> Result<(), AttachError> {
        for index in (0..self.programs.len()).rev() {
            let attach = &self.programs[index].attach;
            let provider = providers::of(attach);
            if !provider.runs_once() && !provider.attached_later(attach) && wanted(attach) {
                self.attach(index, opts)?;
            }
        }
        Ok(())
    }

    /// Attaches one program (index into `Compiled::programs`).
    pub fn attach(&mut self, index: usize, opts: AttachOptions) -> Result<(), AttachError> {
        let meta = self.meta(index)?;
        if let Some(program) = &meta.direct {
            let link = direct::attach_tp_btf(program.as_fd()).map_err(|reason| AttachError {
                probe: meta.probe.clone(),
                reason,
            })?;
            self.direct_links.push(link);
            return Ok(());
        }
        let point = meta.attach.clone();
        let new_links = self.attach_at(index, &point, opts)?;
        self.links.extend(new_links);
        Ok(())
    }

    /// Sets watchpoint program `index` (on a function's argument) on
    /// `address` of process `pid`.
    pub fn attach_watchpoint(
        &mut self,
        index: usize,
        address: u64,
        pid: i32,
    ) -> Result<(), AttachError> {
        let mut point = self.meta(index)?.attach.clone();
        if let AttachPoint::Watchpoint { target, .. } = &mut point {
            *target = WatchTarget::Address(address);
        }
        let new_links = self.attach_at(
            index,
            &point,
            AttachOptions {
                pid: Some(pid),
                ..Default::default()
            },
        )?;
        self.watch_links.push((address, new_links));
        Ok(())
    }

    /// Attaches iterator program `index` and opens it for reading; `None`
    /// when the iterator was pinned instead (its link stays pinned).
    pub fn open_iterator(&mut self, index: usize) -> Result<Option<libbpf_rs::Iter>, AttachError> {
        let point = self.meta(index)?.attach.clone();
        let mut links = self.attach_at(index, &point, AttachOptions::default())?;
        let link = links.pop().ok_or_else(|| AttachError {
            probe: self.programs[index].probe.clone(),
            reason: "attaching made no link".into(),
        })?;
        if matches!(point, AttachPoint::Iter { pin: Some(_), .. }) {
            self.links.push(link);
            return Ok(None);
        }
        let iterator = libbpf_rs::Iter::new(&link).map_err(|e| AttachError {
            probe: self.programs[index].probe.clone(),
            reason: format!("cannot open the iterator: {e:#}"),
        })?;
        self.links.push(link);
        Ok(Some(iterator))
    }

    /// Removes every watchpoint set on `address`; returns how many there were.
    pub fn unwatch(&mut self, address: u64) -> usize {
        let before = self.watch_links.len();
        self.watch_links.retain(|(watched, _)| *watched != address);
        before - self.watch_links.len()
    }

    /// Attaches program `index` at `point` and returns its links.
    fn attach_at(
        &self,
        index: usize,
        point: &AttachPoint,
        opts: AttachOptions,
    ) -> Result<Vec<Link>, AttachError> {
        let meta = self.meta(index)?;
        let fail = |reason: String| AttachError {
            probe: meta.probe.clone(),
            reason,
        };
        if let Some(reason) = &meta.refused {
            return Err(fail(reason.clone()));
        }
        let prog = find_program(&self.object, &meta.name).ok_or_else(|| fail(NOT_LOADED.into()))?;
        let pid = match point {
            AttachPoint::Usdt { .. } if opts.usdt_file_activation => None,
            AttachPoint::Uprobe { .. } => opts.pid,
            // USDT probes and watchpoints follow the command, as bpftrace's.
            _ => opts.pid.or(opts.command_pid),
        };
        let pid = pid.unwrap_or(-1);
        let provider = providers::of(point);
        let (new_links, printed) = with_captured_print(|| provider.attach(&prog, point, pid));
        // libbpf often says more than the errno (which file, which step).
        let new_links = new_links.map_err(|reason| match printed.lines().last() {
            Some(line) => format!("{reason} [{}]", line.trim_start_matches("libbpf: ")),
            None => reason,
        });
        new_links.map_err(fail)
    }

    /// Runs a `BEGIN`/`END` (raw_tp) program once with `BPF_PROG_TEST_RUN`
    /// and returns its return value.
    pub fn run_once(&self, index: usize) -> Result<u32, AttachError> {
        let meta = self.meta(index)?;
        let fail = |reason: String| AttachError {
            probe: meta.probe.clone(),
            reason,
        };
        let prog = find_program(&self.object, &meta.name).ok_or_else(|| fail(NOT_LOADED.into()))?;
        // raw_tp programs take an array of u64 arguments; BEGIN/END read none.
        let mut ctx = [0u8; 8 * 4];
        let input = ProgramInput {
            context_in: Some(&mut ctx),
            ..Default::default()
        };
        prog.test_run(input)
            .map(|out| out.return_value)
            .map_err(|e| fail(format!("BPF_PROG_TEST_RUN failed: {e:#}")))
    }

    /// Indices of the programs attached at `point`'s kind (`Begin` or `End`).
    pub fn programs_at(&self, point: &AttachPoint) -> Vec<usize> {
        (0..self.programs.len())
            .filter(|&i| {
                std::mem::discriminant(&self.programs[i].attach) == std::mem::discriminant(point)
            })
            .collect()
    }

    /// Detaches every probe; programs and maps stay (so `END` can still run
    /// and maps can still be printed).
    pub fn detach_all(&mut self) {
        self.watch_links.clear();
        self.links.clear();
        self.direct_links.clear();
    }

    /// Number of links currently attached.
    #[cfg(test)]
    pub fn attached(&self) -> usize {
        self.links.len() + self.direct_links.len()
    }

    fn meta(&self, index: usize) -> Result<&ProgramMeta, AttachError> {
        self.programs.get(index).ok_or_else(|| AttachError {
            probe: format!("program #{index}"),
            reason: "no such program".into(),
        })
    }
}

const NOT_LOADED: &str = "program was not loaded (loader bug)";
