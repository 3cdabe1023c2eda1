//! The hot path's encoder: one `Trace.packet` entry holding a `TrackEvent`,
//! written straight into the output buffer. It produces exactly the bytes
//! `prost` would for the same `TracePacket` (fields in tag order; the tests
//! compare both), without building the nested messages or computing their
//! lengths twice, which made `prost` encoding most of the render time.

use prost::Message;

use super::proto::{self, AnnotationValue, InternedData};

/// One event packet's content.
#[derive(Default)]
pub struct EventPacket<'a> {
    pub sequence_id: u32,
    pub timestamp: u64,
    /// A `TrackEvent.Type`.
    pub kind: i32,
    /// `None`: the sequence's default track.
    pub track_uuid: Option<u64>,
    pub name_iid: Option<u64>,
    pub callstack_iid: Option<u64>,
    pub counter_value: Option<i64>,
    /// Flows leaving this event, and flows ending at it.
    pub flow_ids: &'a [u64],
    pub terminating_flow_ids: &'a [u64],
    /// (annotation name iid, value), in field order.
    pub annotations: &'a [(u64, AnnotationValue)],
    pub interned: Option<&'a InternedData>,
}

const LEN: u64 = 2;
const VARINT: u64 = 0;

fn key(field: u32, wire: u64) -> u64 {
    u64::from(field) << 3 | wire
}

fn varint_len(v: u64) -> usize {
    // 1 byte per started group of 7 bits, at least 1.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Writes into a slice sized up front: cheaper per byte than `Vec::push`.
struct Cursor<'a> {
    out: &'a mut [u8],
    pos: usize,
}

impl Cursor<'_> {
    #[inline]
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.out[self.pos] = v as u8 | 0x80;
            self.pos += 1;
            v >>= 7;
        }
        self.out[self.pos] = v as u8;
        self.pos += 1;
    }

    #[inline]
    fn varint_field(&mut self, field: u32, v: u64) {
        self.varint(key(field, VARINT));
        self.varint(v);
    }

    /// A repeated varint field, one tag per value (not packed, as upstream).
    fn varint_fields(&mut self, field: u32, values: &[u64]) {
        for &v in values {
            self.varint_field(field, v);
        }
    }
}

fn varint_fields_len(field: u32, values: &[u64]) -> usize {
    values.iter().map(|&v| varint_field_len(field, v)).sum()
}

/// `key + varint` field size.
fn varint_field_len(field: u32, v: u64) -> usize {
    varint_len(key(field, VARINT)) + varint_len(v)
}

fn message_field_len(field: u32, len: usize) -> usize {
    varint_len(key(field, LEN)) + varint_len(len as u64) + len
}

fn value_field(value: &AnnotationValue) -> (u32, u64) {
    match *value {
        AnnotationValue::Uint(v) => (3, v),
        // int64 is a plain varint of the two's complement: negatives take 10 bytes.
        AnnotationValue::Int(v) => (4, v as u64),
        AnnotationValue::StringIid(v) => (17, v),
    }
}

fn annotation_len(name_iid: u64, value: &AnnotationValue) -> usize {
    let (field, v) = value_field(value);
    varint_field_len(1, name_iid) + varint_field_len(field, v)
}

fn track_event_len(e: &EventPacket) -> usize {
    let mut len: usize = e
        .annotations
        .iter()
        .map(|(name, value)| message_field_len(4, annotation_len(*name, value)))
        .sum();
    len += varint_field_len(9, e.kind as u64);
    len += e.name_iid.map_or(0, |iid| varint_field_len(10, iid));
    len += e.track_uuid.map_or(0, |uuid| varint_field_len(11, uuid));
    len += e
        .counter_value
        .map_or(0, |v| varint_field_len(30, v as u64));
    len += varint_fields_len(36, e.flow_ids);
    len += varint_fields_len(42, e.terminating_flow_ids);
    len += e.callstack_iid.map_or(0, |iid| varint_field_len(56, iid));
    len
}

/// Appends the packet as a `Trace.packet` entry; returns its size in bytes.
pub fn put_event_packet(buf: &mut Vec<u8>, e: &EventPacket) -> usize {
    let start = buf.len();
    let event_len = track_event_len(e);
    let interned_len = e.interned.map(|data| data.encoded_len());
    let packet_len = varint_field_len(8, e.timestamp)
        + varint_field_len(10, u64::from(e.sequence_id))
        + message_field_len(11, event_len)
        + interned_len.map_or(0, |len| message_field_len(12, len));
    let fixed_len = message_field_len(proto::TRACE_PACKET_FIELD, packet_len)
        - interned_len.map_or(0, |len| len);
    buf.resize(start + fixed_len, 0);
    let mut out = Cursor {
        out: &mut buf[start..],
        pos: 0,
    };
    out.varint(key(proto::TRACE_PACKET_FIELD, LEN));
    out.varint(packet_len as u64);
    out.varint_field(8, e.timestamp);
    out.varint_field(10, u64::from(e.sequence_id));
    out.varint(key(11, LEN));
    out.varint(event_len as u64);
    for (name, value) in e.annotations {
        out.varint(key(4, LEN));
        out.varint(annotation_len(*name, value) as u64);
        out.varint_field(1, *name);
        let (field, v) = value_field(value);
        out.varint_field(field, v);
    }
    out.varint_field(9, e.kind as u64);
    if let Some(iid) = e.name_iid {
        out.varint_field(10, iid);
    }
    if let Some(uuid) = e.track_uuid {
        out.varint_field(11, uuid);
    }
    if let Some(v) = e.counter_value {
        out.varint_field(30, v as u64);
    }
    out.varint_fields(36, e.flow_ids);
    out.varint_fields(42, e.terminating_flow_ids);
    if let Some(iid) = e.callstack_iid {
        out.varint_field(56, iid);
    }
    if let (Some(data), Some(len)) = (e.interned, interned_len) {
        out.varint(key(12, LEN));
        out.varint(len as u64);
        debug_assert_eq!(out.pos, fixed_len);
        data.encode_raw(buf);
    } else {
        debug_assert_eq!(out.pos, fixed_len);
    }
    buf.len() - start
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::perfetto::proto::{
        DebugAnnotation, EventName, TYPE_COUNTER, TYPE_INSTANT, TYPE_SLICE_END, TracePacket,
        TrackEvent,
    };

    fn prost_bytes(e: &EventPacket) -> Vec<u8> {
        let packet = TracePacket {
            timestamp: Some(e.timestamp),
            trusted_packet_sequence_id: Some(e.sequence_id),
            track_event: Some(TrackEvent {
                debug_annotations: e
                    .annotations
                    .iter()
                    .map(|(name, value)| DebugAnnotation {
                        name_iid: Some(*name),
                        value: Some(value.clone()),
                    })
                    .collect(),
                r#type: Some(e.kind),
                name_iid: e.name_iid,
                track_uuid: e.track_uuid,
                counter_value: e.counter_value,
                flow_ids: e.flow_ids.to_vec(),
                terminating_flow_ids: e.terminating_flow_ids.to_vec(),
                callstack_iid: e.callstack_iid,
            }),
            interned_data: e.interned.cloned(),
            ..TracePacket::default()
        };
        let mut buf = Vec::new();
        prost::encoding::message::encode(proto::TRACE_PACKET_FIELD, &packet, &mut buf);
        buf
    }

    /// The hand encoder writes what prost writes, for small and large values,
    /// negative ints, interned data, flows, counters and bare slice ENDs on
    /// their sequence's default track.
    #[test]
    fn matches_prost() {
        let interned = InternedData {
            event_names: vec![EventName {
                iid: Some(1),
                name: Some("malloc".into()),
            }],
            ..InternedData::default()
        };
        let annotations = [
            (1, AnnotationValue::Uint(u64::MAX)),
            (200, AnnotationValue::Int(-1)),
            (3, AnnotationValue::StringIid(70_000)),
            (4, AnnotationValue::Int(0)),
        ];
        let cases = [
            EventPacket {
                sequence_id: 1,
                timestamp: 86_400_000_000_000,
                kind: TYPE_INSTANT,
                track_uuid: Some(300),
                name_iid: Some(1),
                callstack_iid: Some(1 << 40),
                annotations: &annotations,
                interned: Some(&interned),
                flow_ids: &[1, u64::MAX],
                terminating_flow_ids: &[7],
                ..EventPacket::default()
            },
            EventPacket {
                sequence_id: 200,
                timestamp: 0,
                kind: TYPE_SLICE_END,
                ..EventPacket::default()
            },
            EventPacket {
                sequence_id: 1,
                timestamp: 5,
                kind: TYPE_COUNTER,
                track_uuid: Some(9),
                counter_value: Some(-3),
                ..EventPacket::default()
            },
        ];
        for case in &cases {
            let mut buf = vec![7];
            let written = put_event_packet(&mut buf, case);
            assert_eq!(&buf[1..], prost_bytes(case));
            assert_eq!(written, buf.len() - 1);
        }
        for v in [0, 1, 127, 128, 16_383, 16_384, u64::MAX >> 1, u64::MAX] {
            let mut buf = [0; 10];
            let mut out = Cursor {
                out: &mut buf,
                pos: 0,
            };
            out.varint(v);
            let len = out.pos;
            let mut expected = Vec::new();
            prost::encoding::encode_varint(v, &mut expected);
            assert_eq!(&buf[..len], expected, "{v}");
            assert_eq!(len, varint_len(v), "{v}");
        }
    }
}
