//! Output stage: what printing asks of the running system ([`System`],
//! answered by `runtime::values`), and how the [`Printer`] turns those
//! answers into bpftrace's text for symbols, stacks, names, times and
//! cgroup paths ([`Resolve`]).

use super::printer::Printer;
use super::text::{Frame, Resolve, pointer_text, stack_text};
use super::time::format_timestamp;
use crate::vocab::StackType;

/// `bpf_get_stackid`'s error for a stack that does not exist (`kstack` in a
/// uprobe): bpftrace prints such stacks empty without a word.
const EFAULT: i32 = 14;

/// Facts about the machine that only the running system knows.
pub trait System {
    /// The kernel function containing `addr`, and the offset into it.
    fn kernel_symbol(&self, addr: u64) -> Option<(String, u64)>;
    /// The frames of user addresses of process (or thread) `pid`, in order.
    fn user_frames(&self, pid: u32, addrs: &[u64]) -> Vec<Frame>;
    /// The addresses of stack `id` in the stack map of `stack`'s depth,
    /// innermost first; `None` when the map has no such stack.
    fn stack(&self, stack: StackType, id: u32) -> Option<Vec<u64>>;
    /// The name of user `uid`.
    fn username(&self, uid: u64) -> Option<String>;
    /// `(hierarchy, path)` of cgroup `id` in every mounted cgroup hierarchy
    /// (`unified` for cgroup v2); the path is empty where it is not found.
    fn cgroup_paths(&self, id: u64) -> Vec<(String, String)>;
    /// Nanoseconds since the epoch at boot: what `nsecs`-based times add to.
    fn boot_time_ns(&self) -> u64;
    /// Reports a problem met while printing (once per kind of problem).
    fn warn(&self, message: &str);
}

impl Resolve for Printer<'_> {
    fn kernel_symbol(&self, addr: u64) -> Vec<u8> {
        match self.system.kernel_symbol(addr) {
            Some((name, _)) => name.into_bytes(),
            None => pointer_text(addr).into_bytes(),
        }
    }

    fn user_symbol(&self, addr: u64, pid: u64) -> Vec<u8> {
        let frames = self.system.user_frames(pid as u32, &[addr]);
        match frames.into_iter().next().and_then(|f| f.symbol) {
            Some((name, _)) => name.into_bytes(),
            None => pointer_text(addr).into_bytes(),
        }
    }

    fn stack(&self, stack: StackType, raw: u64, indent: usize) -> Vec<u8> {
        let id = raw as u32 as i32;
        if id < 0 {
            if id != -EFAULT {
                let error = std::io::Error::from_raw_os_error(-id);
                let message = format!("a {} was not taken: {error}", stack.name());
                self.system.warn(&message);
            }
            return Vec::new();
        }
        let Some(addrs) = self.system.stack(stack, id as u32) else {
            return Vec::new();
        };
        let frames = match stack.user {
            true => self.system.user_frames((raw >> 32) as u32, &addrs),
            false => addrs
                .iter()
                .map(|&addr| Frame {
                    addr,
                    symbol: self.system.kernel_symbol(addr),
                    module: None,
                })
                .collect(),
        };
        stack_text(&frames, stack, indent)
    }

    fn probe(&self, index: u64) -> Vec<u8> {
        self.compiled
            .probe_names
            .get(index as usize)
            .map_or_else(|| format!("probe#{index}"), Clone::clone)
            .into_bytes()
    }

    fn username(&self, uid: u64) -> Vec<u8> {
        self.system.username(uid).unwrap_or_default().into_bytes()
    }

    fn timestamp(&self, format: u64, nsecs: u64) -> Vec<u8> {
        let format = self.text(format);
        let since_epoch = self.system.boot_time_ns().wrapping_add(nsecs);
        match format_timestamp(format, since_epoch) {
            Ok(text) => text,
            Err(error) => {
                self.system
                    .warn(&format!("strftime(\"{format}\"): {error}"));
                b"(?)".to_vec()
            }
        }
    }

    fn cgroup_path(&self, filter: u64, id: u64) -> Vec<u8> {
        let filter = glob::Pattern::new(self.text(filter)).ok();
        let mut paths: Vec<(String, String)> = self
            .system
            .cgroup_paths(id)
            .into_iter()
            .filter(|(name, path)| {
                !path.is_empty() && filter.as_ref().is_none_or(|f| f.matches(name))
            })
            .collect();
        // bpftrace lists `unified` (cgroup v2) first, then by name.
        paths.sort_by_key(|(name, _)| (name != "unified", name.clone()));
        let joined: Vec<String> = paths.iter().map(|(n, p)| format!("{n}:{p}")).collect();
        joined.join(",").into_bytes()
    }
}

impl Printer<'_> {
    /// Text `index` of `Compiled::texts` (strftime formats, cgroup filters).
    fn text(&self, index: u64) -> &str {
        self.compiled
            .texts
            .get(index as usize)
            .map_or("", String::as_str)
    }
}

/// A [`System`] without a machine: no symbols, no stacks, a fixed boot time;
/// for tests of the printer.
#[cfg(test)]
#[derive(Default)]
pub struct NoSystem {
    /// The warnings given, each once.
    pub warnings: std::cell::RefCell<std::collections::BTreeSet<String>>,
}

#[cfg(test)]
impl System for NoSystem {
    fn kernel_symbol(&self, addr: u64) -> Option<(String, u64)> {
        (addr >= 0x1000).then(|| ("kfunc".to_string(), addr - 0x1000))
    }
    fn user_frames(&self, pid: u32, addrs: &[u64]) -> Vec<Frame> {
        addrs
            .iter()
            .map(|&addr| Frame {
                addr,
                symbol: (addr >= 0x2000).then(|| (format!("ufunc{pid}"), addr - 0x2000)),
                module: Some("/bin/x".into()),
            })
            .collect()
    }
    fn stack(&self, _stack: StackType, id: u32) -> Option<Vec<u64>> {
        (id == 1).then(|| vec![0x1005, 0x2003, 7])
    }
    fn username(&self, uid: u64) -> Option<String> {
        (uid == 0).then(|| "root".into())
    }
    fn cgroup_paths(&self, _id: u64) -> Vec<(String, String)> {
        [
            ("cpu", "/"),
            ("unified", "/a"),
            ("blkio", ""),
            ("memory", "/m"),
        ]
        .map(|(n, p)| (n.to_string(), p.to_string()))
        .to_vec()
    }
    fn boot_time_ns(&self) -> u64 {
        0
    }
    fn warn(&self, message: &str) {
        self.warnings.borrow_mut().insert(message.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::program::Compiled;
    use crate::output::printer::OutputFormat;
    use crate::vocab::StackMode;

    fn printer<'a>(compiled: &'a Compiled, system: &'a NoSystem) -> Printer<'a> {
        Printer::new(compiled, system, OutputFormat::Text)
    }

    fn text(bytes: Vec<u8>) -> String {
        String::from_utf8(bytes).unwrap()
    }

    /// Kernel stacks resolve frame by frame; a user stack's thread comes
    /// from the value's high half; missing and failed stacks print empty,
    /// failures other than "no stack" with one warning.
    #[test]
    fn stacks() {
        let compiled = Compiled::default();
        let system = NoSystem::default();
        let p = printer(&compiled, &system);
        let mut stack = StackType {
            user: false,
            mode: StackMode::Bpftrace,
            depth: 127,
        };
        assert_eq!(
            text(p.stack(stack, 1, 4)),
            "\n    kfunc+5\n    kfunc+4099\n    0x7\n"
        );
        stack.user = true;
        let raw = (33u64 << 32) | 1;
        assert_eq!(
            text(p.stack(stack, raw, 2)),
            "\n  0x1005\n  ufunc33+3\n  0x7\n"
        );
        assert_eq!(p.stack(stack, 2, 8), b"");
        assert_eq!(p.stack(stack, (-14i32) as u32 as u64, 8), b"");
        assert!(system.warnings.borrow().is_empty());
        assert_eq!(p.stack(stack, (-17i32) as u32 as u64, 8), b"");
        assert_eq!(system.warnings.borrow().len(), 1);
    }

    /// `cgroup_path` lists found paths, `unified` first, filtered by glob.
    #[test]
    fn cgroup_paths() {
        let compiled = Compiled {
            texts: vec!["*".into(), "c*".into()],
            ..Compiled::default()
        };
        let system = NoSystem::default();
        let p = printer(&compiled, &system);
        assert_eq!(text(p.cgroup_path(0, 1)), "unified:/a,cpu:/,memory:/m");
        assert_eq!(text(p.cgroup_path(1, 1)), "cpu:/");
    }

    /// Symbols print without offsets, unknown ones as pointers.
    #[test]
    fn symbols_and_names() {
        let compiled = Compiled::default();
        let system = NoSystem::default();
        let p = printer(&compiled, &system);
        assert_eq!(text(p.kernel_symbol(0x1010)), "kfunc");
        assert_eq!(text(p.kernel_symbol(0)), "0");
        assert_eq!(text(p.user_symbol(0x2001, 5)), "ufunc5");
        assert_eq!(text(p.user_symbol(0x10, 5)), "0x10");
        assert_eq!(text(p.username(0)), "root");
        assert_eq!(text(p.username(7)), "");
    }
}
