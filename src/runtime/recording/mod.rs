//! Recording: record messages from the ring buffer → capture events in
//! `wprof.data`. Decodes the header and fields, keeps thread identities,
//! reads stacks and normalizes their user frames while the processes still
//! live, puts events from all CPUs in time order, and at the end symbolizes
//! every frame and writes the statistics.

mod decode;
mod pending;
mod snapshots;
mod stacks;
mod tables;
mod threads;
mod window;

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::time::{Duration, Instant};

use self::decode::{FieldDecoder, IdentityRecord, decoders, identity_record, malformed, u64_at};
use self::pending::{Due, Join, PendingJoin};
use self::snapshots::{SnapshotJoin, read_snapshot};
use self::stacks::{RawStack, StackHeader, digest, probed_binaries, raw_stack};
use self::tables::Tables;
use self::threads::{Comm, ThreadTable};
use self::window::ReorderWindow;
use crate::capture::model::{
    CaptureInfo, CaptureSettings, CaptureStats, Event, FieldValue, RecordDrops, RecordId,
    RecordKind, StackId,
};
use crate::capture::writer::CaptureWriter;
use crate::codegen::program::Compiled;
use crate::runtime::bpf::loader::Loaded;
use crate::symbols::{AddrKind, FoundCode, KernelSymbols, ModuleIndex};
use crate::tracking::options::StackKind;
use crate::unwind::maps::flags;
use crate::unwind::proc_maps::AddressSpace;
use crate::vocab::{Message, record_header as header};

/// How far back events may arrive out of order: a probe reads the clock
/// before it sends, and may be preempted in between.
const REORDER_WINDOW_NS: u64 = 100_000_000;
/// Most events the reorder window holds (~200 bytes each): at high rates
/// the window is shorter than [`REORDER_WINDOW_NS`] (24 ms at 700 k
/// events/s, still far above a probe's usual clock-to-send delay), so the
/// recorder's memory does not follow the event rate. An event arriving
/// later than the window is written out of time order (the format allows
/// it) and counted.
const REORDER_WINDOW_EVENTS: usize = 16 * 1024;
/// Most events decoded before they go on to the reorder window: a drain
/// of the whole ring buffer (16 MiB with stacks, ~150 k events seen) would
/// otherwise be held at once.
const PENDING_BATCH: usize = 4096;
/// How often what has been written is made a complete chunk on disk.
const FLUSH_INTERVAL: Duration = Duration::from_millis(250);

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Capture(#[from] crate::capture::format::CaptureError),
    #[error("malformed record message: {0}")]
    Malformed(String),
}

/// An event whose stack is not resolved yet: a stack not seen before.
struct Pending {
    event: Event,
    stack: Option<(u128, RawStack)>,
    /// Its part in joining deferred off-CPU user stacks.
    join: Option<Join>,
}

/// Most value vectors kept for reuse.
const SPARE_VALUES: usize = 4096;
/// How often the end of a capture looks again at the stack copies waiting
/// for tables being built.
const LAST_TABLES_POLL: Duration = Duration::from_millis(10);

/// Writes the events of one capture as their messages arrive.
pub struct Recorder {
    writer: CaptureWriter<BufWriter<File>>,
    start_ns: u64,
    /// Per message (index in `Compiled::messages`), how its fields decode.
    fields: Vec<Vec<FieldDecoder>>,
    /// Per message, where its frames start (records with stacks).
    frames_at: Vec<Option<u32>>,
    /// Per record kind, whether it is a span.
    spans: Vec<bool>,
    /// The trackers' `task` record, which sets thread identities.
    identity: Option<IdentityRecord>,
    threads: ThreadTable,
    /// Names `ksym()` fields and, at the end, kernel frames.
    kernel_symbols: KernelSymbols,
    /// The unwind tables of the processes stacks are taken in.
    tables: Option<Tables>,
    /// How user stacks were walked and how they ended.
    stack_counts: tables::StackCounts,
    /// Which file each build id names.
    modules: ModuleIndex,
    /// Digests of the raw stacks already stored, and their stacks.
    stacks: HashMap<u128, StackId>,
    /// How each frame was first seen (innermost or return address).
    frame_kinds: Vec<AddrKind>,
    pending: Vec<Pending>,
    /// Long blocks waiting for their deferred user stacks.
    joins: PendingJoin,
    /// Events waiting for the tables of their copied user stacks.
    snapshots: SnapshotJoin,
    /// Events in time order until they leave the reorder window.
    window: ReorderWindow,
    /// Value vectors of written events, reused for new ones.
    spare: Vec<Vec<FieldValue>>,
    /// The newest time written, and how many events came after it.
    written_ns: u64,
    late: u64,
    last_flush: Instant,
}

impl Recorder {
    pub fn create(
        path: &Path,
        compiled: &Compiled,
        info: &CaptureInfo,
    ) -> Result<Recorder, RecordError> {
        let writer = CaptureWriter::create(path, info, &compiled.records)?;
        let fields: Vec<Vec<FieldDecoder>> = compiled
            .messages
            .iter()
            .map(|m| match m {
                Message::Record { record, fields, .. } => {
                    decoders(&compiled.records, *record, fields)
                }
                _ => Vec::new(),
            })
            .collect();
        let frames_at = (compiled.messages.iter())
            .map(|m| match m {
                Message::Record { frames_at, .. } => *frames_at,
                _ => None,
            })
            .collect();
        Ok(Recorder {
            writer,
            start_ns: info.start_monotonic_ns,
            fields,
            frames_at,
            spans: compiled
                .records
                .iter()
                .map(|r| r.kind == RecordKind::Span)
                .collect(),
            identity: identity_record(&compiled.records),
            threads: ThreadTable::default(),
            kernel_symbols: KernelSymbols::default(),
            tables: (compiled.unwind)
                .filter(|_| !frame_pointers_only(&info.settings))
                .map(Tables::new),
            stack_counts: tables::StackCounts::default(),
            modules: probed_binaries(compiled),
            stacks: HashMap::new(),
            frame_kinds: Vec::new(),
            pending: Vec::new(),
            joins: PendingJoin::new(&compiled.records),
            snapshots: SnapshotJoin::default(),
            window: ReorderWindow::new(REORDER_WINDOW_NS, REORDER_WINDOW_EVENTS),
            spare: Vec::new(),
            written_ns: 0,
            late: 0,
            last_flush: Instant::now(),
        })
    }

    /// Decode one record message (`message` is its index in `Compiled::messages`).
    pub fn push(&mut self, message: usize, record: u32, bytes: &[u8]) -> Result<(), RecordError> {
        let u64_at = |at: u32| u64_at(bytes, at);
        let ts = u64_at(header::TS)?;
        let task = u64_at(header::PID_TGID)?;
        let (pid, tid) = ((task >> 32) as u32, task as u32);
        // `STACK_TGID` is the upper half of the CPU's word.
        let cpu_word = u64_at(header::CPU)?;
        let (cpu, stack_tgid) = (cpu_word as u32, (cpu_word >> 32) as u32);
        let comm: Comm = bytes
            .get(header::COMM as usize..header::DURATION as usize)
            .and_then(|c| c.try_into().ok())
            .ok_or_else(|| malformed(bytes))?;
        let mut values = self.spare.pop().unwrap_or_default();
        self.decode(message, bytes, &mut values)?;
        if let Some(identity) = self.identity.filter(|i| i.record == record) {
            self.set_identity(&identity, &values);
            self.recycle(values);
            return Ok(());
        }
        let thread = self.threads.of_header(&mut self.writer, tid, pid, &comm);
        // Only spans carry a duration: other records without a stack end
        // their header at the comm.
        let span = self.spans.get(record as usize).copied().unwrap_or(false);
        let mut event = Event {
            ts_ns: ts.saturating_sub(self.start_ns),
            cpu,
            thread,
            record: RecordId(record),
            duration_ns: span.then(|| u64_at(header::DURATION)).transpose()?,
            values,
            stack: None,
            walk: None,
        };
        let (mut stack, mut join, mut snapshot) = (None, None, None);
        let stack_pid = if stack_tgid == 0 { pid } else { stack_tgid };
        if let Some(frames_at) = self.frames_at.get(message).copied().flatten() {
            let mut desc = StackHeader::read(bytes)?;
            let fields = self
                .fields
                .get(message)
                .map(Vec::as_slice)
                .unwrap_or_default();
            join = (self.joins).classify(record, desc.flags, tid, fields, bytes);
            // A deferred off-CPU stack held for its tables answers only
            // its own epoch's blocks; a waiting block has no user stack.
            match join {
                None | Some(Join::Brings { .. }) if desc.flags & flags::SNAPSHOT != 0 => {
                    snapshot = Some(read_snapshot(bytes, frames_at, &desc)?);
                }
                _ => desc.flags &= !flags::SNAPSHOT,
            }
            let at = (frames_at, stack_pid);
            let resolve = join.is_some() || snapshot.is_some();
            stack = self.message_stack(bytes, &desc, at, resolve, &mut event)?;
        }
        let pending = Pending { event, stack, join };
        match snapshot {
            Some(snapshot) => self.snapshots.wait(stack_pid, pending, snapshot),
            None => self.pending.push(pending),
        }
        if self.pending.len() >= PENDING_BATCH {
            self.drain_pending()?;
        }
        Ok(())
    }

    /// The stack a message carries (described by `desc`, its frames and
    /// their process at `(frames_at, pid)`): the event's stack when it is
    /// known, else (and always for stacks to join or walk from a copy,
    /// `resolve`) the raw stack to resolve, with its digest. A stack walked
    /// from a copy is counted when it is.
    fn message_stack(
        &mut self,
        bytes: &[u8],
        desc: &StackHeader,
        (frames_at, pid): (u32, u32),
        resolve: bool,
        event: &mut Event,
    ) -> Result<Option<(u128, RawStack)>, RecordError> {
        let user = desc.user_frames > 0;
        let copied = desc.flags & flags::SNAPSHOT != 0;
        if !copied {
            self.stack_counts.count(desc.flags, user);
        }
        event.walk = tables::stack_walk(desc.flags, user);
        let stale = flags::NO_PROCESS | flags::UNKNOWN_MAPPING | flags::KERNEL_VMA;
        if desc.flags & stale != 0
            && let Some(tables) = &mut self.tables
        {
            tables.want(pid);
        }
        if desc.kernel_frames == 0 && desc.user_frames == 0 && !copied {
            return Ok(None);
        }
        let user_pid = if desc.user_frames > 0 { pid } else { 0 };
        let stack_bytes = bytes.get(frames_at as usize..).unwrap_or_default();
        let key = digest(stack_bytes, user_pid, 0, desc);
        if let Some(&known) = self.stacks.get(&key).filter(|_| !resolve) {
            event.stack = Some(known);
            return Ok(None);
        }
        if user_pid != 0 {
            // While the process lives: its files name the build ids of its frames.
            self.modules.add_process(pid);
            if desc.flags & flags::KERNEL_VMA != 0 {
                self.add_found_code(pid);
            }
        }
        Ok(Some((key, raw_stack(bytes, frames_at, desc, pid)?)))
    }

    fn recycle(&mut self, mut values: Vec<FieldValue>) {
        if self.spare.len() < SPARE_VALUES {
            values.clear();
            self.spare.push(values);
        }
    }

    /// Resolve the stacks of pending events (while their processes live) and
    /// write what has left the reorder window.
    pub fn process(&mut self, loaded: &Loaded) -> Result<(), RecordError> {
        if let Some(tables) = &mut self.tables {
            tables.hold(self.snapshots.pids());
            let read = tables.update(loaded);
            self.read_modules_of(&read);
        }
        self.drain_pending()?;
        // Complete chunks on disk: a capture killed now still replays to here.
        if self.last_flush.elapsed() >= FLUSH_INTERVAL {
            self.writer.flush()?;
            self.last_flush = Instant::now();
        }
        Ok(())
    }

    /// Resolves the stacks of pending events, joins deferred user stacks,
    /// and writes what has left the reorder window.
    fn drain_pending(&mut self) -> Result<(), RecordError> {
        let mut batch = Vec::with_capacity(self.pending.len());
        // Taken out and put back, so its capacity is reused.
        let mut decoded = std::mem::take(&mut self.pending);
        let walked = self.settle_snapshots(false);
        for pending in decoded.drain(..).chain(walked) {
            self.route(pending, &mut batch);
        }
        self.pending = decoded;
        for block in self.joins.expire(self.window.newest_ns()) {
            batch.push(self.resolved(block));
        }
        self.window.insert(batch);
        self.write_due()
    }

    /// An event to the reorder window (`batch`), or to the blocks waiting
    /// for their deferred user stacks, or with the stack it brings them.
    fn route(&mut self, pending: Pending, batch: &mut Vec<Event>) {
        match pending.join {
            Some(Join::Awaits { tid, .. }) => self.joins.wait(tid, pending),
            Some(Join::Brings { tid, .. }) => {
                for block in self.joins.answer(tid, &pending) {
                    batch.push(self.resolved(block));
                }
                self.recycle(pending.event.values);
            }
            None => batch.push(self.resolved(pending)),
        }
    }

    /// The events whose copied user stacks are walked now or given up
    /// (all of them with `last`), counted.
    fn settle_snapshots(&mut self, last: bool) -> Vec<Pending> {
        let settled = self.snapshots.settle(self.tables.as_ref(), last);
        for (_, raw) in settled.iter().filter_map(|p| p.stack.as_ref()) {
            self.stack_counts.count(raw.flags, !raw.user.is_empty());
        }
        settled
    }

    /// Writes the events that left the reorder window. Nothing after an
    /// event still waiting for its user stack (a block's deferred one, a
    /// copy's tables) goes out, unless the window is over its cap behind
    /// it: the oldest waiting event then goes out as it is.
    fn write_due(&mut self) -> Result<(), RecordError> {
        loop {
            let copies = self.snapshots.oldest();
            let hold_ns = [self.joins.oldest(), copies].into_iter().flatten().min();
            if let Some(event) = self.window.pop_due_before(hold_ns.unwrap_or(u64::MAX)) {
                self.write(event)?;
                continue;
            }
            if !self.window.over_cap() {
                return Ok(());
            }
            if copies.is_some()
                && copies == hold_ns
                && let Some(pending) = self.snapshots.give_up_oldest()
            {
                let mut batch = Vec::new();
                self.settled_given_up(pending, &mut batch);
                self.window.insert(batch);
                continue;
            }
            match self.joins.next_due(&mut self.window, hold_ns) {
                Some(Due::Event(event)) => self.write(event)?,
                Some(Due::GivenUp(block)) => {
                    let event = self.resolved(block);
                    self.window.insert(vec![event]);
                }
                None => return Ok(()),
            }
        }
    }

    /// A copied stack given up: counted as the BPF walk found it, and routed.
    fn settled_given_up(&mut self, pending: Pending, batch: &mut Vec<Event>) {
        if let Some((_, raw)) = &pending.stack {
            self.stack_counts.count(raw.flags, !raw.user.is_empty());
        }
        self.route(pending, batch);
    }

    /// The event of `pending`, its stack resolved (while its process lives).
    fn resolved(&mut self, mut pending: Pending) -> Event {
        if let Some((key, raw)) = pending.stack {
            pending.event.stack = match self.stacks.get(&key) {
                Some(&known) => Some(known),
                None => {
                    let stack = self.resolve_stack(&raw);
                    if let Some(stack) = stack {
                        self.stacks.insert(key, stack);
                    }
                    stack
                }
            };
        }
        pending.event
    }

    /// Writes `event`, counting it when it comes after a later one.
    fn write(&mut self, event: Event) -> Result<(), RecordError> {
        if event.ts_ns < self.written_ns {
            self.late += 1;
        }
        self.written_ns = self.written_ns.max(event.ts_ns);
        self.writer.event(&event)?;
        self.recycle(event.values);
        Ok(())
    }

    /// A binary whose frames may outlive every process seen running it
    /// (the traced command).
    pub fn add_binary(&mut self, path: &Path) {
        self.modules.add_path(&path.to_string_lossy());
    }

    /// Loads the unwind tables of process `pid` at the next `process`.
    pub fn add_process(&mut self, pid: u32) {
        if let Some(tables) = &mut self.tables {
            tables.want(pid);
        }
    }

    /// Starts building the unwind tables of a program the traced command
    /// runs (its own, or one it launches) and of the files it maps as it
    /// starts, before the command runs.
    pub fn prepare_command(&mut self, program: &Path) {
        if let Some(tables) = &mut self.tables {
            tables.prepare(program);
        }
    }

    /// Places the tables built so far, waiting up to `wait` for the rest
    /// (before the traced command runs).
    pub fn place_tables(&mut self, loaded: &Loaded, wait: Duration) {
        if let Some(tables) = &mut self.tables {
            tables.place_built(loaded, wait);
        }
    }

    /// The traced command runs from now on: table work after this is
    /// inside its run (`tables built after the command was released`).
    pub fn command_released(&mut self) {
        if let Some(tables) = &mut self.tables {
            tables.command_released();
        }
    }

    /// With `WPROF_TIMINGS`, on standard error: the table builds started
    /// after the command was released (files its start-up did not
    /// prepare) and the time spent building after it; how often processes'
    /// mappings were read, by the tables' reader and by the module index.
    fn report_tables(&self) {
        let Some(tables) = self.tables.as_ref().filter(|_| crate::timings::enabled()) else {
            return;
        };
        if let Some((started, build_time)) = tables.after_release() {
            crate::timings::note(&format!(
                "unwind tables built after the command was released: {started} \
                 ({:.3} ms building after it)",
                build_time.as_secs_f64() * 1e3
            ));
        }
        crate::timings::note(&format!(
            "process mappings read: {} for unwind tables ({} failed), {} more for symbols",
            tables.reads,
            tables.failed_reads,
            self.modules.reads()
        ));
    }

    /// At the end of the capture (its programs detached): processes what
    /// is left, waiting up to `wait` while stack copies wait for tables
    /// being built (held in memory: the maps are read no more), then
    /// abandons the builds left, counted.
    pub fn finish_tables(&mut self, loaded: &Loaded, wait: Duration) -> Result<(), RecordError> {
        if let Some(tables) = &mut self.tables {
            tables.stop();
        }
        let deadline = Instant::now() + wait;
        loop {
            self.process(loaded)?;
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(tables) = &mut self.tables else {
                return Ok(());
            };
            if self.snapshots.is_empty() || !tables.building() || left.is_zero() {
                tables.abandon_builds();
                self.report_tables();
                return Ok(());
            }
            tables.place_built(loaded, left.min(LAST_TABLES_POLL));
        }
    }

    /// Whether user stacks are unwound with tables (not frame pointers only).
    pub fn unwinds(&self) -> bool {
        self.tables.is_some()
    }

    /// Loads the unwind tables of process `pid` as soon as the program it
    /// is `exec`ing (its address space was `before`) is mapped: the traced
    /// command, just released.
    pub fn add_new_image(&mut self, loaded: &Loaded, pid: u32, before: AddressSpace) {
        if let Some(tables) = &mut self.tables {
            let read = tables.add_new_image(loaded, pid, before);
            self.read_modules_of(&read);
        }
    }

    /// Reads the unwinder's notes (`bpf_find_vma`) from the loaded maps.
    pub fn connect(&mut self, loaded: &Loaded) {
        if let Some(tables) = &mut self.tables {
            tables.connect(loaded);
        }
    }

    /// The code the unwinder found mapped in `pid` through the kernel
    /// serves symbolization too: the process may be gone before its
    /// mappings are read with it.
    fn add_found_code(&mut self, pid: u32) {
        let Some(tables) = &self.tables else {
            return;
        };
        for (vma, path) in tables.found_code(pid) {
            let code = FoundCode {
                start: vma.start,
                end: vma.end,
                file_offset: vma.offset,
                path: path.to_string(),
            };
            self.modules.add_found(pid, code);
        }
    }

    /// The mappings the unwinder just read serve symbolization too: a
    /// stack its tables walk wakes no one at once (only a kernel walk or
    /// unknown code does), and its process may be gone, with its mappings,
    /// before the recorder sees it.
    fn read_modules_of(&mut self, read: &[(u32, String)]) {
        for (pid, maps) in read {
            self.modules.refresh_from(*pid, maps);
        }
    }

    /// Whether tables are being built or processes wait to be read: the
    /// recorder should run again soon, whatever the events.
    pub fn busy(&self) -> bool {
        self.tables.as_ref().is_some_and(Tables::busy) || !self.snapshots.is_empty()
    }

    pub fn events(&self) -> u64 {
        self.writer.events_written() + self.window.len() as u64
    }

    pub fn bytes(&self) -> u64 {
        self.writer.bytes_written()
    }

    /// Write the remaining events, the symbols of every frame and the statistics.
    /// `drops`: the kernel's counts of lost events per record kind.
    pub fn finish(
        mut self,
        drops: Vec<RecordDrops>,
        duration_ns: u64,
    ) -> Result<CaptureStats, RecordError> {
        let mut last = Vec::new();
        for pending in self.settle_snapshots(true) {
            self.route(pending, &mut last);
        }
        self.window.insert(last);
        let unanswered: Vec<Event> = (self.joins.expire(u64::MAX).into_iter())
            .map(|block| self.resolved(block))
            .collect();
        self.window.insert(unanswered);
        while let Some(event) = self.window.pop() {
            self.write(event)?;
        }
        if self.late > 0 {
            eprintln!(
                "wprof: {} events arrived after the reorder window and are out of time order \
                 in the capture",
                self.late
            );
        }
        let symbols = self.symbols();
        let mut stacks = (self.stack_counts).finish(self.tables.as_ref().map(Tables::stats));
        stacks.extend(self.joins.counts());
        stacks.extend(self.snapshots.counts());
        let stats = CaptureStats {
            events: self.writer.events_written(),
            duration_ns,
            stacks,
            ..CaptureStats::with_record_drops(drops)
        };
        self.writer.finish(&symbols, &stats)?;
        Ok(stats)
    }
}

/// Whether the capture asked for frame pointers only (`-S unwind=fp`): no
/// tables are built, so the unwinder finds no process and every user stack
/// is the kernel's frame-pointer walk.
fn frame_pointers_only(settings: &CaptureSettings) -> bool {
    let asked = StackKind::FramePointersOnly.to_string();
    settings.stacks.contains(&asked)
}
