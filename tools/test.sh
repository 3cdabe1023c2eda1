#!/usr/bin/env bash
# Runs the whole test suite: unit tests, kernel tests and the bpftrace differential tests (run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cargo test --all-targets
