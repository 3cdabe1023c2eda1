#!/usr/bin/env bash
# Runs the whole test suite: unit tests, kernel tests and the bpftrace differential tests (run as root),
# bpftrace 0.17's own runtime tests against wprof (tools/runtime-tests.sh), then a short
# coverage-guided fuzzing run of each fuzz target (fuzz/README.md; fails on a crash).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
# The CI recipe's A/B tests judge a benchmark's timings, so they run after the rest, alone
# on the machine, as a performance gate runs on a CI runner of its own (docs/analysis.md).
cargo test --all-targets -- --skip suite::regress::ci_recipe
cargo test --test integration suite::regress::ci_recipe -- --test-threads=1
tools/runtime-tests.sh
tools/fuzz.sh ci 60
