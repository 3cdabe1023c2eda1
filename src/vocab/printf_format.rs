//! `printf` format strings, parsed once: the checker validates argument
//! count and kinds with the specs, and user space renders the pieces
//! (`output::printf`). The rules follow bpftrace 0.17, which hands each
//! conversion to C `snprintf` together with the text before it and copies
//! the text after the last conversion verbatim. Hence:
//! - `%%` before (or between) conversions prints `%`, but after the last
//!   conversion, or in a format without any, it prints `%%`;
//! - a `%` that starts no valid conversion is literal text after the last
//!   conversion (bpftrace copies it), and an error before it (bpftrace would hand
//!   it to `snprintf` with garbage arguments).
//!
//! Beyond bpftrace 0.17 we accept `%i` and the `+`, space and `#` flags with their
//! C meaning (bpftrace rejects or garbles them).

use thiserror::Error;

/// A piece of a parsed format string.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Piece {
    /// Text printed as is (with `%%` already resolved as bpftrace prints it).
    Literal(String),
    Spec(Spec),
}

/// One conversion specification, e.g. `%-08.3lx`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Spec {
    /// Byte offset of the `%` in the format string.
    pub offset: usize,
    pub flags: Flags,
    pub width: Option<usize>,
    pub precision: Option<usize>,
    pub length: Length,
    pub conversion: Conversion,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// How many bits of the argument the conversion reads.
    pub fn bits(self) -> u32 {
        match self {
            Length::Char => 8,
            Length::Short => 16,
            Length::Int => 32,
            Length::Long => 64,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// `r`, `rx`, `rh`: the bytes of a `buf()`.
    Buffer(BufferStyle),
}

/// How `buf()` bytes print: `%r` (and `print`, maps) [`BufferStyle::Escaped`],
/// `%rx` [`BufferStyle::Hex`], `%rh` [`BufferStyle::Spaced`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BufferStyle {
    /// Printable ASCII (32..=126) as is, other bytes `\xNN`.
    Escaped,
    /// Every byte `\xNN`.
    Hex,
    /// Every byte `NN`, separated by spaces.
    Spaced,
}

/// What kind of argument a conversion consumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// Any integer (`d i u x X o c p`).
    Integer,
    /// A string, or anything printed as text: stacks, symbols, probe names (`s`).
    Text,
    /// A `buf()` (`r`, `rx`, `rh`).
    Buffer,
}

impl Spec {
    /// The argument this spec expects.
    pub fn arg_kind(&self) -> ArgKind {
        match self.conversion {
            Conversion::Str => ArgKind::Text,
            Conversion::Buffer(_) => ArgKind::Buffer,
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
    let buffer_style = match (conv, cur.peek()) {
        (Some('r'), Some(b'x')) => Some(BufferStyle::Hex),
        (Some('r'), Some(b'h')) => Some(BufferStyle::Spaced),
        (Some('r'), _) => Some(BufferStyle::Escaped),
        _ => None,
    };
    if matches!(buffer_style, Some(BufferStyle::Hex | BufferStyle::Spaced)) {
        cur.pos += 1;
    }
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
        Some(c) => buffer_style
            .map(Conversion::Buffer)
            .or_else(|| conversion(c))
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

/// `%c`, `%s` and `%r` take no length modifier (bpftrace 0.17 rejects `%lc`, `%ls`).
fn check_length(spec: Spec, c: char, has_length: bool) -> Result<Spec, FormatError> {
    let text_like = matches!(
        spec.conversion,
        Conversion::Char | Conversion::Str | Conversion::Buffer(_)
    );
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// `%r`, `%rx`, `%rh` take a buffer; `%-10rh` keeps its width.
    #[test]
    fn parses_buffer_conversions() {
        let pieces = parse_format("%r|%rx|%-10rh|%rq").unwrap();
        let all: Vec<_> = specs(&pieces).map(|s| s.conversion).collect();
        assert_eq!(
            all,
            [
                Conversion::Buffer(BufferStyle::Escaped),
                Conversion::Buffer(BufferStyle::Hex),
                Conversion::Buffer(BufferStyle::Spaced),
                Conversion::Buffer(BufferStyle::Escaped),
            ]
        );
        assert_eq!(specs(&pieces).nth(2).unwrap().width, Some(10));
        assert_eq!(pieces.last(), Some(&Piece::Literal("q".into())));
        assert!(specs(&pieces).all(|s| s.arg_kind() == ArgKind::Buffer));
    }
}
