//! Start-up step timings: with `WPROF_TIMINGS` set, each step from `main`
//! to the first read of the ring buffer prints one line on stderr,
//! `wprof: timing: STEP +DELTA ms (at TOTAL ms)`, so launch cost is measured
//! inside one process, step by step (`bench/startup.sh` takes medians).
//!
//! When the variable holds the launch time as wall-clock seconds (bash's
//! `$EPOCHREALTIME`, e.g. `WPROF_TIMINGS=$EPOCHREALTIME wprof ...`), the
//! first line is the time from that launch to `main`: exec and dynamic
//! loading. Any other value starts the clock at `main`.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The variable that turns timings on.
pub const TIMINGS_VAR: &str = "WPROF_TIMINGS";

/// When `main` began, set once by [`start`] when timings are on.
static MAIN_AT: OnceLock<Instant> = OnceLock::new();
/// Nanoseconds after `MAIN_AT` at which the last step ended.
static LAST_STEP_NS: AtomicU64 = AtomicU64::new(0);

/// Call first in `main`: starts the clock when [`TIMINGS_VAR`] is set, and
/// prints launch → `main` when it holds the launch time.
pub fn start() {
    let Some(value) = std::env::var_os(TIMINGS_VAR) else {
        return;
    };
    let now = SystemTime::now();
    if MAIN_AT.set(Instant::now()).is_err() {
        return;
    }
    let launched = value.to_str().and_then(parse_epoch);
    if let Some(since) = launched.and_then(|at| now.duration_since(at).ok()) {
        eprintln!(
            "{}",
            line("launch → main (exec, dynamic loading)", since, since)
        );
    }
}

/// Ends step `name` (prints its line) when timings are on; free otherwise.
pub fn step(name: &str) {
    let Some(main_at) = MAIN_AT.get() else {
        return;
    };
    let at = main_at.elapsed();
    let at_ns = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX);
    let before = LAST_STEP_NS.swap(at_ns, Ordering::Relaxed);
    let delta = Duration::from_nanos(at_ns.saturating_sub(before));
    eprintln!("{}", line(name, delta, at));
}

/// Prints `wprof: timing: TEXT` when timings are on: a figure that is not
/// a start-up step (the table work inside a traced command's run).
pub fn note(text: &str) {
    if enabled() {
        eprintln!("wprof: timing: {text}");
    }
}

/// Whether steps are being timed (to skip work done only to report them).
pub fn enabled() -> bool {
    MAIN_AT.get().is_some()
}

/// One report line.
fn line(name: &str, delta: Duration, at: Duration) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "wprof: timing: {name} +{:.3} ms (at {:.3} ms)",
        ms(delta),
        ms(at)
    )
}

/// `SECONDS.FRACTION` since the Unix epoch (`$EPOCHREALTIME`).
fn parse_epoch(text: &str) -> Option<SystemTime> {
    let (seconds, fraction) = text.trim().split_once('.')?;
    let seconds: u64 = seconds.parse().ok()?;
    if fraction.is_empty() || fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos: u32 = format!("{fraction:0<9}").parse().ok()?;
    Some(UNIX_EPOCH + Duration::new(seconds, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `$EPOCHREALTIME`'s microseconds become nanoseconds; other text is no launch time.
    #[test]
    fn parses_epoch_realtime() {
        let at = parse_epoch("1795667707.947434").expect("parses");
        let since = at.duration_since(UNIX_EPOCH).expect("after the epoch");
        assert_eq!(since, Duration::new(1_795_667_707, 947_434_000));
        for text in ["1", "", "x.5", "1.", "1.5x", "1.1234567890"] {
            assert_eq!(parse_epoch(text), None, "{text}");
        }
    }

    /// A line names the step, its own time and the time since `main`.
    #[test]
    fn formats_a_step() {
        let text = line(
            "compile",
            Duration::from_micros(1500),
            Duration::from_millis(20),
        );
        assert_eq!(text, "wprof: timing: compile +1.500 ms (at 20.000 ms)");
    }
}
