#!/usr/bin/env bash
# Installs what wprof needs to build and test on Debian 12 (run as root).
set -euo pipefail
packages=(libelf-dev zlib1g-dev pkg-config gcc make bpftrace systemtap-sdt-dev golang-go)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi
# Some machines do not mount tracefs at boot; tracepoints need it.
if [ ! -d /sys/kernel/tracing/events ]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
fi
# The official Perfetto trace schema, the oracle of the trace tests.
python3 -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2' 2>/dev/null ||
  python3 -m pip install -q perfetto
