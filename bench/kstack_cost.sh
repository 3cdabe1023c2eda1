#!/usr/bin/env bash
# Kernel stack cost at sched_switch by attach type and depth (issue 10, `-S`).
#
#   bench/kstack_cost.sh [-n ROUNDS] [-l LOOPS]
#
# Runs one wprof per variant at once, each a script on sched_switch that
# counts the kernel stacks of `perf bench sched pipe`'s workers (`@[kstack]`:
# bpf_get_stackid, no frame skipped, so the stack shows every frame the
# kernel unwound, the tracer's included), or only counts switches (the
# baseline of each attach type), around `taskset -c 0 perf bench sched pipe
# -l LOOPS`. Prints per variant the program's bpf_stats ns/run, the stacks
# taken, the cost of a stack (over the counting program of the same attach
# type, per stack taken) and the frames of its most common stack. The variants see the same switches, so
# their differences hold under load (compare within a round).
#
# Environment: WPROF (default target/release/wprof). Needs root and perf.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ROUNDS=3
LOOPS=50000

while [[ $# -gt 0 ]]; do
  case $1 in
    -n) ROUNDS=$2; shift 2 ;;
    -l) LOOPS=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

need_root "loads BPF programs"
need_wprof
need_perf

source "$ROOT/bench/bpf_stats.sh"
enable_bpf_stats

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"; sysctl -q -w kernel.bpf_stats_enabled=$BPF_STATS_BEFORE' EXIT

FILTER='/comm == "sched-pipe"/'
declare -A SCRIPTS=(
  [count-tp_btf]="tp_btf:sched_switch $FILTER { @n = count(); }"
  [count-raw_tp]="rawtracepoint:sched_switch $FILTER { @n = count(); }"
  [count-tracepoint]="tracepoint:sched:sched_switch $FILTER { @n = count(); }"
  [kstack-tp_btf]="tp_btf:sched_switch $FILTER { @s[kstack] = count(); }"
  [kstack-raw_tp]="rawtracepoint:sched_switch $FILTER { @s[kstack] = count(); }"
  [kstack-tracepoint]="tracepoint:sched:sched_switch $FILTER { @s[kstack] = count(); }"
  [kstack8-tp_btf]="tp_btf:sched_switch $FILTER { @s[kstack(8)] = count(); }"
  [kstack4-tp_btf]="tp_btf:sched_switch $FILTER { @s[kstack(4)] = count(); }"
  [kstack1-tp_btf]="tp_btf:sched_switch $FILTER { @s[kstack(1)] = count(); }"
)
NAMES=(count-tp_btf count-raw_tp count-tracepoint kstack-tp_btf kstack-raw_tp
  kstack-tracepoint kstack8-tp_btf kstack4-tp_btf kstack1-tp_btf)

echo "wprof $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'), load average" \
  "$(cut -d' ' -f1-3 /proc/loadavg), $ROUNDS rounds of 'taskset -c 0 perf bench sched pipe -l $LOOPS'"
for round in $(seq "$ROUNDS"); do
  declare -A PIDS=()
  for name in "${NAMES[@]}"; do
    "$WPROF" -e "${SCRIPTS[$name]}" >"$OUT/$name.out" 2>&1 &
    PIDS[$name]=$!
  done
  for name in "${NAMES[@]}"; do
    wait_for_programs "${PIDS[$name]}" 1 || die "$name did not start"
  done
  sleep 1
  taskset -c 0 perf bench sched pipe -l "$LOOPS" >/dev/null
  echo "round $round:"
  declare -A BASE=()
  for name in "${NAMES[@]}"; do
    stats=$(prog_stats "${PIDS[$name]}")
    kill -INT "${PIDS[$name]}"
    wait "${PIDS[$name]}" || true
    # Stacks taken: the counts printed (`@n: N`, or `]: N` after each stack).
    taken=$(awk '/^@n: / || /^\]: / {n += $2} END {print n + 0}' "$OUT/$name.out")
    # The most common stack: the block before the largest count.
    frames=$(awk '/^@s\[/ {n = 0; next} /^\]: / {if ($2 > best) {best = $2; f = n}; next}
                  NF {n++} END {print (f == "" ? "-" : f)}' "$OUT/$name.out")
    type=${name#*-}
    read -r runs ns <<<"$(awk '{r += $2; t += $3} END {print r + 0, t + 0}' <<<"$stats")"
    [[ $name == count-* ]] && BASE[$type]=$(awk -v r="$runs" -v t="$ns" 'BEGIN {print (r ? t / r : 0)}')
    # Per stack: the program's time over its attach type's counting
    # program's, per run, times the runs, over the stacks taken.
    awk -v name="$name" -v frames="$frames" -v r="$runs" -v t="$ns" -v k="$taken" \
        -v base="${BASE[$type]:-0}" -v counting="$([[ $name == count-* ]] && echo 1 || echo 0)" 'BEGIN {
      printf "  %-18s %7d runs %6.0f ns/run %6d taken", name, r, (r ? t / r : 0), k
      if (!counting && k) printf "  %5.0f ns per stack over counting, most common stack %s frames", (t - base * r) / k, frames
      print ""}'
  done
done
