#!/usr/bin/env python3
"""Checks a wprof Perfetto trace against the official schema and the rules
the renderer promises.

Parses FILE with `perfetto_trace_pb2` from the PyPI package `perfetto`
(`pip install perfetto`) and checks:
- one trusted_packet_sequence_id, set on every packet; the first packet has
  SEQ_INCREMENTAL_STATE_CLEARED;
- every track_uuid (and parent_uuid) is described by an earlier
  TrackDescriptor; thread tracks have pid and tid;
- every interned id an event or interned entry refers to (event names,
  annotation names, string values, callstacks, frames, function names,
  mappings, build ids, mapping paths, source paths) is defined in the same or
  an earlier packet, and no iid is redefined with a different value;
- timestamps never decrease on a track; slice BEGIN/END balance per track.
Then prints counts and compares them with the --expect-* options.
Exit status 0 when everything holds, 1 otherwise.
"""

import argparse
import collections
import json
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
TE = pb.TrackEvent

# InternedData field → how entries name their value (for redefinition checks).
INTERNED = {
    "event_names": lambda e: e.name,
    "debug_annotation_names": lambda e: e.name,
    "debug_annotation_string_values": lambda e: e.str,
    "function_names": lambda e: e.str,
    "build_ids": lambda e: e.str,
    "mapping_paths": lambda e: e.str,
    "source_paths": lambda e: e.str,
    "mappings": lambda e: (e.build_id, tuple(e.path_string_ids)),
    "frames": lambda e: (e.function_name_id, e.mapping_id, e.rel_pc, e.source_path_iid),
    "callstacks": lambda e: tuple(e.frame_ids),
}


class Checker:
    def __init__(self):
        self.errors = []
        self.tracks = {}
        self.interned = {field: {} for field in INTERNED}
        self.last_ts = {}
        self.open = collections.defaultdict(int)
        self.counts = collections.Counter()
        self.names = collections.Counter()
        self.sequences = set()

    def error(self, index, message):
        if len(self.errors) < 50:
            self.errors.append(f"packet {index}: {message}")

    def need(self, index, field, iid, what):
        if iid == 0:
            self.error(index, f"{what} uses iid 0")
        elif iid not in self.interned[field]:
            self.error(index, f"{what} uses {field} iid {iid} before it is defined")

    def packet(self, index, packet):
        if not packet.HasField("trusted_packet_sequence_id"):
            self.error(index, "no trusted_packet_sequence_id")
        self.sequences.add(packet.trusted_packet_sequence_id)
        if index == 0 and not packet.sequence_flags & CLEARED:
            self.error(index, "first packet lacks SEQ_INCREMENTAL_STATE_CLEARED")
        if packet.HasField("interned_data"):
            self.intern(index, packet.interned_data)
        if packet.HasField("track_descriptor"):
            self.descriptor(index, packet.track_descriptor)
        if packet.HasField("track_event"):
            self.event(index, packet, packet.track_event)

    def intern(self, index, data):
        for field, value_of in INTERNED.items():
            for entry in getattr(data, field):
                table = self.interned[field]
                value = value_of(entry)
                if entry.iid in table and table[entry.iid] != value:
                    self.error(index, f"{field} iid {entry.iid} redefined")
                table[entry.iid] = value
        # References inside interned data (defined in this packet or earlier).
        for mapping in data.mappings:
            if mapping.build_id:
                self.need(index, "build_ids", mapping.build_id, "mapping")
            for iid in mapping.path_string_ids:
                self.need(index, "mapping_paths", iid, "mapping")
        for frame in data.frames:
            if frame.function_name_id:
                self.need(index, "function_names", frame.function_name_id, "frame")
            if frame.mapping_id:
                self.need(index, "mappings", frame.mapping_id, "frame")
            if frame.source_path_iid:
                self.need(index, "source_paths", frame.source_path_iid, "frame")
        for stack in data.callstacks:
            for iid in stack.frame_ids:
                self.need(index, "frames", iid, "callstack")

    def descriptor(self, index, desc):
        if desc.uuid in self.tracks:
            self.error(index, f"track {desc.uuid} described twice")
        if desc.HasField("parent_uuid") and desc.parent_uuid not in self.tracks:
            self.error(index, f"track {desc.uuid}: parent {desc.parent_uuid} not described")
        if desc.HasField("thread") and not (desc.thread.pid and desc.thread.tid):
            self.error(index, f"thread track {desc.uuid} without pid/tid")
        self.tracks[desc.uuid] = desc

    def event(self, index, packet, event):
        track = event.track_uuid
        if track not in self.tracks:
            self.error(index, f"track_uuid {track} has no earlier TrackDescriptor")
        ts = packet.timestamp
        if ts < self.last_ts.get(track, 0):
            self.error(index, f"timestamp {ts} goes back on track {track}")
        self.last_ts[track] = ts
        kind = event.type
        if kind != TE.TYPE_SLICE_END:
            self.need(index, "event_names", event.name_iid, "event")
            self.names[self.interned["event_names"].get(event.name_iid, "?")] += 1
        if event.HasField("callstack_iid"):
            self.need(index, "callstacks", event.callstack_iid, "event")
            self.counts["events with callstack"] += 1
        for annotation in event.debug_annotations:
            self.need(index, "debug_annotation_names", annotation.name_iid, "annotation")
            if annotation.HasField("string_value_iid"):
                self.need(index, "debug_annotation_string_values",
                          annotation.string_value_iid, "annotation")
        if kind == TE.TYPE_INSTANT:
            self.counts["instants"] += 1
        elif kind == TE.TYPE_SLICE_BEGIN:
            self.counts["slices"] += 1
            self.open[track] += 1
        elif kind == TE.TYPE_SLICE_END:
            if self.open[track] == 0:
                self.error(index, f"slice END without BEGIN on track {track}")
            self.open[track] -= 1
        else:
            self.error(index, f"unexpected TrackEvent type {kind}")

    def finish(self):
        if len(self.sequences) != 1:
            self.errors.append(f"{len(self.sequences)} packet sequences, expected 1")
        for track, depth in self.open.items():
            if depth:
                self.errors.append(f"{depth} slices never end on track {track}")
        return {
            "instants": self.counts["instants"],
            "slices": self.counts["slices"],
            "events_with_callstack": self.counts["events with callstack"],
            "tracks": len(self.tracks),
            "callstacks": len(self.interned["callstacks"]),
            "frames": len(self.interned["frames"]),
            "names": dict(sorted(self.names.items())),
        }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--expect-instants", type=int)
    parser.add_argument("--expect-slices", type=int)
    parser.add_argument("--expect-tracks", type=int)
    parser.add_argument("--expect-callstacks", type=int)
    parser.add_argument("--expect-name", action="append", default=[],
                        metavar="NAME=COUNT", help="instants + slices named NAME")
    args = parser.parse_args()

    trace = pb.Trace()
    with open(args.trace, "rb") as f:
        trace.ParseFromString(f.read())
    checker = Checker()
    for index, packet in enumerate(trace.packet):
        checker.packet(index, packet)
    summary = checker.finish()
    errors = checker.errors

    expected = {
        "instants": args.expect_instants,
        "slices": args.expect_slices,
        "tracks": args.expect_tracks,
        "callstacks": args.expect_callstacks,
    }
    for key, want in expected.items():
        if want is not None and summary[key] != want:
            errors.append(f"{key}: {summary[key]}, expected {want}")
    for spec in args.expect_name:
        name, _, want = spec.rpartition("=")
        got = summary["names"].get(name, 0)
        if got != int(want):
            errors.append(f"events named {name}: {got}, expected {want}")

    print(json.dumps({"packets": len(trace.packet), **summary}, sort_keys=True))
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
