//! C structs and arrays held by value: their bytes (C layout) → a
//! [`Value`], and the text bpftrace prints for them: `{ .a = 1, .b = x }`
//! and `[1,2,3]` as values, `{.a=1,.b=x}` in map keys.

use super::value::{DecodeError, Resolve, Value, decode_at, write_styled};
use crate::vocab::{StructField, ValueType};

/// The struct of `size` bytes at `offset` with these fields.
pub(super) fn decode_struct(
    bytes: &[u8],
    offset: usize,
    fields: &[StructField],
    size: u32,
) -> Result<Value, DecodeError> {
    let end = (offset + size as usize).min(bytes.len());
    let decoded = fields
        .iter()
        .map(|field| {
            let at = offset + field.offset as usize;
            let value = match field.bits {
                Some((shift, width)) => bitfield(bytes, at, end, shift, width, &field.ty)?,
                None => decode_at(bytes, at, &field.ty)?,
            };
            Ok((field.name.clone(), value))
        })
        .collect::<Result<Vec<_>, DecodeError>>()?;
    Ok(Value::Struct(decoded))
}

/// `len` elements of `elem` from `offset`.
pub(super) fn decode_array(
    bytes: &[u8],
    offset: usize,
    elem: &ValueType,
    len: u32,
) -> Result<Value, DecodeError> {
    let stride = elem.size() as usize;
    (0..len as usize)
        .map(|i| decode_at(bytes, offset + i * stride, elem))
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

/// A bitfield: `width` bits `shift` bits into the bytes at `at` (never
/// reading past the struct's `end`), sign-extended when `ty` is signed.
fn bitfield(
    bytes: &[u8],
    at: usize,
    end: usize,
    shift: u8,
    width: u8,
    ty: &ValueType,
) -> Result<Value, DecodeError> {
    let available = end.saturating_sub(at).min(8);
    let needed = (usize::from(shift) + usize::from(width)).div_ceil(8);
    if available < needed {
        return Err(DecodeError::Truncated {
            offset: at,
            need: needed,
            have: available,
        });
    }
    let raw = bytes[at..at + available]
        .iter()
        .rev()
        .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
    let unused = 64 - u32::from(width);
    let field = (raw >> shift) << unused;
    Ok(match ty {
        ValueType::Int { signed: true, .. } => Value::Int((field as i64) >> unused),
        _ => Value::UInt(field >> unused),
    })
}

/// `{ .a = 1, .b = 2 }`, or `{.a=1,.b=2}` in a map key.
pub(super) fn write_struct(
    out: &mut Vec<u8>,
    fields: &[(String, Value)],
    resolver: &dyn Resolve,
    key: bool,
) {
    let (open, separator, equals, close) = match key {
        true => ("{", ",", "=", "}"),
        false => ("{ ", ", ", " = ", " }"),
    };
    out.extend_from_slice(open.as_bytes());
    for (i, (name, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(separator.as_bytes());
        }
        out.push(b'.');
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(equals.as_bytes());
        write_styled(out, value, resolver, key);
    }
    out.extend_from_slice(close.as_bytes());
}

/// `[1,2,3]`, in keys and values alike.
pub(super) fn write_array(out: &mut Vec<u8>, items: &[Value], resolver: &dyn Resolve, key: bool) {
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_styled(out, item, resolver, key);
    }
    out.push(b']');
}

#[cfg(test)]
mod tests {
    use super::super::value::{RawIds, decode, write_value};
    use super::*;

    fn int(size: u8, signed: bool) -> ValueType {
        ValueType::Int { size, signed }
    }

    fn field(name: &str, offset: u32, ty: ValueType, bits: Option<(u8, u8)>) -> StructField {
        StructField {
            name: name.into(),
            offset,
            ty,
            bits,
        }
    }

    /// `struct S { int m; char c; unsigned a:3, b:5; short arr[2]; char name[4]; }`
    fn layout() -> ValueType {
        ValueType::Struct {
            fields: vec![
                field("m", 0, int(4, true), None),
                field("c", 4, int(1, true), None),
                field("a", 5, int(8, false), Some((0, 3))),
                field("b", 5, int(8, false), Some((3, 5))),
                field(
                    "arr",
                    8,
                    ValueType::Array {
                        elem: Box::new(int(2, true)),
                        len: 2,
                    },
                    None,
                ),
                field("name", 12, ValueType::Str { len: 4 }, None),
            ],
            size: 16,
            align: 4,
        }
    }

    fn bytes() -> Vec<u8> {
        let mut b = vec![0u8; 16];
        b[..4].copy_from_slice(&(-2i32).to_le_bytes());
        b[4] = b'A';
        b[5] = 0b1000_1101; // a = 5, b = 17
        b[8..10].copy_from_slice(&7i16.to_le_bytes());
        b[10..12].copy_from_slice(&(-1i16).to_le_bytes());
        b[12..14].copy_from_slice(b"hi");
        b
    }

    /// Members decode at their offsets; bitfields are masked (bpftrace 0.17
    /// prints them unmasked, a bug not copied); chars print as integers.
    #[test]
    fn prints_structs_as_values_and_keys() {
        let value = decode(&bytes(), &layout()).expect("decodes");
        let mut text = Vec::new();
        write_value(&mut text, &value, &RawIds);
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "{ .m = -2, .c = 65, .a = 5, .b = 17, .arr = [7,-1], .name = hi }"
        );
        let mut key = Vec::new();
        super::super::value::write_key_value(&mut key, &value, &RawIds);
        assert_eq!(
            String::from_utf8(key).unwrap(),
            "{.m=-2,.c=65,.a=5,.b=17,.arr=[7,-1],.name=hi}"
        );
    }

    /// 2-D arrays print nested brackets without spaces.
    #[test]
    fn prints_nested_arrays() {
        let row = ValueType::Array {
            elem: Box::new(int(4, true)),
            len: 2,
        };
        let ty = ValueType::Array {
            elem: Box::new(row),
            len: 2,
        };
        let bytes: Vec<u8> = [5i32, 6, 7, 8]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut text = Vec::new();
        write_value(&mut text, &decode(&bytes, &ty).unwrap(), &RawIds);
        assert_eq!(String::from_utf8(text).unwrap(), "[[5,6],[7,8]]");
    }
}
