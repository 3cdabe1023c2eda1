//! Checking record blocks (`< items >`) and spans: item names and types,
//! stack keywords, span keys, and the record kinds the capture will hold.

use crate::frontend::ast::{Expr, ExprKind, Record, RecordItem, SpanBlock};
use crate::frontend::check::{Checker, Source, SourceRole};
use crate::frontend::checked::*;
use crate::frontend::diag::ScriptError;
use crate::frontend::types::Type;

impl Checker<'_> {
    /// A span before its ends are checked: the key type and fields come from them.
    pub(super) fn declare_span(&mut self, span: &SpanBlock) -> SpanDecl {
        SpanDecl {
            name: span.name.clone(),
            // Unknown until an end is checked.
            key: Type::Void,
            record: RecordRef(usize::MAX),
            start_fields: Vec::new(),
            start_stack: None,
            end_fields: Vec::new(),
            end_stack: None,
            span: span.span,
        }
    }

    /// Every span becomes one record kind: start fields, then end fields.
    pub(super) fn finish_spans(&mut self) {
        for span in &mut self.spans {
            span.record = RecordRef(self.records.len());
            let fields = span
                .start_fields
                .iter()
                .chain(&span.end_fields)
                .cloned()
                .collect();
            self.records.push(RecordDecl {
                probe: format!("span:{}", span.name),
                name: span.name.clone(),
                is_span: true,
                fields,
                stack: span.start_stack.or(span.end_stack),
            });
        }
    }

    pub(super) fn record(&mut self, record: &Record, source: &Source) -> Option<CheckedRecord> {
        let mut fields: Vec<(String, Type)> = Vec::new();
        let mut values = Vec::new();
        let mut stack = None;
        for item in &record.items {
            if let Some(kind) = stack_keyword(&item.value) {
                if stack.replace(kind).is_some() {
                    self.error(ScriptError::new(
                        item.span,
                        "a record holds one stack: use `stack` for user and kernel frames together",
                    ));
                }
                continue;
            }
            let (name, value) = self.record_item(item)?;
            if fields.iter().any(|(existing, _)| *existing == name) {
                self.error(ScriptError::new(
                    item.span,
                    format!("the record already has an item named `{name}`"),
                ));
                return None;
            }
            fields.push((name, value.ty.clone()));
            values.push(self.record_value(value)?);
        }
        let role = match source.role {
            SourceRole::Plain => RecordRole::Instant(self.instant_record(fields, stack)),
            SourceRole::SpanStart(span, key) => {
                let key = self.span_key(span, key, source)?;
                self.span_end_fields(span, fields, stack, true, record)?;
                RecordRole::SpanStart { span, key }
            }
            SourceRole::SpanEnd(span, key) => {
                let key = self.span_key(span, key, source)?;
                self.span_end_fields(span, fields, stack, false, record)?;
                RecordRole::SpanEnd { span, key }
            }
        };
        Some(CheckedRecord {
            role,
            values,
            stack,
        })
    }

    fn instant_record(
        &mut self,
        fields: Vec<(String, Type)>,
        stack: Option<StackKind>,
    ) -> RecordRef {
        let probe = self.resolved();
        let name = probe.func.clone().unwrap_or_else(|| {
            probe
                .name
                .rsplit(':')
                .next()
                .unwrap_or(&probe.name)
                .to_string()
        });
        let decl = RecordDecl {
            probe: probe.name.clone(),
            name,
            is_span: false,
            fields,
            stack,
        };
        self.records.push(decl);
        RecordRef(self.records.len() - 1)
    }

    /// `name = expr` or a bare expression named after itself.
    fn record_item(&mut self, item: &RecordItem) -> Option<(String, TExpr)> {
        let name = match &item.name {
            Some(name) => name.clone(),
            None => match implied_name(&item.value) {
                Some(name) => name,
                None => {
                    let error = ScriptError::new(item.span, "this item needs a name")
                        .with_help("write it as `name = expression`");
                    self.error(error);
                    return None;
                }
            },
        };
        let value = self.expr(&item.value)?;
        match value.ty {
            Type::Int { .. } | Type::Str { .. } | Type::Probe | Type::KernelSymbol => {
                Some((name, value))
            }
            // A task pointer is a thread field; other kernel pointers are addresses.
            Type::KernelPtr(_) => Some((name, value)),
            _ => self.fail(
                item.span,
                &format!(
                    "a record item must be an integer or a string, not {}",
                    value.ty
                ),
            ),
        }
    }

    /// The span's key at this end: `by EXPR`, or the thread.
    fn span_key(&mut self, span: SpanRef, key: Option<&Expr>, source: &Source) -> Option<TExpr> {
        let key = match key {
            Some(expr) => self.expr(expr)?,
            None => TExpr {
                kind: TExprKind::Builtin(Builtin::Tid),
                ty: Type::U64,
                span: source.span,
            },
        };
        if matches!(key.ty, Type::Tuple(_) | Type::Void) {
            return self.fail(
                key.span,
                &format!("a span key must be an integer or a string, not {}", key.ty),
            );
        }
        let decl = &mut self.spans[span.0];
        let unified = if decl.key == Type::Void {
            Some(key.ty.clone())
        } else {
            decl.key.unify(&key.ty)
        };
        match unified {
            Some(ty) => decl.key = ty,
            None => {
                let message = format!(
                    "span `{}` has keys of type {} elsewhere; this key is {}",
                    decl.name, decl.key, key.ty
                );
                return self.fail(key.span, &message);
            }
        }
        Some(key)
    }

    /// Record the fields of one end; every attach point of an end must record the same.
    fn span_end_fields(
        &mut self,
        span: SpanRef,
        fields: Vec<(String, Type)>,
        stack: Option<StackKind>,
        start: bool,
        record: &Record,
    ) -> Option<()> {
        let decl = &mut self.spans[span.0];
        let (known, known_stack) = if start {
            (&mut decl.start_fields, &mut decl.start_stack)
        } else {
            (&mut decl.end_fields, &mut decl.end_stack)
        };
        if known.is_empty() && known_stack.is_none() {
            *known = fields;
            *known_stack = stack;
            return Some(());
        }
        let same = known.len() == fields.len()
            && known
                .iter()
                .zip(&fields)
                .all(|((a, at), (b, bt))| a == b && at.unify(bt).is_some());
        if !same || *known_stack != stack {
            let message = format!(
                "every probe of span `{}` must record the same items at this end",
                decl.name
            );
            return self.fail(record.span, &message);
        }
        Some(())
    }
}

fn stack_keyword(expr: &Expr) -> Option<StackKind> {
    match &expr.kind {
        ExprKind::Ident(word) => match word.as_str() {
            "stack" => Some(StackKind::Both),
            "ustack" => Some(StackKind::User),
            "kstack" => Some(StackKind::Kernel),
            _ => None,
        },
        _ => None,
    }
}

/// The name a bare item takes: `pid` → pid, `args.filename` → filename, `$x` → x,
/// `str(args.filename)` → filename.
fn implied_name(expr: &Expr) -> Option<String> {
    match &expr.kind {
        ExprKind::Ident(name) | ExprKind::Var(name) => Some(name.clone()),
        ExprKind::Field { field, .. } => Some(field.clone()),
        ExprKind::Map { name, keys } if keys.is_empty() && !name.is_empty() => Some(name.clone()),
        ExprKind::Call { name, args } if name == "str" => args.first().and_then(implied_name),
        ExprKind::Cast { expr, .. } => implied_name(expr),
        _ => None,
    }
}

#[cfg(test)]
#[path = "check/record_tests.rs"]
mod record_tests;
