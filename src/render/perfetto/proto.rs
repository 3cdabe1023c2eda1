//! The subset of Perfetto's trace format that the renderer emits, as `prost`
//! messages. Field numbers and types are those of the published
//! `perfetto_trace.proto` (checked against the PyPI `perfetto` package's
//! descriptors); only the fields we write are declared. Oneof members are
//! declared as plain optional fields where we only ever set one of them: the
//! wire encoding is identical.
//!
//! Repeated scalar fields are `proto2` and not `[packed = true]` upstream, so
//! they are declared `packed = "false"`: trace processor's decoders read such
//! fields one varint per tag and would misread a packed encoding. The
//! exception is `CompactSched`, whose arrays are `[packed = true]` upstream.

#![allow(missing_docs)]

use prost::{Message, Oneof};

/// `TracePacket.sequence_flags`: the incremental state (interning, defaults)
/// starts fresh at this packet.
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;

/// `BuiltinClock` values.
pub const CLOCK_REALTIME: u32 = 1;
pub const CLOCK_MONOTONIC: u32 = 3;
pub const CLOCK_BOOTTIME: u32 = 6;
/// The sequence's own clock (ids 64–127 are sequence-scoped), declared
/// incremental: each packet's `timestamp` is the delta from the previous
/// packet's on this clock, two or three varint bytes instead of eight.
pub const CLOCK_INCREMENTAL: u32 = 64;

/// `TrackEvent.Type` values.
pub const TYPE_SLICE_BEGIN: i32 = 1;
pub const TYPE_SLICE_END: i32 = 2;
pub const TYPE_INSTANT: i32 = 3;
pub const TYPE_COUNTER: i32 = 4;

/// `CounterDescriptor.Unit`: a plain count.
pub const UNIT_COUNT: i32 = 2;

/// `Frame.Kind` values.
pub const FRAME_KIND_NATIVE: i32 = 1;
pub const FRAME_KIND_KERNEL: i32 = 2;

/// `Trace.packet`: each packet is written as this field of the (never
/// materialized) top-level `Trace` message.
pub const TRACE_PACKET_FIELD: u32 = 1;

#[derive(Clone, PartialEq, Message)]
pub struct TracePacket {
    #[prost(message, optional, tag = "1")]
    pub ftrace_events: Option<FtraceEventBundle>,
    #[prost(message, optional, tag = "2")]
    pub process_tree: Option<ProcessTree>,
    #[prost(message, optional, tag = "6")]
    pub clock_snapshot: Option<ClockSnapshot>,
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    #[prost(message, optional, tag = "12")]
    pub interned_data: Option<InternedData>,
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    #[prost(message, optional, tag = "45")]
    pub system_info: Option<SystemInfo>,
    #[prost(message, optional, tag = "59")]
    pub trace_packet_defaults: Option<TracePacketDefaults>,
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TracePacketDefaults {
    #[prost(message, optional, tag = "11")]
    pub track_event_defaults: Option<TrackEventDefaults>,
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
}

/// The track of a sequence's events that name none.
#[derive(Clone, PartialEq, Message)]
pub struct TrackEventDefaults {
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ClockSnapshot {
    #[prost(message, repeated, tag = "1")]
    pub clocks: Vec<Clock>,
    /// A `BuiltinClock`: the clock the trace's timeline is expressed in.
    #[prost(int32, optional, tag = "2")]
    pub primary_trace_clock: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Clock {
    #[prost(uint32, optional, tag = "1")]
    pub clock_id: Option<u32>,
    #[prost(uint64, optional, tag = "2")]
    pub timestamp: Option<u64>,
    #[prost(bool, optional, tag = "3")]
    pub is_incremental: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
}

#[derive(Clone, PartialEq, Message)]
pub struct CounterDescriptor {
    /// A `CounterDescriptor.Unit`.
    #[prost(int32, optional, tag = "3")]
    pub unit: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ProcessDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ThreadDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(int64, optional, tag = "2")]
    pub tid: Option<i64>,
    #[prost(string, optional, tag = "5")]
    pub thread_name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TrackEvent {
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    /// A `TrackEvent.Type`.
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    /// Interned `EventName` (oneof `name_field`).
    #[prost(uint64, optional, tag = "10")]
    pub name_iid: Option<u64>,
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    /// Oneof `counter_value_field`.
    #[prost(int64, optional, tag = "30")]
    pub counter_value: Option<i64>,
    /// Upstream `flow_ids_old`: varints, 3 bytes for the small ids the
    /// renderer reuses, where `flow_ids` (47) is `fixed64`, 10 bytes.
    /// Trace processor reads both alike.
    #[prost(uint64, repeated, packed = "false", tag = "36")]
    pub flow_ids: Vec<u64>,
    /// Upstream `terminating_flow_ids_old` (the `fixed64` one is 48).
    #[prost(uint64, repeated, packed = "false", tag = "42")]
    pub terminating_flow_ids: Vec<u64>,
    /// Interned `Callstack` (oneof `callstack_field`).
    #[prost(uint64, optional, tag = "56")]
    pub callstack_iid: Option<u64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct DebugAnnotation {
    /// Interned `DebugAnnotationName` (oneof `name_field`).
    #[prost(uint64, optional, tag = "1")]
    pub name_iid: Option<u64>,
    #[prost(oneof = "AnnotationValue", tags = "3, 4, 17")]
    pub value: Option<AnnotationValue>,
}

#[derive(Clone, PartialEq, Oneof)]
pub enum AnnotationValue {
    #[prost(uint64, tag = "3")]
    Uint(u64),
    #[prost(int64, tag = "4")]
    Int(i64),
    /// Interned in `InternedData.debug_annotation_string_values`.
    #[prost(uint64, tag = "17")]
    StringIid(u64),
}

#[derive(Clone, PartialEq, Message)]
pub struct InternedData {
    #[prost(message, repeated, tag = "2")]
    pub event_names: Vec<EventName>,
    #[prost(message, repeated, tag = "3")]
    pub debug_annotation_names: Vec<DebugAnnotationName>,
    #[prost(message, repeated, tag = "5")]
    pub function_names: Vec<InternedString>,
    #[prost(message, repeated, tag = "6")]
    pub frames: Vec<Frame>,
    #[prost(message, repeated, tag = "7")]
    pub callstacks: Vec<Callstack>,
    #[prost(message, repeated, tag = "16")]
    pub build_ids: Vec<InternedString>,
    #[prost(message, repeated, tag = "17")]
    pub mapping_paths: Vec<InternedString>,
    #[prost(message, repeated, tag = "18")]
    pub source_paths: Vec<InternedString>,
    #[prost(message, repeated, tag = "19")]
    pub mappings: Vec<Mapping>,
    #[prost(message, repeated, tag = "29")]
    pub debug_annotation_string_values: Vec<InternedString>,
}

impl InternedData {
    /// Whether there is nothing to emit.
    pub fn is_empty(&self) -> bool {
        self.event_names.is_empty()
            && self.debug_annotation_names.is_empty()
            && self.function_names.is_empty()
            && self.frames.is_empty()
            && self.callstacks.is_empty()
            && self.build_ids.is_empty()
            && self.mapping_paths.is_empty()
            && self.source_paths.is_empty()
            && self.mappings.is_empty()
            && self.debug_annotation_string_values.is_empty()
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct EventName {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct DebugAnnotationName {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct InternedString {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub str: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// Interned in `InternedData.build_ids`.
    #[prost(uint64, optional, tag = "2")]
    pub build_id: Option<u64>,
    /// Path components, each interned in `InternedData.mapping_paths`.
    #[prost(uint64, repeated, packed = "false", tag = "7")]
    pub path_string_ids: Vec<u64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Frame {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// Interned in `InternedData.function_names`.
    #[prost(uint64, optional, tag = "2")]
    pub function_name_id: Option<u64>,
    #[prost(uint64, optional, tag = "3")]
    pub mapping_id: Option<u64>,
    #[prost(uint64, optional, tag = "4")]
    pub rel_pc: Option<u64>,
    /// Interned in `InternedData.source_paths`.
    #[prost(uint64, optional, tag = "5")]
    pub source_path_iid: Option<u64>,
    #[prost(uint32, optional, tag = "6")]
    pub line_number: Option<u32>,
    /// A `Frame.Kind`.
    #[prost(int32, optional, tag = "7")]
    pub kind: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Callstack {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// Outermost frame first.
    #[prost(uint64, repeated, packed = "false", tag = "2")]
    pub frame_ids: Vec<u64>,
}

/// The kernel's scheduling events of one CPU, in Perfetto's compact form.
#[derive(Clone, PartialEq, Message)]
pub struct FtraceEventBundle {
    #[prost(uint32, optional, tag = "1")]
    pub cpu: Option<u32>,
    #[prost(message, optional, tag = "4")]
    pub compact_sched: Option<CompactSched>,
}

/// `FtraceEventBundle.CompactSched`: column arrays of `sched_switch` and
/// `sched_waking`; timestamps are deltas from the previous one (the first
/// absolute), comms are indices into `intern_table`.
#[derive(Clone, PartialEq, Message)]
pub struct CompactSched {
    #[prost(uint64, repeated, tag = "1")]
    pub switch_timestamp: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub switch_prev_state: Vec<i64>,
    #[prost(int32, repeated, tag = "3")]
    pub switch_next_pid: Vec<i32>,
    #[prost(int32, repeated, tag = "4")]
    pub switch_next_prio: Vec<i32>,
    #[prost(string, repeated, tag = "5")]
    pub intern_table: Vec<String>,
    #[prost(uint32, repeated, tag = "6")]
    pub switch_next_comm_index: Vec<u32>,
    #[prost(uint64, repeated, tag = "7")]
    pub waking_timestamp: Vec<u64>,
    #[prost(int32, repeated, tag = "8")]
    pub waking_pid: Vec<i32>,
    #[prost(int32, repeated, tag = "9")]
    pub waking_target_cpu: Vec<i32>,
    #[prost(int32, repeated, tag = "10")]
    pub waking_prio: Vec<i32>,
    #[prost(uint32, repeated, tag = "11")]
    pub waking_comm_index: Vec<u32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ProcessTree {
    #[prost(message, repeated, tag = "1")]
    pub processes: Vec<TreeProcess>,
    #[prost(message, repeated, tag = "2")]
    pub threads: Vec<TreeThread>,
}

/// `ProcessTree.Process`.
#[derive(Clone, PartialEq, Message)]
pub struct TreeProcess {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(int32, optional, tag = "2")]
    pub ppid: Option<i32>,
    #[prost(string, repeated, tag = "3")]
    pub cmdline: Vec<String>,
}

/// `ProcessTree.Thread`.
#[derive(Clone, PartialEq, Message)]
pub struct TreeThread {
    #[prost(int32, optional, tag = "1")]
    pub tid: Option<i32>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(int32, optional, tag = "3")]
    pub tgid: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct SystemInfo {
    #[prost(message, optional, tag = "1")]
    pub utsname: Option<Utsname>,
    #[prost(uint32, optional, tag = "8")]
    pub num_cpus: Option<u32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Utsname {
    #[prost(string, optional, tag = "1")]
    pub sysname: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub release: Option<String>,
}
