//! Expression lowering: flat operator chains from the grammar → AST expressions
//! with bpftrace/C precedence, plus literal decoding (integers, string escapes).

use super::{Builder, Built, Pair, Rule, only_child, significant, span_of};
use crate::frontend::ast::{BinOp, Expr, ExprKind, Span, TypeName, UnOp};
use crate::frontend::diag::ScriptError;

impl Builder {
    /// `binary [? expr : expr]`
    pub(super) fn expr(&mut self, pair: Pair) -> Built<Expr> {
        let span = span_of(&pair);
        self.enter(span, 1)?;
        let mut parts = significant(pair);
        let cond = self.binary(parts.next().expect("grammar: expr starts with a chain"))?;
        let result = match (parts.next(), parts.next()) {
            (Some(then), Some(otherwise)) => Expr {
                kind: ExprKind::Ternary {
                    cond: Box::new(cond),
                    then: Box::new(self.expr(then)?),
                    otherwise: Box::new(self.expr(otherwise)?),
                },
                span,
            },
            _ => cond,
        };
        self.leave(1);
        Ok(result)
    }

    /// `operand (op operand)*`, folded by precedence with an operator stack so
    /// long chains need no recursion.
    fn binary(&mut self, pair: Pair) -> Built<Expr> {
        let span = span_of(&pair);
        let items: Vec<Pair> = pair.into_inner().collect();
        let levels = items.len() / 2;
        self.enter(span, levels)?;
        let mut operands = Vec::with_capacity(levels + 1);
        let mut ops: Vec<BinOp> = Vec::with_capacity(levels);
        for item in items {
            if !matches!(
                item.as_rule(),
                Rule::infix_op | Rule::record_infix | Rule::pred_infix
            ) {
                operands.push(self.operand(item)?);
                continue;
            }
            let op = binary_op(item.as_str());
            while let Some(&top) = ops.last()
                && precedence(top) >= precedence(op)
            {
                reduce(&mut operands, &mut ops);
            }
            ops.push(op);
        }
        while !ops.is_empty() {
            reduce(&mut operands, &mut ops);
        }
        self.leave(levels);
        Ok(operands.pop().expect("grammar: a chain has an operand"))
    }

    /// `prefix* primary postfix*`: postfix operators bind tighter than prefix ones.
    pub(super) fn operand(&mut self, pair: Pair) -> Built<Expr> {
        let span = span_of(&pair);
        let items: Vec<Pair> = pair.into_inner().collect();
        let levels = items.len() - 1;
        self.enter(span, levels)?;
        let at = items
            .iter()
            .position(|item| !matches!(item.as_rule(), Rule::cast | Rule::unary_op))
            .expect("grammar: an operand has a primary");
        let mut items = items.into_iter();
        let prefixes: Vec<Pair> = items.by_ref().take(at).collect();
        let mut expr = self.primary(items.next().expect("grammar: primary follows prefixes"))?;
        for postfix in items {
            expr = self.postfix(expr, postfix)?;
        }
        for prefix in prefixes.into_iter().rev() {
            expr = apply_prefix(prefix, expr);
        }
        self.leave(levels);
        Ok(expr)
    }

    fn postfix(&mut self, expr: Expr, pair: Pair) -> Built<Expr> {
        let span = expr.span.to(span_of(&pair));
        let expr = Box::new(expr);
        let kind = match pair.as_rule() {
            Rule::tuple_index => ExprKind::TupleIndex {
                expr,
                index: self.small_number(&only_child(pair), "tuple index"),
            },
            Rule::field | Rule::arrow => ExprKind::Field {
                expr,
                arrow: pair.as_rule() == Rule::arrow,
                field: only_child(pair).as_str().to_owned(),
            },
            Rule::index => ExprKind::Index {
                expr,
                index: Box::new(self.expr(only_child(pair))?),
            },
            _ => ExprKind::IncDec {
                target: expr,
                increment: pair.as_str() == "++",
                prefix: false,
            },
        };
        Ok(Expr { kind, span })
    }

    fn primary(&mut self, pair: Pair) -> Built<Expr> {
        let span = span_of(&pair);
        let kind = match pair.as_rule() {
            Rule::paren => return self.paren(pair),
            Rule::int => ExprKind::Int(self.int(&pair)),
            Rule::string => ExprKind::Str(self.string(&pair)),
            Rule::boolean => ExprKind::Bool(pair.as_str() == "true"),
            Rule::call => self.call(pair)?,
            Rule::map => self.map(pair)?,
            Rule::positional_count => ExprKind::PositionalCount,
            Rule::positional => ExprKind::Positional(self.small_number(&pair, "positional")),
            Rule::var => return Ok(var(&pair)),
            _ => ExprKind::Ident(pair.as_str().to_owned()),
        };
        Ok(Expr { kind, span })
    }

    /// `(e)` keeps `e` but widens its span over the parentheses; `(a, b)` is a tuple.
    fn paren(&mut self, pair: Pair) -> Built<Expr> {
        let span = span_of(&pair);
        let mut items = self.exprs(pair)?;
        let kind = match items.len() {
            1 => items.pop().expect("one element").kind,
            _ => ExprKind::Tuple(items),
        };
        Ok(Expr { kind, span })
    }

    fn call(&mut self, pair: Pair) -> Built<ExprKind> {
        let mut parts = significant(pair);
        let name = parts.next().expect("grammar: a call has a name");
        let args = parts
            .map(|arg| match arg.as_rule() {
                Rule::type_arg => {
                    let span = span_of(&arg);
                    let kind = ExprKind::Type(type_name(only_child(arg)));
                    Ok(Expr { kind, span })
                }
                _ => self.expr(arg),
            })
            .collect::<Built<_>>()?;
        Ok(ExprKind::Call {
            name: name.as_str().to_owned(),
            args,
        })
    }

    fn map(&mut self, pair: Pair) -> Built<ExprKind> {
        let mut parts = significant(pair);
        let name = parts.next().expect("grammar: a map has a name").as_str();
        let keys = match parts.next() {
            Some(keys) => self.exprs(keys)?,
            None => Vec::new(),
        };
        Ok(ExprKind::Map {
            name: name[1..].to_owned(),
            keys,
        })
    }

    /// Every expression child of a list rule (`paren`, `map_keys`).
    fn exprs(&mut self, pair: Pair) -> Built<Vec<Expr>> {
        significant(pair).map(|item| self.expr(item)).collect()
    }

    fn int(&mut self, pair: &Pair) -> u64 {
        parse_int(pair.as_str()).unwrap_or_else(|message| {
            let error = ScriptError::new(span_of(pair), message).with_label("this literal");
            self.errors.push(error);
            0
        })
    }

    /// A `u32` written in decimal digits, optionally after `$`.
    fn small_number(&mut self, pair: &Pair, what: &str) -> u32 {
        let digits = pair.as_str().trim_start_matches('$');
        digits.parse().unwrap_or_else(|_| {
            let message = format!("{what} `{}` is too large", pair.as_str());
            self.errors.push(ScriptError::new(span_of(pair), message));
            0
        })
    }

    fn string(&mut self, pair: &Pair) -> String {
        let text = pair.as_str();
        let body_start = span_of(pair).start + 1;
        let (value, errors) = decode_string(&text[1..text.len() - 1], body_start);
        self.errors.extend(errors);
        value
    }
}

/// `$name`
pub(super) fn var(pair: &Pair) -> Expr {
    Expr {
        kind: ExprKind::Var(pair.as_str()[1..].to_owned()),
        span: span_of(pair),
    }
}

/// The operator of `op=`, or `None` for plain `=`.
pub(super) fn compound_op(text: &str) -> Option<BinOp> {
    let op = text
        .strip_suffix('=')
        .expect("grammar: assign_op ends with `=`");
    (!op.is_empty()).then(|| binary_op(op))
}

fn apply_prefix(prefix: Pair, expr: Expr) -> Expr {
    let span = span_of(&prefix).to(expr.span);
    let expr = Box::new(expr);
    let kind = match prefix.as_rule() {
        Rule::cast => ExprKind::Cast {
            ty: type_name(only_child(prefix)),
            expr,
        },
        _ => match prefix.as_str() {
            "++" | "--" => ExprKind::IncDec {
                target: expr,
                increment: prefix.as_str() == "++",
                prefix: true,
            },
            op => ExprKind::Unary {
                op: unary_op(op),
                expr,
            },
        },
    };
    Expr { kind, span }
}

/// `uint32`, `struct task_struct *`: the name without stars, words joined by one space.
fn type_name(pair: Pair) -> TypeName {
    let span = span_of(&pair);
    let mut words = Vec::new();
    let mut pointers = 0usize;
    for part in pair.into_inner() {
        match part.as_rule() {
            Rule::pointer => pointers += 1,
            _ => words.push(part.as_str()),
        }
    }
    TypeName {
        name: words.join(" "),
        pointer_depth: u8::try_from(pointers).unwrap_or(u8::MAX),
        span,
    }
}

fn reduce(operands: &mut Vec<Expr>, ops: &mut Vec<BinOp>) {
    let op = ops.pop().expect("reduce needs an operator");
    let rhs = operands.pop().expect("an operator has a right operand");
    let lhs = operands.pop().expect("an operator has a left operand");
    operands.push(Expr {
        span: lhs.span.to(rhs.span),
        kind: ExprKind::Binary {
            op,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
        },
    });
}

/// Binding strength of infix operators; higher binds tighter.
fn precedence(op: BinOp) -> u8 {
    match op {
        BinOp::LogicalOr => 1,
        BinOp::LogicalAnd => 2,
        BinOp::BitOr => 3,
        BinOp::BitXor => 4,
        BinOp::BitAnd => 5,
        BinOp::Eq | BinOp::Ne => 6,
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 7,
        BinOp::Shl | BinOp::Shr => 8,
        BinOp::Add | BinOp::Sub => 9,
        BinOp::Mul | BinOp::Div | BinOp::Mod => 10,
    }
}

fn binary_op(text: &str) -> BinOp {
    match text {
        "+" => BinOp::Add,
        "-" => BinOp::Sub,
        "*" => BinOp::Mul,
        "/" => BinOp::Div,
        "%" => BinOp::Mod,
        "&" => BinOp::BitAnd,
        "|" => BinOp::BitOr,
        "^" => BinOp::BitXor,
        "<<" => BinOp::Shl,
        ">>" => BinOp::Shr,
        "==" => BinOp::Eq,
        "!=" => BinOp::Ne,
        "<" => BinOp::Lt,
        "<=" => BinOp::Le,
        ">" => BinOp::Gt,
        ">=" => BinOp::Ge,
        "&&" => BinOp::LogicalAnd,
        "||" => BinOp::LogicalOr,
        other => unreachable!("grammar: `{other}` is not an infix operator"),
    }
}

fn unary_op(text: &str) -> UnOp {
    match text {
        "!" => UnOp::Not,
        "~" => UnOp::BitNot,
        "-" => UnOp::Neg,
        "*" => UnOp::Deref,
        "&" => UnOp::AddrOf,
        other => unreachable!("grammar: `{other}` is not a prefix operator"),
    }
}

/// Decimal, `0x` hex, leading-`0` octal, `_` separators, `NeM` exponents.
fn parse_int(text: &str) -> Result<u64, String> {
    let digits = text.replace('_', "");
    let out_of_range = || format!("integer literal `{text}` does not fit in 64 bits");
    if let Some(hex) = digits.strip_prefix("0x").or(digits.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).map_err(|_| out_of_range());
    }
    if let Some((mantissa, exponent)) = digits.split_once(['e', 'E']) {
        let mantissa: u64 = mantissa.parse().map_err(|_| out_of_range())?;
        let scale = exponent
            .parse::<u32>()
            .ok()
            .and_then(|exp| 10u64.checked_pow(exp));
        return scale
            .and_then(|scale| mantissa.checked_mul(scale))
            .ok_or_else(out_of_range);
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return u64::from_str_radix(&digits[1..], 8).map_err(|_| {
            match digits.bytes().any(|b| b == b'8' || b == b'9') {
                true => format!("`{text}` is not a valid octal literal"),
                false => out_of_range(),
            }
        });
    }
    digits.parse().map_err(|_| out_of_range())
}

/// Decodes `\n \t \r \\ \" \' \xNN \NNN`; `offset` is where `body` starts in the
/// script, so errors point at the bad escape.
fn decode_string(body: &str, offset: usize) -> (String, Vec<ScriptError>) {
    let mut value = String::with_capacity(body.len());
    let mut errors = Vec::new();
    let mut chars = body.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c != '\\' {
            value.push(c);
            continue;
        }
        let (escape, radix, max_digits) = match chars.next() {
            Some((_, 'x')) => ('x', 16, 2),
            Some((_, d @ '0'..='7')) => (d, 8, 3),
            Some((_, simple)) => {
                match simple_escape(simple) {
                    Some(decoded) => value.push(decoded),
                    None => errors.push(bad_escape(offset + at, simple)),
                }
                continue;
            }
            None => break,
        };
        let mut code = escape.to_digit(radix).unwrap_or(0);
        let mut len = u32::from(escape != 'x');
        while len < max_digits
            && let Some(digit) = chars.peek().and_then(|(_, d)| d.to_digit(radix))
        {
            code = code * radix + digit;
            len += 1;
            chars.next();
        }
        let end = chars.peek().map_or(body.len(), |(next, _)| *next);
        let span = Span::new(offset + at, offset + end);
        match numeric_escape(code, len) {
            Ok(decoded) => value.push(decoded),
            Err(error) => errors.push(
                ScriptError::new(span, error)
                    .with_label("this escape")
                    .with_help(
                        "strings are text here; print a byte with `%c`: `printf(\"%c\", 0xff)`",
                    ),
            ),
        }
    }
    (value, errors)
}

fn simple_escape(c: char) -> Option<char> {
    Some(match c {
        'n' => '\n',
        't' => '\t',
        'r' => '\r',
        '\\' => '\\',
        '"' => '"',
        '\'' => '\'',
        _ => return None,
    })
}

/// The character of `\xNN` / `\NNN`. Strings are UTF-8 text, so only ASCII codes
/// are accepted: a lone byte above 0x7f would not be valid text.
fn numeric_escape(code: u32, digits: u32) -> Result<char, &'static str> {
    if digits == 0 {
        return Err("`\\x` must be followed by hex digits");
    }
    match u8::try_from(code) {
        Ok(byte) if byte.is_ascii() => Ok(char::from(byte)),
        _ => Err("escaped characters above `\\x7f` are not supported in strings"),
    }
}

fn bad_escape(at: usize, c: char) -> ScriptError {
    ScriptError::new(
        Span::new(at, at + 1 + c.len_utf8()),
        format!("unknown escape sequence `\\{c}`"),
    )
    .with_label("this escape")
    .with_help("known escapes: \\n \\t \\r \\\\ \\\" \\' \\xNN \\NNN (octal)")
}
