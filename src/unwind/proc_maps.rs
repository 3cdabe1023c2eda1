//! The executable mappings of a process, from `/proc/PID/maps`, where to
//! read each mapped file (through `/proc/PID/root`, so files of other mount
//! namespaces resolve too), and the identity of its address space, from
//! `/proc/PID/stat`.

use std::path::{Path, PathBuf};

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
    Ok(parse_maps(&read_maps(pid)?))
}

/// The text of `/proc/PID/maps` (the kernel formats every mapping's path
/// on each read: read it once for every user of one moment's mappings).
pub fn read_maps(pid: u32) -> std::io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
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

/// A device as `/proc/PID/maps` names it (`major:minor` in hex), from the
/// kernel's `dev_t` (`major << 20 | minor`, as `super_block.s_dev` holds it).
pub fn device_name(kernel_dev: u32) -> String {
    format!("{:02x}:{:02x}", kernel_dev >> 20, kernel_dev & 0xf_ffff)
}

/// The kernel's `dev_t` of a device named as `/proc/PID/maps` does.
pub fn kernel_device(name: &str) -> Option<u32> {
    let (major, minor) = name.split_once(':')?;
    let major = u32::from_str_radix(major, 16)
        .ok()
        .filter(|&m| m < 1 << 12)?;
    let minor = u32::from_str_radix(minor, 16)
        .ok()
        .filter(|&m| m < 1 << 20)?;
    Some(major << 20 | minor)
}

/// The device (named as `/proc/PID/maps` does) and inode of the file at
/// `path`, as a mapping of it shows them.
pub fn file_identity(path: &Path) -> std::io::Result<(String, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)?;
    let dev = meta.dev();
    let name = format!("{:02x}:{:02x}", libc::major(dev), libc::minor(dev));
    Ok((name, meta.ino()))
}

/// The identity of a process's address space as the kernel's `mm_struct`
/// holds it (`docs/unwinding.md`, "When tables load").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddressSpace {
    pub start_stack: u64,
    pub end_code: u64,
}

/// `end_code` and `start_stack` of process `pid`, fields 27 and 28 of
/// `/proc/PID/stat` (after the parenthesized name, which may hold spaces).
pub fn address_space(pid: u32) -> std::io::Result<AddressSpace> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_address_space(&stat).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat has no end_code and start_stack"),
        )
    })
}

fn parse_address_space(stat: &str) -> Option<AddressSpace> {
    let (_, after_name) = stat.rsplit_once(')')?;
    let mut fields = after_name.split_whitespace();
    // Field 3 (the state) is the first after the name.
    let end_code = fields.nth(27 - 3)?.parse().ok()?;
    let start_stack = fields.next()?.parse().ok()?;
    Some(AddressSpace {
        start_stack,
        end_code,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/PID/stat` gives the address space's identity, whatever the
    /// process's name; this process's matches its own.
    #[test]
    fn reads_address_space_identity() {
        let stat = "42 (a ) b) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 \
                    100 1000 200 18446744073709551615 4096 8192 140000 0 0 0 0 0 0 0 0 0 17 1";
        assert_eq!(
            parse_address_space(stat),
            Some(AddressSpace {
                start_stack: 140000,
                end_code: 8192
            })
        );
        assert_eq!(parse_address_space("1 (x) S 1"), None);
        let own = address_space(std::process::id()).expect("own stat");
        assert!(
            own.start_stack > own.end_code && own.end_code > 0,
            "{own:?}"
        );
    }

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

    /// This process's own maps include its executable, with the device
    /// and inode its file has; device names go to the kernel's `dev_t` and
    /// back.
    #[test]
    fn reads_own_mappings() {
        let maps = exec_mappings(std::process::id()).expect("own maps");
        let file = maps.iter().find(|m| m.is_file()).expect("a file mapping");
        let (device, inode) = file_identity(Path::new(&file.path)).expect("stat");
        assert_eq!((&device, inode), (&file.device, file.inode));
        let dev = kernel_device(&device).expect("a device name");
        assert_eq!(device_name(dev), device);
        assert_eq!(kernel_device("fe:00"), Some(0xfe << 20));
        assert_eq!(device_name(8 << 20 | 0x11), "08:11");
        assert_eq!(kernel_device("x"), None);
    }
}
