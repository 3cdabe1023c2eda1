#!/usr/bin/env bash
# Builds wprof, traces the demo workload with examples/demo.bt and writes a
# Perfetto trace to target/demo/trace.pb (run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cargo build --release --quiet
mkdir -p target/demo
cc -O1 -g -fno-omit-frame-pointer -fno-inline -o target/demo/workload examples/workload.c
target/release/wprof examples/demo.bt -S -D target/demo/wprof.data -T target/demo/trace.pb -- target/demo/workload 200
target/release/wprof -R -I -D target/demo/wprof.data
echo
echo "Trace written to target/demo/trace.pb: open it at https://ui.perfetto.dev"
