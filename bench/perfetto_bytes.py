#!/usr/bin/env python3
"""Where the bytes of a wprof Perfetto trace go: per packet kind, in bytes
per context switch (the switches are those of the trace's compact_sched
bundles).

    bench/perfetto_bytes.py TRACE.pftrace

Every packet is counted with its framing in the Trace message (tag and
length). Track events are split by type, and whether they carry flows;
inside them, flow ids, debug annotations and interned data are also
counted apart (they are part of the packet's bytes too). Needs the PyPI
package `perfetto` (its protos only).
"""

import collections
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

TE = pb.TrackEvent
TYPES = {
    TE.TYPE_SLICE_BEGIN: "slice BEGIN",
    TE.TYPE_SLICE_END: "slice END",
    TE.TYPE_INSTANT: "instant",
    TE.TYPE_COUNTER: "counter",
}


def varint_len(v):
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def field_len(size):
    """A length-delimited field of `size` bytes, with a 1-byte tag."""
    return 1 + varint_len(size) + size


def packet_kind(packet):
    if packet.HasField("track_event"):
        event = packet.track_event
        kind = TYPES.get(event.type, f"track event type {event.type}")
        if event.flow_ids or event.terminating_flow_ids or event.flow_ids_old or event.terminating_flow_ids_old:
            kind += " with flows"
        return kind
    if packet.HasField("ftrace_events"):
        return "compact_sched"
    if packet.HasField("track_descriptor"):
        return "track descriptor"
    for name in ("process_tree", "system_info", "clock_snapshot"):
        if packet.HasField(name):
            return name.replace("_", " ")
    return "other"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    trace = pb.Trace()
    with open(sys.argv[1], "rb") as f:
        trace.ParseFromString(f.read())
    packets = collections.Counter()
    size = collections.Counter()
    parts = collections.Counter()
    switches = 0
    for packet in trace.packet:
        kind = packet_kind(packet)
        packets[kind] += 1
        size[kind] += field_len(packet.ByteSize())
        if packet.HasField("interned_data"):
            parts["interned data"] += field_len(packet.interned_data.ByteSize())
        event = packet.track_event
        ids = list(event.flow_ids) + list(event.terminating_flow_ids)
        parts["flow ids"] += 10 * len(ids)
        parts["flow ids"] += sum(2 + varint_len(i) for i in event.flow_ids_old)
        parts["flow ids"] += sum(2 + varint_len(i) for i in event.terminating_flow_ids_old)
        parts["debug annotations"] += sum(field_len(a.ByteSize()) for a in event.debug_annotations)
        switches += len(packet.ftrace_events.compact_sched.switch_timestamp)
    total = sum(size.values())
    per = max(switches, 1)
    print(f"{sys.argv[1]}: {total} bytes, {len(trace.packet)} packets, {switches} switches")
    print(f"{'packet':<28} {'count':>9} {'bytes':>10} {'B/switch':>9} {'B/packet':>9}")
    for kind, n in size.most_common():
        print(f"{kind:<28} {packets[kind]:>9} {n:>10} {n / per:>9.2f} {n / packets[kind]:>9.1f}")
    print(f"{'total':<28} {len(trace.packet):>9} {total:>10} {total / per:>9.2f}")
    print("inside the packets above:")
    for part, n in sorted(parts.items()):
        print(f"  {part:<26} {'':>9} {n:>10} {n / per:>9.2f}")


if __name__ == "__main__":
    main()
