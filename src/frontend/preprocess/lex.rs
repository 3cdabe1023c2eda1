//! Preprocessor tokens: a script or header → C preprocessing tokens with
//! their byte offsets. Comments and `\`-newline splices count as spaces;
//! line ends are tokens, since directives end there. Script words such as
//! `$1`, `@map` and `$#` are single tokens, so macros never expand inside
//! them.

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokKind {
    Ident,
    /// A preprocessing number: `42`, `0x1fUL`, `1e5`, `.5`.
    Number,
    /// `"..."`, possibly unterminated at the line end.
    Str,
    /// `'x'`
    Char,
    /// An operator or punctuator: `->`, `(`, `##`.
    Punct,
    /// A script word starting with `$` or `@`.
    Sigil,
    /// The end of a line (not inside a comment or after a `\` splice).
    Newline,
    /// Any other character.
    Other,
}

/// A token of some text, by byte offsets into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token {
    pub kind: TokKind,
    pub start: usize,
    pub end: usize,
    /// Whitespace or a comment comes before it.
    pub space_before: bool,
}

/// Operators, longest first so the longest match wins.
const PUNCTS: [&str; 23] = [
    ">>=", "<<=", "...", "->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "+=",
    "-=", "*=", "/=", "%=", "&=", "|=", "^=", "##",
];

/// Every token of `text`, line ends included.
pub fn lex(text: &str) -> Vec<Token> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut at = 0;
    let mut space = false;
    while at < bytes.len() {
        let (kind, end) = match bytes[at] {
            b'\n' => (TokKind::Newline, at + 1),
            b' ' | b'\t' | b'\r' | b'\x0b' | b'\x0c' => {
                at += 1;
                space = true;
                continue;
            }
            b'\\' if bytes.get(at + 1) == Some(&b'\n') => {
                at += 2;
                space = true;
                continue;
            }
            b'\\' if bytes[at + 1..].starts_with(b"\r\n") => {
                at += 3;
                space = true;
                continue;
            }
            b'/' if bytes.get(at + 1) == Some(&b'/') => {
                at = line_comment_end(bytes, at);
                space = true;
                continue;
            }
            b'/' if bytes.get(at + 1) == Some(&b'*') => {
                at = block_comment_end(bytes, at);
                space = true;
                continue;
            }
            b'"' => (
                TokKind::Str,
                quoted_end(bytes, at, b'"').unwrap_or_else(|| line_end(bytes, at)),
            ),
            b'\'' => match quoted_end(bytes, at, b'\'') {
                Some(end) => (TokKind::Char, end),
                None => (TokKind::Punct, at + 1),
            },
            b'$' | b'@' => (TokKind::Sigil, sigil_end(bytes, at)),
            c if c.is_ascii_alphabetic() || c == b'_' => (TokKind::Ident, word_end(bytes, at)),
            c if c.is_ascii_digit() => (TokKind::Number, number_end(bytes, at)),
            b'.' if bytes.get(at + 1).is_some_and(u8::is_ascii_digit) => {
                (TokKind::Number, number_end(bytes, at))
            }
            c if c.is_ascii() => (TokKind::Punct, punct_end(bytes, at)),
            _ => (TokKind::Other, char_end(text, at)),
        };
        tokens.push(Token {
            kind,
            start: at,
            end,
            space_before: space,
        });
        space = false;
        at = end;
    }
    tokens
}

fn line_end(bytes: &[u8], at: usize) -> usize {
    bytes[at..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(bytes.len(), |n| at + n)
}

/// The end of a `//` comment: its line's end, following `\` splices.
fn line_comment_end(bytes: &[u8], mut at: usize) -> usize {
    while at < bytes.len() && bytes[at] != b'\n' {
        at += if bytes[at] == b'\\' && bytes.get(at + 1) == Some(&b'\n') {
            2
        } else {
            1
        };
    }
    at
}

/// The end of a `/* */` comment; an unterminated one runs to the end (the
/// parser's own scan reports it).
fn block_comment_end(bytes: &[u8], at: usize) -> usize {
    bytes[at + 2..]
        .windows(2)
        .position(|pair| pair == b"*/")
        .map_or(bytes.len(), |n| at + 2 + n + 2)
}

/// The end of a literal quoted with `quote` on its line, or `None`.
fn quoted_end(bytes: &[u8], start: usize, quote: u8) -> Option<usize> {
    let mut at = start + 1;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' if bytes.get(at + 1).is_some_and(|&b| b != b'\n') => at += 2,
            b'\n' => return None,
            c if c == quote => return Some(at + 1),
            _ => at += 1,
        }
    }
    None
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn word_end(bytes: &[u8], at: usize) -> usize {
    at + bytes[at..].iter().take_while(|&&b| is_word(b)).count()
}

/// `$name`, `$1`, `$#`, `@name`, `@`.
fn sigil_end(bytes: &[u8], at: usize) -> usize {
    if bytes[at] == b'$' && bytes.get(at + 1) == Some(&b'#') {
        return at + 2;
    }
    word_end(bytes, at + 1)
}

fn number_end(bytes: &[u8], mut at: usize) -> usize {
    at += 1;
    while at < bytes.len() {
        let b = bytes[at];
        let exponent =
            matches!(b, b'+' | b'-') && matches!(bytes[at - 1], b'e' | b'E' | b'p' | b'P');
        if is_word(b) || b == b'.' || exponent {
            at += 1;
        } else {
            break;
        }
    }
    at
}

fn punct_end(bytes: &[u8], at: usize) -> usize {
    PUNCTS
        .iter()
        .find(|p| bytes[at..].starts_with(p.as_bytes()))
        .map_or(at + 1, |p| at + p.len())
}

fn char_end(text: &str, at: usize) -> usize {
    text[at..]
        .chars()
        .next()
        .map_or(at + 1, |c| at + c.len_utf8())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(TokKind, &str)> {
        lex(text)
            .into_iter()
            .map(|t| (t.kind, &text[t.start..t.end]))
            .collect()
    }

    /// Script words, operators and literals are single tokens; comments vanish.
    #[test]
    fn splits_script_text() {
        use TokKind::*;
        assert_eq!(
            kinds("@m[$1] = a->b /* c */ + 0x1fUL; // x\n\"s\\\"t\" 'c'"),
            vec![
                (Sigil, "@m"),
                (Punct, "["),
                (Sigil, "$1"),
                (Punct, "]"),
                (Punct, "="),
                (Ident, "a"),
                (Punct, "->"),
                (Ident, "b"),
                (Punct, "+"),
                (Number, "0x1fUL"),
                (Punct, ";"),
                (Newline, "\n"),
                (Str, "\"s\\\"t\""),
                (Char, "'c'"),
            ]
        );
    }

    /// A `\` splice and a multi-line comment join lines: no line end between.
    #[test]
    fn splices_and_comments_join_lines() {
        let tokens = kinds("#define A \\\n 1 /* x\ny */ 2\nB");
        let newlines = tokens.iter().filter(|t| t.0 == TokKind::Newline).count();
        assert_eq!(newlines, 1, "{tokens:?}");
        assert!(lex("a  b")[1].space_before);
        assert!(!lex("a(b")[1].space_before);
    }

    /// A lone quote is punctuation, an unterminated string ends at its line.
    #[test]
    fn tolerates_unterminated_literals() {
        assert_eq!(kinds("it's")[1], (TokKind::Punct, "'"));
        assert_eq!(kinds("\"abc\nx")[0], (TokKind::Str, "\"abc"));
    }
}
