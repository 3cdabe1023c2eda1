#!/usr/bin/env bash
# Catch performance regressions in CI with wprof (README, "Catching
# regressions in CI"): record RUNS baseline and RUNS candidate captures of a
# benchmark in pairs, alternating them, then compare them and gate on the
# result.
#
#   examples/ci/regress.sh [options]
#
#   -n RUNS           captures per side (default 12), each of 10000 requests
#                     (bench's default: -n N in both --base-args and
#                     --new-args changes it). From 6 up the runs are
#                     compared pair by pair (wprof --paired: a stretch of
#                     time the machine was slow slows both runs of a pair
#                     and leaves their difference alone); 4 and 5 runs are
#                     compared unpaired (5 pairs can never be significant
#                     at p < 0.05), fewer never reach significance.
#   -o DIR            where captures and reports go (default regress-out)
#   --base-dir DIR    directory whose ./bench is the baseline build
#   --new-dir DIR     directory whose ./bench is the candidate build
#                     (both default to a build of examples/ci/bench.c in DIR)
#   --base-args ARGS  arguments of the baseline runs (default: none)
#   --new-args ARGS   arguments of the candidate runs, e.g. --slow
#   --fail-if EXPR    a gate (repeatable; replaces the default gates)
#
# Two kinds of runs: span runs (the request span, no timer: DIR/base-I.data,
# DIR/new-I.data) for every gate but func: ones, and, when a func: gate is
# given, profile runs (timer samples, no span: DIR/profile-base-I.data,
# DIR/profile-new-I.data) for those. Each kind is compared on its own;
# DIR/report.txt and DIR/report.md hold both tables, DIR/comparison.json and
# DIR/profile-comparison.json the two comparisons, DIR/diff.svg the profile
# runs' differential flame graph.
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
# The spans are the command's own (cpid); process: metrics are those of the
# command's processes (--only-command), whatever else runs on the machine.
SCRIPT='span request { uprobe:./bench:request /pid == cpid/ < > uretprobe:./bench:request /pid == cpid/ }'
# --only-command selects the benchmark's process tree in the kernel (and
# again when the capture is read): nothing else on the machine is recorded,
# sampled or unwound.
SPAN_FLAGS=(-e "$SCRIPT" --only-command)
# Timer samples at 4999 Hz: with 10000 requests, about 3000 samples per run
# in compact(), enough to see a 10% change in it. dither=4: drawn at random
# from a timer 4 times as fast, so that compact()'s share of the samples is
# its share of the CPU time however long request() takes before it (a
# fixed-period timer under-samples what a task runs first after waking up:
# docs/analysis.md, "Timer samples and CPU time"). That timer ticks at 20 kHz
# and each tick costs the interrupted task tens of microseconds in a VM, as
# much as a request's own work: request durations would follow how many
# ticks hit them, so the spans are timed in runs without the timer.
PROFILE_FLAGS=(-S timer=4999hz,dither=4 --only-command)
# The fewest run pairs a paired comparison can find significant (p = 2/64).
MIN_PAIRS=6
# (--paired) when the runs are compared pair by pair: set by use_pairs.
PAIRED=()
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

# record_capture DIR OUT FLAGS ARGS: one capture of DIR/bench ARGS (words)
# into OUT, recorded with the flags named by FLAGS (an array's name), the
# benchmark run with the prefix in PRIORITY.
record_capture() {
  local dir=$1 out=$2 args=$4
  local -n flags=$3
  # shellcheck disable=SC2086 # PRIORITY and args are words
  (cd "$dir" && "$WPROF" "${flags[@]}" -D "$out" -- $PRIORITY ./bench $args) \
    >"$out.log" 2>&1 || { cat "$out.log" >&2; die "recording $out failed"; }
}

# record_pair OUT I KIND FLAGS BASE_DIR NEW_DIR BASE_ARGS NEW_ARGS: the I-th
# baseline and candidate captures of one kind (KIND empty or profile-) in OUT,
# the baseline first when I is odd and second when it is even (ABBA), so
# that a machine drifting slower or faster, and whatever the first run of
# a pair pays, touch both sides alike.
record_pair() {
  local out=$1 i=$2 kind=$3 flags=$4 base_dir=$5 new_dir=$6 base_args=$7 new_args=$8
  local base=("$base_dir" "$out/${kind}base-$i.data" "$flags" "$base_args")
  local new=("$new_dir" "$out/${kind}new-$i.data" "$flags" "$new_args")
  if ((i % 2)); then
    record_capture "${base[@]}"
    record_capture "${new[@]}"
  else
    record_capture "${new[@]}"
    record_capture "${base[@]}"
  fi
}

# record_sides OUT RUNS BASE_DIR NEW_DIR BASE_ARGS NEW_ARGS PROFILE:
# baseline and candidate runs taking turns: span runs, and profile runs too
# when PROFILE is yes.
record_sides() {
  local out=$1 runs=$2 base_dir=$3 new_dir=$4 base_args=$5 new_args=$6 profile=$7 i
  rm -f "$out"/base-*.data "$out"/new-*.data "$out"/profile-*.data
  for ((i = 1; i <= runs; i++)); do
    record_pair "$out" "$i" "" SPAN_FLAGS "$base_dir" "$new_dir" "$base_args" "$new_args"
    [[ $profile == yes ]] || continue
    record_pair "$out" "$i" profile- PROFILE_FLAGS "$base_dir" "$new_dir" "$base_args" "$new_args"
  done
}

# profiled GATE...: yes when a gate is on a function (func:), which only
# the profile runs can decide.
profiled() {
  local gate
  for gate in "$@"; do
    [[ $gate == func:* ]] && { echo yes; return; }
  done
  echo no
}

# use_pairs RUNS: compare RUNS runs a side pair by pair when there are
# enough of them.
use_pairs() {
  PAIRED=()
  if (($1 >= MIN_PAIRS)); then PAIRED=(--paired); fi
}

# compare KIND OUT GATE...: wprof's comparison of OUT/KINDnew-* against
# OUT/KINDbase-* (KIND empty or profile-; the shell sorts both lists alike,
# so the i-th of each are a pair), its reports in OUT named KIND...;
# returns wprof's exit status.
compare() {
  local kind=$1 out=$2 gate
  shift 2
  local args=()
  for gate in "$@"; do args+=(--fail-if "$gate"); done
  case $kind in
    profile-) args+=(--metric 'func:request.*' --metric 'func:compact.*'
      --flamegraph "$out/diff.svg") ;;
    *) args+=(--metric 'span:request.*' --metric 'process:bench.*') ;;
  esac
  "$WPROF" -R -D "$out/${kind}new-"*.data --baseline "$out/${kind}base-"*.data \
    "${PAIRED[@]}" "${args[@]}" \
    --report "$out/${kind}report.txt" --report-md "$out/${kind}report.md" \
    --metrics "$out/${kind}comparison.json"
}

# compare_sides OUT PROFILE GATE...: the span runs compared with the gates
# but func: ones, the profile runs (PROFILE yes) with the func: ones;
# DIR/report.txt and report.md get both tables. Returns the worse exit
# status (2 over 1 over 0).
compare_sides() {
  local out=$1 profile=$2 gate
  shift 2
  local span_gates=() func_gates=() status=0 profile_status=0
  for gate in "$@"; do
    if [[ $gate == func:* ]]; then func_gates+=("$gate"); else span_gates+=("$gate"); fi
  done
  compare "" "$out" "${span_gates[@]}" || status=$?
  [[ $profile == yes ]] || return "$status"
  compare profile- "$out" "${func_gates[@]}" || profile_status=$?
  for report in report.txt report.md; do
    printf '\n' >>"$out/$report"
    cat "$out/profile-$report" >>"$out/$report"
  done
  ((profile_status > status)) && status=$profile_status
  return "$status"
}

main() {
  local runs=12 out=regress-out base_dir="" new_dir="" base_args="" new_args=""
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
      -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
      *) die "unknown argument: $1 (see --help)" ;;
    esac
  done
  [[ $EUID -eq 0 ]] || die "needs root: recording loads BPF programs"
  command -v "$WPROF" >/dev/null || die "no $WPROF: set WPROF=/path/to/wprof"
  [[ ${#gates[@]} -gt 0 ]] || gates=("${DEFAULT_GATES[@]}")
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  PRIORITY=$(priority)
  use_pairs "$runs"
  base_dir=${base_dir:-$out/build}
  new_dir=${new_dir:-$out/build}
  build_bench "$base_dir"
  build_bench "$new_dir"
  local profile
  profile=$(profiled "${gates[@]}")
  record_sides "$out" "$runs" "$base_dir" "$new_dir" "$base_args" "$new_args" "$profile"
  local status=0
  compare_sides "$out" "$profile" "${gates[@]}" || status=$?
  cat "$out/report.txt"
  return "$status"
}

# Sourced (bench/regress-checks.sh), it only defines the functions.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
