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
mod lower_checks;
mod lower_expr;
mod lower_map;
mod lower_memory;
mod lower_provider;
mod lower_record;
mod lower_selected;
mod lower_snapshot;
mod lower_stack;
mod lower_task_storage;
mod lower_task_work;
mod lower_values;
mod lower_walk_slots;
mod maps;
pub mod program;
mod prune;
pub mod regalloc;
pub mod stack_layout;
mod task_fields;

use crate::capture::model::{FieldSchema, FieldType, RecordKind, RecordSchema};
use crate::frontend::checked::{CheckedProbe, CheckedProgram, RecordDecl};
use crate::frontend::diag::ScriptError;
use crate::frontend::options::COMMAND_TREE_MAP;
use crate::frontend::types::Type;
use crate::vocab::{AttachPoint, Message, WatchTarget};
use program::{BpfProgram, CommandTreeMap, Compiled, CounterMap};
pub use task_fields::TaskFields;

/// The map of `--only-command`'s tracker, when the program has it.
fn command_tree_map(
    program: &CheckedProgram,
    layouts: &maps::MapLayouts,
) -> Option<CommandTreeMap> {
    let index = (program.maps.iter()).position(|m| m.name == COMMAND_TREE_MAP)?;
    let layout = &layouts.script[index];
    Some(CommandTreeMap {
        map: layout.id,
        key_size: layout.key_size,
        value_size: layout.value_size,
    })
}

/// The most stack a BPF program may use.
pub const STACK_LIMIT: u32 = 512;

/// Compiles `program`; `task_fields` (when the kernel's BTF gives them) lets
/// records of BTF-typed probes read the current task's identity directly.
pub fn compile(
    program: &CheckedProgram,
    task_fields: Option<TaskFields>,
) -> Result<Compiled, Vec<ScriptError>> {
    let (maps, layouts) = maps::layout(program);
    let mut compiled = Compiled {
        maps,
        ringbuf: Some(layouts.ringbuf),
        globals: Some(layouts.globals),
        records: program.records.iter().map(record_schema).collect(),
        probe_names: program.probes.iter().map(|p| p.name.clone()).collect(),
        unwind: layouts.stacks.and_then(|s| s.unwind),
        kernel_walk: layouts.stacks.and_then(|s| s.orc),
        kernel_stack_skips: kernel_stack_skips(program),
        tracepoint_glue: (layouts.stacks.and_then(|s| s.glue))
            .map(|map| (map, stack_layout::tracepoint_glue(program))),
        drops: layouts.drops,
        initial_values: layouts
            .globs
            .map(|map| (map, layouts.glob_set.table_bytes()))
            .into_iter()
            .collect(),
        texts: program.values.texts.clone(),
        value_stacks: layouts.value_stacks.clone(),
        command_tree: command_tree_map(program, &layouts),
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
    let groups = programs_by_attach_point(program);
    let task_work = lower_task_work::callback_groups(program, &groups);
    for (index, blocks) in groups.iter().enumerate() {
        let probe = blocks[0].1;
        let callback = match task_work {
            Some(pair) if pair.callback == index => continue,
            Some(pair) if pair.switch == index => {
                let callback = &groups[pair.callback];
                Some(lower_group(
                    callback,
                    program,
                    &layouts,
                    task_fields,
                    &mut compiled.messages,
                    true,
                ))
            }
            _ => None,
        };
        let lowered = lower_group(
            blocks,
            program,
            &layouts,
            task_fields,
            &mut compiled.messages,
            false,
        );
        let ((function, allocation), callback) = match (lowered, callback.transpose()) {
            (Ok(lowered), Ok(callback)) => (lowered, callback),
            (lowered, callback) => {
                errors.extend(lowered.err());
                errors.extend(callback.err());
                continue;
            }
        };
        let callback = callback.as_ref().map(|(f, a)| (f, a));
        match emit::emit_program(&function, &allocation, callback) {
            Ok(assembled) => {
                let name = program_name(index, &probe.name);
                let mut bpf =
                    assembled.into_program(name, probe.name.clone(), probe.attach.clone());
                bpf.blocks = blocks.len();
                compiled.programs.push(bpf);
            }
            Err(error) => errors.push(ScriptError::new(
                probe.span,
                format!("internal code generation error: {error}"),
            )),
        }
    }
    // After every attach point's program, so those keep their indices.
    for (index, blocks) in groups.iter().enumerate() {
        let (probe_index, probe) = blocks[0];
        let setup = watch_setup(
            probe,
            probe_index,
            index,
            program,
            &layouts,
            &mut compiled.messages,
        );
        compiled.programs.extend(setup);
    }
    maps::fit_quiet_output_ring(program, &mut compiled);
    if errors.is_empty() {
        Ok(compiled)
    } else {
        Err(errors)
    }
}

/// One program's (or task-work callback's) blocks lowered and given
/// registers, or the error of a frame too large for the kernel.
fn lower_group(
    blocks: &[(usize, &CheckedProbe)],
    program: &CheckedProgram,
    layouts: &maps::MapLayouts,
    task_fields: Option<TaskFields>,
    messages: &mut Vec<Message>,
    in_task_work: bool,
) -> Result<(ir::Function, regalloc::Allocation), ScriptError> {
    let probe = blocks[0].1;
    let (mut function, (_, peak_span)) = lower::Lowerer::lower(
        blocks,
        program,
        layouts,
        task_fields,
        messages,
        in_task_work,
    );
    prune::remove_unreachable(&mut function);
    let allocation = regalloc::allocate(&function);
    // The unwinder's functions take their frames from the same 512 bytes.
    let limit = match function.unwinder {
        Some(_) => STACK_LIMIT - crate::unwind::bpf::FRAME_BYTES,
        None => STACK_LIMIT,
    };
    if allocation.frame_bytes > limit {
        let message = format!(
            "`{}` needs {} bytes of BPF stack; the kernel allows {limit}",
            probe.name, allocation.frame_bytes
        );
        let help = "this statement needs the most: split it, or use shorter strings (`str(p, N)`) and fewer string arguments";
        return Err(ScriptError::new(peak_span.unwrap_or(probe.span), message).with_help(help));
    }
    Ok((function, allocation))
}

/// The checked probes grouped into programs: one per attach point (and
/// author: the trackers' blocks keep programs of their own), holding its
/// blocks in script order, each with its index in `program.probes`.
/// Programs come in the order of their first block.
fn programs_by_attach_point(program: &CheckedProgram) -> Vec<Vec<(usize, &CheckedProbe)>> {
    let mut groups: Vec<Vec<(usize, &CheckedProbe)>> = Vec::new();
    for (index, probe) in program.probes.iter().enumerate() {
        let same_point = |group: &&mut Vec<(usize, &CheckedProbe)>| {
            let first = group[0].1;
            first.attach == probe.attach && first.origin == probe.origin
        };
        match groups.iter_mut().find(same_point) {
            Some(group) => group.push((index, probe)),
            None => groups.push(vec![(index, probe)]),
        }
    }
    groups
}

/// The uprobe that sets a function-argument watchpoint, for such a probe
/// (`index` in `program.probes`) whose breakpoint program is `watching`.
fn watch_setup(
    probe: &CheckedProbe,
    index: usize,
    watching: usize,
    program: &CheckedProgram,
    layouts: &maps::MapLayouts,
    messages: &mut Vec<crate::vocab::Message>,
) -> Option<BpfProgram> {
    let AttachPoint::Watchpoint {
        target:
            WatchTarget::FunctionArg {
                binary,
                function,
                file_offset,
                arg,
            },
        sync,
        ..
    } = &probe.attach
    else {
        return None;
    };
    let lowerer = lower::Lowerer::new(probe, index, program, layouts, messages);
    let mut function_ir = lowerer.lower_watch_setup(watching as u32, *arg, *sync);
    prune::remove_unreachable(&mut function_ir);
    let allocation = regalloc::allocate(&function_ir);
    let assembled = emit::emit(&function_ir, &allocation).expect("the setup program assembles");
    let attach = AttachPoint::Uprobe {
        binary: binary.clone(),
        symbol: function.clone(),
        offset: *file_offset,
        retprobe: false,
    };
    let name = program_name(index, &format!("w_{function}"));
    Some(assembled.into_program(name, format!("{} (setup)", probe.name), attach))
}

/// The skip-count globals of the programs that take kernel stacks.
fn kernel_stack_skips(program: &CheckedProgram) -> Vec<crate::vocab::GlobalSlot> {
    let mut slots: Vec<_> = (program.probes.iter())
        .filter(|probe| {
            stack_layout::records_of(probe).any(|r| r.stack.is_some_and(|s| s.kernel()))
        })
        .filter_map(|probe| crate::providers::of(&probe.attach).kernel_stack_skip())
        .collect();
    slots.sort_by_key(|slot| *slot as u32);
    slots.dedup();
    slots
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
                Type::Ptr(ptr) if ptr.is_task() => FieldType::Thread,
                Type::Int { .. } | Type::Ptr(_) => FieldType::UInt,
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

#[cfg(test)]
mod tests {
    use crate::capture::model::RecordOrigin;
    use crate::codegen::program::Compiled;
    use crate::driver::{Source, compile};
    use crate::frontend::fake_machine::FakeMachine;
    use crate::frontend::options::CompileOptions;
    use crate::vocab::AttachPoint;

    fn compiled(sources: &[(&str, RecordOrigin)]) -> Compiled {
        let sources: Vec<Source> = sources
            .iter()
            .enumerate()
            .map(|(i, (text, origin))| Source {
                name: format!("s{i}.bt"),
                text: (*text).into(),
                origin: *origin,
            })
            .collect();
        let (_, compiled) = compile(&sources, &[], &FakeMachine, &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{}", e.render()));
        compiled
    }

    fn script(text: &str) -> Compiled {
        compiled(&[(text, RecordOrigin::Script)])
    }

    /// Blocks on one attach point share one program, in the order of their
    /// first block; `Attaching N probes` still counts every block.
    #[test]
    fn blocks_on_one_attach_point_share_a_program() {
        let compiled = script(
            "BEGIN { @a = 1; } kprobe:f { @b = 1; } BEGIN { @c = 1; } kprobe:f { @d = 1; } \
             kprobe:g { @e = 1; }",
        );
        let programs: Vec<(&str, usize)> = compiled
            .programs
            .iter()
            .map(|p| (p.probe.as_str(), p.blocks))
            .collect();
        assert_eq!(programs, [("BEGIN", 2), ("kprobe:f", 2), ("kprobe:g", 1)]);
        assert_eq!(compiled.programs[0].attach, AttachPoint::Begin);
        assert_eq!(
            compiled.probe_names,
            ["BEGIN", "kprobe:f", "BEGIN", "kprobe:f", "kprobe:g"]
        );
    }

    /// A block on several attach points is in each point's program.
    #[test]
    fn a_block_with_several_points_joins_each_program() {
        let compiled = script("kprobe:f, kprobe:g { @a = 1; } kprobe:g { @b = 1; }");
        let programs: Vec<(&str, usize)> = compiled
            .programs
            .iter()
            .map(|p| (p.probe.as_str(), p.blocks))
            .collect();
        assert_eq!(programs, [("kprobe:f", 1), ("kprobe:g", 2)]);
    }

    /// The built-in trackers' blocks keep programs apart from the user's
    /// blocks on the same point (they are gated differently).
    #[test]
    fn tracker_blocks_keep_their_own_programs() {
        let compiled = compiled(&[
            ("kprobe:f { @a = 1; }", RecordOrigin::Script),
            ("kprobe:f { @b = 1; }", RecordOrigin::Tracker),
        ]);
        assert_eq!(compiled.programs.len(), 2);
    }

    /// Blocks reuse the same stack bytes: two blocks that each need most of
    /// the 512 bytes fit in one program.
    #[test]
    fn blocks_reuse_the_stack() {
        let text = |c: char| {
            let long = c.to_string().repeat(120);
            format!("BEGIN {{ $a = \"{long}\"; $b = $a; printf(\"%s\\n\", $b); }}\n")
        };
        let compiled = script(&format!("{}{}", text('a'), text('b')));
        assert_eq!(compiled.programs.len(), 1);
        assert_eq!(compiled.programs[0].blocks, 2);
    }
}
