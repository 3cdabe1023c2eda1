//! The executable mappings of a process, from `/proc/PID/maps`, and where
//! to read each mapped file (through `/proc/PID/root`, so files of other
//! mount namespaces resolve too).

use std::path::PathBuf;

/// One executable mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecMapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// `major:minor` of the file's device and its inode (0 for anonymous memory).
    pub device: String,
    pub inode: u64,
    /// The path, `[vdso]`-style name, or empty for anonymous memory.
    pub path: String,
}

impl ExecMapping {
    /// Whether a file backs the mapping (not `[vdso]`, JIT or anonymous code).
    pub fn is_file(&self) -> bool {
        self.inode != 0 && self.path.starts_with('/')
    }

    /// The file as seen from here.
    pub fn file_in(&self, pid: u32) -> PathBuf {
        PathBuf::from(format!("/proc/{pid}/root{}", self.path))
    }
}

/// Reads the executable mappings of `pid`, ascending by address.
pub fn exec_mappings(pid: u32) -> std::io::Result<Vec<ExecMapping>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    Ok(parse_maps(&text))
}

/// Parses `/proc/PID/maps` text, keeping executable mappings; malformed
/// lines are skipped.
pub fn parse_maps(text: &str) -> Vec<ExecMapping> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<ExecMapping> {
    let mut fields = line.splitn(6, ' ');
    let (range, perms, offset, device, inode) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    if perms.as_bytes().get(2) != Some(&b'x') {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    Some(ExecMapping {
        start: hex(start)?,
        end: hex(end)?,
        offset: hex(offset)?,
        device: device.to_string(),
        inode: inode.parse().ok()?,
        path: fields.next().unwrap_or("").trim_start().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Executable lines are kept with their fields; others and junk are not.
    #[test]
    fn parses_exec_lines() {
        let text = "\
55d0c0000000-55d0c0001000 r--p 00000000 08:01 1234   /usr/bin/x y
55d0c0001000-55d0c0002000 r-xp 00001000 08:01 1234   /usr/bin/x y
7ffc1e5fe000-7ffc1e600000 r-xp 00000000 00:00 0      [vdso]
7f0000000000-7f0000001000 rwxp 00000000 00:00 0 
garbage
";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 3);
        assert_eq!(maps[0].start, 0x55d0_c000_1000);
        assert_eq!(maps[0].offset, 0x1000);
        assert_eq!(maps[0].path, "/usr/bin/x y");
        assert!(maps[0].is_file());
        assert_eq!(maps[1].path, "[vdso]");
        assert!(!maps[1].is_file() && !maps[2].is_file());
        assert_eq!(
            maps[0].file_in(7).to_str(),
            Some("/proc/7/root/usr/bin/x y")
        );
    }

    /// This process's own maps include its executable.
    #[test]
    fn reads_own_mappings() {
        let maps = exec_mappings(std::process::id()).expect("own maps");
        assert!(maps.iter().any(|m| m.is_file()));
    }
}
