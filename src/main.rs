//! The `wprof` command.

use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use wprof::bpftrace_env::BpftraceEnv;
use wprof::capture::model::RecordOrigin;
use wprof::cli::Cli;
use wprof::cli_bpftrace::{invoked_as_bpftrace, split_command_as_bpftrace};
use wprof::codegen::listing::render_listing;
use wprof::codegen::program::Compiled;
use wprof::compile_cache::{self, CompileCache};
use wprof::driver::{self, Source};
use wprof::frontend::checked::CheckedProgram;
use wprof::frontend::diag::{INLINE_SCRIPT_NAME, ScriptErrors};
use wprof::frontend::limits;
use wprof::frontend::options::CompileOptions;
use wprof::runtime::bpf::loader::{self, TracepointIds};
use wprof::runtime::session::activation::Phases;
use wprof::runtime::session::{self, CaptureTarget, RunError, RunOptions};
use wprof::runtime::targets::environment::SystemEnvironment;
use wprof::timings;
use wprof::tracking::{Tracking, trackers, when};

mod replay;
use wprof::runtime::targets::{features, tracefs};

/// The script name diagnostics give a script read from standard input (`-`), as bpftrace.
const STDIN_SCRIPT_NAME: &str = "stdin";

/// How long a capture without a script and without -d lasts.
const DEFAULT_CAPTURE: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    wprof::timings::start();
    let cli = wprof::front_door::parse_command_line();
    timings::step("arguments parsed");
    // With gates, CI scripts tell a regression (1) from a broken job (2).
    let error = match cli.compare.gating() {
        true => ExitCode::from(2),
        false => ExitCode::FAILURE,
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Script(errors)) => {
            eprintln!("{}", render(errors));
            error
        }
        Err(Failure::Message(message)) if invoked_as_bpftrace() => {
            eprintln!("ERROR: {message}");
            error
        }
        Err(Failure::Message(message)) => {
            eprintln!("wprof: {message}");
            error
        }
        Err(Failure::Regression(message)) => {
            eprintln!("wprof: regression: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Why wprof stops with an error: diagnostics on the script, a plain
/// message, or a gate that failed.
enum Failure {
    Script(ScriptErrors),
    Message(String),
    Regression(String),
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
    if cli.builtins {
        print!("{}", wprof::builtins::reference());
        return Ok(());
    }
    cli.bpftrace.validate().map_err(|e| e.to_string())?;
    if cli.bpftrace.info {
        print!(
            "{}",
            wprof::runtime::targets::info::report(&features::detect())
        );
        return Ok(());
    }
    if cli.bpftrace.list {
        let env = SystemEnvironment::new(cli.target_pid());
        let pattern = cli.script.as_ref().map(|p| p.display().to_string());
        let by_process = cli.target_pid().is_some();
        let listing =
            wprof::listing::list(pattern.as_deref(), cli.bpftrace.verbose, by_process, &env)?;
        for warning in &listing.warnings {
            eprintln!("wprof: warning: {warning}");
        }
        print!("{}", listing.text);
        return Ok(());
    }
    if cli.replay {
        return replay::replay(&cli);
    }
    if cli.data.len() > 1 {
        return Err(
            "a capture is written to one -D file; several are read with -R"
                .to_string()
                .into(),
        );
    }
    // Everything the command line says is checked before any setup.
    let tracking = cli.tracking()?;
    let launch = Instant::now();
    let schedule = when::schedule(
        tracking.prepare.as_ref(),
        tracking.activate.as_ref(),
        &chrono::Local::now(),
    )?;
    let mut compile_options = CompileOptions {
        unsafe_builtins: cli.unsafe_builtins,
        ..tracking.compile_options()?
    };
    compile_options.includes = cli.includes();
    let environment = BpftraceEnv::read().map_err(|e| e.to_string())?;
    compile_options.map_keys_max = environment.map_keys_max;
    compile_options.output_pages_per_cpu = environment.output_pages_per_cpu;
    compile_options.string_len = environment.strlen;
    compile_options.helper_checks =
        (cli.bpftrace.helper_check_level()).map_err(|e| e.to_string())?;
    let user = read_source(&cli)?;
    let no_script = user.is_none();
    if !cli.dump_bpf && cli.bpftrace.emit_elf.is_none() {
        wprof::runtime::privileges::check().map_err(|e| e.to_string())?;
    }
    let _ = tracefs::ensure_mounted();
    let command = match (&cli.command, cli.command_args.is_empty()) {
        (Some(_), false) => {
            return Err("give the command either with -c or after `--`, not both"
                .to_string()
                .into());
        }
        (Some(text), true) if invoked_as_bpftrace() => Some(split_command_as_bpftrace(text)),
        (Some(text), true) => Some(
            shlex::split(text)
                .filter(|argv| !argv.is_empty())
                .ok_or_else(|| format!("cannot split -c command `{text}`"))?,
        ),
        (None, false) => Some(cli.command_args.clone()),
        (None, true) => None,
    };
    // The command's process tree is selected in the kernel too.
    compile_options.filter.command = cli.profile.only_command && command.is_some();
    let mut env = SystemEnvironment::new(cli.target_pid());
    env.compile_only = cli.dump_bpf || cli.bpftrace.emit_elf.is_some();
    env.command = command.as_ref().and_then(|argv| argv.first().cloned());
    timings::step("options, environment and script read");
    let (sources, mut checked, compiled) = compile(&cli, &tracking, user, &env, &compile_options)?;
    if let Program::Fresh { checked, .. } = &checked {
        for warning in &checked.warnings {
            eprintln!("wprof: warning: {warning}");
        }
    }
    let tracepoint_ids = match &mut checked {
        Program::Cached { tracepoint_ids } => std::mem::take(tracepoint_ids),
        Program::Fresh { .. } => env.tracepoint_ids(compiled.programs.iter().map(|p| &p.attach)),
    };
    // The kernel's BTF, parsed for typing, is megabytes the capture does not need.
    drop(env);
    let source_map = driver::source_map(&sources);
    if cli.dump_bpf {
        let mut out = io::stdout().lock();
        for program in &compiled.programs {
            let section = wprof::providers::of(&program.attach).section(&program.attach);
            let text = format!(
                "; {} ({section}, {} instructions)\n{}\n",
                program.probe,
                program.insns.len(),
                render_listing(program, &source_map)
            );
            out.write_all(text.as_bytes())
                .map_err(|e| format!("cannot write the listing: {e}"))?;
        }
        return Ok(());
    }
    if let Some(path) = &cli.bpftrace.emit_elf {
        let image = loader::elf_image(&compiled).map_err(|e| e.to_string())?;
        return std::fs::write(path, image)
            .map_err(|e| format!("cannot write --emit-elf {}: {e}", path.display()).into());
    }
    let features = features::detect();
    match &checked {
        Program::Fresh { checked, cache } => {
            driver::check_kernel_support(&source_map, checked, &features)?;
            // Stored only once it is known to run here, without warnings.
            if let Some(cache) = cache.as_ref().filter(|_| checked.warnings.is_empty()) {
                cache.store(&compiled, &tracepoint_ids);
            }
        }
        Program::Cached { .. } => driver::check_compiled_support(&compiled, &features)?,
    }
    timings::step("kernel features probed");
    let probes = compiled.programs.iter().map(|p| p.blocks).sum();
    (environment.check_limits(probes, compiled.programs.len())).map_err(|e| e.to_string())?;
    let capture = (!compiled.records.is_empty()).then(|| {
        let user = sources.iter().find(|s| s.origin == RecordOrigin::Script);
        let mut info = replay::capture_info(user);
        info.settings = tracking.settings();
        if cli.profile.only_command {
            // Saved, so that replays select the command's processes too.
            info.settings.filters.push(replay::ONLY_COMMAND.to_owned());
        }
        CaptureTarget {
            path: cli.data_path().to_path_buf(),
            info,
        }
    });
    // Outputs are checked now, not found unwritable after the whole capture.
    match &capture {
        Some(target) => replay::check_outputs(&cli, &target.path)?,
        None if replay::any_output(&cli) => return Err(replay::nothing_to_render().into()),
        None => {}
    }
    // Without a script, wprof captures for 1 s unless told otherwise or
    // following a command or process, which end the capture themselves.
    let open_ended = no_script && command.is_none() && cli.target_pid().is_none();
    let options = RunOptions {
        pid: cli.target_pid(),
        command,
        duration: cli.duration.or(open_ended.then_some(DEFAULT_CAPTURE)),
        capture,
        phases: Phases::from_schedule(launch, schedule),
        notify_attached: std::env::var_os(session::NOTIFY_ATTACHED).is_some(),
        quiet: cli.bpftrace.quiet,
        format: cli.output_format(),
        sources: Some(source_map.clone()),
        verbose: cli.bpftrace.verbose,
        usdt_file_activation: cli.usdt_file_activation,
        tracepoint_ids,
    };
    let summary = {
        let mut out = cli.bpftrace.output_sink()?;
        session::run(&compiled, &options, &mut *out).map_err(|error| {
            let verifier = match &error {
                RunError::Load(load) => driver::verifier_diagnostic(load, &compiled, &source_map),
                _ => None,
            };
            verifier.map_or_else(|| Failure::Message(error.to_string()), Failure::Script)
        })?
    };
    if let Some(stats) = &summary.capture {
        replay::warn_about_drops(stats, &compiled.records);
        replay::render_outputs(&cli, Default::default())?;
    }
    Ok(())
}

/// How the program to run was obtained.
enum Program {
    /// Compiled now; the cache entry to store it in once it is known to run.
    Fresh {
        checked: Box<CheckedProgram>,
        cache: Option<CompileCache>,
    },
    /// Read from the compile cache (built-in trackers only), with the BTF
    /// ids of its tracepoints.
    Cached { tracepoint_ids: TracepointIds },
}

/// The program to run: the user's script alone when it only prints (as under
/// bpftrace), else the built-in trackers with it, as one program; the
/// trackers alone come from the compile cache when it has them.
fn compile(
    cli: &Cli,
    tracking: &Tracking,
    user: Option<(Source, Vec<String>)>,
    env: &SystemEnvironment,
    options: &CompileOptions,
) -> Result<(Vec<Source>, Program, Compiled), Failure> {
    let (mut sources, params) = match user {
        Some((source, params)) => (vec![source], params),
        None => (Vec::new(), Vec::new()),
    };
    let command_tree = options.filter.command.then(trackers::command_tree);
    if let Some(user) = sources.first() {
        let alone: Vec<Source> = [user.clone()]
            .into_iter()
            .chain(command_tree.clone())
            .collect();
        let (checked, compiled) = driver::compile(&alone, &params, env, options)?;
        if checked
            .probes
            .iter()
            .all(|p| p.origin == RecordOrigin::Tracker)
        {
            let name = &user.name;
            return Err(format!("{name} has no probes: nothing to attach").into());
        }
        if !replay::wants_capture(cli) && compiled.records.is_empty() {
            timings::step("script compiled (parse, check, codegen)");
            let checked = Box::new(checked);
            return Ok((
                alone,
                Program::Fresh {
                    checked,
                    cache: None,
                },
                compiled,
            ));
        }
    }
    sources.extend(trackers::sources(tracking)?);
    sources.extend(command_tree);
    let cache = match sources.iter().all(|s| s.origin == RecordOrigin::Tracker) {
        true => open_cache(cli, &sources, env, options),
        false => None,
    };
    if let Some((compiled, tracepoint_ids)) = cache.as_ref().and_then(CompileCache::lookup) {
        timings::step("trackers read from the compile cache");
        return Ok((sources, Program::Cached { tracepoint_ids }, compiled));
    }
    let (checked, compiled) = driver::compile(&sources, &params, env, options)?;
    timings::step("trackers and script compiled (parse, check, codegen)");
    let checked = Box::new(checked);
    Ok((sources, Program::Fresh { checked, cache }, compiled))
}

/// The compile cache entry for the trackers, unless turned off; a cache
/// directory that is not safe to use is said once and passed over.
fn open_cache(
    cli: &Cli,
    sources: &[Source],
    env: &SystemEnvironment,
    options: &CompileOptions,
) -> Option<CompileCache> {
    if cli.no_cache || compile_cache::bypassed() {
        return None;
    }
    let inputs = compile_cache::KeyInputs {
        sources,
        options,
        pid: env.pid,
        command: env.command.as_deref(),
    };
    match CompileCache::open(&compile_cache::default_dir()?, &inputs) {
        Ok(cache) => cache,
        Err(error) => {
            eprintln!("wprof: warning: compile cache not used: {error}");
            None
        }
    }
}

/// The script text and its positional parameters.
fn read_source(cli: &Cli) -> Result<Option<(Source, Vec<String>)>, Failure> {
    match (&cli.program, &cli.script) {
        (Some(text), script) => {
            // With -e, a "script" argument is really the first positional parameter.
            let params = script
                .iter()
                .map(|p| p.display().to_string())
                .chain(cli.params.iter().cloned())
                .collect();
            Ok(Some((
                Source {
                    name: INLINE_SCRIPT_NAME.into(),
                    text: text.clone(),
                    origin: RecordOrigin::Script,
                },
                params,
            )))
        }
        (None, Some(path)) => {
            let stdin = path.as_os_str() == "-";
            let file = if stdin { Path::new("/dev/stdin") } else { path };
            let text = limits::read_script(file).map_err(|e| e.to_string())?;
            Ok(Some((
                Source {
                    name: if stdin {
                        STDIN_SCRIPT_NAME.into()
                    } else {
                        path.display().to_string()
                    },
                    text,
                    origin: RecordOrigin::Script,
                },
                cli.params.clone(),
            )))
        }
        (None, None) => Ok(None),
    }
}

/// Diagnostics as bpftrace prints them when run as `bpftrace`; else with
/// colour on a terminal, plain text otherwise (tests read it).
fn render(errors: ScriptErrors) -> String {
    if invoked_as_bpftrace() {
        // Printed with a newline of its own.
        let text = errors.render_as_bpftrace();
        text.trim_end_matches('\n').to_string()
    } else if io::stderr().is_terminal() {
        format!("{:?}", miette::Report::new(errors))
    } else {
        errors.render()
    }
}
