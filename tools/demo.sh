#!/usr/bin/env bash
# Builds wprof and traces the demo workload with examples/demo.bt (run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cargo build --release --quiet
mkdir -p target/demo
cc -O1 -g -fno-omit-frame-pointer -fno-inline -o target/demo/workload examples/workload.c
exec target/release/wprof examples/demo.bt -c "target/demo/workload 200"
