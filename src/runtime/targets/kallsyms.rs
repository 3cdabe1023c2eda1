//! Runtime, kernel symbols by name: `kaddr(NAME)` is the address of the first
//! `/proc/kallsyms` line naming `NAME` (any symbol type), as bpftrace does.
//! Input: a name; output: its address, or a sentence saying why there is none.

use std::fs;

/// A symbol every kernel has, and lists only with `CONFIG_KALLSYMS_ALL`.
const DATA_WITNESS: &str = "jiffies";

/// The address of kernel symbol `name`.
pub fn address(name: &str) -> Result<u64, String> {
    let kallsyms = fs::read_to_string("/proc/kallsyms")
        .map_err(|e| format!("cannot read /proc/kallsyms: {e}"))?;
    find(&kallsyms, name)
}

/// `(address, name)` of a `/proc/kallsyms` line (`ADDR TYPE NAME [MODULE]`).
fn symbol(line: &str) -> Option<(&str, &str)> {
    let mut fields = line.split_whitespace();
    let addr = fields.next()?;
    let name = fields.nth(1)?;
    Some((addr, name))
}

fn find(kallsyms: &str, name: &str) -> Result<u64, String> {
    let found = kallsyms
        .lines()
        .filter_map(symbol)
        .find(|(_, found)| *found == name);
    match found {
        Some((addr, _)) => match u64::from_str_radix(addr, 16) {
            Ok(0) => Err("/proc/kallsyms hides addresses from this user (kptr_restrict)".into()),
            Ok(addr) => Ok(addr),
            Err(_) => Err(format!("/proc/kallsyms gives `{addr}` as its address")),
        },
        None if !kallsyms
            .lines()
            .filter_map(symbol)
            .any(|(_, n)| n == DATA_WITNESS) =>
        {
            Err(
                "it is not in /proc/kallsyms, which lists functions only on this kernel \
             (CONFIG_KALLSYMS_ALL is off, so data symbols are missing)"
                    .into(),
            )
        }
        None => Err("it is not in /proc/kallsyms".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "ffffffff81000000 T _text\n\
                            ffffffff8226ce00 T do_nanosleep\n\
                            ffffffff8226ce00 t do_nanosleep\n";

    /// The first line naming the symbol gives its address.
    #[test]
    fn finds_the_first_match() {
        assert_eq!(find(KALLSYMS, "do_nanosleep"), Ok(0xffffffff8226ce00));
    }

    /// Missing symbols say why; hidden addresses (all zero) too.
    #[test]
    fn explains_misses() {
        let error = find(KALLSYMS, "avenrun").unwrap_err();
        assert!(error.contains("CONFIG_KALLSYMS_ALL"), "{error}");
        let with_data = format!("{KALLSYMS}ffffffff83000000 D jiffies\n");
        assert_eq!(
            find(&with_data, "avenrun"),
            Err("it is not in /proc/kallsyms".into())
        );
        let hidden = "0000000000000000 T do_nanosleep\n";
        assert!(
            find(hidden, "do_nanosleep")
                .unwrap_err()
                .contains("kptr_restrict")
        );
    }

    /// This kernel's `do_nanosleep` (root sees addresses).
    #[test]
    fn reads_the_running_kernel() {
        match address("do_nanosleep") {
            Ok(addr) => assert!(addr > 0xffff_0000_0000_0000, "{addr:#x}"),
            Err(why) => eprintln!("SKIPPED: kallsyms not usable here: {why}"),
        }
    }
}
