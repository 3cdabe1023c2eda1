//! Names of JIT code from perf maps: a JIT (V8 with `--perf-basic-prof`,
//! the JVM's perf agents, LuaJIT, .NET with `DOTNET_PerfMapEnabled`) writes
//! `/tmp/perf-PID.map`, one `START SIZE NAME` line per compiled function
//! (hex start and size). Frames in a process's anonymous executable
//! memory take that file as their module when it exists (as perf shows
//! them), and are named from it at the end of the capture; without one
//! they stay `[anon]`.
//!
//! Input: the map's text. Output: [`PerfMap`], names by address.

use std::path::Path;

/// The perf map process `pid` may write.
pub fn path_of(pid: u32) -> String {
    format!("/tmp/perf-{pid}.map")
}

/// Whether a frame's module is a perf map.
pub fn is_perf_map(path: &str) -> bool {
    (path.strip_prefix("/tmp/perf-"))
        .and_then(|rest| rest.strip_suffix(".map"))
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// A perf map's functions, sorted by start address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfMap {
    functions: Vec<(u64, u64, String)>,
}

impl PerfMap {
    /// The map at `path`; empty when it cannot be read.
    pub fn read(path: &Path) -> PerfMap {
        std::fs::read(path)
            .map(|bytes| PerfMap::parse(&String::from_utf8_lossy(&bytes)))
            .unwrap_or_default()
    }

    /// Parses a map's lines, skipping malformed ones. A JIT appends a
    /// function again when it recompiles it at the same address: the last
    /// line wins.
    pub fn parse(text: &str) -> PerfMap {
        let mut functions: Vec<(u64, u64, String)> = text.lines().filter_map(parse_line).collect();
        functions.reverse();
        functions.sort_by_key(|&(start, ..)| start);
        functions.dedup_by_key(|&mut (start, ..)| start);
        PerfMap { functions }
    }

    /// The function holding `addr` and the offset into it.
    pub fn lookup(&self, addr: u64) -> Option<(&str, u64)> {
        let after = self.functions.partition_point(|&(start, ..)| start <= addr);
        let (start, size, name) = self.functions[..after].last()?;
        (addr - start < *size).then(|| (name.as_str(), addr - start))
    }
}

/// `START SIZE NAME` (hex, with or without `0x`; the name may hold spaces).
fn parse_line(line: &str) -> Option<(u64, u64, String)> {
    let mut parts = line.trim_end().splitn(3, ' ');
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    let start = hex(parts.next()?)?;
    let size = hex(parts.next()?)?;
    let name = parts.next().filter(|n| !n.is_empty())?;
    Some((start, size, name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Addresses inside a function name it with their offset; gaps, ends
    /// and malformed lines name nothing; a later line for the same start wins.
    #[test]
    fn looks_up_functions() {
        let map = PerfMap::parse(
            "7f0000001000 40 LazyCompile:~add app.js:1\n\
             garbage line\n\
             0x7f0000002000 0x10 old\n\
             7f0000002000 20 jit_spin\n\
             7f0000003000 zz bad size\n",
        );
        assert_eq!(
            map.lookup(0x7f00_0000_1000),
            Some(("LazyCompile:~add app.js:1", 0))
        );
        assert_eq!(
            map.lookup(0x7f00_0000_103f),
            Some(("LazyCompile:~add app.js:1", 0x3f))
        );
        assert_eq!(map.lookup(0x7f00_0000_1040), None);
        assert_eq!(map.lookup(0x7f00_0000_2018), Some(("jit_spin", 0x18)));
        assert_eq!(map.lookup(0x7f00_0000_0fff), None);
        assert_eq!(map.functions.len(), 2);
    }

    /// Only `/tmp/perf-DIGITS.map` is a perf map.
    #[test]
    fn recognises_map_paths() {
        assert!(is_perf_map(&path_of(1234)));
        assert!(!is_perf_map("/tmp/perf-.map"));
        assert!(!is_perf_map("/tmp/perf-12x.map"));
        assert!(!is_perf_map("/usr/lib/libc.so.6"));
    }
}
