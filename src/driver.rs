//! The pipeline, in order: parse, check, compile, then (in `runtime`) load,
//! attach and run. Errors that point into the script come back as
//! [`ScriptErrors`], whatever stage found them.

use crate::codegen::listing::instruction_span;
use crate::codegen::program::{AttachPoint, Compiled};
use crate::frontend::checked::CheckedProgram;
use crate::frontend::diag::{ScriptError, ScriptErrors};
use crate::frontend::options::CompileOptions;
use crate::frontend::probes::Environment;
use crate::frontend::{check, parse, positional};
use crate::runtime::features::KernelFeatures;
use crate::runtime::loader::LoadError;

/// A script and the name diagnostics show for it.
#[derive(Clone, Debug)]
pub struct Source {
    pub name: String,
    pub text: String,
}

/// Parse, check and compile `source`.
pub fn compile(
    source: &Source,
    params: &[String],
    env: &dyn Environment,
) -> Result<(CheckedProgram, Compiled), ScriptErrors> {
    let errors = |errors| ScriptErrors::new(&source.name, &source.text, errors);
    let mut script = parse::parse(&source.text, &source.name)?;
    positional::substitute(&mut script, params);
    let checked = check::check(&script, env, &CompileOptions::default()).map_err(errors)?;
    let compiled = crate::codegen::compile(&checked).map_err(errors)?;
    Ok((checked, compiled))
}

/// Errors for probes this kernel cannot run, pointing at their probe blocks.
pub fn check_kernel_support(
    source: &Source,
    checked: &CheckedProgram,
    features: &KernelFeatures,
) -> Result<(), ScriptErrors> {
    let mut errors = Vec::new();
    for probe in &checked.probes {
        let missing = match &probe.attach {
            AttachPoint::Kprobe { .. } => features.kprobes.reason().map(str::to_owned),
            AttachPoint::Fentry { .. } => features.fentry().reason().map(str::to_owned),
            AttachPoint::PerfEvent { event, .. } if event.type_ == 0 => {
                features.hardware_pmu.reason().map(str::to_owned)
            }
            AttachPoint::Uprobe { .. } | AttachPoint::Usdt { .. } => {
                features.uprobes.reason().map(str::to_owned)
            }
            AttachPoint::Tracepoint { .. } => features.tracepoints.reason().map(str::to_owned),
            _ => None,
        };
        if let Some(reason) = missing {
            errors.push(ScriptError::new(
                probe.span,
                format!("cannot run `{}`: {reason}", probe.name),
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ScriptErrors::new(&source.name, &source.text, errors))
    }
}

/// Lines of the verifier log shown with a rejected program.
const VERIFIER_LOG_LINES: usize = 12;

/// A verifier rejection as a diagnostic on the script text that produced the
/// failing instruction; `None` for other load errors.
pub fn verifier_diagnostic(
    error: &LoadError,
    compiled: &Compiled,
    source: &Source,
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
    Some(ScriptErrors::new(&source.name, &source.text, vec![error]))
}
