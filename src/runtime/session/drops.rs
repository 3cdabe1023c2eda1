//! Reading the kernel's drop counters: the per-CPU drops map (a counter per
//! record kind and `DropReason`, at `codegen::program::drop_counter`) →
//! lost events per record kind and reason, summed over CPUs.

use crate::capture::model::{DropReason, RecordDrops, RecordId};
use crate::codegen::program::{Compiled, drop_counter, drop_counters};
use crate::runtime::bpf::loader::Loaded;
use crate::runtime::bpf::maps_read::MapError;

/// The non-zero drop counts of every record kind, record by record.
pub(super) fn read_drops(
    loaded: &Loaded,
    compiled: &Compiled,
) -> Result<Vec<RecordDrops>, MapError> {
    let Some(map) = compiled.drops else {
        return Ok(Vec::new());
    };
    let entries = loaded.map_entries(map)?;
    Ok(record_drops(compiled.records.len(), &entries))
}

/// Sums the per-CPU `u64` counters of `entries` (key, values of every CPU)
/// into counts per record kind and reason; keys past `records` kinds are
/// ignored.
fn record_drops(records: usize, entries: &[(Vec<u8>, Vec<Vec<u8>>)]) -> Vec<RecordDrops> {
    let mut counts = vec![0u64; drop_counters(records) as usize];
    for (key, values) in entries {
        let Some(index) = key
            .get(..4)
            .map(|k| u32::from_ne_bytes(k.try_into().expect("4 bytes")))
        else {
            continue;
        };
        let total: u64 = (values.iter())
            .filter_map(|v| v.get(..8))
            .map(|v| u64::from_ne_bytes(v.try_into().expect("8 bytes")))
            .sum();
        if let Some(count) = counts.get_mut(index as usize) {
            *count += total;
        }
    }
    let mut drops = Vec::new();
    for record in (0..records as u32).map(RecordId) {
        for reason in DropReason::ALL {
            let count = counts[drop_counter(record, reason) as usize];
            if count > 0 {
                drops.push(RecordDrops {
                    record,
                    reason,
                    count,
                });
            }
        }
    }
    drops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u32, per_cpu: &[u64]) -> (Vec<u8>, Vec<Vec<u8>>) {
        let values = per_cpu.iter().map(|v| v.to_ne_bytes().to_vec()).collect();
        (index.to_ne_bytes().to_vec(), values)
    }

    /// Counters are summed over CPUs and told apart by record kind and
    /// reason; zero counts and keys past the last record kind are left out.
    #[test]
    fn sums_counters_per_record_and_reason() {
        let ring = |r| drop_counter(RecordId(r), DropReason::RingBufferFull);
        let stack = drop_counter(RecordId(1), DropReason::StackLost);
        let entries = [
            entry(ring(0), &[120, 0]),
            entry(stack, &[1, 2]),
            entry(ring(1), &[0, 0]),
            entry(ring(2), &[7, 7]),
        ];
        let drops = record_drops(2, &entries);
        let of = |record, reason, count| RecordDrops {
            record: RecordId(record),
            reason,
            count,
        };
        assert_eq!(
            drops,
            [
                of(0, DropReason::RingBufferFull, 120),
                of(1, DropReason::StackLost, 3),
            ]
        );
    }
}
