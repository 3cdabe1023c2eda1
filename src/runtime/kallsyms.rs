//! Kernel addresses to symbol names through `/proc/kallsyms`, read once on
//! first use (record fields made with `ksym()`).

/// Kernel symbols sorted by address.
#[derive(Debug, Default)]
pub struct Kallsyms {
    symbols: Vec<(u64, String)>,
}

impl Kallsyms {
    /// The running kernel's symbols (empty when unreadable, or all zero
    /// addresses under `kptr_restrict`).
    pub fn load() -> Kallsyms {
        let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
        Kallsyms::parse(&text)
    }

    /// `ADDR TYPE NAME [MODULE]` lines.
    fn parse(text: &str) -> Kallsyms {
        let mut symbols: Vec<(u64, String)> = text
            .lines()
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
                let name = parts.nth(1)?;
                (addr != 0).then(|| (addr, name.to_string()))
            })
            .collect();
        symbols.sort_unstable();
        Kallsyms { symbols }
    }

    /// `name` for a symbol's own address, `name+0xOFF` inside it, the
    /// address in hex when nothing precedes it.
    pub fn name(&self, addr: u64) -> String {
        let at = self.symbols.partition_point(|(a, _)| *a <= addr);
        match at.checked_sub(1).map(|i| &self.symbols[i]) {
            Some((start, name)) if *start == addr => name.clone(),
            Some((start, name)) => format!("{name}+{:#x}", addr - start),
            None => format!("{addr:#x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact addresses give the name, inner ones an offset, others hex.
    #[test]
    fn resolves_names_and_offsets() {
        let syms = Kallsyms::parse(
            "ffffffff81000200 T second\nffffffff81000100 t first [mod]\n0000000000000000 T hidden\n",
        );
        assert_eq!(syms.name(0xffff_ffff_8100_0100), "first");
        assert_eq!(syms.name(0xffff_ffff_8100_0210), "second+0x10");
        assert_eq!(syms.name(0x10), "0x10");
    }

    /// This kernel's symbols load (as root) and resolve their own addresses.
    #[test]
    fn loads_this_kernel() {
        let syms = Kallsyms::load();
        if let Some((addr, name)) = syms.symbols.iter().find(|(_, n)| n == "schedule") {
            assert_eq!(&syms.name(*addr), name);
        } else {
            eprintln!("SKIPPED: /proc/kallsyms has no addresses here");
        }
    }
}
