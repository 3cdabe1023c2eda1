//! Moving a parsed script's spans: from preprocessed text back to the
//! script as written, and into a merged offset space, shifted by the base
//! its source has in the program's [`super::diag::SourceMap`], so later
//! errors point at the right text of the right source.

use super::ast::{
    Block, CDefinition, CRecord, CType, Expr, ExprKind, ProbeSpec, Record, Script, Span, Stmt,
    StmtKind,
};

/// Adds `base` to every span of `script`.
pub fn shift_spans(script: &mut Script, base: usize) {
    if base != 0 {
        map_spans(script, &|span| {
            Span::new(span.start + base, span.end + base)
        });
    }
}

/// Replaces every span of `script` with `f(span)`.
pub fn map_spans(script: &mut Script, f: &dyn Fn(Span) -> Span) {
    let shift = Shift(f);
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
    for definition in &mut script.types {
        match definition {
            CDefinition::Record(record) => shift.c_record(record),
            CDefinition::Enum(e) => shift.span(&mut e.span),
            CDefinition::Typedef { ty, span, .. } => {
                shift.c_type(ty);
                shift.span(span);
            }
        }
    }
}

struct Shift<'f>(&'f dyn Fn(Span) -> Span);

impl Shift<'_> {
    fn span(&self, span: &mut Span) {
        *span = (self.0)(*span);
    }

    fn c_record(&self, record: &mut CRecord) {
        for member in record.members.iter_mut().flatten() {
            self.c_type(&mut member.ty);
            self.span(&mut member.span);
        }
        self.span(&mut record.span);
    }

    fn c_type(&self, ty: &mut CType) {
        match ty {
            CType::Named { span, .. } => self.span(span),
            CType::Record(record) => self.c_record(record),
            CType::Enum(e) => self.span(&mut e.span),
            CType::Pointer(inner) | CType::Array(inner, _) => self.c_type(inner),
        }
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
        match &mut expr.kind {
            ExprKind::Cast { ty, .. } | ExprKind::Type(ty) => self.span(&mut ty.span),
            _ => {}
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
        let text = "struct S { int *a[2]; struct { char c; } in; }\n\
                    span s by arg0 { kprobe:a /pid == 1/ < x = (uint8)arg0 > kretprobe:a }\n\
                    kprobe:f /$1/ < stack > { if (x) { record r < a = @m[1, 2] ? 3 : -4 >; } \
                    while (1) { $x[1]++; break } }";
        let mut shifted = parse(text, "t").expect("parses");
        shift_spans(&mut shifted, 7);
        let padded = parse(&format!("{}{text}", " ".repeat(7)), "t").expect("parses");
        assert_eq!(shifted, padded);
    }
}
