//! Interning for the Perfetto renderer: capture ids (records, strings, frames,
//! stacks) → Perfetto interning ids (iids), assigned in first-use order.
//!
//! New entries collect in a pending `InternedData` that the renderer attaches
//! to the very packet that first refers to them, so every iid is defined on
//! the sequence before (or in) its first use. Tables grow only with unique
//! names, strings, frames and stacks, never with the number of events, and
//! iids depend only on the order of first use, so output is deterministic.

use std::collections::BTreeMap;

use super::proto::{
    Callstack, DebugAnnotationName, EventName, FRAME_KIND_KERNEL, FRAME_KIND_NATIVE, Frame,
    InternedData, InternedString, Mapping,
};
use crate::capture::model::{FrameAddr, FrameId, RecordId, StackId, StringId};
use crate::render::source::CaptureSource;

/// A record's interned event name and field names, in `fields` order.
#[derive(Clone, Debug)]
pub struct RecordIids {
    pub name: u64,
    pub fields: Vec<u64>,
}

/// Dedupes values of one interning index and hands out its iids (from 1).
#[derive(Debug)]
struct Index<K> {
    ids: BTreeMap<K, u64>,
}

impl<K: Ord> Index<K> {
    fn new() -> Self {
        Index {
            ids: BTreeMap::new(),
        }
    }

    /// The iid of `key` and whether it is new.
    fn get_or_add(&mut self, key: K) -> (u64, bool) {
        let next = self.ids.len() as u64 + 1;
        match self.ids.entry(key) {
            std::collections::btree_map::Entry::Occupied(e) => (*e.get(), false),
            std::collections::btree_map::Entry::Vacant(e) => (*e.insert(next), true),
        }
    }
}

/// Capture-indexed cache: `ids[i]` is the iid for capture id `i`, 0 when not
/// interned yet (0 is never a valid iid).
fn cached(ids: &[u64], index: u32) -> Option<u64> {
    ids.get(index as usize).copied().filter(|&iid| iid != 0)
}

fn remember(ids: &mut Vec<u64>, index: u32, iid: u64) {
    let i = index as usize;
    if ids.len() <= i {
        ids.resize(i + 1, 0);
    }
    ids[i] = iid;
}

/// Which mapping a frame's address belongs to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum MappingKey {
    Kernel,
    UnknownUser,
    File {
        module: StringId,
        build_id: Option<Vec<u8>>,
    },
}

/// All interning state of the one packet sequence.
#[derive(Debug)]
pub struct Interner {
    pending: InternedData,
    records: Vec<Option<RecordIids>>,
    event_names: Index<String>,
    annotation_names: Index<String>,
    /// By `StringId`.
    event_names_by_string: Vec<u64>,
    /// By `StringId`.
    string_values: Vec<u64>,
    next_string_value: u64,
    /// By `StringId`.
    function_names: Vec<u64>,
    next_function_name: u64,
    /// By `StringId`.
    source_paths: Vec<u64>,
    next_source_path: u64,
    path_components: Index<String>,
    build_ids: Index<Vec<u8>>,
    mappings: Index<MappingKey>,
    /// By `FrameId`: the Perfetto frames of one address, outermost (the
    /// symbol's function) first, then the functions inlined into it.
    frames: Vec<Option<Box<[u64]>>>,
    next_frame: u64,
    /// By `StackId`.
    callstacks: Vec<u64>,
    next_callstack: u64,
}

impl Interner {
    pub fn new() -> Self {
        Interner {
            pending: InternedData::default(),
            records: Vec::new(),
            event_names: Index::new(),
            annotation_names: Index::new(),
            event_names_by_string: Vec::new(),
            string_values: Vec::new(),
            next_string_value: 1,
            function_names: Vec::new(),
            next_function_name: 1,
            source_paths: Vec::new(),
            next_source_path: 1,
            path_components: Index::new(),
            build_ids: Index::new(),
            mappings: Index::new(),
            frames: Vec::new(),
            next_frame: 1,
            callstacks: Vec::new(),
            next_callstack: 1,
        }
    }

    /// Entries added since the last call, to go into the packet about to be
    /// written; `None` when there are none.
    pub fn take_pending(&mut self) -> Option<InternedData> {
        if self.pending.is_empty() {
            None
        } else {
            Some(std::mem::take(&mut self.pending))
        }
    }

    /// The iids of `record`'s event name and field names.
    pub fn record(&mut self, source: &dyn CaptureSource, record: RecordId) -> &RecordIids {
        let i = record.0 as usize;
        if self.records.len() <= i {
            self.records.resize(i + 1, None);
        }
        if self.records[i].is_none() {
            let schema = &source.schemas()[i];
            let name = self.event_name(&schema.name);
            let fields = schema
                .fields
                .iter()
                .map(|field| self.annotation_name(&field.name))
                .collect();
            self.records[i] = Some(RecordIids { name, fields });
        }
        self.records[i].as_ref().expect("interned just above")
    }

    /// The iid of an event name.
    pub fn event_name(&mut self, name: &str) -> u64 {
        if let Some(&iid) = self.event_names.ids.get(name) {
            return iid;
        }
        let (iid, new) = self.event_names.get_or_add(name.to_owned());
        if new {
            self.pending.event_names.push(EventName {
                iid: Some(iid),
                name: Some(name.to_owned()),
            });
        }
        iid
    }

    /// The iid of an annotation name.
    pub fn annotation_name(&mut self, name: &str) -> u64 {
        if let Some(&iid) = self.annotation_names.ids.get(name) {
            return iid;
        }
        let (iid, new) = self.annotation_names.get_or_add(name.to_owned());
        if new {
            self.pending
                .debug_annotation_names
                .push(DebugAnnotationName {
                    iid: Some(iid),
                    name: Some(name.to_owned()),
                });
        }
        iid
    }

    /// The iid of the event name held by a capture string (a comm, an IRQ
    /// action, a work function), cached by string.
    pub fn event_name_of(&mut self, source: &dyn CaptureSource, id: StringId) -> u64 {
        if let Some(iid) = cached(&self.event_names_by_string, id.0) {
            return iid;
        }
        let iid = self.event_name(source.string(id));
        remember(&mut self.event_names_by_string, id.0, iid);
        iid
    }

    /// The iid of a string field value.
    pub fn string_value(&mut self, source: &dyn CaptureSource, id: StringId) -> u64 {
        if let Some(iid) = cached(&self.string_values, id.0) {
            return iid;
        }
        let iid = self.next_string_value;
        self.next_string_value += 1;
        remember(&mut self.string_values, id.0, iid);
        self.pending
            .debug_annotation_string_values
            .push(interned_string(iid, source.string(id).as_bytes()));
        iid
    }

    /// The iid of a callstack, interning its frames, names and mappings.
    pub fn callstack(&mut self, source: &dyn CaptureSource, id: StackId) -> u64 {
        if let Some(iid) = cached(&self.callstacks, id.0) {
            return iid;
        }
        let mut frame_ids = Vec::new();
        // Capture stacks are innermost first; Perfetto's are outermost first.
        for &frame in source.stack(id).frames.iter().rev() {
            frame_ids.extend_from_slice(self.frame(source, frame));
        }
        let iid = self.next_callstack;
        self.next_callstack += 1;
        remember(&mut self.callstacks, id.0, iid);
        self.pending.callstacks.push(Callstack {
            iid: Some(iid),
            frame_ids,
        });
        iid
    }

    fn frame(&mut self, source: &dyn CaptureSource, id: FrameId) -> &[u64] {
        let i = id.0 as usize;
        if self.frames.len() <= i {
            self.frames.resize(i + 1, None);
        }
        if self.frames[i].is_none() {
            let iids = self.add_frame(source, id);
            self.frames[i] = Some(iids);
        }
        self.frames[i].as_deref().expect("interned just above")
    }

    /// One Perfetto frame per function at the address: the symbol's function
    /// then each inlined function, all with the same mapping and `rel_pc`.
    /// The source location belongs to the innermost one.
    fn add_frame(&mut self, source: &dyn CaptureSource, id: FrameId) -> Box<[u64]> {
        let (mapping, rel_pc, kind) = self.mapping(source, source.frame(id));
        let symbol = source.symbol(id);
        let mut names: Vec<Option<StringId>> = vec![symbol.and_then(|s| s.function)];
        if let Some(symbol) = symbol.filter(|s| s.function.is_some()) {
            names.extend(symbol.inlined.iter().copied().map(Some));
        }
        let location = symbol.and_then(|s| s.file.map(|file| (file, s.line)));
        let last = names.len() - 1;
        let mut iids = Vec::with_capacity(names.len());
        for (depth, name) in names.into_iter().enumerate() {
            let iid = self.next_frame;
            self.next_frame += 1;
            let mut frame = Frame {
                iid: Some(iid),
                function_name_id: name.map(|n| self.function_name(source, n)),
                mapping_id: Some(mapping),
                rel_pc: Some(rel_pc),
                source_path_iid: None,
                line_number: None,
                kind,
            };
            if let (true, Some((file, line))) = (depth == last, location) {
                frame.source_path_iid = Some(self.source_path(source, file));
                frame.line_number = line;
            }
            self.pending.frames.push(frame);
            iids.push(iid);
        }
        iids.into_boxed_slice()
    }

    /// The mapping iid, `rel_pc` and frame kind of an address. User
    /// addresses are file offsets: the mapping stands for the whole file
    /// (start offset 0), so `rel_pc` is the file offset.
    fn mapping(&mut self, source: &dyn CaptureSource, addr: &FrameAddr) -> (u64, u64, Option<i32>) {
        let (key, rel_pc, kind) = match addr {
            FrameAddr::Kernel { addr } => (MappingKey::Kernel, *addr, Some(FRAME_KIND_KERNEL)),
            FrameAddr::UnknownUser { addr } => (MappingKey::UnknownUser, *addr, None),
            FrameAddr::User {
                module,
                build_id,
                file_offset,
            } => (
                MappingKey::File {
                    module: *module,
                    build_id: build_id.clone(),
                },
                *file_offset,
                Some(FRAME_KIND_NATIVE),
            ),
        };
        let (iid, new) = self.mappings.get_or_add(key.clone());
        if new {
            let mapping = self.new_mapping(source, iid, &key);
            self.pending.mappings.push(mapping);
        }
        (iid, rel_pc, kind)
    }

    fn new_mapping(&mut self, source: &dyn CaptureSource, iid: u64, key: &MappingKey) -> Mapping {
        let (path, build_id) = match key {
            MappingKey::Kernel => ("[kernel.kallsyms]", None),
            MappingKey::UnknownUser => ("[unknown]", None),
            MappingKey::File { module, build_id } => (source.string(*module), build_id.as_deref()),
        };
        let path_string_ids = path
            .split('/')
            .filter(|c| !c.is_empty())
            .map(|component| self.path_component(component))
            .collect();
        let build_id = build_id.map(|bytes| {
            let (iid, new) = self.build_ids.get_or_add(bytes.to_vec());
            if new {
                self.pending.build_ids.push(interned_string(iid, bytes));
            }
            iid
        });
        Mapping {
            iid: Some(iid),
            build_id,
            path_string_ids,
        }
    }

    fn path_component(&mut self, component: &str) -> u64 {
        let (iid, new) = self.path_components.get_or_add(component.to_owned());
        if new {
            self.pending
                .mapping_paths
                .push(interned_string(iid, component.as_bytes()));
        }
        iid
    }

    fn function_name(&mut self, source: &dyn CaptureSource, id: StringId) -> u64 {
        if let Some(iid) = cached(&self.function_names, id.0) {
            return iid;
        }
        let iid = self.next_function_name;
        self.next_function_name += 1;
        remember(&mut self.function_names, id.0, iid);
        self.pending
            .function_names
            .push(interned_string(iid, source.string(id).as_bytes()));
        iid
    }

    fn source_path(&mut self, source: &dyn CaptureSource, id: StringId) -> u64 {
        if let Some(iid) = cached(&self.source_paths, id.0) {
            return iid;
        }
        let iid = self.next_source_path;
        self.next_source_path += 1;
        remember(&mut self.source_paths, id.0, iid);
        self.pending
            .source_paths
            .push(interned_string(iid, source.string(id).as_bytes()));
        iid
    }
}

fn interned_string(iid: u64, bytes: &[u8]) -> InternedString {
    InternedString {
        iid: Some(iid),
        str: Some(bytes.to_vec()),
    }
}
