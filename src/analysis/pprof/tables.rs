//! The interning tables behind [`ProfileBuilder`](super::ProfileBuilder):
//! strings, functions and locations; mappings; merged samples. Ids are
//! handed out in first-use order, so the same calls give the same bytes.

use std::collections::HashMap;

use super::{Frame, Label, LabelValue, Module, SampleType, proto};

/// The mapping name of kernel frames (perf's spelling).
pub const KERNEL_MAPPING: &str = "[kernel.kallsyms]";

/// Strings, functions and locations.
#[derive(Debug)]
pub(super) struct Interned {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<proto::Function>,
    function_ids: HashMap<i64, u64>,
    locations: Vec<proto::Location>,
    location_ids: HashMap<(u64, u64, i64), u64>,
}

impl Default for Interned {
    fn default() -> Self {
        Interned {
            // `string_table[0]` must be the empty string.
            strings: vec![String::new()],
            string_ids: HashMap::from([(String::new(), 0)]),
            functions: Vec::new(),
            function_ids: HashMap::new(),
            locations: Vec::new(),
            location_ids: HashMap::new(),
        }
    }
}

impl Interned {
    pub fn string(&mut self, text: &str) -> i64 {
        if let Some(&id) = self.string_ids.get(text) {
            return id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(text.to_owned());
        self.string_ids.insert(text.to_owned(), id);
        id
    }

    pub fn value_type(&mut self, sample_type: &SampleType<'_>) -> proto::ValueType {
        proto::ValueType {
            r#type: self.string(sample_type.name),
            unit: self.string(sample_type.unit),
        }
    }

    pub fn label(&mut self, label: &Label<'_>) -> proto::Label {
        let key = self.string(label.key);
        match label.value {
            LabelValue::Str(text) => proto::Label {
                key,
                str: self.string(text),
                ..proto::Label::default()
            },
            LabelValue::Num { value, unit } => proto::Label {
                key,
                num: value,
                num_unit: unit.map_or(0, |unit| self.string(unit)),
                ..proto::Label::default()
            },
        }
    }

    /// The function named `name`; a known `file` fills in a missing one.
    fn function(&mut self, name: &str, file: Option<&str>) -> u64 {
        let name = self.string(name);
        let filename = file.map_or(0, |file| self.string(file));
        if let Some(&id) = self.function_ids.get(&name) {
            let function = &mut self.functions[id as usize - 1];
            if function.filename == 0 {
                function.filename = filename;
            }
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        self.functions.push(proto::Function {
            id,
            name,
            system_name: name,
            filename,
            start_line: 0,
        });
        self.function_ids.insert(name, id);
        id
    }

    /// The location of `frame` in mapping `mapping` (0: none).
    pub fn location(&mut self, frame: &Frame<'_>, mapping: u64) -> u64 {
        let name = frame.function.map_or(0, |f| self.string(f));
        let key = (mapping, frame.address, name);
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let line = self.lines(frame);
        let id = self.locations.len() as u64 + 1;
        self.locations.push(proto::Location {
            id,
            mapping_id: mapping,
            address: frame.address,
            line,
        });
        self.location_ids.insert(key, id);
        id
    }

    /// Innermost inlined function first (with the frame's file:line), the
    /// real function last.
    fn lines(&mut self, frame: &Frame<'_>) -> Vec<proto::Line> {
        let Some(function) = frame.function else {
            return Vec::new();
        };
        let line = i64::from(frame.line.unwrap_or(0));
        let chain: Vec<&str> = frame
            .inlined
            .iter()
            .rev()
            .copied()
            .chain(std::iter::once(function))
            .collect();
        chain
            .into_iter()
            .enumerate()
            .map(|(depth, name)| {
                let innermost = depth == 0;
                let file = if innermost { frame.file } else { None };
                proto::Line {
                    function_id: self.function(name, file),
                    line: if innermost { line } else { 0 },
                }
            })
            .collect()
    }

    pub fn has_location(&self, id: u64) -> bool {
        id >= 1 && id <= self.locations.len() as u64
    }

    pub fn into_tables(self) -> (Vec<String>, Vec<proto::Function>, Vec<proto::Location>) {
        (self.strings, self.functions, self.locations)
    }
}

/// One mapping as frames reveal it.
#[derive(Debug)]
struct MappingState {
    filename: i64,
    build_id: i64,
    kernel: bool,
    low: u64,
    high: u64,
    has_functions: bool,
    has_filenames: bool,
    has_line_numbers: bool,
    has_inline_frames: bool,
}

/// Mappings by module.
#[derive(Debug, Default)]
pub(super) struct Mappings {
    list: Vec<MappingState>,
    ids: HashMap<(i64, i64), u64>,
}

impl Mappings {
    /// The mapping of `frame`'s module (0 for [`Module::Unknown`]), widened to
    /// its address and marked with the symbol information it has.
    pub fn add(&mut self, interned: &mut Interned, frame: &Frame<'_>) -> u64 {
        let (path, build_id, kernel) = match frame.module {
            Module::Unknown => return 0,
            Module::Kernel => (KERNEL_MAPPING, None, true),
            Module::File { path, build_id } => (path, build_id, false),
        };
        let filename = interned.string(path);
        let build_id = build_id.map_or(0, |bytes| interned.string(&hex(bytes)));
        let next_id = self.list.len() as u64 + 1;
        let id = *self.ids.entry((filename, build_id)).or_insert(next_id);
        if id == next_id {
            self.list.push(MappingState {
                filename,
                build_id,
                kernel,
                low: frame.address,
                high: frame.address,
                has_functions: false,
                has_filenames: false,
                has_line_numbers: false,
                has_inline_frames: false,
            });
        }
        let mapping = &mut self.list[id as usize - 1];
        mapping.low = mapping.low.min(frame.address);
        mapping.high = mapping.high.max(frame.address);
        mapping.has_functions |= frame.function.is_some();
        mapping.has_filenames |= frame.file.is_some();
        mapping.has_line_numbers |= frame.line.is_some();
        mapping.has_inline_frames |= !frame.inlined.is_empty();
        id
    }

    pub fn into_mappings(self) -> Vec<proto::Mapping> {
        self.list
            .into_iter()
            .enumerate()
            .map(|(index, m)| proto::Mapping {
                id: index as u64 + 1,
                memory_start: m.low,
                memory_limit: m.high.saturating_add(1),
                file_offset: if m.kernel { 0 } else { m.low },
                filename: m.filename,
                build_id: m.build_id,
                has_functions: m.has_functions,
                has_filenames: m.has_filenames,
                has_line_numbers: m.has_line_numbers,
                has_inline_frames: m.has_inline_frames,
            })
            .collect()
    }
}

/// Lowercase hex, as pprof prints GNU build ids.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

type LabelKey = (i64, i64, i64, i64);

/// Samples merged by stack and labels.
#[derive(Debug, Default)]
pub(super) struct Samples {
    list: Vec<proto::Sample>,
    index: HashMap<(Vec<u64>, Vec<LabelKey>), usize>,
}

impl Samples {
    pub fn add(&mut self, locations: Vec<u64>, labels: Vec<proto::Label>, values: &[i64]) {
        let label_key = labels
            .iter()
            .map(|l| (l.key, l.str, l.num, l.num_unit))
            .collect();
        let key = (locations, label_key);
        if let Some(&at) = self.index.get(&key) {
            for (sum, value) in self.list[at].value.iter_mut().zip(values) {
                *sum = sum.saturating_add(*value);
            }
            return;
        }
        self.index.insert(key.clone(), self.list.len());
        self.list.push(proto::Sample {
            location_id: key.0,
            value: values.to_vec(),
            label: labels,
        });
    }

    pub fn totals(&self, types: usize) -> Vec<i64> {
        let mut totals = vec![0i64; types];
        for sample in &self.list {
            for (total, value) in totals.iter_mut().zip(&sample.value) {
                *total = total.saturating_add(*value);
            }
        }
        totals
    }

    pub fn into_samples(self) -> Vec<proto::Sample> {
        self.list
    }
}
