//! PMU counters: per-slice deltas (annotations on on-CPU and IRQ slices) and
//! counter tracks.
//!
//! A counter track per CPU and counter carries the *cumulative* count
//! (scaled for multiplexing) at every boundary: switches and IRQ entry and
//! exit. Perfetto's UI can show a counter track as value, delta or rate, so
//! one cumulative series gives both "how much in this interval" and "how
//! fast", while the exact per-slice count is on each slice.

use std::cmp::Reverse;

use super::encode::EventPacket;
use super::{On, RenderError, Renderer, SEQUENCE_ID, proto};
use crate::capture::model::Event;
use crate::tracking::records::{Delta, PmuField, reading};

impl Renderer<'_, '_> {
    /// Writes the counter values of `fields` in `event` at `ts_ns` on the
    /// event's CPU; values at a later time (an IRQ's exit) are queued.
    pub(super) fn write_counters(
        &mut self,
        event: &Event,
        fields: &[PmuField],
        ts_ns: u64,
    ) -> Result<(), RenderError> {
        for field in fields {
            let Some(now) = reading(event, field) else {
                continue;
            };
            let name = &self.trackers.counters[field.counter];
            let track = self.tracks.counter(event.cpu, field.counter, name);
            self.write_new_tracks()?;
            let value = Some(now.scaled as i64);
            if ts_ns > event.ts_ns {
                self.ends.push(Reverse((ts_ns, self.begins, track, value)));
                self.begins += 1;
                continue;
            }
            self.writer.write_event(&EventPacket {
                sequence_id: SEQUENCE_ID,
                timestamp: self.start_ns.saturating_add(ts_ns),
                kind: proto::TYPE_COUNTER,
                track_uuid: Some(track),
                counter_value: value,
                ..EventPacket::default()
            })?;
        }
        Ok(())
    }

    /// Adds one annotation per counter delta (`pmu:C`), and `pmu_multiplexed`
    /// when any of them is an estimate, for a packet on sequence `on`.
    pub(super) fn annotate_deltas(&mut self, deltas: &[(usize, Delta)], on: On) {
        let mut multiplexed = false;
        for &(counter, delta) in deltas {
            if self.pmu_iids[counter] == 0 {
                self.pmu_iids[counter] = self.interner.annotation_name(&self.pmu_names[counter]);
            }
            let name = self.pmu_iids[counter];
            if let On::Track(sequence) = on {
                (self.sequences).annotation_name(sequence, name, &self.pmu_names[counter]);
            }
            let value = proto::AnnotationValue::Uint(delta.count);
            self.annotations.push((name, value));
            multiplexed |= delta.multiplexed;
        }
        if multiplexed {
            const MULTIPLEXED: &str = "pmu_multiplexed";
            let name = self.interner.annotation_name(MULTIPLEXED);
            if let On::Track(sequence) = on {
                self.sequences.annotation_name(sequence, name, MULTIPLEXED);
            }
            self.annotations
                .push((name, proto::AnnotationValue::Uint(1)));
        }
    }
}
