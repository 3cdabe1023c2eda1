//! Output stage: `printf` format strings. [`parse_format`] turns the format
//! text into [`Piece`]s once (the checker uses the specs to validate argument
//! count and types); [`format`] renders pieces plus decoded [`Value`]s into the
//! exact bytes bpftrace 0.17 prints.
//!
//! bpftrace 0.17 hands each conversion to C `snprintf` together with the text
//! before it, and copies the text after the last conversion verbatim. Hence:
//! - `%%` before (or between) conversions prints `%`, but after the last
//!   conversion, or in a format without any, it prints `%%`;
//! - a `%` that starts no valid conversion is literal text after the last
//!   conversion (bpftrace copies it), and an error before it (bpftrace would hand
//!   it to `snprintf` with garbage arguments);
//! - integer conversions read a C `int` unless a length modifier says otherwise,
//!   so `%d` of `1 << 40` prints `0` and `%x` of `-1` prints `ffffffff`;
//! - output stops at a NUL produced by `%c` of 0.
//!
//! Beyond bpftrace 0.17 we accept `%i` and the `+`, space and `#` flags with their
//! C meaning (bpftrace rejects or garbles them).

use thiserror::Error;

use super::value::{Resolve, Value, write_value};

/// A piece of a parsed format string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Text printed as is (with `%%` already resolved as bpftrace prints it).
    Literal(String),
    Spec(Spec),
}

/// One conversion specification, e.g. `%-08.3lx`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Byte offset of the `%` in the format string.
    pub offset: usize,
    pub flags: Flags,
    pub width: Option<usize>,
    pub precision: Option<usize>,
    pub length: Length,
    pub conversion: Conversion,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    /// `-`: pad on the right.
    pub left: bool,
    /// `0`: pad numbers with zeros.
    pub zero: bool,
    /// `+`: always print a sign for `d`/`i`.
    pub plus: bool,
    /// space: a space where `+` would print `+`.
    pub space: bool,
    /// `#`: `0x`/`0X` prefix for hex, leading `0` for octal.
    pub alt: bool,
}

/// C length modifier: how many bits of the (64-bit) argument a conversion reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Length {
    /// `hh`: 8 bits.
    Char,
    /// `h`: 16 bits.
    Short,
    /// none: 32 bits (C `int`).
    #[default]
    Int,
    /// `l`, `ll`, `z`, `j`, `t`: 64 bits.
    Long,
}

impl Length {
    fn bits(self) -> u32 {
        match self {
            Length::Char => 8,
            Length::Short => 16,
            Length::Int => 32,
            Length::Long => 64,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conversion {
    /// `d` or `i`.
    Signed,
    /// `u`.
    Unsigned,
    /// `o`.
    Octal,
    /// `x`.
    Hex,
    /// `X`.
    HexUpper,
    /// `c`.
    Char,
    /// `s`.
    Str,
    /// `p`.
    Pointer,
}

/// What kind of argument a conversion consumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// Any integer (`d i u x X o c p`).
    Integer,
    /// A string, or anything printed as text: stacks, symbols, probe names (`s`).
    Text,
}

impl Spec {
    /// The argument this spec expects.
    pub fn arg_kind(&self) -> ArgKind {
        match self.conversion {
            Conversion::Str => ArgKind::Text,
            _ => ArgKind::Integer,
        }
    }
}

/// A format string bpftrace would not print deterministically.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum FormatError {
    #[error("unknown conversion `%{found}` at byte {offset}")]
    UnknownConversion { offset: usize, found: char },
    #[error("missing conversion character after `%` at byte {offset}")]
    MissingConversion { offset: usize },
    #[error("length modifier not allowed with `%{conversion}` at byte {offset}")]
    LengthNotAllowed { offset: usize, conversion: char },
}

/// The specs of a parsed format, in argument order.
pub fn specs(pieces: &[Piece]) -> impl Iterator<Item = &Spec> {
    pieces.iter().filter_map(|p| match p {
        Piece::Spec(s) => Some(s),
        Piece::Literal(_) => None,
    })
}

/// A scanned token before `%%` and bad specs are resolved.
enum Token {
    Text(String),
    Percent,
    Spec(Spec),
    Bad { text: String, error: FormatError },
}

/// Parses a `printf` format string into literal text and conversion specs.
pub fn parse_format(fmt: &str) -> Result<Vec<Piece>, FormatError> {
    let tokens = scan(fmt);
    let last_spec = tokens.iter().rposition(|t| matches!(t, Token::Spec(_)));
    let mut pieces: Vec<Piece> = Vec::new();
    for (i, token) in tokens.into_iter().enumerate() {
        let before_last = last_spec.is_some_and(|last| i < last);
        let text = match token {
            Token::Spec(spec) => {
                pieces.push(Piece::Spec(spec));
                continue;
            }
            Token::Text(text) => text,
            Token::Percent if before_last => "%".to_string(),
            Token::Percent => "%%".to_string(),
            Token::Bad { error, .. } if before_last => return Err(error),
            Token::Bad { text, .. } => text,
        };
        match pieces.last_mut() {
            Some(Piece::Literal(prev)) => prev.push_str(&text),
            _ => pieces.push(Piece::Literal(text)),
        }
    }
    Ok(pieces)
}

fn scan(fmt: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut rest = fmt;
    while !rest.is_empty() {
        let offset = fmt.len() - rest.len();
        let Some(text_len) = rest.find('%') else {
            tokens.push(Token::Text(rest.to_string()));
            break;
        };
        if text_len > 0 {
            tokens.push(Token::Text(rest[..text_len].to_string()));
            rest = &rest[text_len..];
            continue;
        }
        let (token, len) = scan_percent(rest, offset);
        tokens.push(token);
        rest = &rest[len..];
    }
    tokens
}

/// Scans the `%...` at the start of `s` (found at `offset`); returns the token
/// and how many bytes it spans.
fn scan_percent(s: &str, offset: usize) -> (Token, usize) {
    if s.starts_with("%%") {
        return (Token::Percent, 2);
    }
    let mut cur = Cursor {
        s,
        pos: 1,
        len_start: 1,
    };
    let flags = cur.flags();
    let width = cur.number();
    let precision = cur.eat(b'.').then(|| cur.number().unwrap_or(0));
    let length = cur.length();
    let conv_at = cur.pos;
    let conv = cur.next_char();
    let spec = |conversion| Spec {
        offset,
        flags,
        width,
        precision,
        length,
        conversion,
    };
    let result = match conv {
        None => Err(FormatError::MissingConversion { offset }),
        Some(c) => conversion(c)
            .ok_or(FormatError::UnknownConversion { offset, found: c })
            .and_then(|conversion| check_length(spec(conversion), c, conv_at > cur.len_start)),
    };
    match result {
        Ok(spec) => (Token::Spec(spec), cur.pos),
        Err(error) => {
            let text = s[..cur.pos].to_string();
            (Token::Bad { text, error }, cur.pos)
        }
    }
}

/// `%c` and `%s` take no length modifier (bpftrace 0.17 rejects `%lc`, `%ls`).
fn check_length(spec: Spec, c: char, has_length: bool) -> Result<Spec, FormatError> {
    let text_like = matches!(spec.conversion, Conversion::Char | Conversion::Str);
    if has_length && text_like {
        return Err(FormatError::LengthNotAllowed {
            offset: spec.offset,
            conversion: c,
        });
    }
    Ok(spec)
}

fn conversion(c: char) -> Option<Conversion> {
    Some(match c {
        'd' | 'i' => Conversion::Signed,
        'u' => Conversion::Unsigned,
        'o' => Conversion::Octal,
        'x' => Conversion::Hex,
        'X' => Conversion::HexUpper,
        'c' => Conversion::Char,
        's' => Conversion::Str,
        'p' => Conversion::Pointer,
        _ => return None,
    })
}

/// Reads the parts of one conversion spec.
struct Cursor<'a> {
    s: &'a str,
    pos: usize,
    /// Where the length modifier starts (to tell whether there is one).
    len_start: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.pos).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        self.pos += usize::from(hit);
        hit
    }

    fn flags(&mut self) -> Flags {
        let mut f = Flags::default();
        loop {
            match self.peek() {
                Some(b'-') => f.left = true,
                Some(b'0') => f.zero = true,
                Some(b'+') => f.plus = true,
                Some(b' ') => f.space = true,
                Some(b'#') => f.alt = true,
                _ => return f,
            }
            self.pos += 1;
        }
    }

    /// Decimal digits, saturating (absurd widths are clamped when rendering).
    fn number(&mut self) -> Option<usize> {
        let mut n: Option<usize> = None;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            n = Some(
                n.unwrap_or(0)
                    .saturating_mul(10)
                    .saturating_add(usize::from(d - b'0')),
            );
            self.pos += 1;
        }
        n
    }

    fn length(&mut self) -> Length {
        self.len_start = self.pos;
        for (text, len) in LENGTHS {
            if self.s[self.pos..].starts_with(text) {
                self.pos += text.len();
                return len;
            }
        }
        Length::Int
    }

    fn next_char(&mut self) -> Option<char> {
        let c = self.s[self.pos..].chars().next()?;
        self.pos += c.len_utf8();
        Some(c)
    }
}

/// Length modifiers, longest first.
const LENGTHS: [(&str, Length); 7] = [
    ("hh", Length::Char),
    ("h", Length::Short),
    ("ll", Length::Long),
    ("l", Length::Long),
    ("z", Length::Long),
    ("j", Length::Long),
    ("t", Length::Long),
];

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
        write_value(&mut text, v, resolver);
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
            write_value(&mut text, v, resolver);
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
    use crate::output::value::RawIds;

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

    /// Bad specs before a conversion are errors naming the offset and the problem.
    #[test]
    fn rejects_bad_specs() {
        assert_eq!(
            parse_format("ab%f %d"),
            Err(FormatError::UnknownConversion {
                offset: 2,
                found: 'f'
            })
        );
        assert_eq!(
            parse_format("%ls %d"),
            Err(FormatError::LengthNotAllowed {
                offset: 0,
                conversion: 's'
            })
        );
        let tokens = scan("x%-5");
        assert!(matches!(
            &tokens[1],
            Token::Bad {
                error: FormatError::MissingConversion { offset: 1 },
                ..
            }
        ));
    }

    /// Specs record offset, flags, width, precision, length and argument kind.
    #[test]
    fn parses_spec_fields() {
        let pieces = parse_format("id=%-08.3llx %s").unwrap();
        let all: Vec<_> = specs(&pieces).collect();
        assert_eq!(all.len(), 2);
        let s0 = all[0];
        assert_eq!((s0.offset, s0.width, s0.precision), (3, Some(8), Some(3)));
        assert!(s0.flags.left && s0.flags.zero);
        assert_eq!(
            (s0.length, s0.conversion, s0.arg_kind()),
            (Length::Long, Conversion::Hex, ArgKind::Integer)
        );
        assert_eq!(all[1].arg_kind(), ArgKind::Text);
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
}
