//! Recording: record messages from the ring buffer → capture events in
//! `wprof.data`. Decodes the header and fields, keeps thread identities,
//! reads stacks and normalizes their user frames while the processes still
//! live, puts events from all CPUs in time order, and at the end symbolizes
//! every frame and writes the statistics.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::capture::model::*;
use crate::capture::stacks::{
    AddrKind, ModuleIndex, NormalizedAddr, RawFrame, StackNormalizer, SymbolizeOptions, symbolize,
};
use crate::capture::writer::CaptureWriter;
use crate::codegen::program::Compiled;
use crate::output::value::{Value, decode};
use crate::runtime::bpf::loader::Loaded;
use crate::runtime::bpf::maps_read::BuildIdFrame;
use crate::runtime::kallsyms::Kallsyms;
use crate::runtime::threads::{Comm, ThreadTable};
use crate::vocab::{AttachPoint, MapId, MapKind, Message, ValueType, record_header as header};

/// How far back events may arrive out of order: a probe reads the clock
/// before it sends, and may be preempted in between.
const REORDER_WINDOW_NS: u64 = 100_000_000;
/// How often what has been written is made a complete chunk on disk.
const FLUSH_INTERVAL: Duration = Duration::from_millis(250);

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Capture(#[from] crate::capture::format::CaptureError),
    #[error("cannot read a stack: {0}")]
    Stack(#[from] crate::runtime::bpf::maps_read::MapError),
    #[error("malformed record message: {0}")]
    Malformed(String),
}

/// A stack as the probe left it: ids in the stack map, and the return
/// address a function-entry uprobe adds after the innermost user frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct RawStack {
    pid: u32,
    kernel: i64,
    user: i64,
    entry_return: u64,
}

/// An event whose stack ids still need the stack map.
struct Pending {
    event: Event,
    pid: u32,
    kernel_stack: i64,
    user_stack: i64,
    entry_return: u64,
}

/// How one field of a record message decodes.
#[derive(Clone, Debug)]
enum FieldDecoder {
    Value {
        at: u32,
        ty: ValueType,
    },
    /// A task: the kernel stores its tid as a u64.
    Thread {
        at: u32,
    },
    /// A kernel address stored as the symbol's name.
    KernelSymbol {
        at: u32,
    },
}

/// Positions of the tracker `task` record's fields, in `IDENTITY_FIELDS` order.
#[derive(Clone, Copy, Debug)]
struct IdentityRecord {
    record: u32,
    fields: [usize; 6],
}

const IDENTITY_FIELDS: [&str; 6] = ["tid", "pid", "ppid", "comm", "pcomm", "kthread"];

/// Most value vectors kept for reuse.
const SPARE_VALUES: usize = 4096;

pub struct Recorder {
    writer: CaptureWriter<BufWriter<File>>,
    start_ns: u64,
    /// Per message (index in `Compiled::messages`), how its fields decode.
    fields: Vec<Vec<FieldDecoder>>,
    /// Per record kind, whether it is a span.
    spans: Vec<bool>,
    /// The trackers' `task` record, which sets thread identities.
    identity: Option<IdentityRecord>,
    threads: ThreadTable,
    /// Loaded when a record has a kernel symbol field.
    kallsyms: Option<Kallsyms>,
    kernel_stacks: Option<MapId>,
    user_stacks: Option<MapId>,
    /// User stacks hold build ids (else plain addresses).
    user_build_ids: bool,
    /// Which file each build id names.
    modules: ModuleIndex,
    /// Raw stacks already stored (pid 0 for kernel-only stacks).
    stacks: HashMap<RawStack, Option<StackId>>,
    /// How each frame was first seen (innermost or return address).
    frame_kinds: Vec<AddrKind>,
    normalizer: StackNormalizer,
    pending: Vec<Pending>,
    /// Events in time order until they leave the reorder window.
    ordered: VecDeque<Event>,
    /// Value vectors of written events, reused for new ones.
    spare: Vec<Vec<FieldValue>>,
    newest_ns: u64,
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
                Message::Record { record, fields } => decoders(&compiled.records, *record, fields),
                _ => Vec::new(),
            })
            .collect();
        let symbols = fields
            .iter()
            .flatten()
            .any(|f| matches!(f, FieldDecoder::KernelSymbol { .. }));
        Ok(Recorder {
            writer,
            start_ns: info.start_monotonic_ns,
            fields,
            spans: compiled
                .records
                .iter()
                .map(|r| r.kind == RecordKind::Span)
                .collect(),
            identity: identity_record(&compiled.records),
            threads: ThreadTable::default(),
            kallsyms: symbols.then(Kallsyms::load),
            kernel_stacks: compiled.kernel_stacks,
            user_stacks: compiled.user_stacks,
            user_build_ids: compiled.user_stacks.is_some_and(|map| {
                compiled.maps[map.0 as usize].kind == MapKind::BuildIdStackTrace
            }),
            modules: probed_binaries(compiled),
            stacks: HashMap::new(),
            frame_kinds: Vec::new(),
            normalizer: StackNormalizer::new(),
            pending: Vec::new(),
            ordered: VecDeque::new(),
            spare: Vec::new(),
            newest_ns: 0,
            last_flush: Instant::now(),
        })
    }

    /// Decode one record message (`message` is its index in `Compiled::messages`).
    pub fn push(&mut self, message: usize, record: u32, bytes: &[u8]) -> Result<(), RecordError> {
        let u64_at = |at: u32| u64_at(bytes, at);
        let ts = u64_at(header::TS)?;
        let task = u64_at(header::PID_TGID)?;
        let (pid, tid) = ((task >> 32) as u32, task as u32);
        let cpu = u64_at(header::CPU)? as u32;
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
        if self.user_stacks.is_some() {
            // While the process lives: its files name the build ids of its frames.
            self.modules.add_process(pid);
        }
        let event = Event {
            ts_ns: ts.saturating_sub(self.start_ns),
            cpu,
            thread,
            record: RecordId(record),
            duration_ns: self
                .spans
                .get(record as usize)
                .copied()
                .unwrap_or(false)
                .then_some(u64_at(header::DURATION)?),
            values,
            stack: None,
        };
        self.pending.push(Pending {
            event,
            pid,
            kernel_stack: u64_at(header::KERNEL_STACK)? as i64,
            user_stack: u64_at(header::USER_STACK)? as i64,
            entry_return: u64_at(header::ENTRY_RETURN)?,
        });
        Ok(())
    }

    /// The fields of `bytes` into `values`, in schema order.
    fn decode(
        &mut self,
        message: usize,
        bytes: &[u8],
        values: &mut Vec<FieldValue>,
    ) -> Result<(), RecordError> {
        let Recorder {
            fields,
            writer,
            threads,
            kallsyms,
            ..
        } = self;
        for field in fields.get(message).map(Vec::as_slice).unwrap_or_default() {
            let value = match field {
                FieldDecoder::Thread { at } => {
                    FieldValue::Thread(threads.of_field(writer, u64_at(bytes, *at)? as u32))
                }
                FieldDecoder::KernelSymbol { at } => {
                    let addr = u64_at(bytes, *at)?;
                    let name = kallsyms.as_ref().map(|k| k.name(addr));
                    FieldValue::Str(writer.intern(name.as_deref().unwrap_or_default()))
                }
                FieldDecoder::Value { at, ty } => {
                    let field = bytes.get(*at as usize..).unwrap_or_default();
                    match decode(field, ty).map_err(|e| RecordError::Malformed(e.to_string()))? {
                        Value::Int(v) => FieldValue::Int(v),
                        Value::UInt(v) | Value::Probe(v) => FieldValue::UInt(v),
                        Value::Str(text) => {
                            FieldValue::Str(writer.intern(&String::from_utf8_lossy(&text)))
                        }
                        other => {
                            return Err(RecordError::Malformed(format!(
                                "unexpected field value {other:?}"
                            )));
                        }
                    }
                }
            };
            values.push(value);
        }
        Ok(())
    }

    /// A tracker `task` record: the thread it describes is who its tid is from now on.
    fn set_identity(&mut self, identity: &IdentityRecord, values: &[FieldValue]) {
        let [tid, pid, ppid, comm, pcomm, kthread] = identity.fields.map(|i| values.get(i));
        let number = |v: Option<&FieldValue>| match v {
            Some(FieldValue::UInt(n)) => *n as u32,
            Some(FieldValue::Int(n)) => *n as u32,
            _ => 0,
        };
        let text = |v: Option<&FieldValue>| match v {
            Some(FieldValue::Str(id)) => self.writer.string(*id).to_string(),
            _ => String::new(),
        };
        let (name, process_name) = (text(comm), text(pcomm));
        let info = ThreadInfo {
            tid: number(tid),
            pid: number(pid),
            ppid: number(ppid),
            kthread: number(kthread) != 0,
            name: &name,
            process_name: &process_name,
        };
        self.threads.set_identity(&mut self.writer, &info);
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
        let mut batch = Vec::with_capacity(self.pending.len());
        for mut pending in std::mem::take(&mut self.pending) {
            let raw = RawStack {
                pid: pending.pid,
                kernel: pending.kernel_stack,
                user: pending.user_stack,
                entry_return: pending.entry_return,
            };
            pending.event.stack = self.stack(loaded, raw)?;
            batch.push(pending.event);
        }
        // The ring buffer delivers in reservation order, which is nearly
        // time order: a stable sort of the batch is cheap, and merging it
        // into the window is mostly an append.
        batch.sort_by_key(|e| e.ts_ns);
        if let Some(last) = batch.last() {
            self.newest_ns = self.newest_ns.max(last.ts_ns);
        }
        merge_sorted(&mut self.ordered, batch);
        self.write_older_than(self.newest_ns.saturating_sub(REORDER_WINDOW_NS))?;
        // Complete chunks on disk: a capture killed now still replays to here.
        if self.last_flush.elapsed() >= FLUSH_INTERVAL {
            self.writer.flush()?;
            self.last_flush = Instant::now();
        }
        Ok(())
    }

    fn write_older_than(&mut self, limit_ns: u64) -> Result<(), RecordError> {
        while self.ordered.front().is_some_and(|e| e.ts_ns < limit_ns) {
            let event = self.ordered.pop_front().expect("checked");
            self.writer.event(&event)?;
            self.recycle(event.values);
        }
        Ok(())
    }

    fn stack(&mut self, loaded: &Loaded, raw: RawStack) -> Result<Option<StackId>, RecordError> {
        if raw.kernel < 0 && raw.user < 0 {
            return Ok(None);
        }
        let key = RawStack {
            pid: if raw.user >= 0 { raw.pid } else { 0 },
            ..raw
        };
        if let Some(known) = self.stacks.get(&key) {
            return Ok(*known);
        }
        let mut frames = Vec::new();
        if let (true, Some(map)) = (raw.kernel >= 0, self.kernel_stacks) {
            for addr in loaded.stack(map, raw.kernel as u32)? {
                frames.push(self.frame(FrameAddr::Kernel { addr }, frames.len()));
            }
        }
        if let (true, Some(map)) = (raw.user >= 0, self.user_stacks) {
            let raw_frames = if self.user_build_ids {
                loaded.build_id_stack(map, raw.user as u32)?
            } else {
                let addrs = loaded.stack(map, raw.user as u32)?;
                addrs.into_iter().map(BuildIdFrame::Ip).collect()
            };
            let mut user: Vec<FrameAddr> = raw_frames
                .into_iter()
                .map(|frame| self.user_frame(raw.pid, frame))
                .collect();
            if raw.entry_return != 0 && !user.is_empty() {
                // Kernels that fix up entry stacks themselves (when the function
                // starts with `push %rbp`) already list the caller.
                let caller = self.user_frame(raw.pid, BuildIdFrame::Ip(raw.entry_return));
                if user.get(1) != Some(&caller) {
                    user.insert(1, caller);
                }
            }
            for addr in user {
                frames.push(self.frame(addr, frames.len()));
            }
        }
        let stack = (!frames.is_empty()).then(|| self.writer.stack(&frames));
        self.stacks.insert(key, stack);
        Ok(stack)
    }

    /// A user frame normalized by the kernel (build id) or, failing that,
    /// through the process's mappings while it lives.
    fn user_frame(&mut self, pid: u32, frame: BuildIdFrame) -> FrameAddr {
        match frame {
            BuildIdFrame::File {
                build_id,
                file_offset,
            } => {
                let (path, id) = match self.modules.lookup(&build_id) {
                    Some((path, id)) => (path.to_string(), id.to_vec()),
                    None => (String::new(), build_id.to_vec()),
                };
                FrameAddr::User {
                    module: self.writer.intern(&path),
                    build_id: Some(id),
                    file_offset,
                }
            }
            BuildIdFrame::Ip(addr) => {
                if let Some((path, file_offset)) = self.modules.translate(pid, addr) {
                    let build_id = self.modules.build_id_of(path).map(<[u8]>::to_vec);
                    let module = self.writer.intern(path);
                    return FrameAddr::User {
                        module,
                        build_id,
                        file_offset,
                    };
                }
                self.normalized_frame(pid, addr)
            }
        }
    }

    /// A user frame normalized through the live process's mappings.
    fn normalized_frame(&mut self, pid: u32, addr: u64) -> FrameAddr {
        match self.normalizer.normalize_user(pid, &[addr]).pop() {
            Some(NormalizedAddr::Normalized {
                path,
                build_id,
                file_offset,
            }) => FrameAddr::User {
                module: self.writer.intern(&path),
                build_id,
                file_offset,
            },
            _ => FrameAddr::UnknownUser { addr },
        }
    }

    fn frame(&mut self, addr: FrameAddr, depth: usize) -> FrameId {
        let id = self.writer.frame(addr);
        if id.0 as usize == self.frame_kinds.len() {
            self.frame_kinds.push(AddrKind::at_depth(depth));
        }
        id
    }

    /// A binary whose frames may outlive every process seen running it
    /// (the traced command).
    pub fn add_binary(&mut self, path: &Path) {
        self.modules.add_path(&path.to_string_lossy());
    }

    pub fn events(&self) -> u64 {
        self.writer.events_written() + self.ordered.len() as u64
    }

    pub fn bytes(&self) -> u64 {
        self.writer.bytes_written()
    }

    /// Write the remaining events, the symbols of every frame and the statistics.
    pub fn finish(
        mut self,
        drops: Vec<(DropReason, u64)>,
        duration_ns: u64,
    ) -> Result<CaptureStats, RecordError> {
        self.write_older_than(u64::MAX)?;
        let raw: Vec<(RawFrame, AddrKind)> = self
            .writer
            .frames()
            .iter()
            .zip(&self.frame_kinds)
            .map(|(frame, kind)| (raw_frame(frame, &self.writer), *kind))
            .collect();
        let symbolized = symbolize(&raw, &SymbolizeOptions::default());
        let symbols: Vec<(FrameId, Symbol)> = symbolized
            .symbols
            .into_iter()
            .enumerate()
            .map(|(index, raw)| {
                let mut intern = |s: &str| self.writer.intern(s);
                let symbol = Symbol {
                    function: raw.function.as_deref().map(&mut intern),
                    offset: raw.offset,
                    file: raw.file.as_deref().map(&mut intern),
                    line: raw.line,
                    inlined: raw.inlined.iter().map(|s| intern(s)).collect(),
                };
                (FrameId(index as u32), symbol)
            })
            .collect();
        let stats = CaptureStats {
            events: self.writer.events_written(),
            drops,
            duration_ns,
        };
        self.writer.finish(&symbols, &stats)?;
        Ok(stats)
    }
}

/// Merge sorted `batch` into sorted `ordered`; equal times keep `ordered` first.
fn merge_sorted(ordered: &mut VecDeque<Event>, batch: Vec<Event>) {
    let Some(first) = batch.first() else {
        return;
    };
    if ordered.back().is_none_or(|last| last.ts_ns <= first.ts_ns) {
        ordered.extend(batch);
        return;
    }
    let mut merged = VecDeque::with_capacity(ordered.len() + batch.len());
    let mut batch = batch.into_iter().peekable();
    while let Some(old) = ordered.pop_front() {
        while let Some(new) = batch.next_if(|new| new.ts_ns < old.ts_ns) {
            merged.push_back(new);
        }
        merged.push_back(old);
    }
    merged.extend(batch);
    *ordered = merged;
}

/// How the fields of a record message decode: thread fields by the schema,
/// kernel symbols by their layout.
fn decoders(
    records: &[RecordSchema],
    record: u32,
    layout: &[(u32, ValueType)],
) -> Vec<FieldDecoder> {
    let schema = records.get(record as usize);
    layout
        .iter()
        .enumerate()
        .map(|(index, (at, ty))| {
            let field_type = schema.and_then(|s| s.fields.get(index)).map(|f| f.ty);
            match (field_type, ty) {
                (Some(FieldType::Thread), _) => FieldDecoder::Thread { at: *at },
                (_, ValueType::Symbol { kernel: true }) => FieldDecoder::KernelSymbol { at: *at },
                _ => FieldDecoder::Value {
                    at: *at,
                    ty: ty.clone(),
                },
            }
        })
        .collect()
}

/// The trackers' `task` record, when it has every identity field.
fn identity_record(records: &[RecordSchema]) -> Option<IdentityRecord> {
    let (record, schema) = records
        .iter()
        .enumerate()
        .find(|(_, r)| r.origin == RecordOrigin::Tracker && r.name == "task")?;
    let mut fields = [0; 6];
    for (slot, name) in fields.iter_mut().zip(IDENTITY_FIELDS) {
        *slot = schema.fields.iter().position(|f| f.name == name)?;
    }
    Some(IdentityRecord {
        record: record as u32,
        fields,
    })
}

fn u64_at(bytes: &[u8], at: u32) -> Result<u64, RecordError> {
    bytes
        .get(at as usize..at as usize + 8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        .ok_or_else(|| malformed(bytes))
}

fn malformed(bytes: &[u8]) -> RecordError {
    RecordError::Malformed(format!("{} bytes", bytes.len()))
}

fn raw_frame(frame: &FrameAddr, writer: &CaptureWriter<BufWriter<File>>) -> RawFrame {
    match frame {
        FrameAddr::Kernel { addr } => RawFrame::Kernel { addr: *addr },
        FrameAddr::User {
            module,
            build_id,
            file_offset,
        } => RawFrame::User {
            path: writer.string(*module).to_string(),
            build_id: build_id.clone(),
            file_offset: *file_offset,
        },
        FrameAddr::UnknownUser { addr } => RawFrame::UnknownUser { addr: *addr },
    }
}

/// The binaries the script's uprobes and USDT probes attach to: their build
/// ids are known even if no process using them is seen alive.
fn probed_binaries(compiled: &Compiled) -> ModuleIndex {
    let mut modules = ModuleIndex::new();
    for program in &compiled.programs {
        if let AttachPoint::Uprobe { binary, .. } | AttachPoint::Usdt { binary, .. } =
            &program.attach
        {
            modules.add_path(&binary.to_string_lossy());
        }
    }
    modules
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ts_ns: u64, cpu: u32) -> Event {
        Event {
            ts_ns,
            cpu,
            ..Event::default()
        }
    }

    fn schema(name: &str, origin: RecordOrigin, fields: &[(&str, FieldType)]) -> RecordSchema {
        RecordSchema {
            probe: String::new(),
            name: name.into(),
            kind: RecordKind::Instant,
            fields: fields
                .iter()
                .map(|(name, ty)| FieldSchema {
                    name: (*name).into(),
                    ty: *ty,
                })
                .collect(),
            has_stack: false,
            origin,
        }
    }

    /// Batches merge into time order; equal times keep earlier arrivals first.
    #[test]
    fn merges_batches_in_time_order() {
        let mut ordered = VecDeque::new();
        merge_sorted(&mut ordered, vec![at(1, 0), at(5, 0)]);
        merge_sorted(&mut ordered, vec![at(6, 1), at(7, 1)]);
        merge_sorted(&mut ordered, vec![at(0, 1), at(5, 1), at(9, 1)]);
        let order: Vec<(u64, u32)> = ordered.iter().map(|e| (e.ts_ns, e.cpu)).collect();
        assert_eq!(
            order,
            [(0, 1), (1, 0), (5, 0), (5, 1), (6, 1), (7, 1), (9, 1)]
        );
    }

    /// Thread fields decode by the schema, kernel symbols by the layout.
    #[test]
    fn picks_decoders() {
        let records = [schema(
            "switch",
            RecordOrigin::Tracker,
            &[
                ("next", FieldType::Thread),
                ("func", FieldType::Str),
                ("n", FieldType::UInt),
            ],
        )];
        let int = ValueType::Int {
            size: 8,
            signed: false,
        };
        let layout = [
            (80, int.clone()),
            (88, ValueType::Symbol { kernel: true }),
            (96, int),
        ];
        let decoders = decoders(&records, 0, &layout);
        assert!(matches!(decoders[0], FieldDecoder::Thread { at: 80 }));
        assert!(matches!(decoders[1], FieldDecoder::KernelSymbol { at: 88 }));
        assert!(matches!(decoders[2], FieldDecoder::Value { at: 96, .. }));
    }

    /// Only the trackers' complete `task` record sets identities.
    #[test]
    fn finds_the_identity_record() {
        let fields: Vec<(&str, FieldType)> = IDENTITY_FIELDS
            .iter()
            .rev()
            .map(|name| (*name, FieldType::UInt))
            .collect();
        let task = schema("task", RecordOrigin::Tracker, &fields);
        let user_task = schema("task", RecordOrigin::Script, &fields);
        let found = identity_record(&[user_task.clone(), task.clone()]).expect("found");
        assert_eq!((found.record, found.fields), (1, [5, 4, 3, 2, 1, 0]));
        assert!(identity_record(&[user_task]).is_none());
        let partial = schema("task", RecordOrigin::Tracker, &fields[1..]);
        assert!(identity_record(&[partial]).is_none());
    }
}
