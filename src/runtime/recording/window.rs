//! The reorder window: decoded events from all CPUs in → events in time
//! order out, once they are older than the window's span behind the newest
//! event, or once the window holds more than its event cap (so its memory
//! does not follow the event rate).

use std::collections::VecDeque;

use crate::capture::model::Event;

pub struct ReorderWindow {
    events: VecDeque<Event>,
    newest_ns: u64,
    span_ns: u64,
    cap: usize,
}

impl ReorderWindow {
    pub fn new(span_ns: u64, cap: usize) -> ReorderWindow {
        ReorderWindow {
            events: VecDeque::new(),
            newest_ns: 0,
            span_ns,
            cap,
        }
    }

    /// Adds a batch in arrival order.
    pub fn insert(&mut self, mut batch: Vec<Event>) {
        // The ring buffer delivers in reservation order, which is nearly
        // time order: a stable sort of the batch is cheap, and merging it
        // into the window is mostly an append.
        batch.sort_by_key(|e| e.ts_ns);
        if let Some(last) = batch.last() {
            self.newest_ns = self.newest_ns.max(last.ts_ns);
        }
        merge_sorted(&mut self.events, batch);
    }

    /// The oldest event, if it has left the window.
    pub fn pop_due(&mut self) -> Option<Event> {
        let limit_ns = self.newest_ns.saturating_sub(self.span_ns);
        let front = self.events.front()?;
        if front.ts_ns < limit_ns || self.events.len() > self.cap {
            self.events.pop_front()
        } else {
            None
        }
    }

    /// The oldest event, if it is due and older than `hold_ns`.
    pub fn pop_due_before(&mut self, hold_ns: u64) -> Option<Event> {
        if self.events.front()?.ts_ns >= hold_ns {
            return None;
        }
        self.pop_due()
    }

    /// The newest time inserted.
    pub fn newest_ns(&self) -> u64 {
        self.newest_ns
    }

    /// The oldest event, due or not (at the end of the capture).
    pub fn pop(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether the window holds more events than its cap (a hold keeps
    /// them).
    pub fn over_cap(&self) -> bool {
        self.events.len() > self.cap
    }
}

/// Merge sorted `batch` into sorted `ordered`; equal times keep `ordered`
/// first. Only the part of `ordered` after the batch's first event is moved
/// (the batch nearly always starts after it), so the window is not copied.
fn merge_sorted(ordered: &mut VecDeque<Event>, batch: Vec<Event>) {
    let Some(first) = batch.first() else {
        return;
    };
    let at = ordered.partition_point(|old| old.ts_ns <= first.ts_ns);
    let tail = ordered.split_off(at);
    let mut batch = batch.into_iter().peekable();
    for old in tail {
        while let Some(new) = batch.next_if(|new| new.ts_ns < old.ts_ns) {
            ordered.push_back(new);
        }
        ordered.push_back(old);
    }
    ordered.extend(batch);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ts_ns: u64, cpu: u32) -> Event {
        Event {
            ts_ns,
            cpu,
            ..Event::default()
        }
    }

    fn times(
        window: &mut ReorderWindow,
        pop: fn(&mut ReorderWindow) -> Option<Event>,
    ) -> Vec<(u64, u32)> {
        std::iter::from_fn(|| pop(window))
            .map(|e| (e.ts_ns, e.cpu))
            .collect()
    }

    /// Batches merge into time order; equal times keep earlier arrivals first.
    #[test]
    fn merges_batches_in_time_order() {
        let mut window = ReorderWindow::new(u64::MAX, usize::MAX);
        window.insert(vec![at(1, 0), at(5, 0)]);
        window.insert(vec![at(6, 1), at(7, 1)]);
        window.insert(vec![at(9, 1), at(0, 1), at(5, 1)]);
        window.insert(vec![at(6, 0), at(8, 0)]);
        let order = times(&mut window, ReorderWindow::pop);
        let expected = [
            (0, 1),
            (1, 0),
            (5, 0),
            (5, 1),
            (6, 1),
            (6, 0),
            (7, 1),
            (8, 0),
            (9, 1),
        ];
        assert_eq!(order, expected);
    }

    /// Events leave once older than the span behind the newest, or once the
    /// window is over its cap, oldest first.
    #[test]
    fn releases_by_age_and_by_count() {
        let mut window = ReorderWindow::new(10, 3);
        window.insert(vec![at(0, 0), at(5, 0), at(12, 0)]);
        assert_eq!(
            times(&mut window, ReorderWindow::pop_due),
            [(0, 0)],
            "older than 12 - 10"
        );
        window.insert(vec![at(13, 0), at(14, 0), at(15, 0)]);
        assert_eq!(window.len(), 5);
        assert_eq!(
            times(&mut window, ReorderWindow::pop_due),
            [(5, 0), (12, 0)],
            "over the cap"
        );
        assert_eq!(window.len(), 3);
    }

    /// A hold keeps events from its time on, even past the span and the cap.
    #[test]
    fn a_hold_keeps_later_events() {
        let mut window = ReorderWindow::new(10, 1);
        window.insert(vec![at(1, 0), at(5, 0), at(30, 0)]);
        assert_eq!(window.newest_ns(), 30);
        let held: Vec<u64> = std::iter::from_fn(|| window.pop_due_before(5))
            .map(|e| e.ts_ns)
            .collect();
        assert_eq!(held, [1]);
        assert!(window.over_cap());
        assert_eq!(window.pop_due_before(u64::MAX).map(|e| e.ts_ns), Some(5));
        assert!(!window.over_cap());
    }
}
