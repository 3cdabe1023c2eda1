//! Output stage, step two: a decoded [`Value`] → the text bpftrace 0.17
//! prints for it in map keys, map values, `print(value)` and `printf("%s")`.
//!
//! Values that only the running system can name (symbols, stacks, probes,
//! user names, times, cgroups) go through a [`Resolve`]; the formats that
//! need nothing but the value (addresses, buffers, errno messages, stack
//! layouts) are here.

use std::ffi::CStr;

use super::cvalue;
use super::value::Value;
use crate::vocab::printf_format::BufferStyle;
use crate::vocab::{StackMode, StackType};

/// Where a value is printed: bpftrace indents stack frames by 4 spaces in
/// map keys and by 8 everywhere else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Key,
    Value,
}

impl Place {
    fn stack_indent(self) -> usize {
        match self {
            Place::Key => 4,
            Place::Value => 8,
        }
    }
}

/// Turns the ids that only the runtime can interpret into text.
pub trait Resolve {
    /// `ksym(addr)`: the function's name, else the address in hex.
    fn kernel_symbol(&self, addr: u64) -> Vec<u8>;
    /// `usym(addr)` of process `pid`: the function's name, else the address.
    fn user_symbol(&self, addr: u64, pid: u64) -> Vec<u8>;
    /// A whole stack: `\n`, then one line per frame (see [`stack_text`]).
    fn stack(&self, stack: StackType, raw: u64, indent: usize) -> Vec<u8>;
    /// The name of the probe at this index of `Compiled::programs`.
    fn probe(&self, index: u64) -> Vec<u8>;
    /// The name of user `uid` in `/etc/passwd`, empty when there is none.
    fn username(&self, uid: u64) -> Vec<u8>;
    /// `strftime()`: nanoseconds since boot in local time, with format
    /// `format` of `Compiled::texts`.
    fn timestamp(&self, format: u64, nsecs: u64) -> Vec<u8>;
    /// `cgroup_path()`: the cgroup's path in each hierarchy matching filter
    /// `filter` of `Compiled::texts`.
    fn cgroup_path(&self, filter: u64, id: u64) -> Vec<u8>;
}

/// A [`Resolve`] that prints raw numbers, for tests.
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RawIds;

#[cfg(test)]
impl Resolve for RawIds {
    fn kernel_symbol(&self, addr: u64) -> Vec<u8> {
        addr.to_string().into_bytes()
    }
    fn user_symbol(&self, addr: u64, pid: u64) -> Vec<u8> {
        format!("{addr}@{pid}").into_bytes()
    }
    fn stack(&self, stack: StackType, raw: u64, indent: usize) -> Vec<u8> {
        format!("\n{:indent$}{}#{raw}\n", "", stack.name()).into_bytes()
    }
    fn probe(&self, index: u64) -> Vec<u8> {
        format!("probe#{index}").into_bytes()
    }
    fn username(&self, uid: u64) -> Vec<u8> {
        format!("user#{uid}").into_bytes()
    }
    fn timestamp(&self, format: u64, nsecs: u64) -> Vec<u8> {
        format!("time#{format}:{nsecs}").into_bytes()
    }
    fn cgroup_path(&self, filter: u64, id: u64) -> Vec<u8> {
        format!("cgroup#{filter}:{id}").into_bytes()
    }
}

/// Appends the text of `value` as bpftrace prints it: integers in decimal,
/// strings raw, tuples as `(1, abc)`, structs as `{ .a = 1 }` (`{.a=1}` in
/// keys), the rest as [`Resolve`] and the
/// formats below say.
pub fn write_value(out: &mut Vec<u8>, value: &Value, place: Place, resolver: &dyn Resolve) {
    match value {
        Value::Int(v) => out.extend_from_slice(v.to_string().as_bytes()),
        Value::UInt(v) => out.extend_from_slice(v.to_string().as_bytes()),
        Value::Str(s) => out.extend_from_slice(s),
        Value::Tuple(fields) => {
            out.push(b'(');
            write_fields(out, fields, place, resolver);
            out.push(b')');
        }
        Value::KernelSymbol(addr) => out.extend(resolver.kernel_symbol(*addr)),
        Value::UserSymbol { addr, pid } => out.extend(resolver.user_symbol(*addr, *pid)),
        Value::Probe(index) => out.extend(resolver.probe(*index)),
        Value::Stack { stack, raw } => {
            out.extend(resolver.stack(*stack, *raw, place.stack_indent()))
        }
        Value::Inet { family, addr } => out.extend(inet_text(*family, addr).into_bytes()),
        Value::Username(uid) => out.extend(resolver.username(*uid)),
        Value::Buffer(bytes) => out.extend(buffer_text(bytes, BufferStyle::Escaped).into_bytes()),
        Value::Timestamp { format, nsecs } => out.extend(resolver.timestamp(*format, *nsecs)),
        Value::MacAddr(mac) => out.extend(mac_text(mac).into_bytes()),
        Value::CgroupPath { filter, id } => out.extend(resolver.cgroup_path(*filter, *id)),
        Value::Strerror(errno) => out.extend(strerror_text(*errno).into_bytes()),
        Value::Struct(fields) => cvalue::write_struct(out, fields, place, resolver),
        Value::Array(items) => cvalue::write_array(out, items, place, resolver),
    }
}

/// Appends tuple fields separated by `", "`, without parentheses (the form of a
/// multi-key map key: `@x[1, abc]`).
pub fn write_fields(out: &mut Vec<u8>, fields: &[Value], place: Place, resolver: &dyn Resolve) {
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        write_value(out, field, place, resolver);
    }
}

/// One frame of a stack, as the runtime found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub addr: u64,
    /// The function and how far into it the address is.
    pub symbol: Option<(String, u64)>,
    /// The file the address is in (user frames), as the process mapped it.
    pub module: Option<String>,
}

/// A stack as bpftrace prints it: `\n`, then per frame `symbol+offset` (or
/// the address, `0x...`) indented by `indent` spaces; in perf mode
/// `\t<hex address> <symbol> (<module>)` with the module for user frames
/// only (`[unknown]` when the address is in no file).
pub fn stack_text(frames: &[Frame], stack: StackType, indent: usize) -> Vec<u8> {
    let mut text = String::from("\n");
    for frame in frames {
        let symbol = match &frame.symbol {
            Some((name, offset)) => format!("{name}+{offset}"),
            None => pointer_text(frame.addr),
        };
        match stack.mode {
            StackMode::Bpftrace => text.push_str(&format!("{:indent$}{symbol}\n", "")),
            StackMode::Perf if stack.user => {
                let module = match (&frame.symbol, &frame.module) {
                    (Some(_), Some(module)) => module.as_str(),
                    _ => "[unknown]",
                };
                text.push_str(&format!("\t{:x} {symbol} ({module})\n", frame.addr));
            }
            StackMode::Perf => text.push_str(&format!("\t{:x} {symbol}\n", frame.addr)),
        }
    }
    text.into_bytes()
}

/// An address as C++ prints a `void *`: `0x` and hex, `0` for null.
pub fn pointer_text(addr: u64) -> String {
    match addr {
        0 => "0".into(),
        _ => format!("{addr:#x}"),
    }
}

/// `ntop()`: dotted IPv4 for family 2 (`AF_INET`), IPv6 as glibc's
/// `inet_ntop` writes it for family 10 (`AF_INET6`), empty otherwise.
pub fn inet_text(family: u64, addr: &[u8; 16]) -> String {
    match family {
        2 => format!("{}.{}.{}.{}", addr[0], addr[1], addr[2], addr[3]),
        10 => inet6_text(addr),
        _ => String::new(),
    }
}

/// glibc's `inet_ntop(AF_INET6)`: the longest run of two or more zero
/// words becomes `::` (the first of equal runs), and an address whose first
/// six words are zero (or five and then `ffff`) ends in dotted IPv4.
fn inet6_text(addr: &[u8; 16]) -> String {
    let words: Vec<u16> = addr
        .chunks_exact(2)
        .map(|w| u16::from_be_bytes([w[0], w[1]]))
        .collect();
    let mut best: Option<(usize, usize)> = None;
    let mut run: Option<(usize, usize)> = None;
    for (i, &word) in words.iter().enumerate() {
        if word == 0 {
            let (start, len) = run.unwrap_or((i, 0));
            run = Some((start, len + 1));
        } else {
            run = None;
        }
        if let Some((start, len)) = run
            && len >= 2
            && best.is_none_or(|(_, best_len)| len > best_len)
        {
            best = Some((start, len));
        }
    }
    let mut text = String::new();
    let mut i = 0;
    while i < 8 {
        if let Some((start, len)) = best
            && i == start
        {
            text.push_str(if i == 0 { "::" } else { ":" });
            i += len;
            continue;
        }
        let embedded = i == 6
            && best.is_some_and(|(start, len)| {
                start == 0 && (len == 6 || (len == 5 && words[5] == 0xffff))
            });
        if embedded {
            text.push_str(&format!(
                "{}.{}.{}.{}",
                addr[12], addr[13], addr[14], addr[15]
            ));
            return text;
        }
        text.push_str(&format!("{:x}", words[i]));
        if i < 7 {
            text.push(':');
        }
        i += 1;
    }
    text
}

/// `macaddr()`: `AA:BB:CC:DD:EE:FF`, upper-case hex.
pub fn mac_text(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The text of `buf()` bytes in `style`, lower-case hex.
pub fn buffer_text(bytes: &[u8], style: BufferStyle) -> String {
    let mut text = String::new();
    for (i, &byte) in bytes.iter().enumerate() {
        match style {
            BufferStyle::Escaped if (32..=126).contains(&byte) => text.push(char::from(byte)),
            BufferStyle::Escaped | BufferStyle::Hex => text.push_str(&format!("\\x{byte:02x}")),
            BufferStyle::Spaced => {
                if i > 0 {
                    text.push(' ');
                }
                text.push_str(&format!("{byte:02x}"));
            }
        }
    }
    text
}

/// `strerror()`: the C library's message for an errno (its low 32 bits,
/// as C passes it), `Unknown error N` for numbers it does not know.
pub fn strerror_text(errno: u64) -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: strerror_r writes at most `buffer.len()` bytes, NUL included,
    // into the buffer we own.
    let status =
        unsafe { libc::strerror_r(errno as i32, buffer.as_mut_ptr().cast(), buffer.len()) };
    match (status, CStr::from_bytes_until_nul(&buffer)) {
        (0, Ok(message)) => message.to_string_lossy().into_owned(),
        _ => format!("Unknown error {}", errno as i32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(v: &Value, place: Place) -> String {
        let mut out = Vec::new();
        write_value(&mut out, v, place, &RawIds);
        String::from_utf8(out).unwrap()
    }

    fn ipv6(text: &str) -> [u8; 16] {
        text.parse::<std::net::Ipv6Addr>().unwrap().octets()
    }

    /// `print((1, (2, "x"), -3))` prints `(1, (2, x), -3)` (bpftrace 0.17).
    #[test]
    fn prints_nested_tuples() {
        let v = Value::Tuple(vec![
            Value::Int(1),
            Value::Tuple(vec![Value::Int(2), Value::Str(b"x".to_vec())]),
            Value::Int(-3),
        ]);
        assert_eq!(text(&v, Place::Value), "(1, (2, x), -3)");
        assert_eq!(
            text(&Value::UInt(u64::MAX), Place::Key),
            "18446744073709551615"
        );
    }

    /// Stacks are indented by 8 as values and by 4 in keys, tuples included.
    #[test]
    fn stacks_indent_by_place() {
        let stack = StackType {
            user: false,
            mode: StackMode::Bpftrace,
            depth: 3,
        };
        let v = Value::Tuple(vec![Value::Stack { stack, raw: 5 }, Value::Int(7)]);
        assert_eq!(text(&v, Place::Value), "(\n        kstack#5\n, 7)");
        assert_eq!(text(&v, Place::Key), "(\n    kstack#5\n, 7)");
    }

    /// Both modes of bpftrace 0.17, resolved and unresolved frames
    /// (samples in the research notes, §3.1).
    #[test]
    fn stack_layouts() {
        let frame = |addr, symbol: Option<(&str, u64)>, module: Option<&str>| Frame {
            addr,
            symbol: symbol.map(|(n, o)| (n.to_string(), o)),
            module: module.map(String::from),
        };
        let user = [
            frame(0x556a86ac7169, Some(("work", 0)), Some("/tmp/target")),
            frame(0x56088606c149, None, None),
        ];
        let mut stack = StackType {
            user: true,
            mode: StackMode::Bpftrace,
            depth: 127,
        };
        let bpftrace = String::from_utf8(stack_text(&user, stack, 8)).unwrap();
        assert_eq!(bpftrace, "\n        work+0\n        0x56088606c149\n");
        stack.mode = StackMode::Perf;
        let perf = String::from_utf8(stack_text(&user, stack, 8)).unwrap();
        assert_eq!(
            perf,
            "\n\t556a86ac7169 work+0 (/tmp/target)\n\t56088606c149 0x56088606c149 ([unknown])\n"
        );
        stack.user = false;
        let kernel = [frame(
            0xffffffff814c254b,
            Some(("perf_syscall_enter", 475)),
            None,
        )];
        let perf = String::from_utf8(stack_text(&kernel, stack, 4)).unwrap();
        assert_eq!(perf, "\n\tffffffff814c254b perf_syscall_enter+475\n");
    }

    /// IPv4 and IPv6 as glibc prints them, embedded IPv4 forms included.
    #[test]
    fn inet_addresses() {
        let mut v4 = [0u8; 16];
        v4[..4].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(inet_text(2, &v4), "127.0.0.1");
        for (written, printed) in [
            ("fe80::1:2", "fe80::1:2"),
            ("::1", "::1"),
            ("::", "::"),
            ("1:0:0:2:0:0:0:3", "1:0:0:2::3"),
            ("1:0:0:2:0:0:3:4", "1::2:0:0:3:4"),
            ("::ffff:10.1.2.3", "::ffff:10.1.2.3"),
            ("::1:2", "::0.1.0.2"),
            ("2001:db8::", "2001:db8::"),
        ] {
            assert_eq!(inet_text(10, &ipv6(written)), printed, "{written}");
        }
        assert_eq!(inet_text(7, &v4), "");
    }

    /// `%r`, `%rx`, `%rh` of `hello\x01\xff\x00` (bpftrace 0.17 runs).
    #[test]
    fn buffer_styles() {
        let bytes = b"hello\x01\xff\x00";
        assert_eq!(
            buffer_text(bytes, BufferStyle::Escaped),
            "hello\\x01\\xff\\x00"
        );
        assert_eq!(
            buffer_text(bytes, BufferStyle::Hex),
            "\\x68\\x65\\x6c\\x6c\\x6f\\x01\\xff\\x00"
        );
        assert_eq!(
            buffer_text(bytes, BufferStyle::Spaced),
            "68 65 6c 6c 6f 01 ff 00"
        );
    }

    /// MAC addresses in upper-case hex; errno messages from the C library;
    /// null pointers as `0`.
    #[test]
    fn small_formats() {
        assert_eq!(
            mac_text(&[0x68, 0x65, 0x6c, 0x6c, 0x6f, 1]),
            "68:65:6C:6C:6F:01"
        );
        assert_eq!(strerror_text(2), "No such file or directory");
        assert_eq!(strerror_text(123456), "Unknown error 123456");
        assert_eq!(pointer_text(0), "0");
        assert_eq!(pointer_text(1), "0x1");
    }
}
