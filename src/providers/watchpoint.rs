//! `watchpoint:ADDRESS:LEN:MODE` and `watchpoint:FUNCTION+argN:LEN:MODE`
//! (also `w`), `asyncwatchpoint:FUNCTION+argN:LEN:MODE` (`aw`): hardware
//! breakpoints (`PERF_TYPE_BREAKPOINT`) on `LEN` bytes (1, 2, 4 or 8),
//! firing on the accesses `MODE` names (`r`, `w`, `x`; x86-64 watches `w`,
//! `rw` or `x`).
//!
//! A fixed address is watched in the traced process (`-p`/`-c`), or in the
//! kernel without one. The function form watches, each time `FUNCTION` of
//! the traced binary is called, the address its argument N holds: codegen
//! adds a uprobe on the function that sends the address (and, for
//! `watchpoint`, stops the tracee with SIGSTOP), and the session sets the
//! breakpoint and lets the tracee go on (`runtime::session::watch`). The
//! program runs on each hit, with no arguments.

use std::os::fd::{AsRawFd, IntoRawFd};

use libbpf_rs::{Link, ProgramMut};

use super::{ProbeType, Provider, Resolved, ResolvedProbe, Spec, explain, parse_number};
use crate::runtime::bpf::perf_event::open_breakpoint;
use crate::runtime::targets::features::online_cpus;
use crate::vocab::{
    AttachPoint, Context, Environment, KernelFeature, WatchMode, WatchTarget, x86_64,
};

pub struct Watchpoint;

impl Provider for Watchpoint {
    fn memory_space_known(&self) -> bool {
        false
    }

    fn types(&self) -> &'static [ProbeType] {
        &[
            ProbeType {
                name: "watchpoint",
                aliases: &["w"],
            },
            ProbeType {
                name: "asyncwatchpoint",
                aliases: &["aw"],
            },
        ]
    }

    fn resolve(&self, ty: &str, spec: &Spec, env: &dyn Environment) -> Result<Resolved, String> {
        let [target, len, mode] = spec.parts[..] else {
            return Err(format!(
                "`{spec}`: {ty} probe type requires 3 arguments \
                 (`{ty}:ADDRESS:LEN:MODE` or `{ty}:FUNCTION+argN:LEN:MODE`)"
            ));
        };
        let sync = ty == "watchpoint";
        let len = parse_len(len)?;
        let mode = parse_mode(mode)?;
        let watch = |target: WatchTarget, shown: String| {
            ResolvedProbe::new(
                format!("{ty}:{shown}:{len}:{}", spec.parts[2]),
                AttachPoint::Watchpoint {
                    target,
                    len,
                    mode,
                    sync,
                },
                Context::Plain,
            )
        };
        let Some((pattern, arg)) = target.split_once('+') else {
            if !sync {
                return Err(format!(
                    "`{spec}`: asyncwatchpoint requires a function name"
                ));
            }
            let address = parse_number(target).filter(|a| *a != 0).ok_or_else(|| {
                format!("`{target}`: watchpoint must be attached to a non-zero address")
            })?;
            return Ok(vec![watch(WatchTarget::Address(address), target.to_string())].into());
        };
        let arg = parse_arg(arg)?;
        let binary = env.traced_binary().ok_or_else(|| {
            format!("`{spec}`: -p PID or -c CMD required for watchpoint (it watches that process)")
        })?;
        let (path, functions) = env.functions(&binary.display().to_string(), pattern)?;
        Ok(functions
            .into_iter()
            .map(|f| {
                // bpftrace names the probe without `+argN`: `watchpoint:f:4:w`.
                let shown = f.name.clone();
                let target = WatchTarget::FunctionArg {
                    binary: path.clone(),
                    function: f.name,
                    file_offset: f.file_offset,
                    arg,
                };
                watch(target, shown)
            })
            .collect())
    }

    fn owns(&self, point: &AttachPoint) -> bool {
        matches!(point, AttachPoint::Watchpoint { .. })
    }

    fn section(&self, _point: &AttachPoint) -> String {
        "perf_event".into()
    }

    fn feature(&self, _point: &AttachPoint) -> Option<KernelFeature> {
        Some(KernelFeature::Breakpoints)
    }

    fn context_type(&self, _point: &AttachPoint) -> Result<&'static str, String> {
        Ok("struct bpf_perf_event_data")
    }

    fn attached_later(&self, point: &AttachPoint) -> bool {
        matches!(
            point,
            AttachPoint::Watchpoint {
                target: WatchTarget::FunctionArg { .. },
                ..
            }
        )
    }

    fn attach(
        &self,
        prog: &ProgramMut<'_>,
        point: &AttachPoint,
        pid: i32,
    ) -> Result<Vec<Link>, String> {
        let AttachPoint::Watchpoint {
            target: WatchTarget::Address(address),
            len,
            mode,
            ..
        } = point
        else {
            unreachable!("only fixed-address watchpoints attach directly: {point:?}");
        };
        // A process's address is watched in it alone; a kernel address on every CPU.
        let (pid, cpus): (i32, Vec<i32>) = match pid {
            pid if pid > 0 => (pid, vec![-1]),
            _ => (-1, online_cpus().into_iter().map(|c| c as i32).collect()),
        };
        let mut links = Vec::with_capacity(cpus.len());
        for cpu in cpus {
            let fd = open_breakpoint(*address, *len, *mode, pid, cpu).map_err(|e| {
                match e.raw_os_error() {
                    Some(libc::ENOSPC) => "You are out of watchpoint registers \
                         (perf_event_open failed with ENOSPC: x86-64 has 4 debug registers, \
                         one per watched address)"
                        .to_string(),
                    _ => format!("perf_event_open of a breakpoint at {address:#x}: {e}"),
                }
            })?;
            let link = prog
                .attach_perf_event(fd.as_raw_fd())
                .map_err(|e| explain(&e, "the breakpoint could not take a BPF program"))?;
            // The perf link owns the event fd from here on (see providers::perf).
            let _ = fd.into_raw_fd();
            links.push(link);
        }
        Ok(links)
    }
}

/// `1`, `2`, `4` or `8` bytes.
fn parse_len(text: &str) -> Result<u8, String> {
    match parse_number(text) {
        Some(len @ (1 | 2 | 4 | 8)) => Ok(len as u8),
        _ => Err(format!(
            "`{text}`: watchpoint length must be one of (1,2,4,8)"
        )),
    }
}

/// `r`, `w`, `x` each at most once, in a combination x86-64 debug registers
/// can watch: writes, reads and writes, or execution.
fn parse_mode(text: &str) -> Result<WatchMode, String> {
    let mut bits = 0;
    for c in text.chars() {
        let bit = match c {
            'r' => WatchMode::READ,
            'w' => WatchMode::WRITE,
            'x' => WatchMode::EXECUTE,
            _ => {
                return Err(format!(
                    "`{text}`: watchpoint mode must be combination of (r,w,x)"
                ));
            }
        };
        if bits & bit != 0 {
            return Err(format!("`{text}`: watchpoint modes may not be duplicated"));
        }
        bits |= bit;
    }
    let rw = WatchMode::READ | WatchMode::WRITE;
    if !matches!(bits, WatchMode::WRITE | WatchMode::EXECUTE) && bits != rw {
        return Err(format!(
            "invalid watchpoint mode: {text} (x86-64 debug registers watch writes `w`, \
             reads and writes `rw`, or execution `x`)"
        ));
    }
    Ok(WatchMode(bits))
}

/// `argN`, N below the number of argument registers.
fn parse_arg(text: &str) -> Result<u8, String> {
    let n = text
        .strip_prefix("arg")
        .and_then(|n| n.parse::<u8>().ok())
        .ok_or_else(|| format!("`{text}`: expected FUNCTION+argN, N a number"))?;
    match usize::from(n) < x86_64::ARGUMENTS.len() {
        true => Ok(n),
        false => Err(format!(
            "x86_64 doesn't support arg{n}: only arg0..arg5 are passed in registers"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::fake_machine::FakeMachine;

    fn resolve(ty: &str, parts: &[&str]) -> Result<Resolved, String> {
        let spec = Spec {
            word: ty,
            parts: parts.to_vec(),
        };
        Watchpoint.resolve(ty, &spec, &FakeMachine)
    }

    /// A fixed address keeps its spelling in the probe's name.
    #[test]
    fn fixed_addresses() {
        let probes = resolve("watchpoint", &["0x10000000", "8", "w"])
            .unwrap()
            .probes;
        assert_eq!(probes[0].name, "watchpoint:0x10000000:8:w");
        assert_eq!(
            probes[0].attach,
            AttachPoint::Watchpoint {
                target: WatchTarget::Address(0x1000_0000),
                len: 8,
                mode: WatchMode(WatchMode::WRITE),
                sync: true,
            }
        );
        assert!(!Watchpoint.attached_later(&probes[0].attach));
        let error = resolve("asyncwatchpoint", &["0x1000", "8", "w"]).unwrap_err();
        assert!(error.contains("requires a function name"), "{error}");
        let error = resolve("watchpoint", &["0", "8", "w"]).unwrap_err();
        assert!(error.contains("non-zero address"), "{error}");
    }

    /// Lengths, modes and argument numbers are checked as bpftrace does.
    #[test]
    fn checks_lengths_modes_and_arguments() {
        for (parts, needle) in [
            (["0x1000", "3", "w"], "length must be one of (1,2,4,8)"),
            (["0x1000", "4", "q"], "combination of (r,w,x)"),
            (["0x1000", "4", "ww"], "may not be duplicated"),
            (["0x1000", "4", "r"], "invalid watchpoint mode: r"),
            (["0x1000", "4", "wx"], "invalid watchpoint mode: wx"),
            (["f+arg6", "4", "w"], "doesn't support arg6"),
        ] {
            let error = resolve("watchpoint", &parts).unwrap_err();
            assert!(error.contains(needle), "{parts:?}: {error}");
        }
        assert!(resolve("watchpoint", &["0x1000", "4", "rw"]).is_ok());
        assert!(
            resolve("w", &["0x1000", "4"])
                .unwrap_err()
                .contains("requires 3 arguments")
        );
    }

    /// The function form needs a traced process to find the function in.
    #[test]
    fn function_form_needs_a_process() {
        let error = resolve("watchpoint", &["increment+arg1", "4", "w"]).unwrap_err();
        assert!(error.contains("-p PID or -c CMD required"), "{error}");
    }
}
