//! Raw map contents → decoded entries: per-CPU values combined, histogram
//! buckets grouped under their script key.

use std::collections::BTreeMap;

use crate::codegen::program::{MapSpec, MapValue, ValueType};
use crate::output::maps::{AggValue, Entry};
use crate::output::value::{DecodeError, Value, decode};

/// Combine raw `(key, per-CPU values)` pairs of a script map into entries.
pub fn entries(spec: &MapSpec, raw: Vec<(Vec<u8>, Vec<Vec<u8>>)>) -> Result<Vec<Entry>, DecodeError> {
    let script = spec.script_map.as_ref().expect("only script maps are printed");
    let key_bytes = script.key.as_ref().map_or(0, |k| k.size().next_multiple_of(8)) as usize;
    let mut buckets: BTreeMap<Vec<u8>, Vec<(u64, u64)>> = BTreeMap::new();
    let mut result = Vec::new();
    for (key, values) in raw {
        if let MapValue::Hist | MapValue::Lhist { .. } = script.value {
            let bucket = read_u64(&key, key_bytes);
            let count = values.iter().map(|v| read_u64(v, 0)).sum();
            buckets.entry(key[..key_bytes.min(key.len())].to_vec()).or_default().push((bucket, count));
            continue;
        }
        let key = decode_key(&key, script.key.as_ref())?;
        result.push((key, combine(&script.value, &values)?));
    }
    for (key, mut counts) in buckets {
        counts.sort_unstable();
        let key = decode_key(&key, script.key.as_ref())?;
        let value = match script.value {
            MapValue::Hist => AggValue::Hist(counts),
            _ => AggValue::Lhist(counts),
        };
        result.push((key, value));
    }
    Ok(result)
}

fn decode_key(bytes: &[u8], ty: Option<&ValueType>) -> Result<Option<Value>, DecodeError> {
    ty.map(|ty| decode(bytes, ty)).transpose()
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn read_i64(bytes: &[u8], at: usize) -> i64 {
    read_u64(bytes, at) as i64
}

/// One value from the values of every CPU (a single one for shared maps).
fn combine(value: &MapValue, per_cpu: &[Vec<u8>]) -> Result<AggValue, DecodeError> {
    let sum = |at| per_cpu.iter().map(|v| read_i64(v, at)).fold(0i64, i64::wrapping_add);
    Ok(match value {
        MapValue::Plain(ty) => AggValue::Plain(decode(&per_cpu[0], ty)?),
        MapValue::Count => AggValue::Count(sum(0) as u64),
        MapValue::Sum => AggValue::Sum(Value::Int(sum(0))),
        MapValue::Min | MapValue::Max => {
            let set = per_cpu.iter().filter(|v| read_u64(v, 8) != 0).map(|v| read_i64(v, 0));
            let best = if matches!(value, MapValue::Min) { set.min() } else { set.max() };
            let best = Value::Int(best.unwrap_or(0));
            if matches!(value, MapValue::Min) { AggValue::Min(best) } else { AggValue::Max(best) }
        }
        MapValue::Avg => AggValue::Avg { count: sum(0) as u64, total: sum(8) },
        MapValue::Stats => AggValue::Stats { count: sum(0) as u64, total: sum(8) },
        MapValue::Hist | MapValue::Lhist { .. } => unreachable!("histograms are grouped by key"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::program::{MapKind, ScriptMap};

    fn spec(key: Option<ValueType>, value: MapValue) -> MapSpec {
        MapSpec {
            name: "@x".into(),
            kind: MapKind::PerCpuHash,
            key_size: 16,
            value_size: 16,
            max_entries: 8,
            script_map: Some(ScriptMap { key, value }),
        }
    }

    fn le(values: &[u64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// Per-CPU counts add up; min ignores CPUs that never saw a value.
    #[test]
    fn combines_cpus() {
        let int = ValueType::Int { size: 8, signed: false };
        let count = entries(&spec(Some(int.clone()), MapValue::Count), vec![(le(&[7]), vec![le(&[2]), le(&[3])])]).unwrap();
        assert_eq!(count, vec![(Some(Value::UInt(7)), AggValue::Count(5))]);
        let min = entries(&spec(None, MapValue::Min), vec![(le(&[0]), vec![le(&[0, 0]), le(&[9, 1])])]).unwrap();
        assert_eq!(min, vec![(None, AggValue::Min(Value::Int(9)))]);
    }

    /// Histogram entries with the same script key become one entry with sorted buckets.
    #[test]
    fn groups_histogram_buckets() {
        let int = ValueType::Int { size: 8, signed: false };
        let raw = vec![
            (le(&[1, 5]), vec![le(&[1]), le(&[1])]),
            (le(&[1, 3]), vec![le(&[4]), le(&[0])]),
            (le(&[2, 3]), vec![le(&[1]), le(&[0])]),
        ];
        let got = entries(&spec(Some(int), MapValue::Hist), raw).unwrap();
        assert_eq!(
            got,
            vec![
                (Some(Value::UInt(1)), AggValue::Hist(vec![(3, 4), (5, 2)])),
                (Some(Value::UInt(2)), AggValue::Hist(vec![(3, 1)])),
            ]
        );
    }
}
