//! Runtime, a tracing session: load, attach, run BEGIN, start the traced
//! command, route ring buffer messages (capture records to the recorder, the
//! rest to `output::printer`) until something ends the session, then detach,
//! run END and print the maps. Input: `Compiled` and [`RunOptions`]; output:
//! text and an optional capture ([`RunSummary`]).

pub mod activation;
pub mod child;
mod drops;
mod iterate;
mod kernel_walk;
mod receiver;
mod teardown;
mod usr1;
mod watch;

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::capture::model::{CaptureInfo, CaptureStats};
use crate::codegen::program::Compiled;
use crate::codegen::stack_layout::GLUE_BYTES;
use crate::frontend::diag::SourceMap;
use crate::output::printer::{OutputFormat, Printer};
use crate::providers;
use crate::runtime::bpf::counters;
use crate::runtime::bpf::loader::{self, AttachOptions, Loaded};
use crate::runtime::bpf::stack_skip;
use crate::runtime::recording::{RecordError, Recorder};
use crate::runtime::values::SystemValues;
use crate::timings;
use crate::unwind::proc_maps::address_space;
use crate::vocab::{AttachPoint, GlobalSlot, MapId, ProbeState};
use activation::{Interrupt, Phases};
use child::TracedCommand;
use receiver::Receiver;

#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// `-p PID`: scope uprobes to this process and stop when it exits.
    pub pid: Option<i32>,
    /// `-c CMD`: run this after attaching; stop when it exits.
    pub command: Option<Vec<String>>,
    /// `-d`: stop after this long.
    pub duration: Option<Duration>,
    /// Write record events to this capture file.
    pub capture: Option<CaptureTarget>,
    /// When to load and attach, and when to start recording.
    pub phases: Phases,
    /// Print [`NOTIFY_ATTACHED`] on stderr once every probe is attached and
    /// the command started (bpftrace's hook for its test runner).
    pub notify_attached: bool,
    /// `-q`: no `Attaching N probes...` line.
    pub quiet: bool,
    /// Text or JSON lines (`-f json`).
    pub format: OutputFormat,
    /// The scripts, for `-k`/`-kk` reports of failed helper calls.
    pub sources: Option<SourceMap>,
    /// `-v`: print each program's id and verifier log, as bpftrace does.
    pub verbose: bool,
    /// `--usdt-file-activation`: see [`AttachOptions::usdt_file_activation`].
    pub usdt_file_activation: bool,
    /// The `tp_btf` programs' tracepoint ids, known from compiling or the
    /// compile cache: see [`loader::load_with`].
    pub tracepoint_ids: loader::TracepointIds,
}

/// Longest the traced command waits for the unwind tables of its program
/// and libraries before it runs: the C library's take about 0.1 s (a debug
/// build of wprof); a large binary's take seconds, and its first stacks
/// fall back to frame pointers instead of holding the command up.
const COMMAND_TABLES_WAIT: Duration = Duration::from_secs(1);
/// Longest the end of a capture waits for tables that copied user stacks
/// still need (`recording::snapshots`).
const LAST_TABLES_WAIT: Duration = Duration::from_secs(1);
/// How often the recorder runs while unwind tables are being built, so a
/// table is placed when it is built, not when events next wake the
/// recorder (up to [`Status::INTERVAL`] later).
const TABLES_POLL: Duration = Duration::from_millis(5);
/// How soon the session looks again after reading messages: probes wake it
/// at most once a millisecond (codegen's `output`), so while messages flow
/// some arrive without waking it.
const MESSAGE_FOLLOW_UP: Duration = Duration::from_millis(2);

/// The line `notify_attached` prints, and the environment variable that
/// asks for it.
pub const NOTIFY_ATTACHED: &str = "__BPFTRACE_NOTIFY_PROBES_ATTACHED";

/// The probes `Attaching N probes...` counts: the blocks attached or run
/// now (watchpoints on function arguments are set later).
fn attached_now(compiled: &Compiled) -> usize {
    compiled
        .programs
        .iter()
        .filter(|p| !providers::of(&p.attach).attached_later(&p.attach))
        .map(|p| p.blocks)
        .sum()
}

/// `-v`: each program's id and verifier log on `out`, and the probe it
/// attaches on stderr, in bpftrace's words.
fn print_load_reports(reports: &[loader::LoadReport], out: &mut dyn Write) -> io::Result<()> {
    for report in reports {
        if let Some(id) = report.id {
            write!(out, "\nProgram ID: {id}\n")?;
        }
        write!(out, "\nThe verifier log: \n{}\n", report.log)?;
        out.flush()?;
        eprintln!("Attaching {}", report.probe);
    }
    Ok(())
}

/// Where a capture goes and what it says about itself; the start times are
/// filled in when tracing starts.
#[derive(Clone, Debug)]
pub struct CaptureTarget {
    pub path: PathBuf,
    pub info: CaptureInfo,
}

/// What a run leaves behind.
#[derive(Clone, Debug, Default)]
pub struct RunSummary {
    /// Statistics of the capture written, if any.
    pub capture: Option<CaptureStats>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Load(#[from] loader::LoadError),
    #[error(transparent)]
    Attach(#[from] loader::AttachError),
    #[error(transparent)]
    Counter(#[from] counters::CounterError),
    #[error("cannot read BPF maps: {0}")]
    Map(#[from] crate::runtime::bpf::maps_read::MapError),
    #[error("cannot start `{command}`: {source}")]
    Command { command: String, source: io::Error },
    #[error("cannot trace process {pid}: {source}")]
    Process { pid: i32, source: io::Error },
    #[error("cannot write the capture: {0}")]
    Record(#[from] RecordError),
    #[error("cannot write output: {0}")]
    Output(#[from] io::Error),
    #[error("cannot read the iterator: {0}")]
    Iterate(io::Error),
}

/// Whether the session goes on, and if not, why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ending {
    Running,
    ExitCalled,
    Stopped,
}

/// Run `compiled` until `exit()`, Ctrl-C, the duration, or the traced process
/// ends. Loading and attaching wait for `options.phases.prepare_at`, recording
/// for `activate_at`.
pub fn run(
    compiled: &Compiled,
    options: &RunOptions,
    out: &mut dyn Write,
) -> Result<RunSummary, RunError> {
    let interrupt = Interrupt::install();
    if !activation::wait_until(options.phases.prepare_at, "waiting to prepare", interrupt)? {
        return empty_capture(compiled, options);
    }
    let mut loaded = loader::load_with(compiled, options.verbose, &options.tracepoint_ids)?;
    counters::install(&loaded, &compiled.counters)?;
    timings::step("counters set up");
    // Kept until the teardown hands off its descriptors.
    let skip_measured = measure_stack_skip(compiled, &loaded)?;
    timings::step("stack skip measured");
    kernel_walk::prepare(compiled, &loaded, skip_measured.as_ref());
    write_tracepoint_glue(compiled, &loaded)?;
    timings::step("tracepoint iterators found");
    interrupt.forward_to(loaded.stopper());
    let stopper = loaded.stopper();
    if let Some(pid) = options.pid {
        child::watch_process(pid, stopper.clone())
            .map_err(|source| RunError::Process { pid, source })?;
    }
    let globals = compiled
        .globals
        .expect("the code generator always makes a globals map");
    loaded.set_state(globals, ProbeState::Stopped)?;
    loaded.set_global(globals, GlobalSlot::SelfPid, u64::from(std::process::id()))?;
    let child = match &options.command {
        Some(argv) => {
            let child = TracedCommand::spawn_paused(argv).map_err(|source| RunError::Command {
                command: argv.join(" "),
                source,
            })?;
            loaded.set_global(globals, GlobalSlot::ChildPid, u64::from(child.pid()))?;
            if let Some(tree) = &compiled.command_tree {
                let (key, value) = tree.entry(child.pid());
                loaded.update(tree.map, &key, &value)?;
            }
            Some(child)
        }
        None => None,
    };
    let values = SystemValues::new(compiled, &loaded)?;
    let printer =
        Printer::new(compiled, &values, options.format).with_sources(options.sources.as_ref());
    if !options.quiet {
        printer.attached_probes(attached_now(compiled), out)?;
        out.flush()?;
    }
    print_load_reports(&loaded.reports, out)?;
    usr1::install()?;
    let traced_command = child.as_ref().map(|c| c.pid() as i32);
    let pid = options.pid.or(traced_command);
    let attach_options = AttachOptions {
        pid: options.pid,
        command_pid: traced_command,
        usdt_file_activation: options.usdt_file_activation,
    };
    let timed = |point: &AttachPoint| providers::of(point).counts_from_attach(point);
    // An iterator is attached when it is read (`iterate`).
    let alone = |point: &AttachPoint| providers::of(point).runs_alone();
    loaded.attach_where(attach_options, |point| !timed(point) && !alone(point))?;
    timings::step("probes attached");
    if !activation::wait_until(
        options.phases.activate_at,
        "prepared, activating",
        interrupt,
    )? {
        loaded.detach_all();
        return empty_capture(compiled, options);
    }

    // Time 0 of the capture: events before it never passed the gate.
    let start_ns = monotonic_ns();
    loaded.set_global(globals, GlobalSlot::StartNs, start_ns)?;
    let command_pid = child.as_ref().map(|c| c.pid());
    let mut recorder = create_recorder(compiled, options, start_ns, command_pid)?;
    if let Some(recorder) = &mut recorder {
        recorder.connect(&loaded);
    }
    timings::step("capture file and recorder created");
    let mut receiver = Receiver::new(compiled, &values, printer, recorder, pid);
    // As in bpftrace, BEGIN runs before any other probe, and timers count
    // from after it (`interval:ms:500` fires 500 ms after BEGIN).
    for index in loaded.programs_at(&AttachPoint::Begin) {
        loaded.run_once(index)?;
    }
    loaded.set_state(globals, ProbeState::Active)?;
    loaded.attach_where(attach_options, timed)?;
    timings::step("recording");
    if let Some(recorder) = receiver.recorder.as_mut().filter(|_| child.is_some()) {
        recorder.place_tables(&loaded, COMMAND_TABLES_WAIT);
    }
    // The forked wprof's, until the command's `exec` replaces it.
    let image_before = (child.as_ref()).and_then(|c| address_space(c.pid()).ok());
    let running = child
        .map(|c| {
            let pid = c.pid();
            // Its tables, when user stacks are unwound with them.
            let recorder = receiver.recorder.as_mut().filter(|r| r.unwinds());
            let loaded = &loaded;
            let load_tables = (recorder.zip(image_before))
                .map(|(recorder, before)| move || recorder.add_new_image(loaded, pid, before));
            c.release(stopper.clone(), load_tables)
        })
        .transpose()
        .map_err(|source| RunError::Command {
            command: options.command.as_deref().unwrap_or_default().join(" "),
            source,
        })?;
    if let Some(recorder) = receiver.recorder.as_mut().filter(|_| running.is_some()) {
        recorder.command_released();
    }
    if options.notify_attached {
        eprintln!("{NOTIFY_ATTACHED}");
    }

    let iterator = (0..compiled.programs.len())
        .find(|&i| providers::of(&compiled.programs[i].attach).runs_alone());
    match iterator {
        Some(index) => iterate::iterate(&mut loaded, &mut receiver, index, out)?,
        None => trace(&mut loaded, &mut receiver, options.duration, start_ns, out)?,
    }
    let stopped_ns = monotonic_ns();
    loaded.set_state(globals, ProbeState::Stopped)?;
    teardown::hand_off_descriptors();
    loaded.detach_all();
    wind_down(&mut loaded, &mut receiver, out)?;
    if let Some(command) = running {
        command.finish();
    }
    let capture = match receiver.recorder.take() {
        Some(mut recorder) => {
            recorder.finish_tables(&loaded, LAST_TABLES_WAIT)?;
            let drops = drops::read_drops(&loaded, compiled)?;
            Some(recorder.finish(drops, stopped_ns.saturating_sub(start_ns))?)
        }
        None => None,
    };
    print_exit_maps(compiled, &loaded, &receiver.printer, out)?;
    out.flush()?;
    Ok(RunSummary { capture })
}

/// Measures the tracer's kernel frames when raw tracepoint programs take
/// kernel stacks; without a measurement their stacks start with them.
fn measure_stack_skip(
    compiled: &Compiled,
    loaded: &Loaded,
) -> Result<Option<stack_skip::Measured>, RunError> {
    if compiled.kernel_stack_skips.is_empty() {
        return Ok(None);
    }
    let globals = compiled
        .globals
        .expect("the code generator always makes a globals map");
    match stack_skip::measure() {
        Ok(measured) => {
            loaded.set_global(globals, GlobalSlot::RawTracepointStackSkip, measured.skip)?;
            Ok(Some(measured))
        }
        Err(error) => {
            eprintln!(
                "wprof: cannot measure the tracer's own kernel frames ({error}): \
                 kernel stacks of tracepoints start with them"
            );
            Ok(None)
        }
    }
}

/// Writes the address ranges of the tracepoint iterators whose frames raw
/// tracepoint programs drop from their kernel stacks; where the kernel
/// hides their addresses their stacks keep that frame.
fn write_tracepoint_glue(compiled: &Compiled, loaded: &Loaded) -> Result<(), RunError> {
    let Some((map, probes)) = &compiled.tracepoint_glue else {
        return Ok(());
    };
    let names: Vec<&str> = probes.iter().map(|(_, name)| name.as_str()).collect();
    let ranges = stack_skip::tracepoint_iterators(&names);
    let mut value = vec![0u8; compiled.maps[map.0 as usize].value_size as usize];
    for (probe, name) in probes {
        let at = GLUE_BYTES as usize * *probe as usize;
        let found = ranges.iter().find(|(n, _, _)| n == name);
        if let (Some((_, start, end)), Some(slot)) = (found, value.get_mut(at..at + 16)) {
            slot.copy_from_slice(&[start.to_ne_bytes(), end.to_ne_bytes()].concat());
        }
    }
    Ok(loaded.update(*map, &0u32.to_ne_bytes(), &value)?)
}

/// Ctrl-C before activation: nothing was recorded, but a capture that was
/// asked for is still written (empty), so outputs render and an older file
/// at the same path is not mistaken for this run's.
fn empty_capture(compiled: &Compiled, options: &RunOptions) -> Result<RunSummary, RunError> {
    eprintln!("wprof: interrupted before activation: nothing was captured");
    let capture = create_recorder(compiled, options, monotonic_ns(), None)?
        .map(|recorder| recorder.finish(Vec::new(), 0))
        .transpose()?;
    Ok(RunSummary { capture })
}

/// The recorder for a script with record blocks, when capturing.
fn create_recorder(
    compiled: &Compiled,
    options: &RunOptions,
    start_ns: u64,
    command_pid: Option<u32>,
) -> Result<Option<Recorder>, RunError> {
    let Some(target) = options
        .capture
        .as_ref()
        .filter(|_| !compiled.records.is_empty())
    else {
        return Ok(None);
    };
    let mut info = target.info.clone();
    info.start_monotonic_ns = start_ns;
    info.start_realtime_ns = realtime_ns();
    info.command_pid = command_pid;
    let mut recorder = Recorder::create(&target.path, compiled, &info)?;
    if let Some(pid) = options.pid {
        recorder.add_process(pid as u32);
    }
    let argv = options.command.as_deref().unwrap_or_default();
    for path in crate::runtime::targets::library_search::command_programs(argv) {
        recorder.add_binary(&path);
        recorder.prepare_command(&path);
    }
    Ok(Some(recorder))
}

/// Turn messages into output until `exit()`, a stop request or the deadline.
fn trace(
    loaded: &mut Loaded,
    receiver: &mut Receiver,
    duration: Option<Duration>,
    start_ns: u64,
    out: &mut dyn Write,
) -> Result<(), RunError> {
    let stopper = loaded.stopper();
    let mut status = Status::new(receiver.recorder.is_some());
    let deadline = duration.map(|d| Instant::now() + d);
    while receiver.ending == Ending::Running {
        let timeout = deadline
            .map_or(Duration::from_secs(3600), |d| {
                d.saturating_duration_since(Instant::now())
            })
            .min(Status::INTERVAL);
        let busy = (receiver.recorder.as_ref()).is_some_and(Recorder::busy);
        let timeout = if busy {
            timeout.min(TABLES_POLL)
        } else {
            timeout
        };
        let timeout = if std::mem::take(&mut receiver.read_messages) {
            timeout.min(MESSAGE_FOLLOW_UP)
        } else {
            timeout
        };
        let _ = loaded.poll(timeout, |bytes| receiver.message(bytes, out))?;
        if !status.polled {
            status.polled = true;
            timings::step("first poll returned");
        }
        receiver.run_ops(loaded, out)?;
        if usr1::take_request() {
            print_exit_maps(receiver.compiled, loaded, &receiver.printer, out)?;
        }
        receiver.record(loaded)?;
        status.update(receiver, loaded, start_ns)?;
        if receiver.ending == Ending::Running
            && (stopper.is_stopped() || deadline.is_some_and(|d| Instant::now() >= d))
        {
            receiver.ending = Ending::Stopped;
        }
    }
    status.clear()
}

/// After detaching: print what probes sent before (up to an `exit()`),
/// run END and print its output. The ring may still hold events sent
/// before an `exit()` that was not read yet: the session can stop (the
/// command exited) before the ring is read.
fn wind_down(
    loaded: &mut Loaded,
    receiver: &mut Receiver,
    out: &mut dyn Write,
) -> Result<(), RunError> {
    drain(loaded, receiver, out)?;
    receiver.exited = false;
    for index in loaded.programs_at(&AttachPoint::End) {
        loaded.run_once(index)?;
    }
    drain(loaded, receiver, out)
}

/// Reads what is left in the ring, pausing at each map request to serve it
/// in order.
fn drain(
    loaded: &mut Loaded,
    receiver: &mut Receiver,
    out: &mut dyn Write,
) -> Result<(), RunError> {
    loop {
        receiver.ending = Ending::Running;
        let flow = loaded.consume(|bytes| receiver.message(bytes, out))?;
        receiver.run_ops(loaded, out)?;
        if flow.is_continue() {
            return Ok(());
        }
    }
}

/// The one-line live status of a capture, on a terminal only.
struct Status {
    enabled: bool,
    /// Whether the ring buffer was polled yet (the last start-up step).
    polled: bool,
    last: Instant,
    shown: bool,
}

impl Status {
    /// How often the status updates; polls wake at least this often, so
    /// captures are also written out this often.
    const INTERVAL: Duration = Duration::from_millis(250);

    fn new(capturing: bool) -> Status {
        Status {
            enabled: capturing && io::stderr().is_terminal(),
            polled: false,
            last: Instant::now(),
            shown: false,
        }
    }

    fn update(
        &mut self,
        receiver: &Receiver,
        loaded: &Loaded,
        start_ns: u64,
    ) -> Result<(), RunError> {
        let Some(recorder) = &receiver.recorder else {
            return Ok(());
        };
        if !self.enabled || self.last.elapsed() < Self::INTERVAL {
            return Ok(());
        }
        self.last = Instant::now();
        let drops = drops::read_drops(loaded, receiver.compiled)?;
        let lost: u64 = drops.iter().map(|d| d.count).sum();
        let elapsed = monotonic_ns().saturating_sub(start_ns) as f64 / 1e9;
        let line = format!(
            "\r\x1b[K{elapsed:.1}s  {} events  {lost} dropped  {:.1} MB",
            recorder.events(),
            recorder.bytes() as f64 / 1e6
        );
        io::stderr().write_all(line.as_bytes())?;
        self.shown = true;
        Ok(())
    }

    fn clear(&mut self) -> Result<(), RunError> {
        if self.shown {
            io::stderr().write_all(b"\r\x1b[K")?;
        }
        Ok(())
    }
}

/// `CLOCK_MONOTONIC`, the clock of `bpf_ktime_get_ns`.
fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec we pass.
    unsafe { libc::clock_gettime(clock, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// The maps printed at exit: every script map's entries, read now.
fn print_exit_maps(
    compiled: &Compiled,
    loaded: &Loaded,
    printer: &Printer,
    out: &mut dyn Write,
) -> Result<(), RunError> {
    let mut raw = Vec::new();
    for (index, spec) in compiled.maps.iter().enumerate() {
        if spec.script_map.is_some() {
            let map = MapId(index as u32);
            raw.push((map, loaded.map_entries(map)?));
        }
    }
    printer.print_exit_maps(&raw, out)?;
    Ok(())
}
