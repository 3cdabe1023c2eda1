#!/usr/bin/env bash
# Issue 8's statistical checks, repeated: the CI recipe (examples/ci/regress.sh)
# run REPS times on each of three pairs of builds, with its default gates
# (span:request.p50 and .p99 > +5%, func:compact.total > +5%). Each
# repetition records one baseline (span and profile runs, as the recipe)
# and compares each check's candidate with it, all runs taking turns:
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
#   -n RUNS        captures per side (default 5, issue 8's check: compared
#                  unpaired; from 6 on pair by pair, as the recipe does)
#   -o DIR         scratch directory (default bench/results/regress-checks)
#   --requests N   requests per benchmark run (default 10000)
#   CHECK          aa, slow, fast (default: all three)
#
# Prints one line per repetition and check (check, repetition, wprof's exit
# status, the failing gates, the gated metrics' verdicts with their changes
# and p),
# then per check how many repetitions came out as expected and in how many
# every gated metric was `~`; the load average before and after. Raw
# lines go to DIR/results.tsv, each comparison's JSON to
# DIR/kept/CHECK-I/. Needs root and cc; WPROF as for regress.sh.
set -euo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../examples/ci/regress.sh
source "$BENCH/../examples/ci/regress.sh"

GATED=(span:request.p50 span:request.p99 func:compact.total)

# common.sh's usage, in a subshell: this script keeps regress.sh's die and WPROF.
print_usage() {
  # shellcheck source=/dev/null
  (source "$BENCH/common.sh" && usage)
}

# verdicts OUT: each gated metric's verdict symbol, change and p in
# OUT/comparison.json (func: ones in OUT/profile-comparison.json), e.g. span:request.p50=+(+12.4%,p=0.008).
verdicts() {
  local out=$1 metric line=""
  local query='.metrics[$m] | "\(.verdict.symbol // "none")(\(if .change then
    (if .change > 0 then "+" else "" end) + (.change * 1000 | round / 10 | tostring) + "%"
    else "-" end),p=\(.verdict.p // "-"
    | if type == "number" then . * 1000 | round / 1000 else . end))"'
  for metric in "${GATED[@]}"; do
    local json=$out/comparison.json
    [[ $metric == func:* ]] && json=$out/profile-comparison.json
    line+="$metric=$(jq -r --arg m "$metric" "$query" "$json") "
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

# candidate_args CHECK REQUESTS: the benchmark's arguments on CHECK's
# candidate side.
candidate_args() {
  case $1 in
    aa) echo "-n $2" ;;
    slow) echo "-n $2 --slow" ;;
    fast) echo "-n $2 --fast" ;;
  esac
}

# record_repetition OUT RUNS REQUESTS CHECK...: one baseline (OUT/base) and
# one candidate per check (OUT/CHECK), RUNS span and RUNS profile runs each,
# all of them taking turns run by run, so that a machine getting busier or
# quieter touches every side alike. Each check's directory links the
# baseline's captures. The baseline runs first in odd rounds and last in
# even ones (ABBA, as the recipe).
record_repetition() {
  local out=$1 runs=$2 requests=$3 r check
  shift 3
  rm -rf "$out/base" "${@/#/$out/}"
  mkdir -p "$out/base" "${@/#/$out/}"
  for ((r = 1; r <= runs; r++)); do
    for kind in "" profile-; do
      local kind_flags=SPAN_FLAGS
      [[ $kind == profile- ]] && kind_flags=PROFILE_FLAGS
      ((r % 2)) && record_capture "$out/build" "$out/base/${kind}base-$r.data" "$kind_flags" "-n $requests"
      for check in "$@"; do
        record_capture "$out/build" "$out/$check/${kind}new-$r.data" "$kind_flags" \
          "$(candidate_args "$check" "$requests")"
        ln -sf "$out/base/${kind}base-$r.data" "$out/$check/${kind}base-$r.data"
      done
      ((r % 2)) || record_capture "$out/build" "$out/base/${kind}base-$r.data" "$kind_flags" "-n $requests"
    done
  done
}

# judge CHECK I OUT: CHECK's comparison in OUT/CHECK; prints its result line.
judge() {
  local check=$1 i=$2 dir=$3/$1 status=0 failing ok=no
  compare_sides "$dir" yes "${DEFAULT_GATES[@]}" 2>"$dir/stderr.log" || status=$?
  failing=$(failing_gates "$dir/stderr.log")
  expected "$check" "$status" "$failing" && ok=yes
  printf '%s\t%d\t%d\t%s\t%s\t%s\n' "$check" "$i" "$status" "$ok" \
    "${failing:--}" "$(verdicts "$dir")"
}

run_checks() {
  local reps=20 runs=5 out="$BENCH/results/regress-checks" requests=10000
  local checks=()
  while [[ $# -gt 0 ]]; do
    case $1 in
      -r) reps=$2; shift 2 ;;
      -n) runs=$2; shift 2 ;;
      -o) out=$2; shift 2 ;;
      --requests) requests=$2; shift 2 ;;
      aa | slow | fast) checks+=("$1"); shift ;;
      -h | --help) print_usage; exit 0 ;;
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
  use_pairs "$runs"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  : >"$out/results.tsv"
  for ((i = 1; i <= reps; i++)); do
    record_repetition "$out" "$runs" "$requests" "${checks[@]}"
    for check in "${checks[@]}"; do
      judge "$check" "$i" "$out" | tee -a "$out/results.tsv"
      mkdir -p "$out/kept/$check-$i"
      cp "$out/$check/"*comparison.json "$out/kept/$check-$i/"
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
  rm -rf "$out/base" "${checks[@]/#/$out/}"
}

run_checks "$@"
