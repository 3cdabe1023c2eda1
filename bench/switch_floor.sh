#!/usr/bin/env bash
# Where a traced context switch's cost goes, layer by layer: the slowdown of
# `taskset -c 0 perf bench sched pipe` under wprof running only
#   empty     an empty `tp_btf:sched_switch` program (the kernel's dispatch)
#   clock     one clock read per switch, nothing sent (what a timestamp costs)
#   record    one record of one field per switch (the ring and the clock)
#   sched     the built-in `sched` tracker alone
#   default   every default tracker
# and, for reference, `perf record -e sched:sched_switch -a`, each run
# between two untraced runs and compared with them; then each layer's BPF
# time per switch (bpf_stats).
#
#   bench/switch_floor.sh [-n ROUNDS] [-l LOOPS]
#
# Environment: WPROF (default target/release/wprof). Needs root and perf.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ROUNDS=7
LOOPS=200000

while [[ $# -gt 0 ]]; do
  case $1 in
    -n) ROUNDS=$2; shift 2 ;;
    -l) LOOPS=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

need_root "recording loads BPF programs"
need_wprof
need_perf

OUT=$ROOT/bench/results/floor-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
LOG=$OUT/stderr.log
WORKLOAD=(taskset -c 0 perf bench sched pipe -l "$LOOPS")

LAYERS=(empty clock record sched default)
layer_args() {
  case $1 in
    empty) echo "-f none -e tp_btf:sched_switch{}" ;;
    clock) echo "-f none -e tp_btf:sched_switch/nsecs==0/{}" ;;
    record) echo "-f none -e tp_btf:sched_switch<a=1>" ;;
    sched) echo "-f none -f sched" ;;
    default) echo "" ;;
  esac
}

total_time() { sed -n 's/.*Total time: *\([0-9.]*\).*/\1/p' | head -n 1; }

run() {
  local name=$1
  case $name in
    none) "${WORKLOAD[@]}" 2>>"$LOG" | total_time ;;
    perf) perf record -q -e sched:sched_switch -a -o "$OUT/perf.data" -- \
            "${WORKLOAD[@]}" 2>>"$LOG" | total_time ;;
    *) # shellcheck disable=SC2046
       "$WPROF" $(layer_args "$name") -D "$OUT/$name.data" -c "${WORKLOAD[*]}" 2>>"$LOG" |
         total_time ;;
  esac
}

# An untraced run before every traced one (and one at the end): each traced
# run is compared with the untraced runs on either side of it, so the host's
# drift (untraced runs here move 20% within minutes) cancels.
for round in $(seq "$ROUNDS"); do
  for name in "${LAYERS[@]}" perf; do
    printf '%s\t%s\n' none "$(run none)" >>"$OUT/raw.tsv"
    printf '%s\t%s\n' "$name" "$(run "$name")" >>"$OUT/raw.tsv"
  done
  echo "  round $round/$ROUNDS done" >&2
done
printf '%s\t%s\n' none "$(run none)" >>"$OUT/raw.tsv"

# The median over rounds of each run of $1 divided by the mean of the
# untraced runs just before and after it.
slowdown() {
  awk -F'\t' -v c="$1" '{name[NR] = $1; t[NR] = $2}
    END {for (i = 2; i < NR; i++) if (name[i] == c) print t[i] / ((t[i - 1] + t[i + 1]) / 2)}' \
    "$OUT/raw.tsv" | median_of_lines
}

# BPF time per switch of each layer, with kernel.bpf_stats_enabled=1.
source "$ROOT/bench/bpf_stats.sh"
enable_bpf_stats
bpf_ns_per_switch() {
  local pid
  # shellcheck disable=SC2046
  "$WPROF" $(layer_args "$1") -D "$OUT/cost.data" -d 120s >/dev/null 2>>"$LOG" &
  pid=$!
  wait_for_programs "$pid" 1 || true
  sleep 0.2
  local before after
  before=$(prog_stats "$pid" | sort -n)
  "${WORKLOAD[@]}" >/dev/null 2>>"$LOG"
  after=$(prog_stats "$pid" | sort -n)
  kill -INT "$pid"
  wait "$pid" || true
  join <(echo "$before") <(echo "$after") |
    awk -v switches=$((2 * LOOPS)) '{ns += $5 - $3} END {printf "%.0f", ns / switches}'
}

base=$(awk -F'\t' '$1 == "none" {print $2}' "$OUT/raw.tsv" | median_of_lines)
spread=$(awk -F'\t' '$1 == "none" {print $2}' "$OUT/raw.tsv" | sort -g | sed -n '1p;$p' | paste -sd-)
{
  echo "wprof $(git -C "$ROOT" rev-parse --short HEAD), $(nproc) CPUs, $ROUNDS rounds of '${WORKLOAD[*]}', untraced ${base} s (${spread} s)"
  echo
  echo "| layer | slowdown | BPF ns per switch (bpf_stats) |"
  echo "|---|---|---|"
  for name in "${LAYERS[@]}"; do
    printf '| %s | %.3f× | %s |\n' "$name" "$(slowdown "$name")" "$(bpf_ns_per_switch "$name")"
  done
  printf '| perf record -e sched:sched_switch -a | %.3f× | |\n' "$(slowdown perf)"
} | tee "$OUT/summary.txt"
rm -f "$OUT"/*.data
