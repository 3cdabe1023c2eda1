//! Output stage: raw map entries (key bytes plus one value buffer per CPU, in
//! the layouts [`AggFunc`] documents) → [`Entry`]s for [`super::maps`].

use std::collections::BTreeMap;

use crate::vocab::{AggFunc, MapValue, ScriptMap};

use super::maps::{AggValue, Entry};
use super::value::{DecodeError, Value, decode};

/// Combines one entry's per-CPU values (one buffer for plain, non-per-CPU maps).
/// `Ok(None)` for a min/max no CPU has set (bpftrace prints no such entry).
/// Histograms go through [`collect_entries`], whose keys carry the bucket.
pub fn combine(kind: &MapValue, per_cpu: &[&[u8]]) -> Result<Option<AggValue>, DecodeError> {
    let pairs = || {
        per_cpu
            .iter()
            .map(|b| Ok::<_, DecodeError>((word(b, 0)?, word(b, 8)?)))
    };
    let func = match kind {
        MapValue::Plain(ty) => {
            return match per_cpu.first() {
                Some(bytes) => Ok(Some(AggValue::Plain(decode(bytes, ty)?))),
                None => Ok(None),
            };
        }
        MapValue::Aggregate(func) => *func,
    };
    Ok(Some(match func {
        AggFunc::Count | AggFunc::Hist | AggFunc::Lhist { .. } => {
            AggValue::Count(sum_words(per_cpu)?)
        }
        AggFunc::Sum => AggValue::Sum(Value::Int(sum_words(per_cpu)? as i64)),
        AggFunc::Min | AggFunc::Max => match min_max(func == AggFunc::Min, per_cpu)? {
            Some(v) if func == AggFunc::Min => AggValue::Min(Value::Int(v)),
            Some(v) => AggValue::Max(Value::Int(v)),
            None => return Ok(None),
        },
        AggFunc::Avg | AggFunc::Stats => {
            let (mut count, mut total) = (0u64, 0i64);
            for pair in pairs() {
                let (c, t) = pair?;
                count = count.wrapping_add(c);
                total = total.wrapping_add(t as i64);
            }
            if func == AggFunc::Avg {
                AggValue::Avg { count, total }
            } else {
                AggValue::Stats { count, total }
            }
        }
    }))
}

/// The smallest (or largest) value among CPUs whose `set` word is non-zero.
fn min_max(min: bool, per_cpu: &[&[u8]]) -> Result<Option<i64>, DecodeError> {
    let mut best: Option<i64> = None;
    for bytes in per_cpu {
        if word(bytes, 8)? == 0 {
            continue;
        }
        let v = word(bytes, 0)? as i64;
        best = Some(best.map_or(v, |b| if min { b.min(v) } else { b.max(v) }));
    }
    Ok(best)
}

/// Turns a map's raw entries `(key bytes, per-CPU value buffers)` into printable
/// entries. For hist/lhist the last 8 key bytes are the bucket index and the
/// entries of one key prefix merge into one histogram.
pub fn collect_entries(
    spec: &ScriptMap,
    raw: &[(Vec<u8>, Vec<Vec<u8>>)],
) -> Result<Vec<Entry>, DecodeError> {
    let is_hist = matches!(
        spec.value,
        MapValue::Aggregate(AggFunc::Hist | AggFunc::Lhist { .. })
    );
    let mut plain = Vec::new();
    let mut hists: BTreeMap<Vec<u8>, Vec<(u64, u64)>> = BTreeMap::new();
    for (key, values) in raw {
        let per_cpu: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        let Some(value) = combine(&spec.value, &per_cpu)? else {
            continue;
        };
        if !is_hist {
            plain.push((decode_key(spec, key)?, value));
            continue;
        }
        let split = key.len().checked_sub(8).ok_or(DecodeError::Truncated {
            offset: 0,
            need: 8,
            have: key.len(),
        })?;
        let AggValue::Count(count) = value else {
            continue;
        };
        hists
            .entry(key[..split].to_vec())
            .or_default()
            .push((word(key, split)?, count));
    }
    for (prefix, buckets) in hists {
        let value = match spec.value {
            MapValue::Aggregate(AggFunc::Hist) => AggValue::Hist(buckets),
            _ => AggValue::Lhist(buckets),
        };
        plain.push((decode_key(spec, &prefix)?, value));
    }
    Ok(plain)
}

fn decode_key(spec: &ScriptMap, key: &[u8]) -> Result<Option<Value>, DecodeError> {
    spec.key.as_ref().map(|ty| decode(key, ty)).transpose()
}

/// The little-endian u64 at `offset`.
fn word(bytes: &[u8], offset: usize) -> Result<u64, DecodeError> {
    let have = bytes.len().saturating_sub(offset);
    let slice = bytes
        .get(offset..offset.saturating_add(8))
        .filter(|s| s.len() == 8)
        .ok_or(DecodeError::Truncated {
            offset,
            need: 8,
            have,
        })?;
    let mut buf = [0u8; 8];
    buf.copy_from_slice(slice);
    Ok(u64::from_le_bytes(buf))
}

fn sum_words(per_cpu: &[&[u8]]) -> Result<u64, DecodeError> {
    per_cpu
        .iter()
        .try_fold(0u64, |acc, b| Ok(acc.wrapping_add(word(b, 0)?)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::ValueType;

    fn pair(a: i64, b: i64) -> Vec<u8> {
        [a.to_le_bytes(), b.to_le_bytes()].concat()
    }

    /// Counts and sums add up across CPUs; sums are signed.
    #[test]
    fn sums_per_cpu() {
        let cpus = [1u64.to_le_bytes(), 2u64.to_le_bytes()];
        let per_cpu: Vec<&[u8]> = cpus.iter().map(|b| b.as_slice()).collect();
        assert_eq!(
            combine(&MapValue::Aggregate(AggFunc::Count), &per_cpu),
            Ok(Some(AggValue::Count(3)))
        );
        let neg = (-5i64).to_le_bytes();
        assert_eq!(
            combine(&MapValue::Aggregate(AggFunc::Sum), &[&neg, &cpus[0]]),
            Ok(Some(AggValue::Sum(Value::Int(-4))))
        );
    }

    /// Min/max only look at CPUs whose `set` flag is non-zero; none set → no entry.
    #[test]
    fn min_max_respect_set_flag() {
        let (a, b, unset) = (pair(-5, 1), pair(3, 1), pair(-100, 0));
        assert_eq!(
            combine(&MapValue::Aggregate(AggFunc::Min), &[&a, &b, &unset]),
            Ok(Some(AggValue::Min(Value::Int(-5))))
        );
        assert_eq!(
            combine(&MapValue::Aggregate(AggFunc::Max), &[&a, &b, &unset]),
            Ok(Some(AggValue::Max(Value::Int(3))))
        );
        assert_eq!(
            combine(&MapValue::Aggregate(AggFunc::Max), &[&unset]),
            Ok(None)
        );
    }

    /// Avg/stats add counts and totals; short buffers are errors.
    #[test]
    fn averages_and_short_input() {
        let (a, b) = (pair(2, -10), pair(1, 4));
        assert_eq!(
            combine(&MapValue::Aggregate(AggFunc::Avg), &[&a, &b]),
            Ok(Some(AggValue::Avg {
                count: 3,
                total: -6
            }))
        );
        assert!(combine(&MapValue::Aggregate(AggFunc::Stats), &[&[0u8; 9]]).is_err());
    }

    /// Hist keys end in the bucket index; entries of one key merge into one histogram.
    #[test]
    fn groups_hist_buckets() {
        let spec = ScriptMap {
            key: Some(ValueType::Int {
                size: 8,
                signed: true,
            }),
            value: MapValue::Aggregate(AggFunc::Hist),
        };
        let key = |k: i64, b: u64| [k.to_le_bytes(), b.to_le_bytes()].concat();
        let one = |n: u64| vec![n.to_le_bytes().to_vec()];
        let raw = vec![
            (key(7, 3), one(2)),
            (key(7, 5), one(1)),
            (key(1, 2), one(4)),
        ];
        let entries = collect_entries(&spec, &raw).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries[1],
            (Some(Value::Int(7)), AggValue::Hist(vec![(3, 2), (5, 1)]))
        );
    }
}
