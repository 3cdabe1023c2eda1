//! Integer constant expressions, as `#if` and C enum values write them:
//! tokens (macros already expanded) → a 64-bit value, with C's rules for
//! signed and unsigned arithmetic. Identifiers are looked up through a
//! callback: `#if` makes unknown names 0, enum definitions name earlier
//! enumerators.

use super::lex::TokKind;
use super::macros::PpTok;

/// A value: 64 bits, unsigned when C's usual conversions say so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Num {
    pub bits: u64,
    pub unsigned: bool,
}

impl Num {
    fn signed(v: i64) -> Num {
        Num {
            bits: v as u64,
            unsigned: false,
        }
    }

    fn truth(self) -> bool {
        self.bits != 0
    }

    pub fn as_i64(self) -> i64 {
        self.bits as i64
    }
}

/// What an identifier is worth; `Err` with a message to fail.
pub type Lookup<'a> = dyn Fn(&str) -> Result<i64, String> + 'a;

/// Evaluates `tokens` as one constant expression.
pub fn evaluate(tokens: &[PpTok], lookup: &Lookup) -> Result<Num, String> {
    if tokens.is_empty() {
        return Err("expected an expression".into());
    }
    let mut parser = Parser {
        tokens,
        at: 0,
        lookup,
    };
    let value = parser.conditional()?;
    match parser.peek() {
        None => Ok(value),
        Some(t) => Err(format!("unexpected `{}` in the expression", t.text)),
    }
}

struct Parser<'a> {
    tokens: &'a [PpTok],
    at: usize,
    lookup: &'a Lookup<'a>,
}

/// Binary operators by binding strength (higher binds tighter).
fn precedence(op: &str) -> Option<u8> {
    Some(match op {
        "||" => 1,
        "&&" => 2,
        "|" => 3,
        "^" => 4,
        "&" => 5,
        "==" | "!=" => 6,
        "<" | ">" | "<=" | ">=" => 7,
        "<<" | ">>" => 8,
        "+" | "-" => 9,
        "*" | "/" | "%" => 10,
        _ => return None,
    })
}

impl Parser<'_> {
    fn peek(&self) -> Option<&PpTok> {
        self.tokens.get(self.at)
    }

    fn peek_punct(&self) -> Option<&str> {
        self.peek()
            .filter(|t| t.kind == TokKind::Punct)
            .map(|t| &*t.text)
    }

    fn expect(&mut self, punct: &str) -> Result<(), String> {
        match self.peek_punct() {
            Some(p) if p == punct => {
                self.at += 1;
                Ok(())
            }
            _ => Err(format!(
                "expected `{punct}`{}",
                self.peek()
                    .map_or(" at the end".into(), |t| format!(", found `{}`", t.text))
            )),
        }
    }

    fn conditional(&mut self) -> Result<Num, String> {
        let cond = self.binary(1)?;
        if self.peek_punct() != Some("?") {
            return Ok(cond);
        }
        self.at += 1;
        let then = self.conditional()?;
        self.expect(":")?;
        let otherwise = self.conditional()?;
        let unsigned = then.unsigned || otherwise.unsigned;
        let chosen = if cond.truth() { then } else { otherwise };
        Ok(Num {
            bits: chosen.bits,
            unsigned,
        })
    }

    /// Operators binding at least as tightly as `min`, left to right.
    fn binary(&mut self, min: u8) -> Result<Num, String> {
        let mut lhs = self.unary()?;
        while let Some(op) = self.peek_punct().map(str::to_owned)
            && let Some(level) = precedence(&op).filter(|&l| l >= min)
        {
            self.at += 1;
            let rhs = self.binary(level + 1)?;
            lhs = apply(&op, lhs, rhs)?;
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Num, String> {
        let Some(token) = self.peek().cloned() else {
            return Err("the expression ends too early".into());
        };
        self.at += 1;
        match (token.kind, &*token.text) {
            (TokKind::Punct, "(") => {
                let value = self.conditional()?;
                self.expect(")")?;
                Ok(value)
            }
            (TokKind::Punct, "-") => {
                let v = self.unary()?;
                Ok(Num {
                    bits: v.bits.wrapping_neg(),
                    ..v
                })
            }
            (TokKind::Punct, "+") => self.unary(),
            (TokKind::Punct, "~") => {
                let v = self.unary()?;
                Ok(Num { bits: !v.bits, ..v })
            }
            (TokKind::Punct, "!") => Ok(Num::signed(i64::from(!self.unary()?.truth()))),
            (TokKind::Number, text) => number(text),
            (TokKind::Char, text) => char_value(text),
            (TokKind::Ident, name) => (self.lookup)(name).map(Num::signed),
            _ => Err(format!("`{}` cannot start an expression", token.text)),
        }
    }
}

fn apply(op: &str, a: Num, b: Num) -> Result<Num, String> {
    let unsigned = a.unsigned || b.unsigned;
    let truth = |v: bool| Ok(Num::signed(i64::from(v)));
    let (x, y) = (a.bits, b.bits);
    let (sx, sy) = (x as i64, y as i64);
    let value = |bits: u64| Ok(Num { bits, unsigned });
    match op {
        "||" => truth(a.truth() || b.truth()),
        "&&" => truth(a.truth() && b.truth()),
        "|" => value(x | y),
        "^" => value(x ^ y),
        "&" => value(x & y),
        "==" => truth(x == y),
        "!=" => truth(x != y),
        "<" => truth(if unsigned { x < y } else { sx < sy }),
        ">" => truth(if unsigned { x > y } else { sx > sy }),
        "<=" => truth(if unsigned { x <= y } else { sx <= sy }),
        ">=" => truth(if unsigned { x >= y } else { sx >= sy }),
        // The shift's result has the left operand's type.
        "<<" => Ok(Num {
            bits: x.wrapping_shl(y as u32),
            unsigned: a.unsigned,
        }),
        ">>" if a.unsigned => Ok(Num {
            bits: x.wrapping_shr(y as u32),
            unsigned: true,
        }),
        ">>" => Ok(Num::signed(sx.wrapping_shr(y as u32))),
        "+" => value(x.wrapping_add(y)),
        "-" => value(x.wrapping_sub(y)),
        "*" => value(x.wrapping_mul(y)),
        "/" | "%" if y == 0 => Err("division by zero".into()),
        "/" if unsigned => value(x / y),
        "%" if unsigned => value(x % y),
        "/" => value(sx.wrapping_div(sy) as u64),
        "%" => value(sx.wrapping_rem(sy) as u64),
        _ => Err(format!("`{op}` is not an operator of constant expressions")),
    }
}

/// A C integer literal: decimal, `0x`, `0b`, octal, with `u`/`l` suffixes.
pub fn number(text: &str) -> Result<Num, String> {
    let lower = text.to_ascii_lowercase();
    let digits = lower.trim_end_matches(['u', 'l']);
    let unsigned = lower[digits.len()..].contains('u');
    let (body, radix) = if let Some(hex) = digits.strip_prefix("0x") {
        (hex, 16)
    } else if let Some(bin) = digits.strip_prefix("0b") {
        (bin, 2)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (&digits[1..], 8)
    } else {
        (digits, 10)
    };
    let bits = u64::from_str_radix(&body.replace('\'', ""), radix)
        .map_err(|_| format!("`{text}` is not an integer"))?;
    // Literals without `u` are signed unless they only fit unsigned.
    let unsigned = unsigned || bits > i64::MAX as u64;
    Ok(Num { bits, unsigned })
}

/// `'a'`, `'\n'`, `'\x41'`, `'\101'`.
fn char_value(text: &str) -> Result<Num, String> {
    let inner = &text[1..text.len() - 1];
    let value = match inner.strip_prefix('\\') {
        None => inner.chars().next().map(|c| c as i64),
        Some(escape) => match escape.as_bytes().first() {
            Some(b'n') => Some(10),
            Some(b't') => Some(9),
            Some(b'r') => Some(13),
            Some(b'0'..=b'7') => i64::from_str_radix(escape, 8).ok(),
            Some(b'x') => i64::from_str_radix(&escape[1..], 16).ok(),
            Some(&c) => Some(i64::from(c)),
            None => None,
        },
    };
    value
        .map(Num::signed)
        .ok_or_else(|| format!("`{text}` is not a character constant"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::preprocess::macros::tokens_of;

    fn eval(text: &str) -> Result<i64, String> {
        let unknown_is_zero = |_: &str| Ok(0);
        evaluate(&tokens_of(text, 0, None), &unknown_is_zero).map(Num::as_i64)
    }

    /// C precedence, short-circuit truth values and the conditional operator.
    #[test]
    fn evaluates_with_c_precedence() {
        assert_eq!(eval("1 + 2 * 3 << 1"), Ok(14));
        assert_eq!(eval("(1 || 0) && !0 ? 10 : 20"), Ok(10));
        assert_eq!(eval("-1 < 0"), Ok(1));
        assert_eq!(eval("-1 < 0u"), Ok(0));
        assert_eq!(eval("0x10 | 010 | 0b1 | 'A'"), Ok(16 | 8 | 1 | 65));
        assert_eq!(eval("201710L >= 199901L"), Ok(1));
        assert_eq!(eval("UNKNOWN + 4"), Ok(4));
        assert_eq!(eval("~0UL >> 63"), Ok(1));
        assert_eq!(eval("-8 >> 1"), Ok(-4));
    }

    /// Malformed expressions say what is wrong.
    #[test]
    fn reports_errors() {
        assert_eq!(eval("1 / 0"), Err("division by zero".into()));
        assert_eq!(eval("(1"), Err("expected `)` at the end".into()));
        assert_eq!(eval("1 2"), Err("unexpected `2` in the expression".into()));
        assert_eq!(eval(""), Err("expected an expression".into()));
    }
}
