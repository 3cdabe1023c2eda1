//! The pipeline, in order: parse, check, compile, then (in `runtime`) load,
//! attach and run. Errors that point into the script come back as
//! [`ScriptErrors`], whatever stage found them.

use crate::capture::model::RecordOrigin;
use crate::codegen::listing::instruction_span;
use crate::codegen::program::Compiled;
use std::path::Path;

use crate::frontend::ast::{Script, Span};
use crate::frontend::checked::CheckedProgram;
use crate::frontend::diag::{INLINE_SCRIPT_NAME, ScriptError, ScriptErrors, SourceMap};
use crate::frontend::options::CompileOptions;
use crate::frontend::preprocess::{self, Expansion};
use crate::frontend::{check, parse, positional, shift};
use crate::providers;
use crate::runtime::bpf::loader::LoadError;
use crate::runtime::targets::features::KernelFeatures;
use crate::vocab::Environment;

/// A script, the name diagnostics show for it, and who wrote it.
#[derive(Clone, Debug)]
pub struct Source {
    pub name: String,
    pub text: String,
    /// `Script` for the user's script, `Tracker` for a built-in tracker:
    /// becomes the `origin` of the records it defines.
    pub origin: RecordOrigin,
}

/// The offset space a program merged from `sources` lives in: spans of the
/// checked program and of compiled instructions are offsets in it.
pub fn source_map(sources: &[Source]) -> SourceMap {
    SourceMap::new(sources.iter().map(|s| (s.name.as_str(), s.text.as_str())))
}

/// Parse every source, merge them into one program, check and compile it.
/// Maps of the same name are shared between sources; positional parameters
/// (`$1`, `$#`) are those of the first source (the user's script).
pub fn compile(
    sources: &[Source],
    params: &[String],
    env: &dyn Environment,
    options: &CompileOptions,
) -> Result<(CheckedProgram, Compiled), ScriptErrors> {
    let map = source_map(sources);
    let mut script = Script::default();
    let mut expansions = Vec::new();
    for (index, source) in sources.iter().enumerate() {
        let base = map.base(index);
        let (mut part, uses) = parse_source(source, env, options)?;
        positional::substitute(&mut part, if index == 0 { params } else { &[] });
        shift::shift_spans(&mut part, base);
        expansions.extend(uses.into_iter().map(|mut e| {
            e.written = Span::new(e.written.start + base, e.written.end + base);
            e
        }));
        for probe in &mut part.probes {
            probe.origin = source.origin;
        }
        for span in &mut part.spans {
            span.origin = source.origin;
        }
        script.probes.append(&mut part.probes);
        script.spans.append(&mut part.spans);
        script.types.append(&mut part.types);
    }
    let errors = |errors| map.errors(explain_macros(errors, &expansions));
    let checked = check::check(&script, env, options).map_err(errors)?;
    let task_fields = crate::codegen::TaskFields::for_program(&checked, env);
    let compiled = crate::codegen::compile(&checked, task_fields).map_err(errors)?;
    Ok((checked, compiled))
}

/// One source preprocessed (the user's script: trackers have no `#`
/// lines) and parsed, with spans in its text as written, and its macro uses.
fn parse_source(
    source: &Source,
    env: &dyn Environment,
    options: &CompileOptions,
) -> Result<(Script, Vec<Expansion>), ScriptErrors> {
    if source.origin != RecordOrigin::Script {
        return Ok((parse::parse(&source.text, &source.name)?, Vec::new()));
    }
    let fail = |errors| ScriptErrors::new(&source.name, &source.text, errors);
    let setup = preprocess::Setup {
        include_dirs: &options.includes.dirs,
        include_files: &options.includes.files,
        have_btf: env.has_btf(),
        script_path: (source.name != INLINE_SCRIPT_NAME).then(|| Path::new(&source.name)),
    };
    let pre = preprocess::preprocess(&source.text, &setup).map_err(fail)?;
    for note in &pre.notes {
        eprintln!("wprof: note: {}: {note}", source.name);
    }
    let to_written = |span| pre.map.to_written(span);
    let mut script = parse::parse_text(&pre.text).map_err(|errors| {
        let moved = errors.into_iter().map(|mut e| {
            e.span = to_written(e.span);
            e
        });
        fail(explain_macros(moved.collect(), &pre.expansions))
    })?;
    shift::map_spans(&mut script, &to_written);
    Ok((script, pre.expansions))
}

/// Errors at a macro use also say what the macro expanded to.
fn explain_macros(mut errors: Vec<ScriptError>, expansions: &[Expansion]) -> Vec<ScriptError> {
    for error in &mut errors {
        let overlaps = |e: &&Expansion| {
            e.written.start < error.span.end.max(error.span.start + 1)
                && error.span.start < e.written.end
        };
        if let Some(expansion) = expansions.iter().find(overlaps) {
            let help = match error.help.take() {
                Some(help) => format!("{help}\n{}", expansion.help()),
                None => expansion.help(),
            };
            error.help = Some(help);
        }
    }
    errors
}

/// Errors for probes this kernel cannot run, pointing at their probe blocks.
pub fn check_kernel_support(
    sources: &SourceMap,
    checked: &CheckedProgram,
    features: &KernelFeatures,
) -> Result<(), ScriptErrors> {
    let mut errors = Vec::new();
    for probe in &checked.probes {
        let needs = providers::of(&probe.attach).feature(&probe.attach);
        if let Some(reason) = needs.and_then(|feature| features.get(feature).reason()) {
            errors.push(ScriptError::new(
                probe.span,
                format!("cannot run `{}`: {reason}", probe.name),
            ));
        }
    }
    errors.extend(checked.values.unrunnable.iter().cloned());
    if errors.is_empty() {
        Ok(())
    } else {
        Err(sources.errors(errors))
    }
}

/// [`check_kernel_support`] for a program read from the compile cache:
/// there is no script text to point at, so the error names the probe.
pub fn check_compiled_support(
    compiled: &Compiled,
    features: &KernelFeatures,
) -> Result<(), String> {
    let unsupported = compiled.programs.iter().find_map(|program| {
        let needs = providers::of(&program.attach).feature(&program.attach);
        let reason = needs.and_then(|feature| features.get(feature).reason())?;
        Some(format!("cannot run `{}`: {reason}", program.probe))
    });
    unsupported.map_or(Ok(()), Err)
}

/// Lines of the verifier log shown with a rejected program.
const VERIFIER_LOG_LINES: usize = 12;

/// A verifier rejection as a diagnostic on the script text that produced the
/// failing instruction; `None` for other load errors.
pub fn verifier_diagnostic(
    error: &LoadError,
    compiled: &Compiled,
    sources: &SourceMap,
) -> Option<ScriptErrors> {
    let LoadError::Verifier {
        program,
        probe,
        log,
        failing_insn,
    } = error
    else {
        return None;
    };
    let compiled_program = compiled.programs.iter().find(|p| &p.name == program)?;
    let span = failing_insn
        .and_then(|insn| instruction_span(compiled_program, insn))
        .or_else(|| compiled_program.spans.iter().flatten().next().copied())?;
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(VERIFIER_LOG_LINES)..].join("\n");
    let at = failing_insn.map_or(String::new(), |i| format!(" at instruction {i}"));
    let error = ScriptError::new(span, format!("the BPF verifier rejected `{probe}`{at}"))
        .with_label("the failing instruction came from here")
        .with_help(format!(
            "verifier log (last lines; see the full program with --dump-bpf):\n{tail}"
        ));
    Some(sources.errors(vec![error]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::fake_machine::FakeMachine;

    fn source(name: &str, text: &str, origin: RecordOrigin) -> Source {
        Source {
            name: name.into(),
            text: text.into(),
            origin,
        }
    }

    /// A user script and a tracker that share `@n`.
    fn sources(tracker: &str) -> Vec<Source> {
        vec![
            source(
                "user.bt",
                "kprobe:f < a = arg0 > { @n = count(); }",
                RecordOrigin::Script,
            ),
            source("sched.wp", tracker, RecordOrigin::Tracker),
        ]
    }

    #[track_caller]
    fn rendered_error(sources: &[Source]) -> String {
        match compile(sources, &[], &FakeMachine, &CompileOptions::default()) {
            Ok(_) => panic!("expected an error"),
            Err(errors) => errors.render(),
        }
    }

    /// Sources merge into one program: maps of one name are one map, and
    /// each record keeps the origin of the source that defined it.
    #[test]
    fn merges_sources() {
        let all = sources("kprobe:g { @n = count(); record t < b = 1 > }");
        let (checked, compiled) =
            compile(&all, &[], &FakeMachine, &CompileOptions::default()).expect("compiles");
        assert_eq!(checked.maps.len(), 1);
        let origins: Vec<_> = compiled
            .records
            .iter()
            .map(|r| (r.name.as_str(), r.origin))
            .collect();
        assert_eq!(
            origins,
            [("f", RecordOrigin::Script), ("t", RecordOrigin::Tracker)]
        );
    }

    /// Check errors in the second source name that file, with its own line
    /// and column.
    #[test]
    fn check_errors_name_their_source() {
        let text = rendered_error(&sources("kprobe:g {\n  @n = count();\n  nosuch(1);\n}"));
        assert!(text.contains("[sched.wp:3:3]"), "{text}");
        assert!(!text.contains("user.bt"), "{text}");
        let text = rendered_error(&[
            source(
                "user.bt",
                "kprobe:f {\n  nosuch(1);\n}",
                RecordOrigin::Script,
            ),
            source("sched.wp", "kprobe:g { @n = 1 }", RecordOrigin::Tracker),
        ]);
        assert!(text.contains("[user.bt:2:3]"), "{text}");
    }

    /// Syntax errors name the source that has them.
    #[test]
    fn parse_errors_name_their_source() {
        let text = rendered_error(&sources("kprobe:g {\n  @n = ;\n}"));
        assert!(text.contains("[sched.wp:2:8]"), "{text}");
    }

    /// `$1` and `$#` are the user's parameters, and only in the first source.
    #[test]
    fn positional_parameters_belong_to_the_first_source() {
        let all = vec![
            source("user.bt", "kprobe:f { @a[$1] = $#; }", RecordOrigin::Script),
            source(
                "sched.wp",
                "kprobe:g { @b[$#] = 1; }",
                RecordOrigin::Tracker,
            ),
        ];
        let params = ["x".to_owned()];
        let (checked, _) =
            compile(&all, &params, &FakeMachine, &CompileOptions::default()).expect("compiles");
        let keys: Vec<String> = checked
            .maps
            .iter()
            .map(|m| format!("{:?}", m.key))
            .collect();
        assert!(keys[0].contains("Str"), "$1 is the string x: {keys:?}");
        assert!(keys[1].contains("Int"), "$# is 0 in a tracker: {keys:?}");
    }
}
