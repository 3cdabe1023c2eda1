//! Output stage: `time(fmt)` → the local wall-clock time formatted with C
//! `strftime`, as bpftrace 0.17 prints it when the message reaches user space;
//! and `strftime(fmt, nsecs)` values, with bpftrace's `%f` (microseconds).

use std::ffi::CString;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use thiserror::Error;

/// The format of `time()` without an argument.
pub const DEFAULT_TIME_FORMAT: &str = "%H:%M:%S\n";

/// Largest output we let `strftime` produce.
const MAX_OUTPUT: usize = 64 * 1024;

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum TimeError {
    /// bpftrace reports an empty result (e.g. `time("")`) as `strftime returned 0`.
    #[error("strftime returned 0")]
    Empty,
    #[error("time format contains a NUL byte")]
    Nul,
    #[error("cannot convert the time to local time")]
    LocalTime,
}

/// Formats `when` in the local time zone with `strftime(fmt)`.
pub fn format_time(fmt: &str, when: SystemTime) -> Result<Vec<u8>, TimeError> {
    let c_fmt = CString::new(fmt).map_err(|_| TimeError::Nul)?;
    let tm = local_tm(when)?;
    let mut size = 256;
    while size <= MAX_OUTPUT {
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` is writable for `buf.len()` bytes, `c_fmt` is a valid C
        // string and `tm` a fully initialised `struct tm`.
        let n = unsafe { libc::strftime(buf.as_mut_ptr().cast(), buf.len(), c_fmt.as_ptr(), &tm) };
        if n > 0 {
            buf.truncate(n);
            return Ok(buf);
        }
        // 0 means "empty" or "did not fit"; only a larger buffer tells them apart.
        size *= 4;
    }
    Err(TimeError::Empty)
}

/// `strftime(fmt, nsecs)`: the time `since_epoch_ns` in the local time zone,
/// where `%f` is its microseconds in 6 digits (`%%f` stays `%f`).
pub fn format_timestamp(fmt: &str, since_epoch_ns: u64) -> Result<Vec<u8>, TimeError> {
    let micros = (since_epoch_ns % 1_000_000_000) / 1000;
    let mut expanded = String::with_capacity(fmt.len());
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('%', Some('f')) => {
                chars.next();
                expanded.push_str(&format!("{micros:06}"));
            }
            ('%', Some(next)) => {
                chars.next();
                expanded.push('%');
                expanded.push(next);
            }
            _ => expanded.push(c),
        }
    }
    format_time(&expanded, UNIX_EPOCH + Duration::from_nanos(since_epoch_ns))
}

unsafe extern "C" {
    /// POSIX `tzset` (missing from the `libc` crate): re-reads `TZ`, as `localtime` does.
    fn tzset();
}

/// `localtime_r` of `when` (before 1970 counts as the epoch).
fn local_tm(when: SystemTime) -> Result<libc::tm, TimeError> {
    let secs = when.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let t = libc::time_t::try_from(secs).map_err(|_| TimeError::LocalTime)?;
    // SAFETY: `tzset` takes no arguments and only updates libc's time zone state.
    unsafe { tzset() };
    // SAFETY: `tm` is plain old data; `localtime_r` fills it or returns NULL.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the duration of the call.
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if ok {
        Ok(tm)
    } else {
        Err(TimeError::LocalTime)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests run with TZ=UTC so that local time is predictable.
    fn at(secs: u64) -> SystemTime {
        static UTC: std::sync::Once = std::sync::Once::new();
        // SAFETY: set once, before any test of this module formats a time; nothing
        // else in the crate's tests touches the environment.
        UTC.call_once(|| unsafe { std::env::set_var("TZ", "UTC") });
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn fmt(f: &str, secs: u64) -> String {
        String::from_utf8(format_time(f, at(secs)).unwrap()).unwrap()
    }

    /// `time()` prints `05:48:04\n` at 2026-11-21 05:48:04 UTC (bpftrace 0.17, TZ=UTC).
    #[test]
    fn default_format() {
        assert_eq!(fmt(DEFAULT_TIME_FORMAT, 1_795_240_084), "05:48:04\n");
    }

    /// `time("%Y-%m-%d ")` → `2026-11-21 `; `%%|%z|%Z|%s` → `%|+0000|UTC|1795240084`; `%f` stays literal.
    #[test]
    fn strftime_conversions() {
        assert_eq!(fmt("%Y-%m-%d ", 1_795_240_084), "2026-11-21 ");
        assert_eq!(
            fmt("%%|%z|%Z|%s\n", 1_795_240_084),
            "%|+0000|UTC|1795240084\n"
        );
        assert_eq!(fmt("%H:%M:%S.%f|", 1_795_240_084), "05:48:04.%f|");
    }

    /// `strftime("%H:%M:%S.%f", ns)` → `05:48:04.123456`; `%%f` prints `%f`
    /// (bpftrace 0.17 garbles it); `%%%f` a percent and the microseconds.
    #[test]
    fn timestamps_with_micros() {
        at(0);
        let ns = 1_795_240_084 * 1_000_000_000 + 123_456_789;
        let text = |f: &str| String::from_utf8(format_timestamp(f, ns).unwrap()).unwrap();
        assert_eq!(text("%H:%M:%S.%f"), "05:48:04.123456");
        assert_eq!(text("%%f|%%%f"), "%f|%123456");
        assert_eq!(text("%Y"), "2026");
    }

    /// `time("")` is an error (bpftrace prints `strftime returned 0`); long output still fits.
    #[test]
    fn empty_and_long() {
        assert_eq!(format_time("", at(0)), Err(TimeError::Empty));
        assert_eq!(fmt(&"a".repeat(1000), 0).len(), 1000);
        assert_eq!(format_time("a\0b", at(0)), Err(TimeError::Nul));
    }
}
