//! A tracing session: load, attach, run BEGIN, start the traced command, turn
//! ring buffer messages into output until something ends the session, then
//! detach, run END and print the maps.

use super::ksym::KernelSymbols;
use std::io::{self, IsTerminal, Write};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::capture::model::{CaptureInfo, CaptureStats, DropReason};
use crate::codegen::program::Compiled;
use crate::output::agg;
use crate::output::maps::{self, MapDump, PrintOptions};
use crate::output::printf;
use crate::output::value::{Resolve, Value, decode};
use crate::runtime::activation::{self, Interrupt, Phases};
use crate::runtime::child::{self, TracedCommand};
use crate::runtime::counters;
use crate::runtime::loader::{self, AttachOptions, Loaded};
use crate::runtime::recorder::{RecordError, Recorder};
use crate::vocab::printf_format::{Piece, parse_format};
use crate::vocab::{AttachPoint, GlobalSlot, MapId, Message, ProbeState};

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
    Map(#[from] crate::runtime::maps_read::MapError),
    #[error("cannot start `{command}`: {source}")]
    Command { command: String, source: io::Error },
    #[error("cannot trace process {pid}: {source}")]
    Process { pid: i32, source: io::Error },
    #[error("cannot write the capture: {0}")]
    Record(#[from] RecordError),
    #[error("cannot write output: {0}")]
    Output(#[from] io::Error),
}

/// Whether the session goes on, and if not, why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
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
    let mut loaded = loader::load(compiled)?;
    counters::install(&loaded, &compiled.counters)?;
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
            Some(child)
        }
        None => None,
    };
    let probes = compiled.programs.len();
    writeln!(
        out,
        "Attaching {probes} probe{}...",
        if probes == 1 { "" } else { "s" }
    )?;
    out.flush()?;
    let pid = options.pid.or(child.as_ref().map(|c| c.pid() as i32));
    loaded.attach_all(AttachOptions { pid })?;
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
    let recorder = create_recorder(compiled, options, start_ns)?;
    loaded.set_state(globals, ProbeState::Active)?;
    let mut printer = Printer::new(compiled, recorder);
    for index in loaded.programs_at(&AttachPoint::Begin) {
        loaded.run_once(index)?;
    }
    let running = child
        .map(|c| c.release(stopper.clone()))
        .transpose()
        .map_err(|source| RunError::Command {
            command: options.command.as_deref().unwrap_or_default().join(" "),
            source,
        })?;

    trace(&mut loaded, &mut printer, options.duration, start_ns, out)?;
    let stopped_ns = monotonic_ns();
    loaded.set_state(globals, ProbeState::Stopped)?;
    crate::runtime::teardown::hand_off_descriptors();
    loaded.detach_all();
    wind_down(&mut loaded, &mut printer, out)?;
    if let Some(command) = running {
        command.finish();
    }
    let capture = match printer.recorder.take() {
        Some(mut recorder) => {
            recorder.process(&loaded)?;
            let drops = read_drops(&loaded, compiled.drops)?;
            Some(recorder.finish(drops, stopped_ns.saturating_sub(start_ns))?)
        }
        None => None,
    };
    print_exit_maps(compiled, &loaded, &printer, out)?;
    out.flush()?;
    Ok(RunSummary { capture })
}

/// Ctrl-C before activation: nothing was recorded, but a capture that was
/// asked for is still written (empty), so outputs render and an older file
/// at the same path is not mistaken for this run's.
fn empty_capture(compiled: &Compiled, options: &RunOptions) -> Result<RunSummary, RunError> {
    eprintln!("wprof: interrupted before activation: nothing was captured");
    let capture = create_recorder(compiled, options, monotonic_ns())?
        .map(|recorder| recorder.finish(Vec::new(), 0))
        .transpose()?;
    Ok(RunSummary { capture })
}

/// The recorder for a script with record blocks, when capturing.
fn create_recorder(
    compiled: &Compiled,
    options: &RunOptions,
    start_ns: u64,
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
    let mut recorder = Recorder::create(&target.path, compiled, &info)?;
    let command = options.command.as_ref().and_then(|argv| argv.first());
    if let Some(path) = command.and_then(|c| crate::runtime::elf::resolve_binary(c, None).ok()) {
        recorder.add_binary(&path);
    }
    Ok(Some(recorder))
}

/// Turn messages into output until `exit()`, a stop request or the deadline.
fn trace(
    loaded: &mut Loaded,
    printer: &mut Printer,
    duration: Option<Duration>,
    start_ns: u64,
    out: &mut dyn Write,
) -> Result<(), RunError> {
    let stopper = loaded.stopper();
    let mut status = Status::new(printer.recorder.is_some());
    let deadline = duration.map(|d| Instant::now() + d);
    while printer.ending == Ending::Running {
        let timeout = deadline
            .map_or(Duration::from_secs(3600), |d| {
                d.saturating_duration_since(Instant::now())
            })
            .min(Status::INTERVAL);
        let _ = loaded.poll(timeout, |bytes| printer.message(bytes, out))?;
        printer.run_map_requests(loaded, out)?;
        printer.record(loaded)?;
        status.update(printer, loaded, printer.compiled.drops, start_ns)?;
        if printer.ending == Ending::Running
            && (stopper.is_stopped() || deadline.is_some_and(|d| Instant::now() >= d))
        {
            printer.ending = Ending::Stopped;
        }
    }
    status.clear()
}

/// After detaching: run END and print what is left in the ring buffer.
fn wind_down(
    loaded: &mut Loaded,
    printer: &mut Printer,
    out: &mut dyn Write,
) -> Result<(), RunError> {
    if printer.ending == Ending::ExitCalled {
        // As in bpftrace, what probes sent after exit() is not printed
        // (but recorded events are kept).
        printer.quiet = true;
        printer.ending = Ending::Running;
        while loaded
            .consume(|bytes| printer.message(bytes, out))?
            .is_break()
        {}
        printer.quiet = false;
    }
    for index in loaded.programs_at(&AttachPoint::End) {
        loaded.run_once(index)?;
    }
    // Drain what is left, pausing at each map request to serve it in order.
    loop {
        printer.ending = Ending::Running;
        let flow = loaded.consume(|bytes| printer.message(bytes, out))?;
        printer.run_map_requests(loaded, out)?;
        if flow.is_continue() {
            return Ok(());
        }
    }
}

/// Lost events by reason, summed over CPUs.
fn read_drops(loaded: &Loaded, drops: Option<MapId>) -> Result<Vec<(DropReason, u64)>, RunError> {
    let Some(map) = drops else {
        return Ok(Vec::new());
    };
    let reasons = [
        DropReason::RingBufferFull,
        DropReason::StackLost,
        DropReason::UnmatchedSpanEnd,
    ];
    let mut counts = vec![0u64; reasons.len()];
    for (key, values) in loaded.map_entries(map)? {
        let index = key.get(..4).map_or(usize::MAX, |k| {
            u32::from_le_bytes(k.try_into().expect("4 bytes")) as usize
        });
        let total: u64 = values
            .iter()
            .filter_map(|v| v.get(..8))
            .map(|v| u64::from_le_bytes(v.try_into().expect("8 bytes")))
            .sum();
        if let Some(count) = counts.get_mut(index) {
            *count += total;
        }
    }
    Ok(reasons
        .into_iter()
        .zip(counts)
        .filter(|(_, n)| *n > 0)
        .collect())
}

/// The one-line live status of a capture, on a terminal only.
struct Status {
    enabled: bool,
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
            last: Instant::now(),
            shown: false,
        }
    }

    fn update(
        &mut self,
        printer: &Printer,
        loaded: &Loaded,
        drops: Option<MapId>,
        start_ns: u64,
    ) -> Result<(), RunError> {
        let Some(recorder) = &printer.recorder else {
            return Ok(());
        };
        if !self.enabled || self.last.elapsed() < Self::INTERVAL {
            return Ok(());
        }
        self.last = Instant::now();
        let lost: u64 = read_drops(loaded, drops)?.iter().map(|(_, n)| n).sum();
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

fn print_exit_maps(
    compiled: &Compiled,
    loaded: &Loaded,
    printer: &Printer,
    out: &mut dyn Write,
) -> Result<(), RunError> {
    let mut dumps = Vec::new();
    for (index, spec) in compiled.maps.iter().enumerate() {
        let Some(script) = &spec.script_map else {
            continue;
        };
        let entries = agg::collect_entries(script, &loaded.map_entries(MapId(index as u32))?);
        match entries {
            // bpftrace prints empty maps too, as a blank line.
            Ok(entries) => dumps.push(MapDump {
                name: &spec.name,
                spec: script,
                entries,
            }),
            Err(error) => eprintln!("wprof: cannot decode {}: {error}", spec.name),
        }
    }
    maps::print_exit_maps(&mut WriteAdapter(out), dumps, printer)?;
    Ok(())
}

/// `&mut dyn Write` as a sized `Write` for functions generic over it.
struct WriteAdapter<'a>(&'a mut dyn Write);

impl Write for WriteAdapter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// Turns messages into output; map operations are queued until the poll
/// callback returns, since they need the loaded maps.
struct Printer<'a> {
    compiled: &'a Compiled,
    formats: Vec<Option<Vec<Piece>>>,
    map_requests: Vec<Message>,
    paused: bool,
    ending: Ending,
    /// Capture events go here.
    recorder: Option<Recorder>,
    /// Drop printed output (after `exit()`), keep recorded events.
    quiet: bool,
    /// Names of `ksym()` addresses.
    kernel_symbols: KernelSymbols,
}

impl<'a> Printer<'a> {
    fn new(compiled: &'a Compiled, recorder: Option<Recorder>) -> Self {
        let formats = compiled
            .messages
            .iter()
            .map(|m| match m {
                Message::Printf { format, .. } => parse_format(format).ok(),
                _ => None,
            })
            .collect();
        Printer {
            compiled,
            formats,
            map_requests: Vec::new(),
            paused: false,
            ending: Ending::Running,
            recorder,
            quiet: false,
            kernel_symbols: KernelSymbols::default(),
        }
    }

    /// Resolve the stacks of new events and write them out.
    fn record(&mut self, loaded: &Loaded) -> Result<(), RunError> {
        if let Some(recorder) = &mut self.recorder {
            recorder.process(loaded)?;
        }
        Ok(())
    }

    fn message(&mut self, bytes: &[u8], out: &mut dyn Write) -> ControlFlow<()> {
        if let Err(error) = self.dispatch(bytes, out) {
            eprintln!("wprof: {error}");
        }
        // Map requests need the maps, which the ring buffer reader borrows:
        // stop delivering until the caller has served them.
        if self.ending == Ending::Running && !std::mem::take(&mut self.paused) {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        }
    }

    fn dispatch(&mut self, bytes: &[u8], out: &mut dyn Write) -> io::Result<()> {
        let id = bytes
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        let Some(message) = id.and_then(|id| self.compiled.messages.get(id as usize)) else {
            return Err(io::Error::other(format!(
                "malformed message of {} bytes from BPF",
                bytes.len()
            )));
        };
        let index = id.unwrap_or_default() as usize;
        match message {
            Message::Record { record, .. } => match &mut self.recorder {
                Some(recorder) => recorder
                    .push(index, *record, bytes)
                    .map_err(io::Error::other),
                None => Ok(()),
            },
            _ if self.quiet => Ok(()),
            Message::Printf { args, .. } => {
                let values = decode_fields(bytes, args)?;
                let pieces = self.formats[index].as_deref().unwrap_or_default();
                out.write_all(&printf::format(pieces, &values, self))
            }
            Message::PrintValue { value } => {
                let values = decode_fields(bytes, std::slice::from_ref(value))?;
                maps::print_value(&mut WriteAdapter(out), &values[0], self)
            }
            Message::Time { format } => {
                let text = crate::output::time::format_time(format, std::time::SystemTime::now())
                    .map_err(io::Error::other)?;
                out.write_all(&text)
            }
            Message::Exit => {
                self.ending = Ending::ExitCalled;
                Ok(())
            }
            Message::PrintMap { .. } | Message::ClearMap { .. } | Message::ZeroMap { .. } => {
                self.map_requests.push(message.clone());
                self.paused = true;
                Ok(())
            }
        }
    }

    fn run_map_requests(&mut self, loaded: &Loaded, out: &mut dyn Write) -> Result<(), RunError> {
        for request in std::mem::take(&mut self.map_requests) {
            match request {
                Message::PrintMap { map, top, div } => {
                    let spec = &self.compiled.maps[map.0 as usize];
                    let script = spec.script_map.as_ref().expect("print() takes script maps");
                    let entries = agg::collect_entries(script, &loaded.map_entries(map)?)
                        .map_err(io::Error::other)?;
                    let options = PrintOptions {
                        top,
                        div: div.max(1),
                    };
                    maps::print_map(
                        &mut WriteAdapter(out),
                        &spec.name,
                        script,
                        entries,
                        options,
                        self,
                    )?;
                }
                Message::ClearMap { map } => loaded.clear(map)?,
                Message::ZeroMap { map } => loaded.zero(map)?,
                _ => unreachable!("only map requests are queued"),
            }
        }
        out.flush()?;
        Ok(())
    }
}

fn decode_fields(
    bytes: &[u8],
    fields: &[(u32, crate::vocab::ValueType)],
) -> io::Result<Vec<Value>> {
    fields
        .iter()
        .map(|(at, ty)| {
            let field = bytes.get(*at as usize..).unwrap_or_default();
            decode(field, ty).map_err(io::Error::other)
        })
        .collect()
}

impl Resolve for Printer<'_> {
    fn stack(&self, _kernel: bool, _map: MapId, id: u64) -> Vec<u8> {
        format!("stack#{id}").into_bytes()
    }
    fn symbol(&self, kernel: bool, addr: u64) -> Vec<u8> {
        if kernel {
            self.kernel_symbols.name(addr)
        } else {
            format!("{addr:#x}").into_bytes()
        }
    }
    fn probe(&self, index: u64) -> Vec<u8> {
        self.compiled
            .programs
            .get(index as usize)
            .map_or_else(|| format!("probe#{index}"), |p| p.probe.clone())
            .into_bytes()
    }
}
