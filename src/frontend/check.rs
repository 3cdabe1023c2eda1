//! Checking: syntax tree → [`CheckedProgram`].
//!
//! Probe specs are resolved first (one `CheckedProbe` per attach point). Map
//! and variable types come from every assignment in the script, so bodies are
//! checked twice: the first pass only collects types, the second reports errors.

use std::collections::{HashMap, HashSet};

use crate::builtins;
use crate::capture::model::RecordOrigin;
use crate::frontend::ast::{
    Block, Expr, ExprKind, ProbeSpec, Record, Script, Span, Stmt, StmtKind,
};
use crate::frontend::checked::*;
use crate::frontend::ctypes::TypeTable;
use crate::frontend::diag::ScriptError;
use crate::frontend::options::CompileOptions;
use crate::frontend::types::Type;
use crate::providers::{self, Resolved, ResolvedProbe};
use crate::unwind::layout::MmLayout;
use crate::vocab::Environment;

/// Check a parsed script against the machine described by `env`, with the
/// command line's `options` (stack kinds, counters, task filters).
pub fn check(
    script: &Script,
    env: &dyn Environment,
    options: &CompileOptions,
) -> Result<CheckedProgram, Vec<ScriptError>> {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let mut resolve_all = |specs: &[ProbeSpec]| {
        let mut resolved = Vec::new();
        let mut skipped = Vec::new();
        for spec in specs {
            match resolve(spec, env) {
                Ok(found) => {
                    resolved.extend(found.probes);
                    warnings.extend(found.warnings);
                }
                // As decided for bpftrace's tools (ssllatency names functions
                // only some TLS libraries have): skip, but never silently.
                Err((error, true)) => skipped.push((spec, error)),
                Err((error, _)) => errors.push(error),
            }
        }
        if skipped.len() == specs.len() {
            errors.extend(nothing_to_attach(&skipped));
        } else {
            warnings.extend(skipped.iter().map(|(spec, error)| {
                let named = format!("`{}`", spec_text(spec));
                let why = error.message.strip_prefix(&format!("{named}: "));
                format!("skipping {named}: {}", why.unwrap_or(&error.message))
            }));
        }
        resolved
    };
    let mut sources = Vec::new();
    for block in &script.probes {
        sources.push(Source {
            predicate: block.predicate.as_ref(),
            record: block.record.as_ref(),
            body: Some(&block.body),
            role: SourceRole::Plain,
            resolved: resolve_all(&block.specs),
            origin: block.origin,
            span: block.span,
        });
    }
    for (index, span) in script.spans.iter().enumerate() {
        let key = span.key.as_ref();
        let start = SourceRole::SpanStart(SpanRef(index), key);
        for (end, role) in [
            (&span.start, start),
            (&span.end, SourceRole::SpanEnd(SpanRef(index), key)),
        ] {
            sources.push(Source {
                predicate: end.predicate.as_ref(),
                record: end.record.as_ref(),
                body: None,
                role,
                resolved: resolve_all(&end.specs),
                origin: span.origin,
                span: end.span,
            });
        }
    }
    errors.extend(lone_probe_mixed(&sources));
    if !errors.is_empty() {
        return Err(errors);
    }

    let mut checker = Checker::new(env, options);
    let type_errors = checker.types.define(&script.types);
    if !type_errors.is_empty() {
        return Err(type_errors);
    }
    checker.check_all(&sources, script);
    checker.errors.clear();
    checker.final_pass = true;
    let probes = checker.check_all(&sources, script);
    checker.check_task_storage_maps();
    let first_span = probes.first().map_or(Span::default(), |p| p.span);
    let mm_layout = match user_stack_layout(&checker.records, env, first_span) {
        Ok(layout) => layout,
        Err(error) => {
            checker.errors.push(error);
            None
        }
    };
    let kernel_walk = kernel_walk(&checker.records, env, options);
    if checker.errors.is_empty() {
        warnings.append(&mut checker.warnings);
        warnings.dedup();
        Ok(CheckedProgram {
            probes,
            warnings,
            maps: checker.maps,
            records: checker.records,
            spans: checker.spans,
            filter: options.filter.clone(),
            map_keys_max: options.map_keys_max,
            output_pages_per_cpu: options.output_pages_per_cpu,
            helper_checks: options.helper_checks,
            values: checker.values,
            counters: match checker.reads_counters {
                true => options.pmu.clone(),
                false => Vec::new(),
            },
            mm_layout,
            offcpu_min_block_ns: options.offcpu_min_block_ns,
            kernel_walk,
            task_work: task_work(env, options),
            frame_pointers_only: options.frame_pointers_only,
            untrusted_views: checker.untrusted_views,
        })
    } else {
        Err(checker.errors)
    }
}

/// The task-work kfunc `-S offcpu=DUR` schedules its deferred stacks with,
/// unless the kernel has none or the options force `sys_exit`.
fn task_work(env: &dyn Environment, options: &CompileOptions) -> Option<TaskWork> {
    if options.offcpu_min_block_ns.is_none() || options.offcpu_sys_exit {
        return None;
    }
    let names = crate::codegen::helpers::TASK_WORK_SCHEDULE_RESUME;
    let kfunc = names.iter().find_map(|name| env.kfunc_id(name))?;
    let task_pid = crate::unwind::layout::member_offset(env, "struct task_struct", "pid").ok()?;
    Some(TaskWork { kfunc, task_pid })
}

/// An error when a probe that must run alone (an iterator) shares the
/// script with another attached probe (BEGIN and END may surround it).
fn lone_probe_mixed(sources: &[Source]) -> Option<ScriptError> {
    let points = || {
        sources
            .iter()
            .flat_map(|s| s.resolved.iter().map(move |p| (s, p)))
    };
    let (block, lone) = points().find(|(_, p)| providers::of(&p.attach).runs_alone())?;
    let others = points()
        .filter(|(_, p)| !providers::of(&p.attach).runs_once())
        .count();
    (others > 1).then(|| {
        ScriptError::new(
            block.span,
            format!(
                "`{}` must be the only probe besides BEGIN and END",
                lone.name
            ),
        )
        .with_help(
            "an iterator runs once over every object when wprof reads it, then tracing ends; \
             run other probes in another wprof",
        )
    })
}

/// The unwinder's view of the kernel, when some record has a user stack.
fn user_stack_layout(
    records: &[RecordDecl],
    env: &dyn Environment,
    script_span: Span,
) -> Result<Option<MmLayout>, ScriptError> {
    if !records.iter().any(|r| r.stack.is_some_and(StackKind::user)) {
        return Ok(None);
    }
    MmLayout::resolve(env).map(Some).map_err(|why| {
        ScriptError::new(
            script_span,
            format!("user stacks need the kernel's task and memory layout: {why}"),
        )
    })
}

/// Where the kernel-stack walker finds a task's stack, when a record may
/// take a switching task's kernel stack (only `stack(offcpu, NEXT)` takes
/// it without a threshold); `None` on a kernel whose types do not say.
fn kernel_walk(
    records: &[RecordDecl],
    env: &dyn Environment,
    options: &CompileOptions,
) -> Option<u32> {
    let kernel_stacks = records
        .iter()
        .any(|r| r.stack.is_some_and(StackKind::kernel));
    (kernel_stacks && options.offcpu_min_block_ns.is_none())
        .then(|| crate::unwind::layout::task_stack_offset(env).ok())
        .flatten()
}

/// Expands one spec into its attach points through its provider; an error
/// says whether only the spec's target is missing (skippable in a block
/// with other attach points).
fn resolve(spec: &ProbeSpec, env: &dyn Environment) -> Result<Resolved, (ScriptError, bool)> {
    let parts = spec.parts.iter().map(String::as_str).collect();
    let text = providers::Spec {
        word: &spec.provider,
        parts,
    };
    providers::resolve(&text, env).map_err(|error| {
        let diagnostic = ScriptError::new(spec.span, error.message);
        let diagnostic = match error.help {
            Some(help) => diagnostic.with_help(help),
            None => diagnostic,
        };
        (diagnostic, error.missing)
    })
}

/// The spec as written, `uprobe:libssl:SSL_read`.
fn spec_text(spec: &ProbeSpec) -> String {
    std::iter::once(spec.provider.as_str())
        .chain(spec.parts.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(":")
}

/// A block whose every attach point names a missing function: the errors,
/// the first with a hint.
fn nothing_to_attach(skipped: &[(&ProbeSpec, ScriptError)]) -> Vec<ScriptError> {
    skipped
        .iter()
        .enumerate()
        .map(|(i, (spec, error))| match i {
            0 if spec.provider.starts_with('k') => error.clone().with_help(
                "this kernel may name the function differently: list its functions with \
                 `wprof -l 'kprobe:*NAME*'`",
            ),
            0 => error.clone().with_help(
                "the function may be in another library the program loads (e.g. pthread_create \
                 is in libc.so.6 since glibc 2.34: uprobe:libc:pthread_create)",
            ),
            _ => error.clone(),
        })
        .collect()
}

/// A probe block or one end of a span, with its attach points.
pub(super) struct Source<'a> {
    predicate: Option<&'a Expr>,
    record: Option<&'a Record>,
    body: Option<&'a Block>,
    pub(super) role: SourceRole<'a>,
    resolved: Vec<ResolvedProbe>,
    origin: RecordOrigin,
    pub(super) span: Span,
}

#[derive(Clone, Copy)]
pub(super) enum SourceRole<'a> {
    Plain,
    SpanStart(SpanRef, Option<&'a Expr>),
    SpanEnd(SpanRef, Option<&'a Expr>),
}

pub(crate) struct Checker<'e> {
    /// The machine: kernel types come from here on demand.
    pub(crate) env: &'e dyn Environment,
    pub(crate) options: &'e CompileOptions,
    pub(super) errors: Vec<ScriptError>,
    /// Warnings of the final pass, printed before tracing starts.
    warnings: Vec<String>,
    /// In the first pass errors are dropped and unknown types are assumed.
    pub(super) final_pass: bool,
    pub(super) maps: Vec<MapDecl>,
    map_index: HashMap<String, MapRef>,
    pub(super) records: Vec<RecordDecl>,
    /// The record of each `record NAME` statement's name.
    pub(super) named_records: HashMap<String, RecordRef>,
    pub(super) spans: Vec<SpanDecl>,
    /// Some record has a `pmu` item.
    pub(crate) reads_counters: bool,
    /// Variable types per (probe block, name), collected over both passes.
    var_types: HashMap<(usize, String), Type>,
    pub(super) probe: ProbeState,
    /// The C types the script can name: its own definitions, then BTF.
    pub(crate) types: TypeTable<'e>,
    /// What the values used so far need (stack maps, texts).
    pub(crate) values: ValueNeeds,
    /// Structs whose pointer members are loaded directly (`UntrustedViews`).
    pub(crate) untrusted_views: UntrustedViews,
    /// The BTF id of [`RDONLY_CAST`], looked up on first need.
    pub(crate) rdonly_cast: std::cell::OnceCell<Option<u32>>,
}

/// The kfunc that gives an untrusted view of a BTF pointer.
pub(crate) const RDONLY_CAST: &str = "bpf_rdonly_cast";

/// What the checker knows while inside one attach point's body.
#[derive(Default)]
pub(super) struct ProbeState {
    pub(super) block: usize,
    pub(super) resolved: Option<ResolvedProbe>,
    pub(super) vars: HashMap<String, VarId>,
    pub(super) var_list: Vec<Type>,
    pub(super) loop_depth: u32,
    /// Variables whose only assignments so far did not check: their uses
    /// are not reported again (the assignment's error says why).
    pub(super) unchecked_vars: HashSet<String>,
    /// Who wrote the block being checked.
    pub(super) origin: RecordOrigin,
}

impl<'e> Checker<'e> {
    fn new(env: &'e dyn Environment, options: &'e CompileOptions) -> Self {
        Checker {
            env,
            options,
            errors: Vec::new(),
            warnings: Vec::new(),
            final_pass: false,
            maps: Vec::new(),
            map_index: HashMap::new(),
            records: Vec::new(),
            named_records: HashMap::new(),
            spans: Vec::new(),
            reads_counters: false,
            var_types: HashMap::new(),
            probe: ProbeState::default(),
            types: TypeTable::new(env),
            values: ValueNeeds::default(),
            untrusted_views: UntrustedViews::default(),
            rdonly_cast: std::cell::OnceCell::new(),
        }
    }

    fn check_all(&mut self, sources: &[Source], script: &Script) -> Vec<CheckedProbe> {
        self.records.clear();
        self.named_records.clear();
        self.spans = script
            .spans
            .iter()
            .map(|span| self.declare_span(span))
            .collect();
        let mut probes = Vec::new();
        for (source_index, source) in sources.iter().enumerate() {
            for probe in &source.resolved {
                self.probe = ProbeState {
                    block: source_index,
                    resolved: Some(probe.clone()),
                    origin: source.origin,
                    ..ProbeState::default()
                };
                let predicate = source.predicate.map(|p| self.condition(p));
                let record = source.record.map(|r| self.record(r, source));
                let record = match (record, source.role) {
                    (Some(record), _) => record,
                    (None, SourceRole::Plain) => None,
                    // A span end without items still takes part.
                    (None, _) => self.record(
                        &Record {
                            items: vec![],
                            span: source.span,
                        },
                        source,
                    ),
                };
                let body = source.body.map(|b| self.block(b)).unwrap_or_default();
                let command_identity = self.command_identity(source.span);
                probes.push(CheckedProbe {
                    name: probe.name.clone(),
                    attach: probe.attach.clone(),
                    predicate,
                    record,
                    body,
                    variables: std::mem::take(&mut self.probe.var_list),
                    span: source.span,
                    function_entry: probe.function_entry,
                    user_memory: probe.user_memory,
                    origin: source.origin,
                    command_identity,
                });
            }
        }
        self.finish_spans();
        probes
    }

    /// Warns once the script is known (the first pass repeats every check).
    pub(crate) fn warn(&mut self, message: &str) {
        if self.final_pass {
            self.warnings.push(message.to_string());
        }
    }

    pub(crate) fn error(&mut self, error: ScriptError) {
        if self.final_pass {
            self.errors.push(error);
        }
    }

    /// An error for when the program is run, not when it is compiled.
    pub(crate) fn defer_error(&mut self, error: ScriptError) {
        if self.final_pass {
            self.values.unrunnable.push(error);
        }
    }

    pub(crate) fn resolved(&self) -> &ResolvedProbe {
        self.probe
            .resolved
            .as_ref()
            .expect("bodies are only checked inside a resolved probe")
    }

    fn block(&mut self, block: &Block) -> Vec<TStmt> {
        block.stmts.iter().filter_map(|s| self.stmt(s)).collect()
    }

    fn stmt(&mut self, stmt: &Stmt) -> Option<TStmt> {
        let kind = match &stmt.kind {
            StmtKind::Expr(expr) => self.expr_stmt(expr)?,
            StmtKind::Assign {
                target,
                op: None,
                value,
            } => self.assign(target, value)?,
            StmtKind::Assign {
                target,
                op: Some(op),
                value,
            } => self.compound(target, *op, value.clone(), stmt.span)?,
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => TStmtKind::If {
                cond: self.condition(cond),
                then: self.block(then),
                otherwise: otherwise
                    .as_ref()
                    .map(|b| self.block(b))
                    .unwrap_or_default(),
            },
            StmtKind::While { cond, body } => {
                let cond = self.condition(cond);
                self.probe.loop_depth += 1;
                let body = self.block(body);
                self.probe.loop_depth -= 1;
                TStmtKind::While { cond, body }
            }
            StmtKind::Unroll { count, body } => {
                let count = self.unroll_count(count)?;
                TStmtKind::Unroll {
                    count,
                    body: self.block(body),
                }
            }
            StmtKind::Break | StmtKind::Continue => {
                if self.probe.loop_depth == 0 {
                    let word = if matches!(stmt.kind, StmtKind::Break) {
                        "break"
                    } else {
                        "continue"
                    };
                    self.error(ScriptError::new(
                        stmt.span,
                        format!("`{word}` outside of a loop"),
                    ));
                    return None;
                }
                if matches!(stmt.kind, StmtKind::Break) {
                    TStmtKind::Break
                } else {
                    TStmtKind::Continue
                }
            }
            StmtKind::Return => TStmtKind::Return,
            StmtKind::Record { name, record } => {
                TStmtKind::Record(self.record_stmt(name, record, stmt.span)?)
            }
        };
        Some(TStmt {
            kind,
            span: stmt.span,
        })
    }

    /// The repeat count of `unroll(N)`: a literal from 1 to 100, as bpftrace
    /// (whose messages name the bound broken).
    fn unroll_count(&mut self, count: &Expr) -> Option<u32> {
        let message = match count.kind {
            ExprKind::Int(n) if (1..=100).contains(&n) => return Some(n as u32),
            ExprKind::Int(0) => "unroll minimum value is 1",
            ExprKind::Int(_) => "unroll maximum value is 100",
            _ => "unroll needs an integer literal from 1 to 100",
        };
        self.error(ScriptError::new(count.span, message));
        None
    }

    /// `x++` as a statement, function calls, and other expressions for effect.
    fn expr_stmt(&mut self, expr: &Expr) -> Option<TStmtKind> {
        match &expr.kind {
            ExprKind::IncDec {
                target, increment, ..
            } => self.inc_dec(target, *increment, expr.span),
            ExprKind::Call { name, args } => self.call_stmt(name, args, expr.span),
            // As in bpftrace, a statement `c ? printf(..) : printf(..)` runs one
            // branch for its effect: the branches need no value.
            ExprKind::Ternary {
                cond,
                then,
                otherwise,
            } => {
                let branch = |e: &Expr| Block {
                    stmts: vec![Stmt {
                        kind: StmtKind::Expr(e.clone()),
                        span: e.span,
                    }],
                    span: e.span,
                };
                let as_if = Stmt {
                    kind: StmtKind::If {
                        cond: (**cond).clone(),
                        then: branch(then),
                        otherwise: Some(branch(otherwise)),
                    },
                    span: expr.span,
                };
                self.stmt(&as_if).map(|s| s.kind)
            }
            _ => {
                let checked = self.expr(expr)?;
                Some(TStmtKind::Expr(checked))
            }
        }
    }

    pub(super) fn assign(&mut self, target: &Expr, value: &Expr) -> Option<TStmtKind> {
        match &target.kind {
            ExprKind::Var(name) => {
                let Some(value) = self.expr(value) else {
                    self.probe.unchecked_vars.insert(name.clone());
                    return None;
                };
                let var = self.declare_var(name, &value.ty, target.span)?;
                Some(TStmtKind::AssignVar { var, value })
            }
            ExprKind::Map { name, keys } => {
                if let ExprKind::Call { name: func, args } = &value.kind
                    && let Some(found) = builtins::aggregation(func)
                {
                    let (agg, arg) = found.hooks.check(self, &found.site(args, value.span))?;
                    let key = self.map_key(keys, target.span)?;
                    let map = self.declare_map(
                        name,
                        key.as_ref().map(|k| &k.ty),
                        MapValueKind::Aggregate(agg),
                        target.span,
                    )?;
                    return Some(TStmtKind::Aggregate {
                        map,
                        key,
                        func: agg,
                        arg,
                    });
                }
                if value.mentions_map(name) && !self.map_index.contains_key(name) {
                    self.declare_int_map(name, keys, target.span)?;
                }
                let value = self.expr(value)?;
                if value.ty == Type::Void {
                    self.error(ScriptError::new(
                        value.span,
                        "this expression has no value to store",
                    ));
                    return None;
                }
                let key = self.map_key(keys, target.span)?;
                let map = self.declare_map(
                    name,
                    key.as_ref().map(|k| &k.ty),
                    MapValueKind::Plain(value.ty.clone()),
                    target.span,
                )?;
                Some(TStmtKind::AssignMap { map, key, value })
            }
            _ => {
                self.error(ScriptError::new(
                    target.span,
                    "can only assign to a `$variable` or a `@map`",
                ));
                None
            }
        }
    }

    /// The key of a map access: none, one expression, or a tuple of several.
    pub(crate) fn map_key(&mut self, keys: &[Expr], span: Span) -> Option<Option<TExpr>> {
        let mut checked = Vec::new();
        for key in keys {
            let key = self.expr(key)?;
            if matches!(key.ty, Type::Void | Type::Tuple(_)) {
                self.error(ScriptError::new(
                    key.span,
                    format!("a map key cannot be of type {}", key.ty),
                ));
                return None;
            }
            checked.push(key);
        }
        Some(match checked.len() {
            0 => None,
            1 => {
                self.check_task_key(&checked[0])?;
                checked.pop()
            }
            _ => {
                let ty = Type::Tuple(checked.iter().map(|k| k.ty.clone()).collect());
                Some(TExpr {
                    kind: TExprKind::Tuple(checked),
                    ty,
                    span,
                })
            }
        })
    }

    pub(super) fn declare_var(&mut self, name: &str, ty: &Type, span: Span) -> Option<VarId> {
        let slot = (self.probe.block, name.to_string());
        let unified = match self.var_types.get(&slot) {
            None => ty.clone(),
            Some(known) => match known.unify(ty) {
                Some(t) => t,
                None => {
                    self.error(ScriptError::new(
                        span,
                        format!("${name} holds {known} elsewhere; cannot assign {ty}"),
                    ));
                    return None;
                }
            },
        };
        self.var_types.insert(slot, unified.clone());
        if let Some(&id) = self.probe.vars.get(name) {
            self.probe.var_list[id.0] = unified;
            return Some(id);
        }
        let id = VarId(self.probe.var_list.len());
        self.probe.var_list.push(unified);
        self.probe.vars.insert(name.to_string(), id);
        Some(id)
    }

    /// The type a variable settles on after every assignment in the script.
    pub(super) fn var_type(&self, name: &str) -> Option<Type> {
        self.var_types
            .get(&(self.probe.block, name.to_string()))
            .cloned()
    }

    pub(super) fn declare_map(
        &mut self,
        name: &str,
        key: Option<&Type>,
        value: MapValueKind,
        span: Span,
    ) -> Option<MapRef> {
        let display = format!("@{name}");
        let Some(&map) = self.map_index.get(name) else {
            let map = MapRef(self.maps.len());
            self.maps.push(MapDecl {
                name: display,
                key: key.cloned(),
                value,
                read_in_kernel: false,
                span,
            });
            self.map_index.insert(name.to_string(), map);
            return Some(map);
        };
        let decl = &self.maps[map.0];
        let key = match (&decl.key, key) {
            (None, None) => None,
            (Some(a), Some(b)) => match a.unify(b) {
                Some(t) => Some(t),
                None => {
                    self.error(ScriptError::new(
                        span,
                        format!("{display} has keys of type {a} elsewhere; this key is {b}"),
                    ));
                    return None;
                }
            },
            (a, b) => {
                let describe =
                    |k: Option<&Type>| k.map_or("no key".to_string(), |t| format!("{t} keys"));
                let message = format!(
                    "{display} is used with {} elsewhere and with {} here",
                    describe(a.as_ref()),
                    describe(b)
                );
                self.error(ScriptError::new(span, message));
                return None;
            }
        };
        let value = match (&decl.value, value) {
            (MapValueKind::Plain(a), MapValueKind::Plain(b)) => match a.unify(&b) {
                Some(t) => MapValueKind::Plain(t),
                None => {
                    self.error(ScriptError::new(
                        span,
                        format!("{display} holds {a} elsewhere; cannot store {b}"),
                    ));
                    return None;
                }
            },
            (MapValueKind::Aggregate(a), MapValueKind::Aggregate(b)) if *a == b => {
                MapValueKind::Aggregate(b)
            }
            (old, new) => {
                let describe = |v: &MapValueKind| match v {
                    MapValueKind::Plain(t) => format!("values of type {t}"),
                    MapValueKind::Aggregate(f) => format!("{}()", f.name()),
                };
                let message = format!(
                    "{display} holds {} elsewhere; cannot also hold {}",
                    describe(old),
                    describe(&new)
                );
                self.error(ScriptError::new(span, message));
                return None;
            }
        };
        let decl = &mut self.maps[map.0];
        decl.key = key;
        decl.value = value;
        Some(map)
    }

    pub(crate) fn lookup_map(&mut self, name: &str, span: Span) -> Option<MapRef> {
        match self.map_index.get(name) {
            Some(&map) => Some(map),
            None => {
                self.error(ScriptError::new(span, format!("@{name} is never assigned")));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
