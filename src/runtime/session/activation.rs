//! The phases of a session in time: wait to prepare (load and attach), wait
//! to activate (start recording), with the kernel gate closed in between.
//! Ctrl-C ends any wait.

use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::runtime::bpf::maps_read::Stopper;
use crate::tracking::when::Schedule;

/// When a session prepares and activates, as instants of this run.
#[derive(Clone, Copy, Debug)]
pub struct Phases {
    pub prepare_at: Instant,
    pub activate_at: Instant,
}

impl Phases {
    /// Prepare and activate at once (no `--prepare` / `--activate`).
    pub fn immediate() -> Phases {
        Phases::from_schedule(Instant::now(), Schedule::default())
    }

    /// `schedule` counted from `launch`.
    pub fn from_schedule(launch: Instant, schedule: Schedule) -> Phases {
        Phases {
            prepare_at: launch + schedule.prepare,
            activate_at: launch + schedule.activate,
        }
    }
}

impl Default for Phases {
    fn default() -> Phases {
        Phases::immediate()
    }
}

/// Ctrl-C, from before anything is loaded until the end: sets a flag that
/// waits check, and stops the loaded programs' poller once there is one.
pub struct Interrupt {
    requested: AtomicBool,
    stopper: Mutex<Option<Stopper>>,
}

impl Interrupt {
    /// The process's interrupt, reset for a new session. The handler is
    /// installed once: the ctrlc crate takes only one.
    pub fn install() -> &'static Interrupt {
        static INTERRUPT: OnceLock<Interrupt> = OnceLock::new();
        let interrupt = INTERRUPT.get_or_init(|| {
            // A second Ctrl-C while maps print is ignored, as the first already stops.
            let _ = ctrlc::set_handler(|| INTERRUPT.get().expect("set before the handler").fire());
            Interrupt {
                requested: AtomicBool::new(false),
                stopper: Mutex::new(None),
            }
        });
        interrupt.requested.store(false, Ordering::SeqCst);
        *interrupt.lock() = None;
        interrupt
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Stopper>> {
        self.stopper
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn fire(&self) {
        self.requested.store(true, Ordering::SeqCst);
        if let Some(stopper) = &*self.lock() {
            stopper.stop();
        }
    }

    /// From now on Ctrl-C also stops `stopper` (at once if it came already).
    pub fn forward_to(&self, stopper: Stopper) {
        if self.is_requested() {
            stopper.stop();
        }
        *self.lock() = Some(stopper);
    }

    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }
}

/// Sleep until `at`, showing `what` and the wall-clock time on a terminal.
/// Returns false when Ctrl-C came first.
pub fn wait_until(at: Instant, what: &str, interrupt: &Interrupt) -> io::Result<bool> {
    let now = Instant::now();
    if at <= now {
        return Ok(!interrupt.is_requested());
    }
    let terminal = io::stderr().is_terminal();
    if terminal {
        let wall = chrono::Local::now() + (at - now);
        let line = format!("\r\x1b[K{what} at {}", wall.format("%H:%M:%S%.3f"));
        io::stderr().write_all(line.as_bytes())?;
    }
    const SLICE: Duration = Duration::from_millis(20);
    while !interrupt.is_requested() {
        let left = at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(SLICE));
    }
    if terminal {
        io::stderr().write_all(b"\r\x1b[K")?;
    }
    Ok(!interrupt.is_requested())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits end at their time, or at once when Ctrl-C came.
    #[test]
    fn waits_end_on_time_or_interrupt() {
        let interrupt = Interrupt::install();
        let start = Instant::now();
        assert!(wait_until(start + Duration::from_millis(50), "test", interrupt).unwrap());
        assert!(start.elapsed() >= Duration::from_millis(50));
        interrupt.fire();
        let start = Instant::now();
        assert!(!wait_until(start + Duration::from_secs(5), "test", interrupt).unwrap());
        assert!(start.elapsed() < Duration::from_secs(1));
        let interrupt = Interrupt::install();
        assert!(!interrupt.is_requested());
    }
}
