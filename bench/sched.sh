#!/usr/bin/env bash
# System-tracking benchmark: the cost of recording the scheduler.
#
#   bench/sched.sh [-n ROUNDS] [-l LOOPS] [-b BUSY_SECONDS]
#
#   -n ROUNDS   alternating rounds of the five configurations (default 5)
#   -l LOOPS    `perf bench sched pipe -l LOOPS` per run (default 200000)
#   -b SECONDS  length of the busy and of the idle capture (default 10)
#
# Each round runs `taskset -c 0 perf bench sched pipe -l LOOPS` six ways, in
# turn: untraced, under `wprof` (default features), under `wprof -S` (plus
# timer and off-CPU stacks, user stacks through the .eh_frame tables), under
# `wprof -S -S unwind=fp` (the same, frame pointers only, issue 12), under
# `wprof -S offcpu=1ms` (off-CPU stacks of blocks of at least 1 ms only,
# issue 11), and under `perf record -e sched:sched_switch -a`, every traced
# run between two untraced ones. The slowdown is the median over rounds of
# the workload's own "Total time" against the mean of the untraced runs on
# either side of it (the host's drift cancels: untraced runs here move 20%
# within minutes). Then: peak RSS of a busy and of an idle capture, and the BPF program
# cost (kernel.bpf_stats_enabled) of the default, `-S`, `-S -S unwind=fp`
# and `-S offcpu=1ms` captures (and the workload's kernel-mode page faults
# per switch, see bpf_cost). Prints issues 10 and 12's table (markdown)
# in one run; see bench/README.md.
#
# Environment: WPROF (default target/release/wprof). Needs root and perf.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ROUNDS=5
LOOPS=200000
BUSY_S=10

while [[ $# -gt 0 ]]; do
  case $1 in
    -n) ROUNDS=$2; shift 2 ;;
    -l) LOOPS=$2; shift 2 ;;
    -b) BUSY_S=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

need_root "recording loads BPF programs"
need_wprof
need_perf
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
      /usr/bin/time -f 'maxrss_kb=%M' -o "$OUT/$name.time" \
        perf record -q -e sched:sched_switch -a -o "$data" -- "${WORKLOAD[@]}" >"$out" 2>>"$LOG"
      record "$name" maxrss_kb "$(sed -n 's/maxrss_kb=//p' "$OUT/$name.time")" ;;
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
CONFIGS=("default" "stacks -S" "stacksfp -S -S unwind=fp" "offcpu -S offcpu=1ms" "perf")
for round in $(seq "$ROUNDS"); do
  for config in "${CONFIGS[@]}"; do
    run none
    # shellcheck disable=SC2086 # the name, then the tracer's arguments
    run $config
  done
  echo "  round $round/$ROUNDS done" >&2
done
run none

# Peak RSS on a long busy capture (the workload loops for BUSY_S seconds) and
# on an idle one (no workload: whatever else runs on the machine).
capture_rss() {
  local name=$1; shift
  /usr/bin/time -f 'maxrss_kb=%M' -o "$OUT/$name.time" "$WPROF" -D "$OUT/$name.data" "$@" \
    >/dev/null 2>>"$LOG"
  record "$name" maxrss_kb "$(sed -n 's/maxrss_kb=//p' "$OUT/$name.time")"
  record "$name" drops "$("$WPROF" -R -I -D "$OUT/$name.data" 2>>"$LOG" |
    awk '$1 == "drops" {print $2; exit}')"
  rm -f "$OUT/$name.data"
}
capture_rss busy -c "taskset -c 0 perf bench sched pipe -l $((LOOPS * BUSY_S * 9 / 10))"
capture_rss idle -d "${BUSY_S}s"

# BPF program cost of the default capture (stable under load, unlike the
# slowdown): every program's run_time_ns / run_cnt from /proc/PID/fdinfo with
# kernel.bpf_stats_enabled=1, read while wprof still runs, after one workload.
source "$ROOT/bench/bpf_stats.sh"
enable_bpf_stats
# $1 = name, the rest = wprof's arguments: programs-NAME.txt (id, runs, ns)
# and the capture's switch count in cost-NAME.switches.
# Kernel-mode page faults of the workload (x86 `exceptions` tracepoints): a
# user stack walk that follows a bogus frame pointer takes one (an exception
# inside the BPF program), counted per switch beside the programs' cost.
FAULT_EVENT_DIR=/sys/kernel/tracing/events/exceptions/page_fault_kernel
bpf_cost() {
  local name=$1; shift
  "$WPROF" "$@" -D "$OUT/cost.data" -d 120s >/dev/null 2>>"$LOG" &
  local cost_pid=$!
  # Recording has begun once the trackers' programs run (start-up runs two
  # test programs of its own first; a debug build on a busy machine takes
  # seconds to get there).
  wait_for_programs "$cost_pid" 6 || true
  if [[ -d $FAULT_EVENT_DIR ]]; then
    perf stat -x, -e exceptions:page_fault_kernel -o "$OUT/faults-$name.csv" -- \
      "${WORKLOAD[@]}" >/dev/null 2>>"$LOG"
  else
    "${WORKLOAD[@]}" >/dev/null 2>>"$LOG"
  fi
  prog_stats "$cost_pid" | sort -k3,3nr >"$OUT/programs-$name.txt"
  kill -INT "$cost_pid"
  wait "$cost_pid" || true
  "$WPROF" -R -I -D "$OUT/cost.data" 2>>"$LOG" | awk '$2 == "switch" {print $4; exit}' \
    >"$OUT/cost-$name.switches"
  rm -f "$OUT/cost.data"
}
bpf_cost default
bpf_cost stacks -S
bpf_cost stacksfp -S -S unwind=fp
bpf_cost offcpu -S offcpu=1ms

median() { awk -F'\t' -v c="$1" -v m="$2" '$1 == c && $2 == m {print $3}' "$RAW" | median_of_lines; }
# Each run of $1 against the mean of the untraced runs before and after it:
# the median of those ratios.
slowdown() {
  awk -F'\t' -v c="$1" '$2 == "seconds" {n[++runs] = $1; t[runs] = $3}
    END {for (i = 2; i < runs; i++) if (n[i] == c) print t[i] / ((t[i - 1] + t[i + 1]) / 2)}' "$RAW" |
    median_of_lines
}
calc() { awk "BEGIN {printf \"$1\", $2}"; }
mb() { calc %.1f "$(median "$1" maxrss_kb) / 1024"; }

{
  echo "wprof $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg), $ROUNDS rounds of '${WORKLOAD[*]}'"
  echo
  echo '| | slowdown | drops | B/switch data | B/switch Perfetto | launch → recording | peak RSS |'
  echo '|---|---|---|---|---|---|---|'
  for c in default stacks stacksfp offcpu perf; do
    label="wprof default"
    [[ $c == stacks ]] && label="wprof \`-S\`"
    [[ $c == stacksfp ]] && label="wprof \`-S -S unwind=fp\`"
    [[ $c == offcpu ]] && label="wprof \`-S offcpu=1ms\`"
    [[ $c == perf ]] && label="\`perf record -e sched:sched_switch -a\`"
    ratio=$(calc %.2f "$(slowdown "$c")")
    if [[ $c == perf ]]; then
      echo "| $label | ${ratio}× | | | | | $(mb perf) MB |"
      continue
    fi
    sw=$(median "$c" switches)
    echo "| $label | ${ratio}× | $(median "$c" drops)" \
      "| $(calc %.1f "$(median "$c" data_bytes) / $sw")" \
      "| $(calc %.1f "$(median "$c" trace_bytes) / $sw")" \
      "| $(calc %.1f "$(median "$c" launch_to_recording_ms)") ms | $(mb "$c") MB |"
  done
  echo "| ${BUSY_S} s busy capture | | $(median busy drops) | | | | $(mb busy) MB |"
  echo "| ${BUSY_S} s idle capture | | $(median idle drops) | | | | $(mb idle) MB |"
  echo
  echo "untraced: $(median none seconds) s; switches per wprof run: $(median default switches)"
  for c in default stacks stacksfp offcpu; do
    awk -v sw="$(cat "$OUT/cost-$c.switches")" -v c="$c" '{n += $3; r[NR] = $2; t[NR] = $3}
      END {printf "%s capture BPF cost (bpf_stats): %.0f ns per switch over all programs", c, (sw > 0 ? n / sw : 0);
           printf " (%d switches); busiest programs (runs, ns/run):", sw
           for (i = 1; i <= NR && i <= 4; i++) printf " %d %.0f;", r[i], t[i] / r[i]; print ""}' \
      "$OUT/programs-$c.txt"
    if [[ -f $OUT/faults-$c.csv ]]; then
      awk -F, -v sw="$(cat "$OUT/cost-$c.switches")" -v c="$c" '$3 ~ /page_fault_kernel/ {
        printf "%s capture: %.2f kernel page faults per switch\n", c, (sw > 0 ? $1 / sw : 0)}' \
        "$OUT/faults-$c.csv"
    fi
  done
} | tee "$OUT/summary.txt"
