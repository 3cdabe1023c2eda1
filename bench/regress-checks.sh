#!/usr/bin/env bash
# Issue 8's statistical checks, repeated: the CI recipe (examples/ci/regress.sh)
# run REPS times on each of three pairs of builds, with its default gates
# (span:request.p50 and .p99 > +5%, func:compact.total > +5%):
#
#   aa    baseline and candidate are the same build: every repetition should
#         pass (exit 0) and mark the gated metrics `~` (false alarms ≤ 1/20)
#   slow  the candidate runs with --slow (request 15% longer, compact 10%
#         more CPU): every repetition should exit 1 with all three gates failing
#   fast  the candidate runs with --fast (request 15% shorter): should pass
#
#   bench/regress-checks.sh [-r REPS] [-n RUNS] [-o DIR] [--requests N] [CHECK...]
#
#   -r REPS        repetitions of each check (default 20)
#   -n RUNS        captures per side (default 5)
#   -o DIR         scratch directory (default bench/results/regress-checks)
#   --requests N   requests per benchmark run (default 10000)
#   CHECK          aa, slow, fast (default: all three)
#
# Prints one line per repetition (check, repetition, wprof's exit status,
# the failing gates, the gated metrics' verdicts with their changes and p;
# the checks take turns),
# then per check how many repetitions came out as expected and in how many
# every gated metric was `~`; the load average before and after. Raw
# lines go to DIR/results.tsv. Needs root and cc; WPROF as for regress.sh.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../examples/ci/regress.sh
source "$HERE/../examples/ci/regress.sh"

GATED=(span:request.p50 span:request.p99 func:compact.total)

# verdicts OUT: each gated metric's verdict symbol, change and p in
# OUT/comparison.json, e.g. span:request.p50=+(+12.4%,p=0.008).
verdicts() {
  local out=$1 metric line=""
  local query='.metrics[$m] | "\(.verdict.symbol // "none")(\(if .change then
    (if .change > 0 then "+" else "" end) + (.change * 1000 | round / 10 | tostring) + "%"
    else "-" end),p=\(.verdict.p // "-"
    | if type == "number" then . * 1000 | round / 1000 else . end))"'
  for metric in "${GATED[@]}"; do
    line+="$metric=$(jq -r --arg m "$metric" "$query" "$out/comparison.json") "
  done
  echo "${line% }"
}

# failing_gates LOG: the expressions of the gates wprof reported as failing.
failing_gates() {
  sed -n "s/^wprof: FAIL  --fail-if '\(.*\)':.*/\1/p" "$1" | paste -sd, -
}

# expected CHECK STATUS FAILING: whether a repetition came out as it should.
expected() {
  local check=$1 status=$2 failing=$3
  case $check in
    aa | fast) [[ $status -eq 0 ]] ;;
    slow) [[ $status -eq 1 && $(tr ',' '\n' <<<"$failing" | grep -c .) -eq ${#GATED[@]} ]] ;;
  esac
}

# repetition CHECK I OUT RUNS REQUESTS: one recording and comparison; prints
# its result line.
repetition() {
  local check=$1 i=$2 out=$3 runs=$4 requests=$5 new_args="-n $requests"
  case $check in
    slow) new_args+=" --slow" ;;
    fast) new_args+=" --fast" ;;
  esac
  rm -f "$out"/base-*.data "$out"/new-*.data
  record_sides "$out" "$runs" "$out/build" "$out/build" "-n $requests" "$new_args"
  local status=0
  compare_sides "$out" "${DEFAULT_GATES[@]}" 2>"$out/stderr.log" || status=$?
  local failing
  failing=$(failing_gates "$out/stderr.log")
  local ok=no
  expected "$check" "$status" "$failing" && ok=yes
  printf '%s\t%d\t%d\t%s\t%s\t%s\n' "$check" "$i" "$status" "$ok" \
    "${failing:--}" "$(verdicts "$out")"
}

run_checks() {
  local reps=20 runs=5 out="$HERE/results/regress-checks" requests=10000
  local checks=()
  while [[ $# -gt 0 ]]; do
    case $1 in
      -r) reps=$2; shift 2 ;;
      -n) runs=$2; shift 2 ;;
      -o) out=$2; shift 2 ;;
      --requests) requests=$2; shift 2 ;;
      aa | slow | fast) checks+=("$1"); shift ;;
      -h | --help) sed -n '2,24p' "$0"; exit 0 ;;
      *) die "unknown argument: $1 (see --help)" ;;
    esac
  done
  [[ ${#checks[@]} -gt 0 ]] || checks=(aa slow fast)
  [[ $EUID -eq 0 ]] || die "needs root: recording loads BPF programs"
  command -v "$WPROF" >/dev/null || die "no $WPROF: set WPROF=/path/to/wprof"
  command -v jq >/dev/null || die "needs jq"
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  build_bench "$out/build"
  PRIORITY=$(priority)
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  : >"$out/results.tsv"
  # The checks take turns, so that a machine getting busier or quieter
  # touches every check alike.
  for ((i = 1; i <= reps; i++)); do
    for check in "${checks[@]}"; do
      repetition "$check" "$i" "$out" "$runs" "$requests" | tee -a "$out/results.tsv"
    done
  done
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  for check in "${checks[@]}"; do
    local good
    good=$(awk -F'\t' -v c="$check" '$1 == c && $4 == "yes"' "$out/results.tsv" | wc -l)
    local quiet
    quiet=$(awk -F'\t' -v c="$check" '$1 == c && $6 !~ /=[+-]/' "$out/results.tsv" | wc -l)
    echo "$check: $good of $reps repetitions as expected; gated metrics all \`~\` in $quiet"
  done
  rm -f "$out"/base-*.data "$out"/new-*.data "$out"/*.data.log
}

run_checks "$@"
