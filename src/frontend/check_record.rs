//! Checking record blocks (`< items >`), `record NAME` statements and spans:
//! item names and types, stack and counter items, span keys, and the record
//! kinds the capture will hold.

use crate::capture::model::RecordOrigin;
use crate::frontend::ast::{BinOp, Expr, ExprKind, Record, RecordItem, Span, SpanBlock};
use crate::frontend::check::{Checker, Source, SourceRole};
use crate::frontend::checked::*;
use crate::frontend::diag::ScriptError;
use crate::frontend::options::STACK_KINDS;
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
        })
    }

    /// Fields, values and stack of `< items >`; counter fields are named
    /// `PREFIX:COUNTER...`.
    fn record_items(&mut self, record: &Record, counter_prefix: &str) -> Option<RecordItems> {
        let mut items = RecordItems::default();
        for item in &record.items {
            if let Some(kind) = self.stack_item(&item.value) {
                if std::mem::replace(&mut items.has_stack_item, true) {
                    self.error(ScriptError::new(
                        item.span,
                        "a record holds one stack: use `stack` for user and kernel frames together",
                    ));
                }
                items.stack = kind;
                continue;
            }
            if matches!(&item.value.kind, ExprKind::Ident(word) if word == "pmu") {
                self.reads_counters = true;
                for (index, counter) in self.options.pmu.clone().iter().enumerate() {
                    for suffix in ["", ":enabled", ":running"] {
                        let name = format!("{counter_prefix}:{}{suffix}", counter.name);
                        self.add_field(&mut items.fields, name, Type::U64, item.span)?;
                    }
                    items.values.push(RecordValue::Counter(index));
                }
                continue;
            }
            let expanded;
            let parts = match identity_of(&item.value) {
                Some(task) => {
                    expanded = identity_items(task, item.span);
                    &expanded[..]
                }
                None => std::slice::from_ref(item),
            };
            for part in parts {
                let (name, value) = self.record_item(part)?;
                self.add_field(&mut items.fields, name, value.ty.clone(), part.span)?;
                items
                    .values
                    .push(RecordValue::Expr(self.record_value(value)?));
            }
        }
        Some(items)
    }

    fn add_field(
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

    /// `stack`, `ustack`, `kstack` or `stack(KIND)`: `Some` with the stack
    /// it captures (none for a kind that is off); `None` for other items.
    fn stack_item(&mut self, expr: &Expr) -> Option<Option<StackKind>> {
        let ExprKind::Call { name, args } = &expr.kind else {
            return stack_keyword(expr).map(Some);
        };
        if name != "stack" {
            return None;
        }
        let kind = match args.as_slice() {
            [
                Expr {
                    kind: ExprKind::Ident(kind),
                    ..
                },
            ] if STACK_KINDS.contains(&kind.as_str()) => kind,
            _ => {
                let message = format!("`stack(KIND)` takes one of {}", STACK_KINDS.join(", "));
                self.error(ScriptError::new(expr.span, message).with_label("unknown stack kind"));
                return Some(None);
            }
        };
        Some(
            self.options
                .stacks
                .contains(kind)
                .then_some(StackKind::Both),
        )
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
struct RecordItems {
    fields: Vec<(String, Type)>,
    values: Vec<RecordValue>,
    stack: Option<StackKind>,
    /// Some item is a stack, even one whose kind is off.
    has_stack_item: bool,
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

/// The task of an `identity(TASK)` record item.
fn identity_of(expr: &Expr) -> Option<&Expr> {
    match &expr.kind {
        ExprKind::Call { name, args } if name == "identity" && args.len() == 1 => Some(&args[0]),
        _ => None,
    }
}

/// `identity(TASK)` as the items it stands for: the task's `tid`, `pid`,
/// `ppid`, `comm`, `pcomm` (its process's name) and `kthread` (0 or 1), the
/// fields of the trackers' `task` record (docs/system-tracking.md).
fn identity_items(task: &Expr, span: Span) -> Vec<RecordItem> {
    let node = |kind| Expr { kind, span };
    let member = |base: Expr, field: &str| {
        node(ExprKind::Field {
            expr: Box::new(base),
            field: field.into(),
            arrow: true,
        })
    };
    let binary = |op, lhs, rhs| {
        node(ExprKind::Binary {
            op,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
        })
    };
    const PF_KTHREAD_BIT: u64 = 21;
    let kthread = binary(
        BinOp::BitAnd,
        binary(
            BinOp::Shr,
            member(task.clone(), "flags"),
            node(ExprKind::Int(PF_KTHREAD_BIT)),
        ),
        node(ExprKind::Int(1)),
    );
    [
        ("tid", member(task.clone(), "pid")),
        ("pid", member(task.clone(), "tgid")),
        ("ppid", member(member(task.clone(), "real_parent"), "tgid")),
        ("comm", member(task.clone(), "comm")),
        (
            "pcomm",
            member(member(task.clone(), "group_leader"), "comm"),
        ),
        ("kthread", kthread),
    ]
    .into_iter()
    .map(|(name, value)| RecordItem {
        name: Some(name.into()),
        value,
        span,
    })
    .collect()
}
