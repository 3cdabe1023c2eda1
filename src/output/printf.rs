//! Output stage: renders `printf` format pieces (parsed by
//! [`crate::vocab::printf_format`]) plus decoded [`Value`]s into the exact
//! bytes bpftrace 0.17 prints:
//! - integer conversions read a C `int` unless a length modifier says otherwise,
//!   so `%d` of `1 << 40` prints `0` and `%x` of `-1` prints `ffffffff`;
//! - output stops at a NUL produced by `%c` of 0.

use super::text::{Place, Resolve, buffer_text, write_value};
use super::value::Value;
use crate::vocab::printf_format::{Conversion, Piece, Spec};

/// Renders a parsed format with its arguments, byte for byte as bpftrace 0.17.
/// A missing argument prints as 0 or an empty string (the checker prevents it).
pub fn format(pieces: &[Piece], args: &[Value], resolver: &dyn Resolve) -> Vec<u8> {
    let mut out = Vec::new();
    let mut args = args.iter();
    for piece in pieces {
        match piece {
            Piece::Literal(text) => out.extend_from_slice(text.as_bytes()),
            Piece::Spec(spec) => {
                let mut field = render_spec(spec, args.next(), resolver);
                // C strings end at NUL: `%c` of 0 cuts the rest of this conversion.
                if let Some(nul) = field.iter().position(|&b| b == 0) {
                    field.truncate(nul);
                }
                out.extend(field);
            }
        }
    }
    out
}

/// Largest width or precision honoured; glibc fails beyond about this anyway.
const MAX_FIELD: usize = 4096;

fn render_spec(spec: &Spec, arg: Option<&Value>, resolver: &dyn Resolve) -> Vec<u8> {
    let width = spec.width.unwrap_or(0).min(MAX_FIELD);
    let body = match spec.conversion {
        Conversion::Str => text_arg(spec, arg, resolver),
        Conversion::Buffer(style) => match arg {
            Some(Value::Buffer(bytes)) => {
                let mut text = buffer_text(bytes, style).into_bytes();
                text.truncate(spec.precision.unwrap_or(usize::MAX));
                text
            }
            _ => text_arg(spec, arg, resolver),
        },
        Conversion::Char => vec![int_arg(arg, resolver) as u8],
        Conversion::Pointer => pointer(spec, int_arg(arg, resolver), width),
        _ => integer(spec, int_arg(arg, resolver), width),
    };
    pad(body, width, spec.flags.left)
}

/// The argument of `%s`: strings raw, precision truncates.
fn text_arg(spec: &Spec, arg: Option<&Value>, resolver: &dyn Resolve) -> Vec<u8> {
    let mut text = Vec::new();
    if let Some(v) = arg {
        write_value(&mut text, v, Place::Value, resolver);
    }
    if let Some(p) = spec.precision {
        text.truncate(p);
    }
    text
}

/// The 64-bit pattern an integer conversion reads; text arguments (rejected by
/// the checker) read as their length so that nothing panics.
fn int_arg(arg: Option<&Value>, resolver: &dyn Resolve) -> u64 {
    match arg {
        None => 0,
        Some(v) => v.as_bits().unwrap_or_else(|| {
            let mut text = Vec::new();
            write_value(&mut text, v, Place::Value, resolver);
            text.len() as u64
        }),
    }
}

/// `%p`: `(nil)` for 0, else `0x` and lower-case hex, like glibc.
fn pointer(spec: &Spec, v: u64, width: usize) -> Vec<u8> {
    if v == 0 {
        return b"(nil)".to_vec();
    }
    let digits = with_precision(format!("{v:x}"), spec.precision);
    let zero_width = zero_pad_width(spec, width);
    join_padded("", "0x", &digits, zero_width)
}

/// `d i u o x X` after C's rules for sign, prefix, precision and zero padding.
fn integer(spec: &Spec, bits: u64, width: usize) -> Vec<u8> {
    let n = spec.length.bits();
    let value = if n == 64 {
        bits
    } else {
        bits & ((1u64 << n) - 1)
    };
    let (negative, magnitude) = match spec.conversion {
        Conversion::Signed => {
            let signed = ((value << (64 - n)) as i64) >> (64 - n);
            (signed < 0, signed.unsigned_abs())
        }
        _ => (false, value),
    };
    let mut digits = match spec.conversion {
        Conversion::Octal => format!("{magnitude:o}"),
        Conversion::Hex => format!("{magnitude:x}"),
        Conversion::HexUpper => format!("{magnitude:X}"),
        _ => magnitude.to_string(),
    };
    if spec.precision == Some(0) && magnitude == 0 {
        digits.clear();
    }
    digits = with_precision(digits, spec.precision);
    let (sign, prefix) = sign_and_prefix(spec, negative, magnitude, &mut digits);
    join_padded(sign, prefix, &digits, zero_pad_width(spec, width))
}

fn sign_and_prefix(
    spec: &Spec,
    negative: bool,
    magnitude: u64,
    digits: &mut String,
) -> (&'static str, &'static str) {
    let f = spec.flags;
    let sign = match spec.conversion {
        Conversion::Signed if negative => "-",
        Conversion::Signed if f.plus => "+",
        Conversion::Signed if f.space => " ",
        _ => "",
    };
    let prefix = match spec.conversion {
        Conversion::Hex if f.alt && magnitude != 0 => "0x",
        Conversion::HexUpper if f.alt && magnitude != 0 => "0X",
        Conversion::Octal if f.alt && !digits.starts_with('0') => {
            digits.insert(0, '0');
            ""
        }
        _ => "",
    };
    (sign, prefix)
}

/// Left-pads `digits` with zeros to at least `precision` characters.
fn with_precision(digits: String, precision: Option<usize>) -> String {
    let p = precision.unwrap_or(0).min(MAX_FIELD);
    if digits.len() >= p {
        return digits;
    }
    format!("{}{digits}", "0".repeat(p - digits.len()))
}

/// The width zero padding fills, or 0 when `0` is off, overridden by `-` or by a precision.
fn zero_pad_width(spec: &Spec, width: usize) -> usize {
    let f = spec.flags;
    if f.zero && !f.left && spec.precision.is_none() {
        width
    } else {
        0
    }
}

/// `sign + prefix + zeros + digits`, zeros filling up to `zero_width`.
fn join_padded(sign: &str, prefix: &str, digits: &str, zero_width: usize) -> Vec<u8> {
    let used = sign.len() + prefix.len() + digits.len();
    let zeros = "0".repeat(zero_width.saturating_sub(used));
    format!("{sign}{prefix}{zeros}{digits}").into_bytes()
}

/// Space padding to `width`, on the right for `-`.
fn pad(mut body: Vec<u8>, width: usize, left: bool) -> Vec<u8> {
    let fill = width.saturating_sub(body.len());
    if fill == 0 {
        return body;
    }
    if left {
        body.resize(body.len() + fill, b' ');
        return body;
    }
    let mut out = vec![b' '; fill];
    out.append(&mut body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::text::RawIds;
    use crate::vocab::printf_format::parse_format;

    fn s(text: &str) -> Value {
        Value::Str(text.as_bytes().to_vec())
    }

    fn run(fmt: &str, args: &[Value]) -> String {
        let pieces = parse_format(fmt).expect("format parses");
        String::from_utf8_lossy(&format(&pieces, args, &RawIds)).into_owned()
    }

    fn ints(v: &[i64]) -> Vec<Value> {
        v.iter().map(|&i| Value::Int(i)).collect()
    }

    /// bpftrace -e 'BEGIN { printf("%-5d|%5s|%x|%lu\n", 3, "ab", 255, 7); }' → `3    |   ab|ff|7`.
    #[test]
    fn brief_example() {
        let args = [Value::Int(3), s("ab"), Value::Int(255), Value::Int(7)];
        assert_eq!(run("%-5d|%5s|%x|%lu\n", &args), "3    |   ab|ff|7\n");
    }

    /// `[%-10s][%10s][%.2s][%-5.1s]` of "abc","abc","abcdef","xyz" (bpftrace 0.17).
    #[test]
    fn string_width_and_precision() {
        let args = [s("abc"), s("abc"), s("abcdef"), s("xyz")];
        let out = run("[%-10s][%10s][%.2s][%-5.1s]", &args);
        assert_eq!(out, "[abc       ][       abc][ab][x    ]");
        let args = [s("hello"), s("hello"), s("hello"), s("hi"), s("zzz")];
        let out = run("[%s][%10.2s][%-10.2s|][%.10s][%.0s]", &args);
        assert_eq!(out, "[hello][        he][he        |][hi][]");
    }

    /// `[%05d][%lu][%llx][%x][%X][%o][%c][%p]` of 42,-1,-1,-1,255,8,65,4096 (bpftrace 0.17).
    #[test]
    fn integer_conversions() {
        let out = run(
            "[%05d][%lu][%llx][%x][%X][%o][%c][%p]",
            &ints(&[42, -1, -1, -1, 255, 8, 65, 4096]),
        );
        assert_eq!(
            out,
            "[00042][18446744073709551615][ffffffffffffffff][ffffffff][FF][10][A][0x1000]"
        );
    }

    /// `%hd %hhd %hu %hhu %hx %hhx %ld %lo %o %zx %jo %tu` of 70000 (bpftrace 0.17).
    #[test]
    fn length_modifiers_truncate() {
        let cases = [
            ("%hd", "4464"),
            ("%hhd", "112"),
            ("%hu", "4464"),
            ("%hhu", "112"),
            ("%hx", "1170"),
            ("%hhx", "70"),
            ("%ld", "70000"),
            ("%lo", "210560"),
            ("%o", "210560"),
            ("%zx", "11170"),
            ("%jo", "210560"),
            ("%tu", "70000"),
            ("%lp", "0x11170"),
            ("%hhp", "0x11170"),
        ];
        for (fmt, want) in cases {
            assert_eq!(run(fmt, &ints(&[70000])), want, "{fmt}");
        }
    }

    /// `%d` reads a C int: `%d` of i64::MIN is 0; `(uint32)-1` is -1; `%ld` of it 4294967295.
    #[test]
    fn plain_conversions_read_32_bits() {
        assert_eq!(run("%d", &ints(&[i64::MIN])), "0");
        assert_eq!(
            run(
                "%d|%ld",
                &[Value::UInt(u32::MAX.into()), Value::UInt(u32::MAX.into())]
            ),
            "-1|4294967295"
        );
        assert_eq!(
            run("%u|%lu", &ints(&[-1, -1])),
            "4294967295|18446744073709551615"
        );
        assert_eq!(run("%d", &[Value::UInt(65535)]), "65535");
    }

    /// `[%5d|%-5d|%05d|%-05d]` of -42 and `[%08.3d|%-8.3d|%.3x]` of 5,-5,255 (bpftrace 0.17).
    #[test]
    fn negative_padding_and_precision() {
        assert_eq!(
            run("[%5d|%-5d|%05d|%-05d]", &ints(&[-42; 4])),
            "[  -42|-42  |-0042|-42  ]"
        );
        assert_eq!(
            run("[%08.3d|%-8.3d|%.3x]", &ints(&[5, -5, 255])),
            "[     005|-005    |0ff]"
        );
        assert_eq!(
            run("[%5.3d][%-8.3x][%08x][%.0d]", &ints(&[7, 255, 255, 0])),
            "[  007][0ff     ][000000ff][]"
        );
    }

    /// `%05s` ignores the zero flag; `%3c`, `%-3c`, `%c` of 322 → `B` (bpftrace 0.17).
    #[test]
    fn chars_and_zero_flag_on_strings() {
        assert_eq!(
            run("[%5s|%05s|%-05s]", &[s("ab"), s("ab"), s("ab")]),
            "[   ab|   ab|ab   ]"
        );
        assert_eq!(
            run("[%3c][%-3c|][%c]", &ints(&[65, 66, 322])),
            "[  A][B  |][B]"
        );
    }

    /// `%c` of 200 prints the raw byte 0xC8; `%c` of 0 ends that conversion's output.
    #[test]
    fn char_bytes_and_nul() {
        let pieces = parse_format("[%c][%c][%5c][%-5c]").unwrap();
        let out = format(&pieces, &ints(&[200, 0, 0, 0]), &RawIds);
        assert_eq!(out, b"[\xc8][][    ][]");
    }

    /// `[%p][%p][%5p][%-5p|][%010p][%-10p|][%.3p]` (bpftrace 0.17, glibc `(nil)`).
    #[test]
    fn pointers() {
        assert_eq!(
            run("[%p][%p][%5p][%-5p|]", &ints(&[0, -1, 0, 0])),
            "[(nil)][0xffffffffffffffff][(nil)][(nil)|]"
        );
        assert_eq!(
            run("[%010p][%-10p|][%.3p]", &ints(&[4096, 4096, 1])),
            "[0x00001000][0x1000    |][0x001]"
        );
    }

    /// `%%` prints `%` before the last conversion, `%%` after it or without any
    /// (`"[%%] %d"` → `[%] 5`, `"%d%%"` → `50%%`, `"[%%]"` → `[%%]`).
    #[test]
    fn percent_quirk() {
        assert_eq!(run("[%%] %d\n", &ints(&[5])), "[%] 5\n");
        assert_eq!(run("%d%%\n", &ints(&[50])), "50%%\n");
        assert_eq!(run("%s %%\n", &[s("x")]), "x %%\n");
        assert_eq!(run("[%%]\n", &[]), "[%%]\n");
    }

    /// Stray `%` after the last conversion is copied (`"%d %]"` → `50 %]`; `"a%"` → `a%`).
    #[test]
    fn trailing_junk_is_literal() {
        assert_eq!(run("%d %]\n", &ints(&[50])), "50 %]\n");
        assert_eq!(run("a%", &[]), "a%");
        assert_eq!(run("[%f][%5]", &[]), "[%f][%5]");
    }

    /// C flags beyond bpftrace 0.17: `%+d`, `% d`, `%#x`, `%#o`, `%i`.
    #[test]
    fn c_flags_extension() {
        assert_eq!(
            run(
                "[%+d][% d][%#x][%#X][%#o][%i][%+5d]",
                &ints(&[5, 5, 255, 255, 8, -5, 1])
            ),
            "[+5][ 5][0xff][0XFF][010][-5][   +1]"
        );
    }

    /// `%s` prints tuples, probes and symbols through the resolver; missing args print empty.
    #[test]
    fn text_of_other_values() {
        assert_eq!(
            run("[%s][%s]", &[Value::Probe(2), Value::Tuple(ints(&[1, 2]))]),
            "[probe#2][(1, 2)]"
        );
        assert_eq!(run("[%s][%d]", &[]), "[][0]");
    }

    /// `%r` family on `buf()` bytes, with width (bpftrace turns them into `%s`).
    #[test]
    fn buffers() {
        let buf = || vec![Value::Buffer(b"hi\x01".to_vec())];
        assert_eq!(run("[%r]", &buf()), "[hi\\x01]");
        assert_eq!(run("[%rx]", &buf()), "[\\x68\\x69\\x01]");
        assert_eq!(run("[%12rh]", &buf()), "[    68 69 01]");
    }
}
