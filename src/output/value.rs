//! Output stage, step one: raw little-endian bytes (a map key, a map value or a
//! message field) plus their [`ValueType`] → a [`Value`]; and a [`Value`] → the
//! text bpftrace 0.17 prints for it in map keys, map values and `print(value)`.
//!
//! Symbols and probe names stay unresolved ids here; whoever prints them
//! supplies a [`Resolve`] implementation that turns the ids into text.

use std::cmp::Ordering;

use thiserror::Error;

use super::cvalue;
use crate::vocab::ValueType;

/// A decoded value. Integers keep their signedness so that printing and
/// `printf` conversions can sign- or zero-extend them the way C does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A signed integer, sign-extended from its stored size.
    Int(i64),
    /// An unsigned integer, zero-extended from its stored size.
    UInt(u64),
    /// String bytes up to (not including) the first NUL. Kernel strings need not be
    /// UTF-8, and bpftrace prints them byte for byte.
    Str(Vec<u8>),
    Tuple(Vec<Value>),
    /// A code address printed as a symbol.
    Symbol {
        kernel: bool,
        addr: u64,
    },
    /// An index into `Compiled::programs`, printed as the probe name.
    Probe(u64),
    /// A C struct or union held by value: its members in order.
    Struct(Vec<(String, Value)>),
    /// A C array held by value.
    Array(Vec<Value>),
}

impl Value {
    /// The 64-bit pattern of an integer-like value, as C varargs would pass it.
    pub fn as_bits(&self) -> Option<u64> {
        match self {
            Value::Int(v) => Some(*v as u64),
            Value::UInt(v) => Some(*v),
            Value::Symbol { addr, .. } => Some(*addr),
            Value::Probe(i) => Some(*i),
            Value::Str(_) | Value::Tuple(_) | Value::Struct(_) | Value::Array(_) => None,
        }
    }

    /// This value with every integer (tuple fields included) divided by `div`,
    /// truncating toward zero, as `print(@m, top, div)` does. `div` 0 counts as 1.
    pub fn divided(&self, div: u64) -> Value {
        let div = div.max(1);
        match self {
            Value::Int(v) => Value::Int(div_signed(*v, div)),
            Value::UInt(v) => Value::UInt(v / div),
            Value::Tuple(fields) => Value::Tuple(fields.iter().map(|f| f.divided(div)).collect()),
            other => other.clone(),
        }
    }
}

/// `v / div` for a signed value and unsigned divisor, truncating toward zero.
pub fn div_signed(v: i64, div: u64) -> i64 {
    match i64::try_from(div) {
        Ok(d) if d > 0 => v / d,
        // A divisor above i64::MAX leaves only i64::MIN with a non-zero quotient.
        _ => (i128::from(v) / i128::from(div.max(1))) as i64,
    }
}

/// Why bytes could not be decoded as the given type.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("value needs {need} bytes at offset {offset}, only {have} available")]
    Truncated {
        offset: usize,
        need: usize,
        have: usize,
    },
    #[error("integer of unsupported size {0} bytes")]
    IntSize(u8),
}

/// Decodes `bytes` (little-endian, as BPF stores them) as a value of type `ty`.
/// Never panics: short input is a [`DecodeError::Truncated`].
pub fn decode(bytes: &[u8], ty: &ValueType) -> Result<Value, DecodeError> {
    decode_at(bytes, 0, ty)
}

pub(super) fn decode_at(bytes: &[u8], offset: usize, ty: &ValueType) -> Result<Value, DecodeError> {
    let field = slice(bytes, offset, ty.size() as usize)?;
    match ty {
        ValueType::Int { size, signed } => decode_int(field, *size, *signed),
        ValueType::Str { .. } => {
            let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
            Ok(Value::Str(field[..end].to_vec()))
        }
        ValueType::Tuple { fields, .. } => fields
            .iter()
            .map(|(off, fty)| decode_at(bytes, offset + *off as usize, fty))
            .collect::<Result<_, _>>()
            .map(Value::Tuple),
        ValueType::Symbol { kernel } => Ok(Value::Symbol {
            kernel: *kernel,
            addr: read_u64(field),
        }),
        ValueType::Probe => Ok(Value::Probe(read_u64(field))),
        ValueType::Struct { fields, size, .. } => {
            cvalue::decode_struct(bytes, offset, fields, *size)
        }
        ValueType::Array { elem, len } => cvalue::decode_array(bytes, offset, elem, *len),
    }
}

/// `bytes[offset..offset + len]`, or why not.
fn slice(bytes: &[u8], offset: usize, len: usize) -> Result<&[u8], DecodeError> {
    let truncated = DecodeError::Truncated {
        offset,
        need: len,
        have: bytes.len().saturating_sub(offset),
    };
    let end = offset.checked_add(len).ok_or_else(|| truncated.clone())?;
    bytes.get(offset..end).ok_or(truncated)
}

/// Little-endian u64 from up to 8 bytes (missing high bytes are zero).
fn read_u64(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .take(8)
        .rev()
        .fold(0, |acc, &b| (acc << 8) | u64::from(b))
}

fn decode_int(field: &[u8], size: u8, signed: bool) -> Result<Value, DecodeError> {
    if !matches!(size, 1 | 2 | 4 | 8) {
        return Err(DecodeError::IntSize(size));
    }
    let raw = read_u64(field);
    if !signed {
        return Ok(Value::UInt(raw));
    }
    let unused = 64 - 8 * u32::from(size);
    Ok(Value::Int(((raw << unused) as i64) >> unused))
}

/// Turns the ids that only the runtime can interpret into text.
pub trait Resolve {
    /// A symbolized address (`func+off`, or the number when unknown).
    fn symbol(&self, kernel: bool, addr: u64) -> Vec<u8>;
    /// The name of the probe at this index of `Compiled::programs`.
    fn probe(&self, index: u64) -> Vec<u8>;
}

/// A [`Resolve`] that prints raw numbers, for tests.
#[derive(Clone, Copy, Debug, Default)]
#[cfg(test)]
pub struct RawIds;

#[cfg(test)]
impl Resolve for RawIds {
    fn symbol(&self, _kernel: bool, addr: u64) -> Vec<u8> {
        addr.to_string().into_bytes()
    }
    fn probe(&self, index: u64) -> Vec<u8> {
        format!("probe#{index}").into_bytes()
    }
}

/// Appends the text of `value` as bpftrace prints it: integers in decimal,
/// strings raw, tuples as `(1, abc)`, structs as `{ .a = 1 }`.
pub fn write_value(out: &mut Vec<u8>, value: &Value, resolver: &dyn Resolve) {
    write_styled(out, value, resolver, false);
}

/// Appends the text of `value` as bpftrace prints it in a map key, where
/// structs are compact: `{.a=1,.b=2}`.
pub fn write_key_value(out: &mut Vec<u8>, value: &Value, resolver: &dyn Resolve) {
    write_styled(out, value, resolver, true);
}

/// [`write_value`], or [`write_key_value`] when `key`.
pub(super) fn write_styled(out: &mut Vec<u8>, value: &Value, resolver: &dyn Resolve, key: bool) {
    match value {
        Value::Int(v) => out.extend_from_slice(v.to_string().as_bytes()),
        Value::UInt(v) => out.extend_from_slice(v.to_string().as_bytes()),
        Value::Str(s) => out.extend_from_slice(s),
        Value::Tuple(fields) => {
            out.push(b'(');
            write_tuple_fields(out, fields, resolver, key);
            out.push(b')');
        }
        Value::Symbol { kernel, addr } => out.extend(resolver.symbol(*kernel, *addr)),
        Value::Probe(index) => out.extend(resolver.probe(*index)),
        Value::Struct(fields) => cvalue::write_struct(out, fields, resolver, key),
        Value::Array(items) => cvalue::write_array(out, items, resolver, key),
    }
}

/// Appends tuple fields separated by `", "`, without parentheses (the form of a
/// multi-key map key: `@x[1, abc]`).
pub fn write_fields(out: &mut Vec<u8>, fields: &[Value], resolver: &dyn Resolve) {
    write_tuple_fields(out, fields, resolver, true);
}

fn write_tuple_fields(out: &mut Vec<u8>, fields: &[Value], resolver: &dyn Resolve, key: bool) {
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        write_styled(out, field, resolver, key);
    }
}

/// The order bpftrace 0.17 sorts map keys in: integers as unsigned 64-bit
/// numbers (so `-1` sorts after `256`), strings bytewise, tuples field by field.
pub fn key_order(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => x.cmp(y),
        (Value::Tuple(x), Value::Tuple(y)) | (Value::Array(x), Value::Array(y)) => x
            .iter()
            .zip(y)
            .map(|(p, q)| key_order(p, q))
            .find(|o| o.is_ne())
            .unwrap_or_else(|| x.len().cmp(&y.len())),
        (Value::Struct(x), Value::Struct(y)) => x
            .iter()
            .zip(y)
            .map(|((_, p), (_, q))| key_order(p, q))
            .find(|o| o.is_ne())
            .unwrap_or_else(|| x.len().cmp(&y.len())),
        _ => match (a.as_bits(), b.as_bits()) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => rank(a).cmp(&rank(b)),
        },
    }
}

/// Orders values of different shapes (which a well-typed map never mixes).
fn rank(v: &Value) -> u8 {
    match v {
        Value::Str(_) => 0,
        Value::Tuple(_) => 1,
        _ => 2,
    }
}

/// Numeric order of integer values (signed ones as signed), `None` otherwise.
pub fn numeric_order(a: &Value, b: &Value) -> Option<Ordering> {
    let wide = |v: &Value| match v {
        Value::Int(i) => Some(i128::from(*i)),
        Value::UInt(u) => Some(i128::from(*u)),
        _ => None,
    };
    Some(wide(a)?.cmp(&wide(b)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(v: &Value) -> String {
        let mut out = Vec::new();
        write_value(&mut out, v, &RawIds);
        String::from_utf8(out).unwrap()
    }

    fn int(size: u8, signed: bool) -> ValueType {
        ValueType::Int { size, signed }
    }

    /// Signed integers are sign-extended from their size, unsigned ones zero-extended.
    #[test]
    fn decodes_ints_by_size_and_sign() {
        assert_eq!(decode(&[0xff], &int(1, true)), Ok(Value::Int(-1)));
        assert_eq!(decode(&[0xff], &int(1, false)), Ok(Value::UInt(255)));
        assert_eq!(decode(&[0xfe, 0xff], &int(2, true)), Ok(Value::Int(-2)));
        assert_eq!(
            decode(&[1, 2, 0, 0], &int(4, false)),
            Ok(Value::UInt(0x201))
        );
        assert_eq!(
            decode(&[0xff; 8], &int(8, false)),
            Ok(Value::UInt(u64::MAX))
        );
        assert_eq!(decode(&[0xff; 8], &int(8, true)), Ok(Value::Int(-1)));
    }

    /// Strings stop at the first NUL, or fill the whole buffer without one.
    #[test]
    fn decodes_strings_up_to_nul() {
        let ty = ValueType::Str { len: 4 };
        assert_eq!(decode(b"ab\0c", &ty), Ok(Value::Str(b"ab".to_vec())));
        assert_eq!(decode(b"abcd", &ty), Ok(Value::Str(b"abcd".to_vec())));
    }

    /// Tuple fields are read at their offsets, padding skipped.
    #[test]
    fn decodes_tuples_by_offset() {
        let ty = ValueType::Tuple {
            fields: vec![(0, int(1, true)), (8, ValueType::Str { len: 4 })],
            size: 12,
        };
        let mut bytes = vec![0xffu8, 9, 9, 9, 9, 9, 9, 9];
        bytes.extend_from_slice(b"xy\0\0");
        let v = decode(&bytes, &ty).unwrap();
        assert_eq!(
            v,
            Value::Tuple(vec![Value::Int(-1), Value::Str(b"xy".to_vec())])
        );
    }

    /// Short input and odd integer sizes are errors, not panics.
    #[test]
    fn rejects_short_input() {
        assert_eq!(
            decode(&[1, 2], &int(4, true)),
            Err(DecodeError::Truncated {
                offset: 0,
                need: 4,
                have: 2
            })
        );
        let ty = ValueType::Tuple {
            fields: vec![(8, int(8, true))],
            size: 4,
        };
        assert!(decode(&[0; 4], &ty).is_err());
        assert_eq!(decode(&[0; 3], &int(3, true)), Err(DecodeError::IntSize(3)));
    }

    /// Symbols and probes decode to their raw ids.
    #[test]
    fn decodes_ids() {
        assert_eq!(
            decode(&7u64.to_le_bytes(), &ValueType::Symbol { kernel: true }),
            Ok(Value::Symbol {
                kernel: true,
                addr: 7
            })
        );
        assert_eq!(
            decode(&2u64.to_le_bytes(), &ValueType::Probe),
            Ok(Value::Probe(2))
        );
    }

    /// `print((1, (2, "x"), -3))` prints `(1, (2, x), -3)` (bpftrace 0.17).
    #[test]
    fn prints_nested_tuples() {
        let v = Value::Tuple(vec![
            Value::Int(1),
            Value::Tuple(vec![Value::Int(2), Value::Str(b"x".to_vec())]),
            Value::Int(-3),
        ]);
        assert_eq!(text(&v), "(1, (2, x), -3)");
        assert_eq!(text(&Value::UInt(u64::MAX)), "18446744073709551615");
    }

    /// `print(@t, 0, 2)` of `(-7, "a", (int8)-1)` prints `(-3, a, 0)`.
    #[test]
    fn divides_ints_inside_tuples() {
        let v = Value::Tuple(vec![
            Value::Int(-7),
            Value::Str(b"a".to_vec()),
            Value::Int(-1),
        ]);
        assert_eq!(text(&v.divided(2)), "(-3, a, 0)");
        assert_eq!(
            Value::UInt(u64::MAX).divided(2),
            Value::UInt(i64::MAX as u64)
        );
        assert_eq!(Value::Int(5).divided(0), Value::Int(5));
    }

    /// Keys sort as unsigned numbers: 1, 2, 256, -256, -1 (bpftrace 0.17, `@d[256]="a"; ...`).
    #[test]
    fn sorts_int_keys_unsigned() {
        let mut keys: Vec<Value> = [-1, 256, 2, -256, 1].map(Value::Int).to_vec();
        keys.sort_by(key_order);
        assert_eq!(keys, [1, 2, 256, -256, -1].map(Value::Int).to_vec());
    }
}
