#!/usr/bin/env bash
# Runs the whole test suite: unit tests, kernel tests and the bpftrace differential tests (run as root),
# bpftrace 0.17's own runtime tests against wprof (tools/runtime-tests.sh), then a short
# coverage-guided fuzzing run of each fuzz target (fuzz/README.md; fails on a crash).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cargo test --all-targets
tools/runtime-tests.sh
tools/fuzz.sh ci 60
