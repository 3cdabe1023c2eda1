//! The `--fail-if` parser (grammar in the module docs of `gate`): a
//! hand-written recursive descent over the text, every error with the byte
//! range it is about.

use super::{
    Condition, Dimension, Gate, GateError, GateKind, MetricKind, MetricName, Node, Op, Quantity,
    Threshold,
};

/// Parses one `--budget` expression: conditions on values (`5ms`, `90%`),
/// not changes, that must hold.
pub fn parse_budget(text: &str) -> Result<Gate, GateError> {
    let mut gate = parse(text).map_err(|e| e.in_gate(GateKind::Budget))?;
    gate.kind = GateKind::Budget;
    for condition in gate.conditions() {
        if !matches!(condition.threshold, Threshold::Budget(_)) {
            return Err(GateError::new(
                text,
                condition.threshold_span,
                "a budget compares a value, not a change",
            )
            .with_help("give a value (5ms, 90%); gate on changes with --fail-if")
            .in_gate(GateKind::Budget));
        }
    }
    Ok(gate)
}

/// Parses one `--fail-if` expression.
pub fn parse(text: &str) -> Result<Gate, GateError> {
    let mut parser = Parser { text, pos: 0 };
    let root = parser.or()?;
    parser.skip_space();
    if parser.pos < text.len() {
        let rest = parser.word_at(parser.pos);
        return Err(parser
            .error(
                (parser.pos, parser.pos + rest.len()),
                format!("unexpected `{rest}`"),
            )
            .with_help("join conditions with && or ||"));
    }
    Ok(Gate {
        text: text.to_owned(),
        kind: GateKind::FailIf,
        root,
    })
}

/// Whether `subject` must be quoted to parse back as one name.
pub(super) fn needs_quotes(subject: &str) -> bool {
    subject.is_empty() || subject.chars().any(|c| c == ':' || ends_name(c))
}

/// Characters that end an unquoted name.
fn ends_name(c: char) -> bool {
    c.is_whitespace() || "\"()<>=!&|".contains(c)
}

struct Parser<'t> {
    text: &'t str,
    pos: usize,
}

impl<'t> Parser<'t> {
    fn error(&self, span: (usize, usize), message: impl Into<String>) -> GateError {
        GateError::new(self.text, span, message)
    }

    fn rest(&self) -> &'t str {
        &self.text[self.pos..]
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    /// Consumes `token` (after spaces) if it comes next; words must not run on.
    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        let rest = self.rest();
        let word = token.chars().all(char::is_alphabetic);
        let runs_on = word
            && rest[token.len().min(rest.len())..]
                .chars()
                .next()
                .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if rest.starts_with(token) && !runs_on {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    /// The run of non-space text at `at`, for messages.
    fn word_at(&self, at: usize) -> &'t str {
        let rest = &self.text[at..];
        &rest[..rest.find(char::is_whitespace).unwrap_or(rest.len())]
    }

    fn or(&mut self) -> Result<Node, GateError> {
        let mut node = self.and()?;
        while self.eat("||") || self.eat("or") {
            node = Node::Or(Box::new(node), Box::new(self.and()?));
        }
        Ok(node)
    }

    fn and(&mut self) -> Result<Node, GateError> {
        let mut node = self.primary()?;
        while self.eat("&&") || self.eat("and") {
            node = Node::And(Box::new(node), Box::new(self.primary()?));
        }
        Ok(node)
    }

    fn primary(&mut self) -> Result<Node, GateError> {
        self.skip_space();
        let open = self.pos;
        if !self.eat("(") {
            return self.condition().map(Node::Condition);
        }
        let node = self.or()?;
        if !self.eat(")") {
            return Err(self
                .error((open, open + 1), "this `(` is not closed")
                .with_help("add the missing `)`"));
        }
        Ok(node)
    }

    fn condition(&mut self) -> Result<Condition, GateError> {
        self.skip_space();
        let metric_start = self.pos;
        let metric = self.metric()?;
        let metric_span = (metric_start, self.pos);
        let op = self.op()?;
        self.skip_space();
        let threshold_start = self.pos;
        let threshold = self.threshold()?;
        Ok(Condition {
            metric,
            op,
            threshold,
            metric_span,
            threshold_span: (threshold_start, self.pos),
        })
    }

    fn metric(&mut self) -> Result<MetricName, GateError> {
        let kind = self.kind()?;
        let start = self.pos;
        let (subject, stat) = if self.rest().starts_with('"') {
            self.quoted_metric()?
        } else {
            let len = self.rest().find(ends_name).unwrap_or(self.rest().len());
            self.pos += len;
            split_stat(&self.text[start..self.pos])
                .map(|(subject, stat)| (subject.to_owned(), stat.to_owned()))
                .ok_or_else(|| self.missing_metric(start))?
        };
        if subject.is_empty() || !valid_stat(&stat) {
            return Err(self.missing_metric(start));
        }
        Ok(MetricName {
            kind,
            subject,
            stat,
        })
    }

    fn missing_metric(&self, start: usize) -> GateError {
        let found = self.word_at(start);
        let message = if found.is_empty() {
            "expected a metric".to_owned()
        } else {
            format!("`{found}` is not a metric")
        };
        self.error((start, start + found.len()), message)
            .with_help("write KIND:NAME.STAT, e.g. span:request.p99 or thread:worker.oncpu")
    }

    /// An optional `kind:` prefix.
    fn kind(&mut self) -> Result<Option<MetricKind>, GateError> {
        let rest = self.rest();
        let word_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        if word_len == 0 || !rest[word_len..].starts_with(':') {
            return Ok(None);
        }
        let word = &rest[..word_len];
        let Some(kind) = MetricKind::ALL.into_iter().find(|k| k.name() == word) else {
            let names: Vec<&str> = MetricKind::ALL.iter().map(|k| k.name()).collect();
            return Err(self
                .error(
                    (self.pos, self.pos + word_len),
                    format!("unknown metric kind `{word}`"),
                )
                .with_help(format!("kinds are {}", names.join(", "))));
        };
        self.pos += word_len + 1;
        Ok(Some(kind))
    }

    /// `"name".stat`
    fn quoted_metric(&mut self) -> Result<(String, String), GateError> {
        let open = self.pos;
        let Some(close) = self.text[open + 1..].find('"') else {
            return Err(self
                .error((open, open + 1), "this quote is not closed")
                .with_help("close the name with `\"`"));
        };
        let subject = self.text[open + 1..open + 1 + close].to_owned();
        self.pos = open + close + 2;
        let stat_start = self.pos;
        if !self.rest().starts_with('.') {
            return Err(self
                .error(
                    (stat_start, stat_start + 1),
                    "expected `.STAT` after the name",
                )
                .with_help("e.g. \"my name\".p99"));
        }
        let len = self.rest().find(ends_name).unwrap_or(self.rest().len());
        self.pos += len;
        Ok((subject, self.text[stat_start + 1..self.pos].to_owned()))
    }

    fn op(&mut self) -> Result<Op, GateError> {
        for (token, op) in [
            (">=", Op::GreaterOrEqual),
            ("<=", Op::LessOrEqual),
            (">", Op::Greater),
            ("<", Op::Less),
        ] {
            if self.eat(token) {
                return Ok(op);
            }
        }
        let found = self.word_at(self.pos);
        let message = if found.is_empty() {
            "expected a comparison after the metric".to_owned()
        } else {
            format!("expected a comparison, found `{found}`")
        };
        Err(self
            .error((self.pos, self.pos + found.len()), message)
            .with_help("compare with >, >=, < or <="))
    }

    fn threshold(&mut self) -> Result<Threshold, GateError> {
        let start = self.pos;
        let rest = self.rest();
        let sign = match rest.chars().next() {
            Some('+') => Some(1.0),
            Some('-') => Some(-1.0),
            _ => None,
        };
        let digits_start = start + usize::from(sign.is_some());
        let number_len = self.text[digits_start..]
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(self.text.len() - digits_start);
        let number_text = &self.text[digits_start..digits_start + number_len];
        let Ok(number) = number_text.parse::<f64>() else {
            let found = self.word_at(start);
            return Err(self
                .error((start, start + found.len().max(1)), "expected a threshold")
                .with_help("e.g. +10% (relative change), +2ms (change) or 5ms (budget)"));
        };
        let unit_start = digits_start + number_len;
        let unit_len = self.text[unit_start..]
            .find(|c: char| !(c.is_alphabetic() || c == '%'))
            .unwrap_or(self.text.len() - unit_start);
        let unit = &self.text[unit_start..unit_start + unit_len];
        self.pos = unit_start + unit_len;
        let Some((scale, dimension)) = unit_scale(unit) else {
            return Err(self
                .error((unit_start, self.pos), format!("unknown unit `{unit}`"))
                .with_help("units are ns us ms s, B KB MB GB KiB MiB GiB, k M G, and %"));
        };
        let value = number * scale;
        Ok(match (sign, unit) {
            (Some(sign), "%") => Threshold::Relative(sign * value),
            (Some(sign), _) => Threshold::Delta(Quantity {
                value: sign * value,
                dimension,
            }),
            (None, _) => Threshold::Budget(Quantity { value, dimension }),
        })
    }
}

/// `subject.stat` split at the last dot, keeping `p99.9` whole.
fn split_stat(metric: &str) -> Option<(&str, &str)> {
    let (head, last) = metric.rsplit_once('.')?;
    if last.bytes().all(|b| b.is_ascii_digit())
        && let Some((subject, percentile)) = head.rsplit_once('.')
        && is_percentile(percentile)
    {
        return Some((subject, &metric[subject.len() + 1..]));
    }
    Some((head, last))
}

fn is_percentile(stat: &str) -> bool {
    stat.strip_prefix('p')
        .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// A word (`oncpu`, `context_switches`) or a percentile (`p99`, `p99.9`).
fn valid_stat(stat: &str) -> bool {
    let word = stat
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && stat.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let decimal_percentile = stat.split_once('.').is_some_and(|(p, decimals)| {
        is_percentile(p) && !decimals.is_empty() && decimals.bytes().all(|b| b.is_ascii_digit())
    });
    word || decimal_percentile
}

/// A unit's factor to its dimension's base unit.
fn unit_scale(unit: &str) -> Option<(f64, Dimension)> {
    Some(match unit {
        "" => (1.0, Dimension::Number),
        "%" => (0.01, Dimension::Ratio),
        "ns" => (1.0, Dimension::Time),
        "us" | "µs" => (1e3, Dimension::Time),
        "ms" => (1e6, Dimension::Time),
        "s" => (1e9, Dimension::Time),
        "B" => (1.0, Dimension::Bytes),
        "KB" | "kB" => (1e3, Dimension::Bytes),
        "MB" => (1e6, Dimension::Bytes),
        "GB" => (1e9, Dimension::Bytes),
        "KiB" => (1024.0, Dimension::Bytes),
        "MiB" => (1024.0 * 1024.0, Dimension::Bytes),
        "GiB" => (1024.0 * 1024.0 * 1024.0, Dimension::Bytes),
        "k" => (1e3, Dimension::Number),
        "M" => (1e6, Dimension::Number),
        "G" => (1e9, Dimension::Number),
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
