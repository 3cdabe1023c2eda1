//! Which events a replay keeps: a time window and process filters, shared by
//! every renderer so they always agree.

use crate::capture::model::{Event, Thread};

/// Replay selection. Times are relative to the capture start.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Keep events at or after this time.
    pub start_ns: Option<u64>,
    /// Keep events before this time.
    pub end_ns: Option<u64>,
    /// Keep only these processes (any when empty).
    pub pids: Vec<u32>,
    /// Keep only processes whose name matches one of these globs (any when empty).
    pub process_names: Vec<glob::Pattern>,
}

impl Filter {
    /// Whether `event` on `thread`, whose process is called `process_name`, is kept.
    pub fn keeps(&self, event: &Event, thread: &Thread, process_name: &str) -> bool {
        self.in_window(event.ts_ns)
            && (self.pids.is_empty() || self.pids.contains(&thread.pid))
            && (self.process_names.is_empty()
                || self.process_names.iter().any(|g| g.matches(process_name)))
    }

    pub fn in_window(&self, ts_ns: u64) -> bool {
        self.start_ns.is_none_or(|start| ts_ns >= start)
            && self.end_ns.is_none_or(|end| ts_ns < end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::model::StringId;

    fn event(ts_ns: u64) -> Event {
        Event {
            ts_ns,
            ..Event::default()
        }
    }

    fn thread(pid: u32) -> Thread {
        Thread {
            tid: pid,
            pid,
            name: StringId(0),
            process_name: StringId(0),
            ppid: 0,
            kthread: false,
        }
    }

    /// The window is half-open and process filters combine with it.
    #[test]
    fn window_and_processes() {
        let filter = Filter {
            start_ns: Some(10),
            end_ns: Some(20),
            pids: vec![7],
            process_names: vec![glob::Pattern::new("ma*").unwrap()],
        };
        assert!(filter.keeps(&event(10), &thread(7), "malloc_target"));
        assert!(!filter.keeps(&event(20), &thread(7), "malloc_target"));
        assert!(!filter.keeps(&event(15), &thread(8), "malloc_target"));
        assert!(!filter.keeps(&event(15), &thread(7), "bash"));
    }
}
