//! JSON pieces written by hand into a byte buffer: numbers, exact seconds,
//! escaped strings. No value trees, so lines cost no allocation.

pub(super) fn write_u64(buf: &mut Vec<u8>, value: u64) {
    buf.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

pub(super) fn write_i64(buf: &mut Vec<u8>, value: i64) {
    buf.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// Nanoseconds as exact seconds with nine decimals (`1.234567890`): no
/// floating point, so every nanosecond survives and output is stable.
pub(super) fn write_seconds(buf: &mut Vec<u8>, ns: u64) {
    write_u64(buf, ns / 1_000_000_000);
    let mut fraction = ns % 1_000_000_000;
    let mut digits = *b".000000000";
    for digit in digits[1..].iter_mut().rev() {
        *digit = b'0' + (fraction % 10) as u8;
        fraction /= 10;
    }
    buf.extend_from_slice(&digits);
}

/// `,"key":"value"` (the key needs no escaping).
pub(super) fn write_key_str(buf: &mut Vec<u8>, key: &str, value: &str) {
    buf.extend_from_slice(b",\"");
    buf.extend_from_slice(key.as_bytes());
    buf.extend_from_slice(b"\":");
    write_str(buf, value.as_bytes());
}

/// Whether a byte must be escaped inside a JSON string (RFC 8259 §7).
const NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Writes `text` as a JSON string: quotes, backslashes and control characters
/// escaped, valid UTF-8 as is, each invalid sequence as `\ufffd`.
pub(super) fn write_str(buf: &mut Vec<u8>, text: &[u8]) {
    buf.push(b'"');
    for chunk in text.utf8_chunks() {
        let valid = chunk.valid().as_bytes();
        let mut start = 0;
        for (index, &byte) in valid.iter().enumerate() {
            if NEEDS_ESCAPE[byte as usize] {
                buf.extend_from_slice(&valid[start..index]);
                write_escape(buf, byte);
                start = index + 1;
            }
        }
        buf.extend_from_slice(&valid[start..]);
        if !chunk.invalid().is_empty() {
            buf.extend_from_slice(br"\ufffd");
        }
    }
    buf.push(b'"');
}

fn write_escape(buf: &mut Vec<u8>, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match byte {
        b'"' => buf.extend_from_slice(br#"\""#),
        b'\\' => buf.extend_from_slice(br"\\"),
        b'\n' => buf.extend_from_slice(br"\n"),
        b'\r' => buf.extend_from_slice(br"\r"),
        b'\t' => buf.extend_from_slice(br"\t"),
        0x08 => buf.extend_from_slice(br"\b"),
        0x0c => buf.extend_from_slice(br"\f"),
        _ => buf.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(byte >> 4)],
            HEX[usize::from(byte & 0xf)],
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Escaping follows RFC 8259; invalid UTF-8 becomes U+FFFD.
    #[test]
    fn escapes_strings() {
        let mut buf = Vec::new();
        write_str(
            &mut buf,
            b"q\" b\\ \x08\x0c\n\r\t \x00\x1f\x7f \xc3\xa9 \xff\xfe x\xe2\x82",
        );
        let expected =
            "\"q\\\" b\\\\ \\b\\f\\n\\r\\t \\u0000\\u001f\x7f é \\ufffd\\ufffd x\\ufffd\"";
        assert_eq!(String::from_utf8(buf.clone()).unwrap(), expected);
        let parsed: String = serde_json::from_slice(&buf).unwrap();
        assert_eq!(
            parsed,
            String::from_utf8_lossy(
                b"q\" b\\ \x08\x0c\n\r\t \x00\x1f\x7f \xc3\xa9 \xff\xfe x\xe2\x82"
            )
        );
    }

    /// Seconds keep every nanosecond.
    #[test]
    fn writes_exact_seconds() {
        let mut buf = Vec::new();
        for ns in [0, 1, 999_999_999, 1_000_000_000, u64::MAX] {
            write_seconds(&mut buf, ns);
            buf.push(b' ');
        }
        let text = String::from_utf8(buf).unwrap();
        assert_eq!(
            text,
            "0.000000000 0.000000001 0.999999999 1.000000000 18446744073.709551615 "
        );
    }
}
