//! Packet sequences of the on-CPU slice tracks: each thread track (and each
//! CPU's idle track) writes its on-CPU slice BEGINs and ENDs on a sequence
//! of its own, whose defaults name the track (so those packets omit its
//! uuid) and whose incremental clock counts from the track's previous
//! packet. Everything else stays on the main sequence.
//!
//! Interned ids are per sequence in Perfetto; a track's sequence defines the
//! names it uses (its slice names, PMU annotation names) with the main
//! sequence's iids, so one iid means one string in the whole trace.

use super::proto::{
    self, Clock, ClockSnapshot, DebugAnnotationName, EventName, InternedData, TracePacket,
    TracePacketDefaults, TrackEventDefaults,
};

/// The first id after the main sequence's.
const FIRST_TRACK_SEQUENCE: u32 = super::SEQUENCE_ID + 1;

/// The iids defined on one track's sequence.
#[derive(Debug, Default)]
struct Defined {
    event_names: Vec<u64>,
    annotation_names: Vec<u64>,
}

#[derive(Debug, Default)]
pub struct Sequences {
    /// By track uuid: its sequence id (0: none yet).
    by_track: Vec<u32>,
    /// By sequence id, from `FIRST_TRACK_SEQUENCE`.
    defined: Vec<Defined>,
    /// Definitions for the next packet written on a track's sequence.
    pending: InternedData,
}

impl Sequences {
    /// The sequence of `track`; with the packet that starts it at
    /// `ts_ns` (absolute) when it is new, to be written first.
    pub fn of(&mut self, track: u64, ts_ns: u64) -> (u32, Option<TracePacket>) {
        let index = track as usize;
        if self.by_track.len() <= index {
            self.by_track.resize(index + 1, 0);
        }
        if self.by_track[index] != 0 {
            return (self.by_track[index], None);
        }
        let id = FIRST_TRACK_SEQUENCE + self.defined.len() as u32;
        self.by_track[index] = id;
        self.defined.push(Defined::default());
        (id, Some(start_packet(id, track, ts_ns)))
    }

    /// Defines event name `iid` (`name`) on sequence `id` unless it is.
    pub fn event_name(&mut self, id: u32, iid: u64, name: &str) {
        let defined = &mut self.defined[(id - FIRST_TRACK_SEQUENCE) as usize];
        if !defined.event_names.contains(&iid) {
            defined.event_names.push(iid);
            self.pending.event_names.push(EventName {
                iid: Some(iid),
                name: Some(name.to_owned()),
            });
        }
    }

    /// Defines annotation name `iid` (`name`) on sequence `id` unless it is.
    pub fn annotation_name(&mut self, id: u32, iid: u64, name: &str) {
        let defined = &mut self.defined[(id - FIRST_TRACK_SEQUENCE) as usize];
        if !defined.annotation_names.contains(&iid) {
            defined.annotation_names.push(iid);
            self.pending
                .debug_annotation_names
                .push(DebugAnnotationName {
                    iid: Some(iid),
                    name: Some(name.to_owned()),
                });
        }
    }

    /// The definitions to write with the next packet, if any.
    pub fn take_pending(&mut self) -> Option<InternedData> {
        (!self.pending.is_empty()).then(|| std::mem::take(&mut self.pending))
    }
}

/// Clears the sequence's state, makes `track` its default track and an
/// incremental clock, equal to `CLOCK_MONOTONIC` at `ts_ns`, its clock.
fn start_packet(id: u32, track: u64, ts_ns: u64) -> TracePacket {
    let clock = |clock_id, is_incremental| Clock {
        clock_id: Some(clock_id),
        timestamp: Some(ts_ns),
        is_incremental,
    };
    TracePacket {
        trusted_packet_sequence_id: Some(id),
        sequence_flags: Some(proto::SEQ_INCREMENTAL_STATE_CLEARED),
        clock_snapshot: Some(ClockSnapshot {
            clocks: vec![
                clock(proto::CLOCK_MONOTONIC, None),
                clock(proto::CLOCK_INCREMENTAL, Some(true)),
            ],
            primary_trace_clock: None,
        }),
        trace_packet_defaults: Some(TracePacketDefaults {
            timestamp_clock_id: Some(proto::CLOCK_INCREMENTAL),
            track_event_defaults: Some(TrackEventDefaults {
                track_uuid: Some(track),
            }),
        }),
        ..TracePacket::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A track gets one sequence, started once; names are defined once per
    /// sequence, with the iids given.
    #[test]
    fn one_sequence_per_track() {
        let mut sequences = Sequences::default();
        let (a, start) = sequences.of(7, 1000);
        let start = start.expect("a new sequence starts");
        assert_eq!(start.trusted_packet_sequence_id, Some(a));
        let defaults = start.trace_packet_defaults.expect("defaults");
        assert_eq!(defaults.track_event_defaults.unwrap().track_uuid, Some(7));
        assert_eq!(sequences.of(7, 2000), (a, None));
        let (b, _) = sequences.of(3, 2000);
        assert_ne!(a, b);
        assert!(a > super::super::SEQUENCE_ID);
        sequences.event_name(a, 5, "ping");
        sequences.event_name(a, 5, "ping");
        sequences.annotation_name(a, 2, "pmu:cycles");
        let pending = sequences.take_pending().expect("definitions");
        assert_eq!(pending.event_names.len(), 1);
        assert_eq!(pending.debug_annotation_names.len(), 1);
        assert_eq!(sequences.take_pending(), None);
        sequences.event_name(b, 5, "ping");
        assert!(sequences.take_pending().is_some(), "defined again on b");
    }
}
