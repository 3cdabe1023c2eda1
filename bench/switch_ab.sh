#!/usr/bin/env bash
# Per-switch BPF cost of two wprof builds side by side, in steady state.
#
#   bench/switch_ab.sh [-n ROUNDS] [-w SECONDS] [-m SECONDS] A_BINARY B_BINARY [WPROF ARGS...]
#
# Starts `taskset -c 0 perf bench sched pipe` (long), then both builds at
# once (system-wide, WPROF ARGS, default `-S`), waits -w seconds (the
# workload's processes read and their tables loaded), then reads every
# program's bpf_stats of both twice, -m seconds apart: the difference is
# what each build's programs cost on the same context switches, after the
# start-up (no kernel walks of processes not read yet). Prints per build
# and round the busiest program's ns/run (the sched_switch program) and all
# programs' ns per run of it. The builds run concurrently, so the figures
# hold under load when compared within a round.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ROUNDS=3
WARM=6
MEASURE=5

while [[ $# -gt 0 ]]; do
  case $1 in
    -n) ROUNDS=$2; shift 2 ;;
    -w) WARM=$2; shift 2 ;;
    -m) MEASURE=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) break ;;
  esac
done
[[ $# -ge 2 ]] || die "two binaries needed (see --help)"
A=$1 B=$2
shift 2
ARGS=("$@")
[[ ${#ARGS[@]} -gt 0 ]] || ARGS=(-S)
need_root "loads BPF programs"
need_perf

source "$ROOT/bench/bpf_stats.sh"
enable_bpf_stats
OUT=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$OUT"
  sysctl -q -w kernel.bpf_stats_enabled="$BPF_STATS_BEFORE"
}
trap cleanup EXIT

# busiest PID BEFORE AFTER: the busiest program's ns/run over the window,
# and all programs' ns per run of the busiest.
window() {
  join <(sort "$1") <(sort "$2") | awk '{r = $4 - $2; t = $5 - $3; all += t;
    if (t > bt) {bt = t; br = r}} END {printf "%7.0f ns/run (%d runs), all programs %7.0f ns per run",
    (br ? bt / br : 0), br, (br ? all / br : 0)}'
}

echo "load average $(cut -d' ' -f1-3 /proc/loadavg); wprof ${ARGS[*]}; A=$A B=$B"
for round in $(seq "$ROUNDS"); do
  setsid taskset -c 0 perf bench sched pipe -l 100000000 >/dev/null 2>&1 &
  work=$!
  "$A" "${ARGS[@]}" -D "$OUT/a.data" -d 600s >/dev/null 2>"$OUT/a.err" &
  pa=$!
  "$B" "${ARGS[@]}" -D "$OUT/b.data" -d 600s >/dev/null 2>"$OUT/b.err" &
  pb=$!
  PIDS=("$pa" "$pb" "$work")
  sleep "$WARM"
  prog_stats "$pa" >"$OUT/a0"; prog_stats "$pb" >"$OUT/b0"
  sleep "$MEASURE"
  prog_stats "$pa" >"$OUT/a1"; prog_stats "$pb" >"$OUT/b1"
  kill -- -"$work"; kill -INT "$pa" "$pb"
  wait "$pa" "$pb" || true
  wait "$work" 2>/dev/null || true
  echo "round $round: A $(window "$OUT/a0" "$OUT/a1")"
  echo "         B $(window "$OUT/b0" "$OUT/b1")"
done
