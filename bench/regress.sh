#!/usr/bin/env bash
# Comparison benchmark: how long and how much memory `wprof -R -D new-* --baseline
# base-*` takes on 5 + 5 captures of at least 1 M events each, and whether its memory
# grows with the captures' size. See bench/README.md ("Comparison benchmark").
#
#   bench/regress.sh [-r RUNS] [-m MILLION_EVENTS] [-n ROUNDS]
#
#   -r RUNS   captures per side (default 5)
#   -m N      events per capture, in millions (default 1: at least that
#             many, a short capture is recorded again); the size check also
#             compares captures of N/2 million events
#   -n ROUNDS comparisons timed per size, the median reported (default 3)
#
# Each capture records a span per getppid(2) call of bench/syscall_load.c
# (one thread, paced; its duration calibrated by a first 1 s capture, as a
# busy machine runs it slower): its durations feed every percentile, so the
# comparison's work is per event. Environment: WPROF (default
# target/release/wprof). Needs root, cc and /usr/bin/time.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

RUNS=5
MILLIONS=1
ROUNDS=3
# Calls per second of the paced load: high, yet below the zero-drop rate.
RATE=400000
SCRIPT='span call { tracepoint:syscalls:sys_enter_getppid /pid == cpid/ < > tracepoint:syscalls:sys_exit_getppid /pid == cpid/ }'

while [[ $# -gt 0 ]]; do
  case $1 in
    -r) RUNS=$2; shift 2 ;;
    -m) MILLIONS=$2; shift 2 ;;
    -n) ROUNDS=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

need_root "recording loads BPF programs"
need_wprof
command -v cc >/dev/null || die "cc is missing: it builds bench/syscall_load.c"
[[ -x /usr/bin/time ]] || die "/usr/bin/time is missing (apt-get install time)"

OUT=$ROOT/bench/results/regress-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
cc -O2 -Wall -pthread -o "$OUT/syscall_load" "$ROOT/bench/syscall_load.c"

# events DATA: the events a capture holds, from -I.
events() {
  "$WPROF" -R -D "$1" -I 2>&1 | sed -n 's/^ *events *\([0-9]*\).*/\1/p' | head -n 1
}

# calibrate: events a capture of the paced load gets per second on this
# machine now (a busy machine runs the load slower than RATE).
calibrate() {
  "$WPROF" -e "$SCRIPT" -D "$OUT/calibrate.data" -- "$OUT/syscall_load" 1 1 "$RATE" \
    >>"$OUT/record.log" 2>&1 || die "recording the calibration failed (see $OUT/record.log)"
  events "$OUT/calibrate.data"
}

# record_capture DATA MILLIONS: a capture DATA of at least MILLIONS million
# events. Its duration comes from the calibration; a capture that falls
# short (the machine got busier) is recorded again, longer in proportion.
record_capture() {
  local data=$1 target secs attempt got
  target=$(awk "BEGIN {print int($2 * 1000000)}")
  secs=$(awk "BEGIN {print $target / $PER_SECOND}")
  for ((attempt = 1; attempt <= 4; attempt++)); do
    "$WPROF" -e "$SCRIPT" -D "$data" -- "$OUT/syscall_load" 1 "$secs" "$RATE" \
      >>"$OUT/record.log" 2>&1 || die "recording $data failed (see $OUT/record.log)"
    got=$(events "$data")
    ((got >= target)) && return
    secs=$(awk "BEGIN {print $secs * $target / ($got + 1) * 1.05}")
  done
  die "$data holds $got events after 4 attempts, not $target (see $OUT/record.log)"
}

# record_side PREFIX MILLIONS: RUNS captures PREFIX-I.data of at least
# MILLIONS million events each.
record_side() {
  local i
  for ((i = 1; i <= RUNS; i++)); do
    record_capture "$1-$i.data" "$2"
  done
}

# compare SIZE: times ROUNDS comparisons of the SIZE captures; prints
# `SIZE events wall_s cpu_s max_rss_kib` for the median round (by CPU).
compare() {
  local size=$1 round
  local total=0 data
  for data in "$OUT/$size"-base-*.data "$OUT/$size"-new-*.data; do
    total=$((total + $(events "$data")))
  done
  for ((round = 1; round <= ROUNDS; round++)); do
    /usr/bin/time -f '%e %U %S %M' -o "$OUT/time" \
      "$WPROF" -R -D "$OUT/$size"-new-*.data --baseline "$OUT/$size"-base-*.data \
      --fail-if 'span:call.p99 > +50%' --report "$OUT/$size.txt" \
      --report-md "$OUT/$size.md" --metrics "$OUT/$size.json" 2>>"$OUT/compare.log" ||
      [[ $? -eq 1 ]] || die "the comparison failed (see $OUT/compare.log)"
    awk -v s="$size" -v n="$total" '{print s, n, $1, $2 + $3, $4}' "$OUT/time"
  done | sort -k4 -n | sed -n "$(((ROUNDS + 1) / 2))p"
}

half=$(awk "BEGIN {print $MILLIONS / 2}")
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/summary.txt"
PER_SECOND=$(calibrate)
echo "calibration: $PER_SECOND events per second of load" | tee -a "$OUT/summary.txt"
record_side "$OUT/full-base" "$MILLIONS"
record_side "$OUT/full-new" "$MILLIONS"
record_side "$OUT/half-base" "$half"
record_side "$OUT/half-new" "$half"
{
  echo "size events wall_s cpu_s max_rss_kib"
  compare full
  compare half
} | tee -a "$OUT/raw.tsv" | column -t | tee -a "$OUT/summary.txt"
awk 'NR > 1 {printf "%s: %.2f s CPU per million events\n", $1, $4 / ($2 / 1e6)}' \
  "$OUT/raw.tsv" | tee -a "$OUT/summary.txt"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/summary.txt"
rm -f "$OUT"/*.data
