//! Moving a parsed script into a merged offset space: every span of the
//! syntax tree is shifted by the base its source has in the program's
//! [`super::diag::SourceMap`], so later errors name the right source.

use super::ast::{Block, Expr, ExprKind, ProbeSpec, Record, Script, Span, Stmt, StmtKind};

/// Adds `base` to every span of `script`.
pub fn shift_spans(script: &mut Script, base: usize) {
    if base == 0 {
        return;
    }
    let shift = Shift(base);
    for probe in &mut script.probes {
        shift.specs(&mut probe.specs);
        probe.predicate.iter_mut().for_each(|p| shift.expr(p));
        probe.record.iter_mut().for_each(|r| shift.record(r));
        shift.block(&mut probe.body);
        shift.span(&mut probe.span);
    }
    for block in &mut script.spans {
        block.key.iter_mut().for_each(|k| shift.expr(k));
        for end in [&mut block.start, &mut block.end] {
            shift.specs(&mut end.specs);
            end.predicate.iter_mut().for_each(|p| shift.expr(p));
            end.record.iter_mut().for_each(|r| shift.record(r));
            shift.span(&mut end.span);
        }
        shift.span(&mut block.span);
    }
}

struct Shift(usize);

impl Shift {
    fn span(&self, span: &mut Span) {
        *span = Span::new(span.start + self.0, span.end + self.0);
    }

    fn specs(&self, specs: &mut [ProbeSpec]) {
        specs.iter_mut().for_each(|s| self.span(&mut s.span));
    }

    fn record(&self, record: &mut Record) {
        for item in &mut record.items {
            self.expr(&mut item.value);
            self.span(&mut item.span);
        }
        self.span(&mut record.span);
    }

    fn block(&self, block: &mut Block) {
        block.stmts.iter_mut().for_each(|s| self.stmt(s));
        self.span(&mut block.span);
    }

    fn stmt(&self, stmt: &mut Stmt) {
        match &mut stmt.kind {
            StmtKind::Expr(e) => self.expr(e),
            StmtKind::Assign { target, value, .. } => {
                self.expr(target);
                self.expr(value);
            }
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                self.expr(cond);
                self.block(then);
                otherwise.iter_mut().for_each(|b| self.block(b));
            }
            StmtKind::Unroll { count: head, body } | StmtKind::While { cond: head, body } => {
                self.expr(head);
                self.block(body);
            }
            StmtKind::Record { record, .. } => self.record(record),
            StmtKind::Break | StmtKind::Continue | StmtKind::Return => {}
        }
        self.span(&mut stmt.span);
    }

    fn expr(&self, expr: &mut Expr) {
        if let ExprKind::Cast { ty, .. } = &mut expr.kind {
            self.span(&mut ty.span);
        }
        expr.children_mut().into_iter().for_each(|e| self.expr(e));
        self.span(&mut expr.span);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::parse::parse;

    /// Every span moves by the base, so the tree equals the parse of the
    /// same text preceded by that many spaces.
    #[test]
    fn shifts_every_span() {
        let text = "span s by arg0 { kprobe:a /pid == 1/ < x = (uint8)arg0 > kretprobe:a }\n\
                    kprobe:f /$1/ < stack > { if (x) { record r < a = @m[1, 2] ? 3 : -4 >; } \
                    while (1) { $x[1]++; break } }";
        let mut shifted = parse(text, "t").expect("parses");
        shift_spans(&mut shifted, 7);
        let padded = parse(&format!("{}{text}", " ".repeat(7)), "t").expect("parses");
        assert_eq!(shifted, padded);
    }
}
