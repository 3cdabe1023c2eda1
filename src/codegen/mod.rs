//! Code generation: checked program → BPF programs, map specs and message layouts.
//!
//! Each probe is lowered to IR over virtual registers (`lower*`), given
//! registers (`regalloc`), and emitted through the assembler (`emit`, `asm`).

pub mod asm;
pub mod disasm;
mod emit;
mod glob_nfa;
pub(crate) mod helpers;
pub mod ir;
pub mod listing;
pub(crate) mod lower;
mod lower_bytes;
mod lower_expr;
mod lower_kernel;
mod lower_map;
mod lower_record;
mod lower_selected;
mod lower_task_storage;
mod lower_values;
mod maps;
pub mod program;
mod prune;
pub mod regalloc;

use crate::capture::model::{FieldSchema, FieldType, RecordKind, RecordSchema};
use crate::frontend::checked::{CheckedProgram, RecordDecl};
use crate::frontend::diag::ScriptError;
use crate::frontend::types::Type;
use program::{Compiled, CounterMap};

/// The most stack a BPF program may use.
pub const STACK_LIMIT: u32 = 512;

pub fn compile(program: &CheckedProgram) -> Result<Compiled, Vec<ScriptError>> {
    let (maps, layouts) = maps::layout(program);
    let mut compiled = Compiled {
        maps,
        ringbuf: Some(layouts.ringbuf),
        globals: Some(layouts.globals),
        records: program.records.iter().map(record_schema).collect(),
        kernel_stacks: layouts.kernel_stacks,
        user_stacks: layouts.user_stacks,
        drops: layouts.drops,
        initial_values: layouts
            .globs
            .map(|map| (map, layouts.glob_set.table_bytes()))
            .into_iter()
            .collect(),
        texts: program.values.texts.clone(),
        value_stacks: layouts.value_stacks.clone(),
        counters: program
            .counters
            .iter()
            .zip(&layouts.counters)
            .map(|(counter, &map)| CounterMap {
                name: counter.name.clone(),
                event: counter.event,
                map,
            })
            .collect(),
        ..Compiled::default()
    };
    let mut errors = Vec::new();
    for (index, probe) in program.probes.iter().enumerate() {
        let (mut function, (_, peak_span)) =
            lower::Lowerer::lower(probe, index, program, &layouts, &mut compiled.messages);
        prune::remove_unreachable(&mut function);
        let allocation = regalloc::allocate(&function);
        if allocation.frame_bytes > STACK_LIMIT {
            let message = format!(
                "`{}` needs {} bytes of BPF stack; the kernel allows {STACK_LIMIT}",
                probe.name, allocation.frame_bytes
            );
            let help = "this statement needs the most: split it, or use shorter strings (`str(p, N)`) and fewer string arguments";
            errors.push(ScriptError::new(peak_span.unwrap_or(probe.span), message).with_help(help));
            continue;
        }
        match emit::emit(&function, &allocation) {
            Ok(assembled) => {
                let name = program_name(index, &probe.name);
                compiled.programs.push(assembled.into_program(
                    name,
                    probe.name.clone(),
                    probe.attach.clone(),
                ));
            }
            Err(error) => errors.push(ScriptError::new(
                probe.span,
                format!("internal code generation error: {error}"),
            )),
        }
    }
    if errors.is_empty() {
        Ok(compiled)
    } else {
        Err(errors)
    }
}

/// How a record kind is described in captures.
fn record_schema(decl: &RecordDecl) -> RecordSchema {
    let fields = decl
        .fields
        .iter()
        .map(|(name, ty)| FieldSchema {
            name: name.clone(),
            ty: match ty {
                Type::Int { signed: true, .. } => FieldType::Int,
                Type::KernelPtr(ptr) if ptr.is_task() => FieldType::Thread,
                Type::Int { .. } | Type::KernelPtr(_) => FieldType::UInt,
                _ => FieldType::Str,
            },
        })
        .collect();
    RecordSchema {
        origin: decl.origin,
        probe: decl.probe.clone(),
        name: decl.name.clone(),
        kind: if decl.is_span {
            RecordKind::Span
        } else {
            RecordKind::Instant
        },
        fields,
        has_stack: decl.stack.is_some(),
    }
}

/// A BPF object name (at most 15 characters) that still says which probe it is.
fn program_name(index: usize, probe: &str) -> String {
    let tail: String = probe
        .rsplit(':')
        .next()
        .unwrap_or(probe)
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let mut name = format!("p{index}_{tail}");
    name.truncate(15);
    name
}
