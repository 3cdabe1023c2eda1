#!/usr/bin/env python3
"""Checks a wprof Perfetto trace against the official schema and the rules
the renderer promises.

Parses FILE with `perfetto_trace_pb2` from the PyPI package `perfetto`
(`pip install perfetto`) and checks:
- a trusted_packet_sequence_id on every packet; the first packet of each
  sequence has SEQ_INCREMENTAL_STATE_CLEARED;
- every track_uuid (and parent_uuid; an event without one is on its
  sequence's default track) is described by an earlier TrackDescriptor;
  thread tracks have pid and tid;
- every interned id an event or interned entry refers to (event names,
  annotation names, string values, callstacks, frames, function names,
  mappings, build ids, mapping paths, source paths) is defined on the same
  sequence in the same or an earlier packet, and no iid is redefined with a
  different value (anywhere: one iid means one string in the trace);
- timestamps never decrease on a track (resolved through the sequence's
  clock snapshot: a packet on an incremental clock gives the delta from the
  previous one on its sequence); slice BEGIN/END balance per track;
- counter events are on counter tracks; flows as trace processor reads
  them (`flow_ids` and `terminating_flow_ids`, or their varint `_old`
  forms): a flow ends only while it is open, an id is reused only after
  its flow ended, and no event both starts and ends one flow;
- compact_sched arrays of a bundle have matching lengths and comm indices
  inside the bundle's intern table.
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


class Sequence:
    """The incremental state of one packet sequence."""

    def __init__(self):
        self.defined = {field: set() for field in INTERNED}
        self.default_clock = 6  # BOOTTIME unless TracePacketDefaults say otherwise
        self.default_track = None
        self.incremental = {}  # incremental clock id -> its current time


class Checker:
    def __init__(self):
        self.errors = []
        self.tracks = {}
        self.interned = {field: {} for field in INTERNED}
        self.last_ts = {}
        self.open = collections.defaultdict(int)
        self.counts = collections.Counter()
        self.names = collections.Counter()
        self.sequences = {}
        self.seq = None
        self.thread_slices = collections.Counter()
        self.counter_values = collections.Counter()
        self.open_flows = set()
        self.flows = 0
        self.compact_cpus = set()
        self.compact_switches = 0
        self.tree_threads = set()
        self.slice_names = collections.defaultdict(list)
        self.annotation_sums = collections.Counter()

    def error(self, index, message):
        if len(self.errors) < 50:
            self.errors.append(f"packet {index}: {message}")

    def need(self, index, field, iid, what):
        if iid == 0:
            self.error(index, f"{what} uses iid 0")
        elif iid not in self.seq.defined[field]:
            self.error(index, f"{what} uses {field} iid {iid} before its sequence defines it")

    def packet(self, index, packet):
        if not packet.HasField("trusted_packet_sequence_id"):
            self.error(index, "no trusted_packet_sequence_id")
        sequence = packet.trusted_packet_sequence_id
        if sequence not in self.sequences and not packet.sequence_flags & CLEARED:
            self.error(index, f"first packet of sequence {sequence} lacks SEQ_INCREMENTAL_STATE_CLEARED")
        if packet.sequence_flags & CLEARED:
            self.sequences[sequence] = Sequence()
        self.seq = self.sequences.setdefault(sequence, Sequence())
        if packet.HasField("clock_snapshot"):
            for clock in packet.clock_snapshot.clocks:
                if clock.is_incremental:
                    self.seq.incremental[clock.clock_id] = clock.timestamp
        if packet.HasField("trace_packet_defaults"):
            defaults = packet.trace_packet_defaults
            self.seq.default_clock = defaults.timestamp_clock_id
            if defaults.track_event_defaults.HasField("track_uuid"):
                self.seq.default_track = defaults.track_event_defaults.track_uuid
        if packet.HasField("timestamp"):
            packet.timestamp = self.resolve(index, packet)
        if packet.HasField("interned_data"):
            self.intern(index, packet.interned_data)
        if packet.HasField("track_descriptor"):
            self.descriptor(index, packet.track_descriptor)
        if packet.HasField("track_event"):
            self.event(index, packet, packet.track_event)
        if packet.HasField("ftrace_events"):
            self.bundle(index, packet.ftrace_events)
        if packet.HasField("process_tree"):
            self.tree_threads.update(t.tid for t in packet.process_tree.threads)

    def resolve(self, index, packet):
        """The packet's absolute timestamp (in its clock's domain)."""
        seq = self.seq
        clock = packet.timestamp_clock_id if packet.HasField("timestamp_clock_id") else seq.default_clock
        if clock >= 64 and clock not in seq.incremental:
            self.error(index, f"timestamp on clock {clock}, which no clock snapshot defined")
            return packet.timestamp
        if clock not in seq.incremental:
            return packet.timestamp
        seq.incremental[clock] += packet.timestamp
        return seq.incremental[clock]

    def bundle(self, index, bundle):
        if not bundle.HasField("compact_sched"):
            return
        sched = bundle.compact_sched
        self.compact_cpus.add(bundle.cpu)
        self.compact_switches += len(sched.switch_timestamp)
        for prefix, columns in [
            ("switch", ["timestamp", "prev_state", "next_pid", "next_prio", "next_comm_index"]),
            ("waking", ["timestamp", "pid", "target_cpu", "prio", "comm_index"]),
        ]:
            lengths = {len(getattr(sched, f"{prefix}_{c}")) for c in columns}
            if len(lengths) != 1:
                self.error(index, f"compact_sched {prefix} columns differ in length: {lengths}")
        for i in list(sched.switch_next_comm_index) + list(sched.waking_comm_index):
            if i >= len(sched.intern_table):
                self.error(index, f"compact_sched comm index {i} outside the intern table")

    def intern(self, index, data):
        for field, value_of in INTERNED.items():
            for entry in getattr(data, field):
                table = self.interned[field]
                value = value_of(entry)
                if entry.iid in table and table[entry.iid] != value:
                    self.error(index, f"{field} iid {entry.iid} redefined")
                table[entry.iid] = value
                self.seq.defined[field].add(entry.iid)
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
        track = event.track_uuid if event.HasField("track_uuid") else self.seq.default_track
        if track not in self.tracks:
            self.error(index, f"track_uuid {track} has no earlier TrackDescriptor")
        ts = packet.timestamp
        if ts < self.last_ts.get(track, 0):
            self.error(index, f"timestamp {ts} goes back on track {track}")
        self.last_ts[track] = ts
        kind = event.type
        self.flow(index, event)
        if kind == TE.TYPE_COUNTER:
            desc = self.tracks.get(track)
            if desc is None or not desc.HasField("counter"):
                self.error(index, f"counter value on track {track}, not a counter track")
            else:
                self.counter_values[desc.name] += 1
            return
        if kind == TE.TYPE_SLICE_END and self.slice_names[track]:
            # Annotations of a slice's END (e.g. PMU deltas of on-CPU
            # slices), summed by slice name and annotation name.
            name = self.slice_names[track].pop()
            for annotation in event.debug_annotations:
                key = self.interned["debug_annotation_names"].get(annotation.name_iid, "?")
                self.annotation_sums[(name, key)] += annotation.uint_value or annotation.int_value
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
            self.slice_names[track].append(self.interned["event_names"].get(event.name_iid, "?"))
            desc = self.tracks.get(track)
            if desc is not None and desc.HasField("thread") and self.open[track] == 1:
                name = self.interned["event_names"].get(event.name_iid, "?")
                self.thread_slices[name] += 1
        elif kind == TE.TYPE_SLICE_END:
            if self.open[track] == 0:
                self.error(index, f"slice END without BEGIN on track {track}")
            self.open[track] -= 1
        else:
            self.error(index, f"unexpected TrackEvent type {kind}")

    def flow(self, index, event):
        starts = list(event.flow_ids) + list(event.flow_ids_old)
        ends = list(event.terminating_flow_ids) + list(event.terminating_flow_ids_old)
        for flow in starts:
            if flow in self.open_flows:
                self.error(index, f"flow id {flow} reused while its flow is open")
            self.open_flows.add(flow)
        for flow in ends:
            if flow in starts:
                self.error(index, f"flow {flow} starts and ends on one event")
            elif flow not in self.open_flows:
                self.error(index, f"flow {flow} ends but is not open")
            else:
                self.open_flows.remove(flow)
                self.flows += 1

    def finish(self):
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
            "thread_slices": dict(sorted(self.thread_slices.items())),
            "counter_tracks": dict(sorted(self.counter_values.items())),
            "flows": self.flows,
            "compact_sched_cpus": len(self.compact_cpus),
            "compact_sched_switches": self.compact_switches,
            "process_tree_threads": len(self.tree_threads),
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
    parser.add_argument("--expect-thread-slices", action="append", default=[],
                        metavar="COMM:N", help="top-level slices named COMM on thread tracks "
                        "(on-CPU slices); N exact, or N+ for at least N")
    parser.add_argument("--expect-counter-track", action="append", default=[],
                        metavar="NAME", help="a counter track NAME with values")
    parser.add_argument("--expect-compact-sched", type=int, metavar="CPUS",
                        help="CPUs with compact_sched bundles (at least one switch in all)")
    parser.add_argument("--expect-flows", type=int, help="flows that start and end")
    parser.add_argument("--expect-min-flows", type=int, metavar="N",
                        help="at least N flows that start and end")
    parser.add_argument("--expect-end-annotation-sum", nargs=3, action="append", default=[],
                        metavar=("SLICE", "ANNOTATION", "MIN"),
                        help="the values of ANNOTATION on the ends of slices named SLICE "
                        "add up to at least MIN")
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

    for spec in args.expect_thread_slices:
        comm, _, want = spec.rpartition(":")
        got = summary["thread_slices"].get(comm, 0)
        if (got < int(want[:-1])) if want.endswith("+") else (got != int(want)):
            errors.append(f"on-CPU slices of {comm}: {got}, expected {want}")
    for name in args.expect_counter_track:
        if not summary["counter_tracks"].get(name):
            errors.append(f"no counter track {name!r} with values")
    if args.expect_compact_sched is not None:
        got = summary["compact_sched_cpus"]
        if got != args.expect_compact_sched or not summary["compact_sched_switches"]:
            errors.append(f"compact_sched on {got} CPUs, expected {args.expect_compact_sched}")
    if args.expect_flows is not None and summary["flows"] != args.expect_flows:
        errors.append(f"flows: {summary['flows']}, expected {args.expect_flows}")

    if args.expect_min_flows is not None and summary["flows"] < args.expect_min_flows:
        errors.append(f"flows: {summary['flows']}, expected at least {args.expect_min_flows}")
    for name, annotation, want in args.expect_end_annotation_sum:
        got = checker.annotation_sums[(name, annotation)]
        if got < int(want):
            errors.append(f"{annotation} on ends of {name} slices: {got}, expected at least {want}")

    print(json.dumps({"packets": len(trace.packet), **summary}, sort_keys=True))
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
