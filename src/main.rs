//! The `wprof` command.

use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;
use wprof::capture::model::RecordOrigin;
use wprof::cli::Cli;
use wprof::codegen::listing::render_listing;
use wprof::driver::{self, Source};
use wprof::frontend::diag::{INLINE_SCRIPT_NAME, ScriptErrors};
use wprof::frontend::options::CompileOptions;
use wprof::runtime::environment::SystemEnvironment;
use wprof::runtime::session::{self, CaptureTarget, RunError, RunOptions};

mod replay;
use wprof::runtime::{features, tracefs};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Script(errors)) => {
            eprintln!("{}", render(errors));
            ExitCode::FAILURE
        }
        Err(Failure::Message(message)) => {
            eprintln!("wprof: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Why wprof stops with an error: diagnostics on the script, or a plain message.
enum Failure {
    Script(ScriptErrors),
    Message(String),
}

impl From<ScriptErrors> for Failure {
    fn from(errors: ScriptErrors) -> Self {
        Failure::Script(errors)
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Message(message)
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    if cli.json_schema {
        print!("{}", wprof::render::ndjson::json_schema());
        return Ok(());
    }
    if cli.replay {
        return replay::replay(&cli);
    }
    let (source, params) = read_source(&cli)?;
    let _ = tracefs::ensure_mounted();
    let env = SystemEnvironment::new(cli.pid);
    let sources = std::slice::from_ref(&source);
    let (checked, compiled) = driver::compile(sources, &params, &env, &CompileOptions::default())?;
    let source_map = driver::source_map(sources);
    if cli.dump_bpf {
        let mut out = io::stdout().lock();
        for program in &compiled.programs {
            let section = program.attach.section();
            let text = format!(
                "; {} ({section}, {} instructions)\n{}\n",
                program.probe,
                program.insns.len(),
                render_listing(program, &source.text)
            );
            out.write_all(text.as_bytes())
                .map_err(|e| format!("cannot write the listing: {e}"))?;
        }
        return Ok(());
    }
    driver::check_kernel_support(&source_map, &checked, &features::detect())?;
    let command = match (&cli.command, cli.command_args.is_empty()) {
        (Some(_), false) => {
            return Err("give the command either with -c or after `--`, not both"
                .to_string()
                .into());
        }
        (Some(text), true) => Some(
            shlex::split(text)
                .filter(|argv| !argv.is_empty())
                .ok_or_else(|| format!("cannot split -c command `{text}`"))?,
        ),
        (None, false) => Some(cli.command_args.clone()),
        (None, true) => None,
    };
    let capture = (!compiled.records.is_empty()).then(|| CaptureTarget {
        path: cli.data.clone(),
        info: replay::capture_info(&source),
    });
    let options = RunOptions {
        pid: cli.pid,
        command,
        duration: cli.duration,
        capture,
    };
    let summary = {
        let mut out = io::stdout().lock();
        session::run(&compiled, &options, &mut out).map_err(|error| {
            let verifier = match &error {
                RunError::Load(load) => driver::verifier_diagnostic(load, &compiled, &source_map),
                _ => None,
            };
            verifier.map_or_else(|| Failure::Message(error.to_string()), Failure::Script)
        })?
    };
    if let Some(stats) = &summary.capture {
        replay::warn_about_drops(stats);
        replay::render_outputs(&cli, &Default::default())?;
    } else if cli.trace.is_some() || cli.json.is_some() || cli.summary {
        return Err(
            "-T, -J and -I render captures: the script has no record block (`< ... >`) or span"
                .to_string()
                .into(),
        );
    }
    Ok(())
}

/// The script text and its positional parameters.
fn read_source(cli: &Cli) -> Result<(Source, Vec<String>), Failure> {
    match (&cli.program, &cli.script) {
        (Some(text), script) => {
            // With -e, a "script" argument is really the first positional parameter.
            let params = script
                .iter()
                .map(|p| p.display().to_string())
                .chain(cli.params.iter().cloned())
                .collect();
            Ok((
                Source {
                    name: INLINE_SCRIPT_NAME.into(),
                    text: text.clone(),
                    origin: RecordOrigin::Script,
                },
                params,
            ))
        }
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            Ok((
                Source {
                    name: path.display().to_string(),
                    text,
                    origin: RecordOrigin::Script,
                },
                cli.params.clone(),
            ))
        }
        (None, None) => Err(Failure::Message(
            "give a program with -e 'PROGRAM' or a script file (see --help)".into(),
        )),
    }
}

/// Diagnostics with colour on a terminal, plain text otherwise (tests read it).
fn render(errors: ScriptErrors) -> String {
    if io::stderr().is_terminal() {
        format!("{:?}", miette::Report::new(errors))
    } else {
        errors.render()
    }
}
