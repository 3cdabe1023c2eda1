//! Recording: record messages from the ring buffer → capture events in
//! `wprof.data`. Decodes the header and fields, keeps thread identities,
//! reads stacks and normalizes their user frames while the processes still
//! live, puts events from all CPUs in time order, and at the end symbolizes
//! every frame and writes the statistics.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::capture::model::*;
use crate::capture::stacks::{
    AddrKind, ModuleIndex, NormalizedAddr, RawFrame, StackNormalizer, SymbolizeOptions, symbolize,
};
use crate::capture::writer::CaptureWriter;
use crate::codegen::program::{AttachPoint, Compiled, MapId, ValueType, record_header as header};
use crate::output::value::{Value, decode};
use crate::runtime::loader::Loaded;
use crate::runtime::maps_read::BuildIdFrame;

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
    Stack(#[from] crate::runtime::maps_read::MapError),
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

pub struct Recorder {
    writer: CaptureWriter<BufWriter<File>>,
    start_ns: u64,
    fields: Vec<Vec<(u32, ValueType)>>,
    /// Per record kind, whether it is a span.
    spans: Vec<bool>,
    kernel_stacks: Option<MapId>,
    user_stacks: Option<MapId>,
    /// Which file each build id names.
    modules: ModuleIndex,
    threads: HashMap<(u32, Vec<u8>), ThreadId>,
    /// Raw stacks already stored (pid 0 for kernel-only stacks).
    stacks: HashMap<RawStack, Option<StackId>>,
    /// How each frame was first seen (innermost or return address).
    frame_kinds: Vec<AddrKind>,
    normalizer: StackNormalizer,
    pending: Vec<Pending>,
    /// Events by time until they leave the reorder window.
    ordered: BTreeMap<(u64, u64), Event>,
    sequence: u64,
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
        let fields = compiled
            .messages
            .iter()
            .map(|m| match m {
                crate::codegen::program::Message::Record { fields, .. } => fields.clone(),
                _ => Vec::new(),
            })
            .collect();
        Ok(Recorder {
            writer,
            start_ns: info.start_monotonic_ns,
            fields,
            spans: compiled
                .records
                .iter()
                .map(|r| r.kind == RecordKind::Span)
                .collect(),
            kernel_stacks: compiled.kernel_stacks,
            user_stacks: compiled.user_stacks,
            modules: probed_binaries(compiled),
            threads: HashMap::new(),
            stacks: HashMap::new(),
            frame_kinds: Vec::new(),
            normalizer: StackNormalizer::new(),
            pending: Vec::new(),
            ordered: BTreeMap::new(),
            sequence: 0,
            newest_ns: 0,
            last_flush: Instant::now(),
        })
    }

    /// Decode one record message (`message` is its index in `Compiled::messages`).
    pub fn push(&mut self, message: usize, record: u32, bytes: &[u8]) -> Result<(), RecordError> {
        let u64_at = |at: u32| {
            bytes
                .get(at as usize..at as usize + 8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
                .ok_or_else(|| RecordError::Malformed(format!("{} bytes", bytes.len())))
        };
        let ts = u64_at(header::TS)?;
        let task = u64_at(header::PID_TGID)?;
        let (pid, tid) = ((task >> 32) as u32, task as u32);
        let cpu = u64_at(header::CPU)? as u32;
        let comm = bytes
            .get(header::COMM as usize..header::DURATION as usize)
            .map(|c| c.split(|b| *b == 0).next().unwrap_or_default().to_vec())
            .unwrap_or_default();
        let duration = u64_at(header::DURATION)?;
        let thread = self.thread(tid, pid, comm);
        if self.user_stacks.is_some() {
            // While the process lives: its files name the build ids of its frames.
            self.modules.add_process(pid);
        }
        let values = self.values(message, bytes)?;
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
                .then_some(duration),
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

    fn thread(&mut self, tid: u32, pid: u32, comm: Vec<u8>) -> ThreadId {
        if let Some(&id) = self.threads.get(&(tid, comm.clone())) {
            return id;
        }
        let name = String::from_utf8_lossy(&comm).into_owned();
        let process = if tid == pid {
            name.clone()
        } else {
            process_name(pid).unwrap_or_else(|| name.clone())
        };
        let id = self.writer.thread(&ThreadInfo {
            tid,
            pid,
            name: &name,
            process_name: &process,
            ..ThreadInfo::default()
        });
        self.threads.insert((tid, comm), id);
        id
    }

    fn values(&mut self, message: usize, bytes: &[u8]) -> Result<Vec<FieldValue>, RecordError> {
        let layout = self.fields.get(message).cloned().unwrap_or_default();
        layout
            .iter()
            .map(|(at, ty)| {
                let field = bytes.get(*at as usize..).unwrap_or_default();
                match decode(field, ty).map_err(|e| RecordError::Malformed(e.to_string()))? {
                    Value::Int(v) => Ok(FieldValue::Int(v)),
                    Value::UInt(v) => Ok(FieldValue::UInt(v)),
                    Value::Str(text) => Ok(FieldValue::Str(
                        self.writer.intern(&String::from_utf8_lossy(&text)),
                    )),
                    Value::Probe(index) => Ok(FieldValue::UInt(index)),
                    other => Err(RecordError::Malformed(format!(
                        "unexpected field value {other:?}"
                    ))),
                }
            })
            .collect()
    }

    /// Resolve the stacks of pending events (while their processes live) and
    /// write what has left the reorder window.
    pub fn process(&mut self, loaded: &Loaded) -> Result<(), RecordError> {
        for mut pending in std::mem::take(&mut self.pending) {
            let raw = RawStack {
                pid: pending.pid,
                kernel: pending.kernel_stack,
                user: pending.user_stack,
                entry_return: pending.entry_return,
            };
            pending.event.stack = self.stack(loaded, raw)?;
            self.newest_ns = self.newest_ns.max(pending.event.ts_ns);
            self.sequence += 1;
            self.ordered
                .insert((pending.event.ts_ns, self.sequence), pending.event);
        }
        self.write_older_than(self.newest_ns.saturating_sub(REORDER_WINDOW_NS))?;
        // Complete chunks on disk: a capture killed now still replays to here.
        if self.last_flush.elapsed() >= FLUSH_INTERVAL {
            self.writer.flush()?;
            self.last_flush = Instant::now();
        }
        Ok(())
    }

    fn write_older_than(&mut self, limit_ns: u64) -> Result<(), RecordError> {
        while let Some(entry) = self.ordered.first_entry() {
            if entry.key().0 >= limit_ns {
                break;
            }
            self.writer.event(&entry.remove())?;
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
            let mut user: Vec<FrameAddr> = loaded
                .build_id_stack(map, raw.user as u32)?
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

/// The name of process `pid` (its main thread's comm), while it lives.
fn process_name(pid: u32) -> Option<String> {
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(name.trim_end().to_string())
}
