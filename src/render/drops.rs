//! What a capture lost, in words: its end statistics and record schemas →
//! the end-of-capture warning (`dropped 120 of `malloc` (ring buffer
//! full), 3,400 tracker events (ring buffer full)`) and per-kind totals
//! for `-I`. Script records are named one by one; trackers' are summed.

use crate::analysis::saturating_sum;
use crate::capture::model::{CaptureStats, DropReason, RecordId, RecordOrigin, RecordSchema};

/// The warning for a capture that lost events, or `None` when it lost none.
pub fn warning(stats: &CaptureStats, schemas: &[RecordSchema]) -> Option<String> {
    if stats.drops.is_empty() {
        return None;
    }
    let parts = if !stats.counts_per_record() {
        // Before format 2.3 drops were counted only by reason.
        (stats.drops.iter())
            .map(|&(reason, n)| format!("{} ({})", grouped(n), reason.label()))
            .collect()
    } else {
        by_kind(stats, schemas)
    };
    Some(format!("dropped {}", parts.join(", ")))
}

/// `N of `name` (reason)` per script record kind and reason, then the
/// trackers' drops summed, with their reasons.
fn by_kind(stats: &CaptureStats, schemas: &[RecordSchema]) -> Vec<String> {
    let is_tracker = |record: RecordId| {
        schemas
            .get(record.0 as usize)
            .is_some_and(|s| s.origin == RecordOrigin::Tracker)
    };
    let mut parts = Vec::new();
    let mut tracker_reasons: Vec<(DropReason, u64)> = Vec::new();
    for drop in &stats.record_drops {
        if is_tracker(drop.record) {
            match tracker_reasons.iter_mut().find(|(r, _)| *r == drop.reason) {
                Some((_, n)) => *n = n.saturating_add(drop.count),
                None => tracker_reasons.push((drop.reason, drop.count)),
            }
            continue;
        }
        let name = schemas
            .get(drop.record.0 as usize)
            .map_or("?", |s| s.name.as_str());
        let (n, why) = (grouped(drop.count), drop.reason.label());
        parts.push(format!("{n} of `{name}` ({why})"));
    }
    if !tracker_reasons.is_empty() {
        tracker_reasons.sort();
        let total = saturating_sum(tracker_reasons.iter().map(|&(_, n)| n));
        let reasons: Vec<&str> = tracker_reasons.iter().map(|(r, _)| r.label()).collect();
        let (n, why) = (grouped(total), reasons.join(", "));
        parts.push(format!("{n} tracker events ({why})"));
    }
    parts
}

/// The events of `record` lost for any reason, `None` when the capture did
/// not count drops per record kind (unfinished, or older than format 2.3
/// with drops).
pub fn dropped_of(stats: Option<&CaptureStats>, record: RecordId) -> Option<u64> {
    let stats = stats.filter(|s| s.counts_per_record())?;
    Some(saturating_sum(stats.drops_of(record).map(|(_, n)| n)))
}

/// `3,400`: digits in groups of three.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::model::{RecordDrops, RecordKind};

    fn schema(name: &str, origin: RecordOrigin) -> RecordSchema {
        RecordSchema {
            probe: format!("uprobe:libc:{name}"),
            name: name.into(),
            kind: RecordKind::Instant,
            fields: vec![],
            has_stack: false,
            origin,
        }
    }

    fn drop(record: u32, reason: DropReason, count: u64) -> RecordDrops {
        RecordDrops {
            record: RecordId(record),
            reason,
            count,
        }
    }

    /// Script kinds are named with their reason; trackers' drops are one sum.
    #[test]
    fn names_script_kinds_and_sums_trackers() {
        let schemas = [
            schema("malloc", RecordOrigin::Script),
            schema("switch", RecordOrigin::Tracker),
            schema("waking", RecordOrigin::Tracker),
        ];
        let stats = CaptureStats::with_record_drops(vec![
            drop(0, DropReason::RingBufferFull, 120),
            drop(1, DropReason::RingBufferFull, 3_000),
            drop(2, DropReason::StackLost, 400),
        ]);
        assert_eq!(
            warning(&stats, &schemas).as_deref(),
            Some(
                "dropped 120 of `malloc` (ring buffer full), \
                 3,400 tracker events (ring buffer full, stack lost)"
            )
        );
        assert_eq!(dropped_of(Some(&stats), RecordId(1)), Some(3_000));
        assert_eq!(dropped_of(Some(&stats), RecordId(0)), Some(120));
    }

    /// A capture that lost nothing has no warning; one counted only by
    /// reason (format 2.2) is told by reason, with no per-kind totals.
    #[test]
    fn no_drops_and_older_captures() {
        let schemas = [schema("malloc", RecordOrigin::Script)];
        assert_eq!(warning(&CaptureStats::default(), &schemas), None);
        assert_eq!(
            dropped_of(Some(&CaptureStats::default()), RecordId(0)),
            Some(0)
        );
        let old = CaptureStats {
            drops: vec![(DropReason::StackLost, 1_234_567)],
            ..CaptureStats::default()
        };
        assert_eq!(
            warning(&old, &schemas).as_deref(),
            Some("dropped 1,234,567 (stack lost)")
        );
        assert_eq!(dropped_of(Some(&old), RecordId(0)), None);
        assert_eq!(dropped_of(None, RecordId(0)), None);
    }

    /// Drop counts (the capture's, unbounded) add up saturating.
    #[test]
    fn sums_of_drops_saturate() {
        let schemas = [
            schema("switch", RecordOrigin::Tracker),
            schema("waking", RecordOrigin::Tracker),
        ];
        let stats = CaptureStats {
            drops: vec![(DropReason::RingBufferFull, u64::MAX)],
            record_drops: vec![
                drop(0, DropReason::RingBufferFull, u64::MAX),
                drop(0, DropReason::StackLost, u64::MAX),
                drop(1, DropReason::RingBufferFull, u64::MAX),
            ],
            ..CaptureStats::default()
        };
        let max = grouped(u64::MAX);
        assert_eq!(
            warning(&stats, &schemas),
            Some(format!(
                "dropped {max} tracker events (ring buffer full, stack lost)"
            ))
        );
        assert_eq!(dropped_of(Some(&stats), RecordId(0)), Some(u64::MAX));
    }

    /// Digits group by three from the right.
    #[test]
    fn groups_digits() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(20_411), "20,411");
        assert_eq!(grouped(u64::MAX), "18,446,744,073,709,551,615");
    }
}
