//! Positional parameters: `$1`..`$N` and `$#` are replaced by the command
//! line's values before checking, as bpftrace does: numbers (C syntax: `0x`
//! hex, leading `0` octal, optional sign) become integers, anything else a
//! string; a missing parameter is `0`. Inside `str()` a parameter is always its
//! text (`str($1)` of `1` is `"1"`, missing is `""`), and `str($1 + N)` skips
//! N bytes of it. In attach points (`interval:ms:$1`) `$N` is the text.

use crate::frontend::ast::{BinOp, Block, Expr, ExprKind, ProbeSpec, Script, Span, StmtKind, UnOp};

/// Replace every positional parameter in `script` with its value from `params`.
pub fn substitute(script: &mut Script, params: &[String]) {
    for span in &mut script.spans {
        for end in [&mut span.start, &mut span.end] {
            end.specs.iter_mut().for_each(|s| attach_point(s, params));
        }
    }
    for probe in &mut script.probes {
        probe.specs.iter_mut().for_each(|s| attach_point(s, params));
        if let Some(predicate) = &mut probe.predicate {
            expr(predicate, params);
        }
        block(&mut probe.body, params);
    }
}

fn block(block: &mut Block, params: &[String]) {
    for stmt in &mut block.stmts {
        match &mut stmt.kind {
            StmtKind::Expr(e) => expr(e, params),
            StmtKind::Assign { target, value, .. } => {
                expr(target, params);
                expr(value, params);
            }
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                expr(cond, params);
                self::block(then, params);
                if let Some(otherwise) = otherwise {
                    self::block(otherwise, params);
                }
            }
            StmtKind::Unroll { count: cond, body } | StmtKind::While { cond, body } => {
                expr(cond, params);
                self::block(body, params);
            }
            StmtKind::Record { record, .. } => {
                record
                    .items
                    .iter_mut()
                    .for_each(|i| expr(&mut i.value, params));
            }
            StmtKind::Break | StmtKind::Continue | StmtKind::Return => {}
        }
    }
}

/// `$N` in the provider and parts of an attach point becomes the parameter's text.
fn attach_point(spec: &mut ProbeSpec, params: &[String]) {
    spec.provider = replace_in_text(&spec.provider, params);
    for part in &mut spec.parts {
        *part = replace_in_text(part, params);
    }
}

fn replace_in_text(text: &str, params: &[String]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let digits = rest[at + 1..]
            .find(|c: char| !c.is_ascii_digit())
            .map_or(rest.len() - at - 1, |end| end);
        match rest[at + 1..at + 1 + digits].parse::<u32>() {
            Ok(n) => out.push_str(param(params, n).unwrap_or("")),
            Err(_) => out.push_str(&rest[at..at + 1 + digits]),
        }
        rest = &rest[at + 1 + digits..];
    }
    out.push_str(rest);
    out
}

fn expr(e: &mut Expr, params: &[String]) {
    match &mut e.kind {
        ExprKind::Positional(n) => e.kind = value(param(params, *n), e.span),
        ExprKind::PositionalCount => e.kind = ExprKind::Int(params.len() as u64),
        ExprKind::Call { name, args } if name == "str" => {
            if let Some(first) = args.first_mut()
                && let Some(text) = text_argument(first, params)
            {
                first.kind = ExprKind::Str(text);
            }
            args.iter_mut().for_each(|x| expr(x, params));
        }
        _ => e.children_mut().into_iter().for_each(|x| expr(x, params)),
    }
}

/// The parameter `$n` (1-based), if given.
fn param(params: &[String], n: u32) -> Option<&str> {
    let index = (n as usize).checked_sub(1)?;
    params.get(index).map(String::as_str)
}

/// A parameter outside `str()`: an integer when it reads as one, else a string.
fn value(text: Option<&str>, span: Span) -> ExprKind {
    let Some(text) = text else {
        return ExprKind::Int(0);
    };
    match parse_int(text) {
        Some((false, magnitude)) => ExprKind::Int(magnitude),
        Some((true, magnitude)) => ExprKind::Unary {
            op: UnOp::Neg,
            expr: Box::new(Expr {
                kind: ExprKind::Int(magnitude),
                span,
            }),
        },
        None => ExprKind::Str(text.to_string()),
    }
}

/// The text `str()` reads for `$n` or `$n + k` (the literal from byte k on).
fn text_argument(arg: &Expr, params: &[String]) -> Option<String> {
    let (n, skip) = match &arg.kind {
        ExprKind::Positional(n) => (*n, 0),
        ExprKind::Binary {
            op: BinOp::Add,
            lhs,
            rhs,
        } => match (&lhs.kind, &rhs.kind) {
            (ExprKind::Positional(n), ExprKind::Int(k)) => (*n, *k),
            _ => return None,
        },
        _ => return None,
    };
    let text = param(params, n).unwrap_or("");
    let skip = usize::try_from(skip).unwrap_or(usize::MAX).min(text.len());
    Some(text.get(skip..).unwrap_or("").to_string())
}

/// C's `strtoll(text, &end, 0)` over the whole text: sign, then `0x` hex,
/// leading `0` octal or decimal. Returns (negative, magnitude).
fn parse_int(text: &str) -> Option<(bool, u64)> {
    let (negative, unsigned) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (digits, radix) = if let Some(hex) = unsigned
        .strip_prefix("0x")
        .or_else(|| unsigned.strip_prefix("0X"))
    {
        (hex, 16)
    } else if unsigned.len() > 1 && unsigned.starts_with('0') {
        (&unsigned[1..], 8)
    } else {
        (unsigned, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    // strtoll's range: -2^63 ..= 2^63 - 1.
    let limit = if negative { 1 << 63 } else { i64::MAX as u64 };
    (magnitude <= limit).then_some((negative, magnitude))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::parse::parse;

    /// Numeric parameters become integers, others strings, `$#` the count.
    #[test]
    fn replaces_parameters() {
        let mut script = parse(r#"BEGIN { printf("%d %s %d\n", $1, $2, $#); }"#, "t").unwrap();
        substitute(&mut script, &["42".into(), "abc".into()]);
        let StmtKind::Expr(Expr {
            kind: ExprKind::Call { args, .. },
            ..
        }) = &script.probes[0].body.stmts[0].kind
        else {
            panic!("printf call expected");
        };
        assert_eq!(args[1].kind, ExprKind::Int(42));
        assert_eq!(args[2].kind, ExprKind::Str("abc".into()));
        assert_eq!(args[3].kind, ExprKind::Int(2));
    }

    /// `$0` names no parameter: it reads 0 like a missing one (a fuzzer found
    /// it overflowing the index).
    #[test]
    fn dollar_zero_is_missing() {
        let mut script = parse(r#"BEGIN { printf("%d", $0); }"#, "t").unwrap();
        substitute(&mut script, &["42".into()]);
        let StmtKind::Expr(Expr {
            kind: ExprKind::Call { args, .. },
            ..
        }) = &script.probes[0].body.stmts[0].kind
        else {
            panic!("printf call expected");
        };
        assert_eq!(args[1].kind, ExprKind::Int(0));
    }

    /// Parameters follow strtoll with base 0: octal, hex, sign; junk is text.
    #[test]
    fn numbers_read_as_c_does() {
        assert_eq!(parse_int("0775"), Some((false, 0o775)));
        assert_eq!(parse_int("0X1f"), Some((false, 31)));
        assert_eq!(parse_int("-12"), Some((true, 12)));
        assert_eq!(parse_int("0"), Some((false, 0)));
        assert_eq!(parse_int("09"), None);
        assert_eq!(parse_int("12ab"), None);
        assert_eq!(parse_int("9223372036854775808"), None);
    }

    /// `str($N)` is the parameter's text, `str($N + k)` skips k bytes, a
    /// missing parameter is 0 outside `str()` and empty inside it.
    #[test]
    fn str_reads_the_text() {
        let text = r#"BEGIN { printf("%s%s%d%s", str($1), str($2 + 2), $3, str($3)); }"#;
        let mut script = parse(text, "t").unwrap();
        substitute(&mut script, &["12".into(), "hello".into()]);
        let StmtKind::Expr(Expr {
            kind: ExprKind::Call { args, .. },
            ..
        }) = &script.probes[0].body.stmts[0].kind
        else {
            panic!("printf call expected");
        };
        let str_arg = |i: usize| match &args[i].kind {
            ExprKind::Call { args, .. } => args[0].kind.clone(),
            other => panic!("str() expected, got {other:?}"),
        };
        assert_eq!(str_arg(1), ExprKind::Str("12".into()));
        assert_eq!(str_arg(2), ExprKind::Str("llo".into()));
        assert_eq!(args[3].kind, ExprKind::Int(0));
        assert_eq!(str_arg(4), ExprKind::Str(String::new()));
    }

    /// `$N` in an attach point becomes the parameter's text.
    #[test]
    fn attach_points_take_the_text() {
        let mut script = parse("interval:ms:$1, BEG$2 { }", "t").unwrap();
        substitute(&mut script, &["100".into(), "IN".into()]);
        let specs = &script.probes[0].specs;
        assert_eq!(specs[0].to_string(), "interval:ms:100");
        assert_eq!(specs[1].to_string(), "BEGIN");
    }
}
