//! Kernel addresses → function names: the one kernel symbolizer. It reads
//! the running kernel's `/proc/kallsyms` once (through blazesym) and serves
//! `ksym()` values printed by the session, `ksym()` values recorded in a
//! capture, and the kernel frames of a capture's stacks.

use std::cell::RefCell;
use std::collections::HashMap;

use blazesym::MaybeDefault;
use blazesym::symbolize::source::{Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};

/// A kernel function and how far into it an address is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelSymbol {
    pub function: String,
    pub offset: u64,
}

/// The kernel's symbols, read on first use, and the addresses looked up one
/// at a time so far (`ksym()` values repeat).
pub struct KernelSymbols {
    symbolizer: Symbolizer,
    known: RefCell<HashMap<u64, Option<KernelSymbol>>>,
}

impl Default for KernelSymbols {
    fn default() -> Self {
        KernelSymbols {
            // kallsyms has neither source lines nor inlined calls; function
            // names of Rust code in the kernel are demangled.
            symbolizer: Symbolizer::builder()
                .enable_auto_reload(false)
                .enable_code_info(false)
                .enable_inlined_fns(false)
                .enable_demangling(true)
                .build(),
            known: RefCell::default(),
        }
    }
}

impl KernelSymbols {
    /// The symbols of `addrs`, in order: `None` where no symbol precedes
    /// the address. `Err` when the kernel's symbols cannot be read at all.
    pub fn symbolize(&self, addrs: &[u64]) -> Result<Vec<Option<KernelSymbol>>, blazesym::Error> {
        // kallsyms only: finding and parsing a vmlinux with DWARF costs
        // seconds and gives line numbers few users have sources for.
        let source = Source::Kernel(Kernel {
            vmlinux: MaybeDefault::None,
            debug_syms: false,
            ..Kernel::default()
        });
        let found = self.symbolizer.symbolize(&source, Input::AbsAddr(addrs))?;
        Ok(found
            .iter()
            .map(|symbolized| match symbolized {
                Symbolized::Sym(sym) => Some(KernelSymbol {
                    function: sym.name.to_string(),
                    offset: sym.offset as u64,
                }),
                Symbolized::Unknown(_) => None,
            })
            .collect())
    }

    /// The symbol of one address, remembered; `None` also when the kernel's
    /// symbols cannot be read.
    fn lookup(&self, addr: u64) -> Option<KernelSymbol> {
        let mut known = self.known.borrow_mut();
        let found = known.entry(addr).or_insert_with(|| {
            let found = self.symbolize(&[addr]).ok()?;
            found.into_iter().next().flatten()
        });
        found.clone()
    }

    /// `ksym()` as bpftrace prints it: the function's name, or the address
    /// in hex when no symbol covers it.
    pub fn function(&self, addr: u64) -> String {
        match self.lookup(addr) {
            Some(symbol) => symbol.function,
            None => format!("{addr:#x}"),
        }
    }

    /// `ksym()` as a capture records it: `function` at its first byte,
    /// `function+0xOFF` inside it, the address in hex when nothing covers it.
    pub fn function_and_offset(&self, addr: u64) -> String {
        match self.lookup(addr) {
            Some(KernelSymbol {
                function,
                offset: 0,
            }) => function,
            Some(KernelSymbol { function, offset }) => format!("{function}+{offset:#x}"),
            None => format!("{addr:#x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The address of `name` in `/proc/kallsyms`, `None` when the file hides
    /// addresses (not root, `kptr_restrict`).
    fn kallsyms_address(name: &str) -> Option<u64> {
        let kallsyms = std::fs::read_to_string("/proc/kallsyms").expect("read /proc/kallsyms");
        let suffix = format!(" T {name}");
        let line = kallsyms.lines().find(|line| line.ends_with(&suffix))?;
        let addr = u64::from_str_radix(line.split(' ').next()?, 16).ok()?;
        (addr != 0).then_some(addr)
    }

    /// Names with and without offsets, and hex for what nothing covers.
    #[test]
    fn names_kernel_addresses() {
        let Some(schedule) = kallsyms_address("schedule") else {
            eprintln!("SKIPPED: /proc/kallsyms shows no addresses (not root?)");
            return;
        };
        let symbols = KernelSymbols::default();
        assert_eq!(symbols.function(schedule + 5), "schedule");
        assert_eq!(symbols.function_and_offset(schedule), "schedule");
        assert_eq!(symbols.function_and_offset(schedule + 5), "schedule+0x5");
        assert_eq!(symbols.function(1), "0x1");
        assert_eq!(symbols.function_and_offset(1), "0x1");
    }

    /// Many addresses resolve in one call, in order.
    #[test]
    fn symbolizes_in_order() {
        let (Some(schedule), Some(openat)) = (
            kallsyms_address("schedule"),
            kallsyms_address("do_sys_openat2"),
        ) else {
            eprintln!("SKIPPED: /proc/kallsyms shows no addresses (not root?)");
            return;
        };
        let found = KernelSymbols::default()
            .symbolize(&[openat + 1, 1, schedule])
            .expect("kallsyms readable");
        let found: Vec<Option<(&str, u64)>> = found
            .iter()
            .map(|s| s.as_ref().map(|s| (s.function.as_str(), s.offset)))
            .collect();
        assert_eq!(
            found,
            [Some(("do_sys_openat2", 1)), None, Some(("schedule", 0))]
        );
    }
}
