#!/usr/bin/env bash
# Catch performance regressions in CI with wprof (README, "Catching
# regressions in CI"): record RUNS baseline and RUNS candidate captures of a
# benchmark, alternating them, then compare them and gate on the result.
#
#   examples/ci/regress.sh [options]
#
#   -n RUNS           captures per side (default 5; 4 is the fewest with
#                     which a change can be significant at p < 0.05), each
#                     of 10000 requests (bench's default: -n N in both
#                     --base-args and --new-args changes it)
#   -o DIR            where captures and reports go (default regress-out)
#   --base-dir DIR    directory whose ./bench is the baseline build
#   --new-dir DIR     directory whose ./bench is the candidate build
#                     (both default to a build of examples/ci/bench.c in DIR)
#   --base-args ARGS  arguments of the baseline runs (default: none)
#   --new-args ARGS   arguments of the candidate runs, e.g. --slow
#   --fail-if EXPR    a gate (repeatable; replaces the default gates)
#
# Exit status: wprof's: 0 no regression, 1 a gate failed (the failing gates
# are on stderr and in DIR/report.md), 2 the job is broken (bad capture,
# bad gate). Environment: WPROF (default: wprof on the PATH). Needs root
# (recording loads BPF programs) and cc.
#
# The script is the same text for both sides (the probed program is
# ./bench, run from each build's directory), so wprof compares the captures;
# a different script would be an error.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WPROF=${WPROF:-wprof}
# The spans are the command's own (cpid); process: and func: metrics are
# those of the command's processes (--only-command), whatever else runs on
# the machine.
SCRIPT='span request { uprobe:./bench:request /pid == cpid/ < > uretprobe:./bench:request /pid == cpid/ }'
# Timer samples at 4999 Hz: with 10000 requests, about 3000 samples per run
# in compact(), enough to see a 10% change in it. dither=4: drawn at random
# from a timer 4 times as fast, so that compact()'s share of the samples is
# its share of the CPU time however long request() takes before it (a
# fixed-period timer under-samples what a task runs first after waking up:
# docs/analysis.md, "Timer samples and CPU time"). --only-command selects
# the benchmark's process tree in the kernel (and again when the capture is
# read): nothing else on the machine is sampled, unwound or recorded.
RECORD_FLAGS=(-S timer=4999hz,dither=4 --only-command)
DEFAULT_GATES=(
  'span:request.p50 > +5%'
  'span:request.p99 > +5%'
  'func:compact.total > +5%'
)

die() { echo "regress.sh: $*" >&2; exit 2; }

# build_bench DIR: DIR/bench from examples/ci/bench.c, unless it exists.
build_bench() {
  local dir=$1
  mkdir -p "$dir"
  [[ -x $dir/bench ]] && return
  cc -O2 -Wall -g -fno-omit-frame-pointer -o "$dir/bench" "$HERE/bench.c"
}

# priority: the command prefix that runs the benchmark ahead of other work,
# so that a shared machine does not preempt it in the middle of a request
# (a preempted request's duration is the other work's, and a p99 is made of
# a few such outliers): real-time FIFO priority where the kernel allows it
# (only interrupts preempt it; the benchmark sleeps most of the time, so it
# starves nothing), else the highest nice priority.
priority() {
  if chrt -f 1 true 2>/dev/null; then
    echo chrt -f 1
  else
    echo "regress.sh: warning: no real-time priority (chrt -f failed): using nice -n -20" >&2
    echo nice -n -20
  fi
}

# record_capture DIR OUT ARGS...: one capture of DIR/bench ARGS... into OUT,
# the benchmark run with the prefix in PRIORITY.
record_capture() {
  local dir=$1 out=$2
  shift 2
  # shellcheck disable=SC2086 # PRIORITY is words
  (cd "$dir" && "$WPROF" "${RECORD_FLAGS[@]}" -e "$SCRIPT" -D "$out" -- $PRIORITY ./bench "$@") \
    >"$out.log" 2>&1 || { cat "$out.log" >&2; die "recording $out failed"; }
}

# record_sides OUT RUNS BASE_DIR NEW_DIR BASE_ARGS NEW_ARGS: alternating
# baseline and candidate runs, so that slow drift of a shared machine
# touches both sides alike.
record_sides() {
  local out=$1 runs=$2 base_dir=$3 new_dir=$4 base_args=$5 new_args=$6 i
  for ((i = 1; i <= runs; i++)); do
    # shellcheck disable=SC2086 # the arguments are words
    record_capture "$base_dir" "$out/base-$i.data" $base_args
    # shellcheck disable=SC2086
    record_capture "$new_dir" "$out/new-$i.data" $new_args
  done
}

# compare_sides OUT GATE...: wprof's comparison of OUT/new-* against
# OUT/base-*, its reports in OUT; returns wprof's exit status.
compare_sides() {
  local out=$1
  shift
  local gates=()
  for gate in "$@"; do gates+=(--fail-if "$gate"); done
  "$WPROF" -R -D "$out"/new-*.data --baseline "$out"/base-*.data "${gates[@]}" \
    --metric 'span:request.*' --metric 'func:request.*' --metric 'func:compact.*' \
    --metric 'process:bench.*' \
    --report "$out/report.txt" --report-md "$out/report.md" \
    --metrics "$out/comparison.json" --flamegraph "$out/diff.svg"
}

main() {
  local runs=5 out=regress-out base_dir="" new_dir="" base_args="" new_args=""
  local gates=()
  while [[ $# -gt 0 ]]; do
    case $1 in
      -n) runs=$2; shift 2 ;;
      -o) out=$2; shift 2 ;;
      --base-dir) base_dir=$2; shift 2 ;;
      --new-dir) new_dir=$2; shift 2 ;;
      --base-args) base_args=$2; shift 2 ;;
      --new-args) new_args=$2; shift 2 ;;
      --fail-if) gates+=("$2"); shift 2 ;;
      -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
      *) die "unknown argument: $1 (see --help)" ;;
    esac
  done
  [[ $EUID -eq 0 ]] || die "needs root: recording loads BPF programs"
  command -v "$WPROF" >/dev/null || die "no $WPROF: set WPROF=/path/to/wprof"
  [[ ${#gates[@]} -gt 0 ]] || gates=("${DEFAULT_GATES[@]}")
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  rm -f "$out"/base-*.data "$out"/new-*.data
  PRIORITY=$(priority)
  base_dir=${base_dir:-$out/build}
  new_dir=${new_dir:-$out/build}
  build_bench "$base_dir"
  build_bench "$new_dir"
  record_sides "$out" "$runs" "$base_dir" "$new_dir" "$base_args" "$new_args"
  local status=0
  compare_sides "$out" "${gates[@]}" || status=$?
  cat "$out/report.txt"
  return "$status"
}

# Sourced (bench/regress-checks.sh), it only defines the functions.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
