//! `ksym()` values as bpftrace prints them: the kernel function's name
//! (without offset), or the address in hex when no symbol covers it.

use std::cell::RefCell;
use std::collections::HashMap;

use crate::capture::stacks::{AddrKind, RawFrame, SymbolizeOptions, symbolize};

/// Kernel symbol names by address, looked up once each.
#[derive(Debug, Default)]
pub struct KernelSymbols {
    names: RefCell<HashMap<u64, Vec<u8>>>,
}

impl KernelSymbols {
    pub fn name(&self, addr: u64) -> Vec<u8> {
        self.names
            .borrow_mut()
            .entry(addr)
            .or_insert_with(|| lookup(addr))
            .clone()
    }
}

fn lookup(addr: u64) -> Vec<u8> {
    let frame = [(RawFrame::Kernel { addr }, AddrKind::Ip)];
    let symbolized = symbolize(&frame, &SymbolizeOptions::default());
    match symbolized
        .symbols
        .into_iter()
        .next()
        .and_then(|s| s.function)
    {
        Some(name) => name.into_bytes(),
        None => format!("{addr:#x}").into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kallsyms address prints as its function; an unmapped one as hex.
    #[test]
    fn names_kernel_addresses() {
        let kallsyms = std::fs::read_to_string("/proc/kallsyms").expect("kallsyms");
        let schedule = kallsyms
            .lines()
            .find_map(|l| l.strip_suffix(" T schedule"))
            .and_then(|a| u64::from_str_radix(a, 16).ok())
            .expect("schedule in kallsyms");
        let symbols = KernelSymbols::default();
        assert_eq!(symbols.name(schedule + 5), b"schedule");
        assert_eq!(symbols.name(1), b"0x1");
    }
}
