#!/usr/bin/env bash
# The per-system-call cost of enabling `raw_syscalls:sys_exit` (issue 11).
#
#   bench/syscall_cost.sh [-n ROUNDS]
#
# `-S offcpu=DUR` attaches a program to `sys_exit`; any program there makes
# the kernel send every task's system calls through its slow path. This
# measures that cost apart from the programs' own: bench/syscall_cost.c (the
# cheapest of 15 rounds of 200 000 getppid calls, thread CPU time per call,
# pinned to CPU 0) untraced, under an empty `tp_btf:sys_exit` program, under
# the default capture and under `-S offcpu=1ms`, in alternating rounds; it
# prints each configuration's median and its difference to untraced.
# `perf bench sched pipe` makes two system calls per context switch.
#
# Environment: WPROF (default target/release/wprof). Needs root and cc.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ROUNDS=5

while [[ $# -gt 0 ]]; do
  case $1 in
    -n) ROUNDS=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

need_root "recording loads BPF programs"
need_wprof
command -v cc >/dev/null || die "cc is missing: it builds bench/syscall_cost.c"

OUT=$ROOT/bench/results/syscall-cost-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
RAW=$OUT/raw.tsv
LOG=$OUT/stderr.log
: >"$RAW"
: >"$LOG"
cc -O2 -Wall -o "$OUT/syscall_cost" "$ROOT/bench/syscall_cost.c"
LOAD="taskset -c 0 $OUT/syscall_cost"

# $1 = configuration name, the rest = wprof's arguments (none: untraced).
run() {
  local name=$1; shift
  local ns
  if [[ $name == none ]]; then
    ns=$($LOAD)
  else
    ns=$("$WPROF" "$@" -c "$LOAD" 2>>"$LOG" | grep -E '^[0-9]+\.[0-9]+$' | head -n 1)
  fi
  [[ -n $ns ]] || { tail -n 5 "$LOG" >&2; die "$name: no result"; }
  printf '%s\t%s\n' "$name" "$ns" >>"$RAW"
}

echo "syscall_cost.sh: $ROUNDS rounds, results in $OUT" >&2
for _ in $(seq "$ROUNDS"); do
  run none
  run empty_sys_exit -e 'tp_btf:sys_exit { }'
  run default -D "$OUT/capture.data"
  run offcpu -D "$OUT/capture.data" -S offcpu=1ms
done
rm -f "$OUT/capture.data"

median() {
  awk -F'\t' -v c="$1" '$1 == c {print $2}' "$RAW" | sort -g |
    awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
{
  echo "wprof $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg), $ROUNDS rounds"
  echo
  echo '| | ns per getppid call (CPU) | over untraced |'
  echo '|---|---|---|'
  base=$(median none)
  for c in none empty_sys_exit default offcpu; do
    m=$(median "$c")
    echo "| $c | $m | $(awk "BEGIN {printf \"%+.1f\", $m - $base}") |"
  done
} | tee "$OUT/summary.txt"
