#!/usr/bin/env bash
# System-tracking benchmark: the cost of recording the scheduler.
#
#   bench/sched.sh [-n ROUNDS] [-l LOOPS] [-b BUSY_SECONDS]
#
#   -n ROUNDS   alternating rounds of the four configurations (default 5)
#   -l LOOPS    `perf bench sched pipe -l LOOPS` per run (default 200000)
#   -b SECONDS  length of the busy capture whose peak RSS is measured (default 10)
#
# Each round runs `taskset -c 0 perf bench sched pipe -l LOOPS` four ways, in
# turn: untraced, under `wprof` (default features), under `wprof -S` (plus
# timer and off-CPU stacks), and under `perf record -e sched:sched_switch -a`.
# The slowdown is the workload's own "Total time" against the untraced median
# of the same run. See bench/README.md ("System-tracking benchmark").
#
# Environment: WPROF (default target/release/wprof). Needs root and perf.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WPROF=${WPROF:-$ROOT/target/release/wprof}
ROUNDS=5
LOOPS=200000
BUSY_S=10

die() { echo "sched.sh: $*" >&2; exit 1; }

while [[ $# -gt 0 ]]; do
  case $1 in
    -n) ROUNDS=$2; shift 2 ;;
    -l) LOOPS=$2; shift 2 ;;
    -b) BUSY_S=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

[[ $EUID -eq 0 ]] || die "needs root (recording loads BPF programs)"
[[ -x $WPROF ]] || die "$WPROF is missing: build it with 'cargo build --release'"
command -v perf >/dev/null || die "perf is missing (apt-get install linux-perf)"
[[ -x /usr/bin/time ]] || die "/usr/bin/time is missing (apt-get install time)"

OUT=$ROOT/bench/results/sched-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
RAW=$OUT/raw.tsv
LOG=$OUT/stderr.log
: >"$RAW"
: >"$LOG"

WORKLOAD=(taskset -c 0 perf bench sched pipe -l "$LOOPS")

record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$RAW"; }
total_time() { sed -n 's/.*Total time: *\([0-9.]*\).*/\1/p' "$1" | head -n 1; }
now_ns() { date +%s%N; }

# One traced run. $1 = configuration name, the rest = the tracer's arguments
# before the workload. Records the workload's time, and for wprof the
# capture's counts, sizes, launch-to-recording time and peak RSS.
run() {
  local name=$1; shift
  local out=$OUT/$name.out data=$OUT/$name.data trace=$OUT/$name.pb
  case $name in
    none)
      "${WORKLOAD[@]}" >"$out" 2>>"$LOG" ;;
    perf)
      perf record -q -e sched:sched_switch -a -o "$data" -- "${WORKLOAD[@]}" >"$out" 2>>"$LOG" ;;
    *)
      local launch
      launch=$(now_ns)
      /usr/bin/time -f 'maxrss_kb=%M' -o "$OUT/$name.time" \
        "$WPROF" "$@" -D "$data" -c "${WORKLOAD[*]}" >"$out" 2>>"$LOG"
      "$WPROF" -R -D "$data" -T "$trace" 2>>"$LOG"
      local info switches events drops start
      info=$("$WPROF" -R -I -D "$data" 2>>"$LOG")
      printf '%s\n' "$info" >"$OUT/$name.info"
      switches=$(awk '$2 == "switch" {print $4; exit}' <<<"$info")
      events=$(awk '$1 == "events" {print $2; exit}' <<<"$info")
      drops=$(awk '$1 == "drops" {print $2; exit}' <<<"$info")
      # The header line only: wprof stops on the closed pipe after it.
      start=$( ("$WPROF" -R -D "$data" -J - 2>/dev/null || true) | head -n 1 |
        sed -n 's/.*"start_realtime_ns":\([0-9]*\).*/\1/p')
      record "$name" switches "${switches:-0}"
      record "$name" events "${events:-0}"
      record "$name" drops "${drops:-0}"
      record "$name" data_bytes "$(stat -c %s "$data")"
      record "$name" trace_bytes "$(stat -c %s "$trace")"
      [[ -n $start ]] && record "$name" launch_to_recording_ms \
        "$(awk "BEGIN {print ($start - $launch) / 1e6}")"
      record "$name" maxrss_kb "$(sed -n 's/maxrss_kb=//p' "$OUT/$name.time")"
      ;;
  esac
  local t
  t=$(total_time "$out")
  [[ -n $t ]] || { tail -n 20 "$LOG" >&2; die "$name: no 'Total time' in $out"; }
  record "$name" seconds "$t"
}

echo "sched.sh: $ROUNDS rounds of '${WORKLOAD[*]}', results in $OUT" >&2
for round in $(seq "$ROUNDS"); do
  run none
  run default
  run stacks -S
  run perf
  echo "  round $round/$ROUNDS done" >&2
done

# Peak RSS on a long busy capture: the workload loops for BUSY_S seconds.
busy_loops=$((LOOPS * BUSY_S * 9 / 10))
/usr/bin/time -f 'maxrss_kb=%M' -o "$OUT/busy.time" "$WPROF" -D "$OUT/busy.data" \
  -c "taskset -c 0 perf bench sched pipe -l $busy_loops" >/dev/null 2>>"$LOG"
record busy maxrss_kb "$(sed -n 's/maxrss_kb=//p' "$OUT/busy.time")"
record busy drops "$("$WPROF" -R -I -D "$OUT/busy.data" 2>>"$LOG" |
  awk '$1 == "drops" {print $2; exit}')"

median() {
  awk -F'\t' -v c="$1" -v m="$2" '$1 == c && $2 == m {print $3}' "$RAW" | sort -g |
    awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2];
         else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

{
  base=$(median none seconds)
  printf '%-8s %9s %7s %11s %7s %10s %10s %9s %8s\n' config seconds ratio "switches/s" drops \
    "B/sw data" "B/sw pb" "launch ms" "RSS MB"
  for c in none default stacks perf; do
    s=$(median "$c" seconds)
    sw=$(median "$c" switches)
    printf '%-8s %9.3f %7.2f' "$c" "$s" "$(awk "BEGIN {print $s / $base}")"
    if [[ $c == default || $c == stacks ]]; then
      printf ' %11.0f %7s %10.1f %10.1f %9.1f %8.1f\n' "$(awk "BEGIN {print $sw / $s}")" \
        "$(median "$c" drops)" \
        "$(awk "BEGIN {print $(median "$c" data_bytes) / $sw}")" \
        "$(awk "BEGIN {print $(median "$c" trace_bytes) / $sw}")" \
        "$(median "$c" launch_to_recording_ms)" \
        "$(awk "BEGIN {print $(median "$c" maxrss_kb) / 1024}")"
    else
      printf '\n'
    fi
  done
  printf 'busy %ss capture: peak RSS %.1f MB, drops %s\n' "$BUSY_S" \
    "$(awk "BEGIN {print $(median busy maxrss_kb) / 1024}")" "$(median busy drops)"
} | tee "$OUT/summary.txt"
