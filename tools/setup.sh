#!/usr/bin/env bash
# Installs what wprof needs to build and test on Debian 12 (run as root).
set -euo pipefail
# wprof is written in Rust edition 2024, which needs Rust 1.85 or newer;
# Debian 12's own rustc (1.63) is too old. Stop before installing anything.
min_rust=1.85
toolchain_help="install a current Rust toolchain with rustup (https://rustup.rs), then run this again"
if ! command -v cargo >/dev/null; then
  echo "setup.sh: cargo is missing: wprof needs Rust >= $min_rust (edition 2024); $toolchain_help" >&2
  exit 1
fi
rust_version=$(cargo --version | awk '{print $2}')
if [ "$(printf '%s\n%s\n' "$min_rust" "$rust_version" | sort -V | head -n 1)" != "$min_rust" ]; then
  echo "setup.sh: cargo $rust_version is too old: wprof needs Rust >= $min_rust (edition 2024; Debian 12's rustc is 1.63); $toolchain_help" >&2
  exit 1
fi
# python-is-python3: bpftrace's runtime tests call `python` (tools/runtime-tests.sh).
# g++: the C++ workloads (tests/data/*.cc) of the demangling tests.
packages=(libelf-dev zlib1g-dev pkg-config gcc g++ make bpftrace systemtap-sdt-dev golang-go
  python-is-python3)
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
# Nor debugfs, whose tracing directory bpftrace's runtime tests read
# (/sys/kernel/debug/tracing/trace: the debugf tests).
if [ ! -d /sys/kernel/debug/tracing ]; then
  mount -t debugfs nodev /sys/kernel/debug 2>/dev/null || true
fi
# The official Perfetto trace schema, the oracle of the trace tests.
python3 -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2' 2>/dev/null ||
  python3 -m pip install -q perfetto
