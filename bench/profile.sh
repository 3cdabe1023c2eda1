#!/usr/bin/env bash
# Profile rendering benchmark: how fast a busy 10 s `-S` capture renders to folded
# stacks, a flame graph SVG and pprof, and whether memory grows with the capture.
# See bench/README.md ("Profile benchmark").
#
#   bench/profile.sh [-t SECONDS] [-n ROUNDS] [-D CAPTURE]
#
#   -t SECONDS  length of the busy capture (default 10)
#   -n ROUNDS   rendering rounds per output, alternating outputs (default 3)
#   -D CAPTURE  render this capture instead of recording one (then no root is needed)
#
# Environment: WPROF (default target/release/wprof). Recording needs root and perf.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SECONDS_BUSY=10
ROUNDS=3
CAPTURE=

while [[ $# -gt 0 ]]; do
  case $1 in
    -t) SECONDS_BUSY=$2; shift 2 ;;
    -n) ROUNDS=$2; shift 2 ;;
    -D) CAPTURE=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

need_wprof
[[ -x /usr/bin/time ]] || die "/usr/bin/time is missing (apt-get install time): it measures peak RSS"

OUT=$ROOT/bench/results/profile-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
LOG=$OUT/stderr.log
SUMMARY=$OUT/summary.txt
: >"$LOG"

say() { echo "$*" | tee -a "$SUMMARY"; }
calc() { awk "BEGIN {printf \"$1\", $2}"; }

# A busy machine: two switch-heavy pipe pairs and two CPU spinners, for the
# whole capture, while wprof records every task with timer and off-CPU stacks.
record_busy() {
  [[ $EUID -eq 0 ]] || die "recording needs root (or give a capture with -D)"
  need_perf "it loads the machine"
  # Each load in its own process group: `perf bench sched pipe` forks its
  # partner, which must stop with it.
  local groups=()
  for _ in 1 2; do
    setsid perf bench sched pipe -l 100000000 >/dev/null 2>&1 & groups+=($!)
    setsid bash -c 'while :; do :; done' & groups+=($!)
  done
  "$WPROF" -S -d "${SECONDS_BUSY}s" -D "$CAPTURE" >>"$LOG" 2>&1 || true
  for group in "${groups[@]}"; do kill -- "-$group" 2>/dev/null || true; done
  wait "${groups[@]}" 2>/dev/null || true
  [[ -s $CAPTURE ]] || die "no capture was written (see $LOG)"
}

if [[ -z $CAPTURE ]]; then
  CAPTURE=$OUT/busy.data
  record_busy
fi

# What the capture holds, from -I: all events, timer samples, switches.
INFO=$("$WPROF" -R -I -D "$CAPTURE" 2>>"$LOG") || die "cannot read $CAPTURE"
EVENTS=$(awk '/^events /{print $2; exit}' <<<"$INFO")
count_of() { awk -v name="$1" '$2 == name && $3 ~ /instant|span/ {print $4; exit}' <<<"$INFO"; }
TIMER=$(count_of timer)
SWITCHES=$(count_of switch)
SIZE=$(stat -c %s "$CAPTURE")
say "capture: $CAPTURE ($(calc '%.1f' "$SIZE / 1e6") MB), $EVENTS events: $TIMER timer samples, $SWITCHES switches"
say "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# One rendering: render NAME ARGS...; appends "name wall user sys rss_kb" to raw.tsv.
render() {
  local name=$1; shift
  local start end
  start=$(date +%s%N)
  /usr/bin/time -f '%U %S %M' -o "$OUT/$name.time" "$WPROF" -R -D "$CAPTURE" "$@" \
    >/dev/null 2>>"$LOG" || die "wprof -R $* failed (see $LOG)"
  end=$(date +%s%N)
  printf '%s\t%s\t%s\n' "$name" "$(calc '%.3f' "($end - $start) / 1e9")" "$(cat "$OUT/$name.time")" \
    >>"$OUT/raw.tsv"
}

: >"$OUT/raw.tsv"
for ((round = 1; round <= ROUNDS; round++)); do
  render folded --folded "$OUT/wall.folded"
  render svg --flamegraph "$OUT/wall.svg"
  render pprof --pprof "$OUT/wall.pb.gz"
  render report --report "$OUT/report.txt" --top 0
  render metrics --metrics "$OUT/metrics.json"
done
# Memory against capture length: the first 20% and 50% of the capture, and all of it.
for fraction in 20 50 100; do
  ms=$((SECONDS_BUSY * 10 * fraction))
  render "window-$fraction" --folded /dev/null -d "${ms}ms"
done

# Medians per output: wall s, cpu s (user + sys), peak RSS MB.
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
say ""
say "$(printf '%-10s %9s %9s %12s %14s %9s' output wall_s cpu_s "M events/s" "M samples/s" rss_MB)"
SAMPLES=$((TIMER + SWITCHES))
for name in folded svg pprof report metrics; do
  wall=$(awk -v n="$name" '$1 == n {print $2}' "$OUT/raw.tsv" | median)
  cpu=$(awk -v n="$name" '$1 == n {print $3 + $4}' "$OUT/raw.tsv" | median)
  rss=$(awk -v n="$name" '$1 == n {print $5}' "$OUT/raw.tsv" | median)
  say "$(printf '%-10s %9.3f %9.3f %12.2f %14.2f %9.1f' "$name" "$wall" "$cpu" \
    "$(calc '%.4f' "$EVENTS / $cpu / 1e6")" "$(calc '%.4f' "$SAMPLES / $cpu / 1e6")" \
    "$(calc '%.4f' "$rss / 1024")")"
done
say ""
say "peak RSS rendering folded stacks of part of the capture:"
for fraction in 20 50 100; do
  rss=$(awk -v n="window-$fraction" '$1 == n {print $5}' "$OUT/raw.tsv")
  cpu=$(awk -v n="window-$fraction" '$1 == n {print $3 + $4}' "$OUT/raw.tsv")
  say "  first ${fraction}%: $(calc '%.1f' "$rss / 1024") MB, ${cpu} s CPU"
done
say ""
say "(M events/s: every event of the capture read, over CPU time; M samples/s: timer"
say " samples and switches (off-CPU intervals) turned into profile samples, over CPU time)"
echo "results in $OUT"
