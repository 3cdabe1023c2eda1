//! Checking record blocks (`< items >`), `record NAME` statements and spans:
//! item names and types, stack and counter items, span keys, and the record
//! kinds the capture will hold.

use crate::builtins;
use crate::capture::model::RecordOrigin;
use crate::frontend::ast::{Expr, ExprKind, Record, RecordItem, Span, SpanBlock};
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
            origin: span.origin,
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
                origin: span.origin,
            });
        }
    }

    pub(super) fn record(&mut self, record: &Record, source: &Source) -> Option<CheckedRecord> {
        let counter_prefix = match source.role {
            SourceRole::SpanEnd(..) => "pmu_end",
            _ => "pmu",
        };
        let mut items = self.record_items(record, counter_prefix)?;
        let role = match source.role {
            SourceRole::Plain => {
                self.implicit_stack(&mut items);
                RecordRole::Instant(self.instant_record(items.fields.clone(), items.stack))
            }
            SourceRole::SpanStart(span, key) => {
                let key = self.span_key(span, key, source)?;
                self.span_end_fields(span, items.fields.clone(), items.stack, true, record)?;
                RecordRole::SpanStart { span, key }
            }
            SourceRole::SpanEnd(span, key) => {
                let key = self.span_key(span, key, source)?;
                self.span_end_fields(span, items.fields.clone(), items.stack, false, record)?;
                RecordRole::SpanEnd { span, key }
            }
        };
        Some(CheckedRecord {
            role,
            values: items.values,
            stack: items.stack,
            offcpu_stack: items.offcpu_stack,
        })
    }

    /// `record NAME < items >`: every statement of one name shares one record
    /// kind, so they must record the same items.
    pub(super) fn record_stmt(
        &mut self,
        name: &str,
        record: &Record,
        span: Span,
    ) -> Option<CheckedRecord> {
        let mut items = self.record_items(record, "pmu")?;
        self.implicit_stack(&mut items);
        let id = match self.named_records.get(name) {
            None => {
                let decl = RecordDecl {
                    probe: self.resolved().name.clone(),
                    name: name.to_owned(),
                    is_span: false,
                    fields: items.fields,
                    stack: items.stack,
                    origin: self.probe.origin,
                };
                self.records.push(decl);
                let id = RecordRef(self.records.len() - 1);
                self.named_records.insert(name.to_owned(), id);
                id
            }
            Some(&id) => {
                let known = &mut self.records[id.0];
                match unify_fields(&known.fields, &items.fields) {
                    Some(fields) if known.stack == items.stack => known.fields = fields,
                    _ => {
                        let message = format!(
                            "record `{name}` is recorded elsewhere with other items: \
                             every `record {name}` must record the same items"
                        );
                        return self.fail(span, &message);
                    }
                }
                id
            }
        };
        Some(CheckedRecord {
            role: RecordRole::Instant(id),
            values: items.values,
            stack: items.stack,
            offcpu_stack: items.offcpu_stack,
        })
    }

    /// Fields, values and stack of `< items >`; counter fields are named
    /// `PREFIX:COUNTER...`.
    fn record_items(
        &mut self,
        record: &Record,
        counter_prefix: &'static str,
    ) -> Option<RecordItems> {
        let mut items = RecordItems {
            counter_prefix,
            ..RecordItems::default()
        };
        for item in &record.items {
            let (name, args, call) = match &item.value.kind {
                ExprKind::Ident(name) => (name, &[][..], false),
                ExprKind::Call { name, args } => (name, &args[..], true),
                _ => {
                    self.add_item(&mut items, item)?;
                    continue;
                }
            };
            match builtins::record_item(name, call) {
                Some(found) => found
                    .hooks
                    .check(self, &found.site(args, item.span), &mut items)?,
                None => self.add_item(&mut items, item)?,
            }
        }
        Some(items)
    }

    /// One `name = expr` or bare expression item: a field and its value.
    pub(crate) fn add_item(&mut self, items: &mut RecordItems, item: &RecordItem) -> Option<()> {
        let (name, value) = self.record_item(item)?;
        self.add_field(&mut items.fields, name, value.ty.clone(), item.span)?;
        let value = self.record_value(value)?;
        items.values.push(RecordValue::Expr(value));
        Some(())
    }

    pub(crate) fn add_field(
        &mut self,
        fields: &mut Vec<(String, Type)>,
        name: String,
        ty: Type,
        span: Span,
    ) -> Option<()> {
        if fields.iter().any(|(existing, _)| *existing == name) {
            let message = format!("the record already has an item named `{name}`");
            return self.fail(span, &message);
        }
        fields.push((name, ty));
        Some(())
    }

    /// With `-S probe`, records of the user's script without a stack item
    /// capture the stack.
    fn implicit_stack(&self, items: &mut RecordItems) {
        if self.probe.origin == RecordOrigin::Script
            && !items.has_stack_item
            && self.options.stacks.contains("probe")
        {
            items.stack = Some(StackKind::Both);
        }
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
            origin: self.probe.origin,
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
            Type::Ptr(_) => Some((name, value)),
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
        let thread = Expr {
            kind: ExprKind::Ident("tid".into()),
            span: source.span,
        };
        let key = self.expr(key.unwrap_or(&thread))?;
        if matches!(key.ty, Type::Tuple(_) | Type::Void | Type::Object(_)) {
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
        if unify_fields(known, &fields).is_none() || *known_stack != stack {
            let message = format!(
                "every probe of span `{}` must record the same items at this end",
                decl.name
            );
            return self.fail(record.span, &message);
        }
        Some(())
    }
}

/// What a record's items add up to.
#[derive(Default)]
pub(crate) struct RecordItems {
    pub(crate) fields: Vec<(String, Type)>,
    pub(crate) values: Vec<RecordValue>,
    pub(crate) stack: Option<StackKind>,
    /// `stack(offcpu, NEXT)` or `stack(offcpu, pending)`.
    pub(crate) offcpu_stack: Option<OffcpuStack>,
    /// Some item is a stack, even one whose kind is off.
    pub(crate) has_stack_item: bool,
    /// Counter fields are named `PREFIX:COUNTER`: `pmu`, or `pmu_end` at a
    /// span's end.
    pub(crate) counter_prefix: &'static str,
}

/// The fields both lists agree on (same names, types that unify), with the
/// unified types; `None` when they differ.
fn unify_fields(known: &[(String, Type)], new: &[(String, Type)]) -> Option<Vec<(String, Type)>> {
    if known.len() != new.len() {
        return None;
    }
    known
        .iter()
        .zip(new)
        .map(|((a, at), (b, bt))| {
            (a == b)
                .then(|| at.unify(bt))
                .flatten()
                .map(|t| (a.clone(), t))
        })
        .collect()
}

/// The name a bare item takes: `pid` → pid, `args.filename` → filename, `$x` → x,
/// `str(args.filename)` → filename.
fn implied_name(expr: &Expr) -> Option<String> {
    match &expr.kind {
        ExprKind::Ident(name) | ExprKind::Var(name) => Some(name.clone()),
        ExprKind::Field { field, .. } => Some(field.clone()),
        ExprKind::Map { name, keys } if keys.is_empty() && !name.is_empty() => Some(name.clone()),
        ExprKind::Call { name, args }
            if builtins::expression(name, true)
                .is_some_and(|f| f.hooks.names_items_after_arg()) =>
        {
            args.first().and_then(implied_name)
        }
        ExprKind::Cast { expr, .. } => implied_name(expr),
        _ => None,
    }
}

#[cfg(test)]
#[path = "check/record_tests.rs"]
mod record_tests;
