#!/usr/bin/env bash
# Unwinding benchmark (issue 12): what a user stack costs with the .eh_frame
# tables and with frame pointers only, and what the tables take in memory.
#
#   bench/unwind.sh [-n ROUNDS] [-s SECONDS]
#
#   -n ROUNDS   alternating rounds of the four configurations (default 3)
#   -s SECONDS  workload time per run (default 3)
#
# tests/data/unwind/chain.c (main → a → b → c, spinning in c) is built with
# frame pointers (`-O2 -fno-omit-frame-pointer`) and without them (`-O2
# -fomit-frame-pointer`). Each round samples each build under `wprof -S
# timer=997hz -n NAME` with the tables (the default) and with `-S
# unwind=fp`, pinned to CPU 1. For each run: the timer program's
# run_time_ns / run_cnt (kernel.bpf_stats_enabled; its runs on other tasks
# stop at the task filter and dilute this), its run time per recorded sample
# of the workload, and the share of samples that reach `main`. Table memory:
# the capture's peak rows (8 bytes each) per MiB of code covered, for the
# workload with libc, and for a large binary (bpftrace and libLLVM, `bpftrace
# --version` in a loop). Prints a markdown table; see bench/README.md.
#
# Environment: WPROF (default target/release/wprof). Needs root and cc.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ROUNDS=3
SECONDS_PER_RUN=3
PERF_EVENT_PROG=7 # BPF_PROG_TYPE_PERF_EVENT: the timer sampler

while [[ $# -gt 0 ]]; do
  case $1 in
    -n) ROUNDS=$2; shift 2 ;;
    -s) SECONDS_PER_RUN=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

need_root "recording loads BPF programs"
need_wprof
command -v cc >/dev/null || die "cc is missing"
source "$ROOT/bench/bpf_stats.sh"

OUT=$ROOT/bench/results/unwind-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
RAW=$OUT/raw.tsv
LOG=$OUT/stderr.log
: >"$RAW"
: >"$LOG"
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$RAW"; }

SRC=$ROOT/tests/data/unwind
cc -O2 -g -fno-omit-frame-pointer -I"$SRC" -o "$OUT/chain_fp" "$SRC/chain.c"
cc -O2 -g -fomit-frame-pointer -I"$SRC" -o "$OUT/chain_nofp" "$SRC/chain.c"
enable_bpf_stats

# The rows of `-I` that count user stacks and tables: `label value`.
stack_rows() { "$WPROF" -R -I -D "$1" 2>>"$LOG" | awk '$1 == "user" {on = 1} $1 == "drops" {on = 0}
  on {sub(/^user stacks/, ""); n = $NF; $NF = ""; gsub(/^ +| +$/, ""); print $0 "\t" n}'; }

# One run: $1 = binary name, $2 = tables or fp.
run() {
  local binary=$1 mode=$2 name="$1-$2" data=$OUT/run.data json=$OUT/run.json
  local args=(-S timer=997hz -n "$binary")
  [[ $mode == fp ]] && args+=(-S unwind=fp)
  "$WPROF" "${args[@]}" -D "$data" -d 120s >/dev/null 2>>"$LOG" &
  local pid=$!
  wait_for_programs "$pid" 6 || die "$name: wprof did not start recording"
  taskset -c 1 "$OUT/$binary" $((SECONDS_PER_RUN * 1000)) >/dev/null
  prog_stats "$pid" "$PERF_EVENT_PROG" >"$OUT/timer.txt"
  kill -INT "$pid"
  wait "$pid" || true
  "$WPROF" -R -D "$data" -J "$json" 2>>"$LOG"
  local samples main
  samples=$(grep -c '"t":"timer"' "$json" || true)
  main=$(python3 - "$json" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
stacks = {l["id"]: l["frames"] for l in lines if l["type"] == "stack"}
timer = [l for l in lines if l["type"] == "event" and l.get("t") == "timer" and "stack" in l]
main = sum(any(f.startswith("[U] main+") for f in stacks[e["stack"]]) for e in timer)
print(f"{100 * main / max(len(timer), 1):.1f}")
PY
)
  awk -v n="$name" -v s="$samples" '{r += $2; t += $3}
    END {printf "%s\truns\t%d\n%s\tns_per_run\t%.0f\n%s\tns_per_sample\t%.0f\n",
         n, r, n, (r ? t / r : 0), n, (s ? t / s : 0)}' "$OUT/timer.txt" >>"$RAW"
  record "$name" samples "$samples"
  record "$name" reach_main_pct "$main"
  stack_rows "$data" | sed "s/^/$name\t/" >>"$RAW"
  rm -f "$data" "$json"
}

echo "unwind.sh: $ROUNDS rounds, results in $OUT" >&2
for round in $(seq "$ROUNDS"); do
  for binary in chain_fp chain_nofp; do
    run "$binary" tables
    run "$binary" fp
  done
  echo "  round $round/$ROUNDS done" >&2
done

# Table memory for a large binary: bpftrace, whose libLLVM holds ~100 MiB
# of code, sampled while it prints its version in a loop.
if command -v bpftrace >/dev/null; then
  "$WPROF" -S timer=997hz -n bpftrace -D "$OUT/big.data" \
    -c "sh -c 'for i in \$(seq 40); do bpftrace --version; done'" >/dev/null 2>>"$LOG" || true
  stack_rows "$OUT/big.data" | sed "s/^/big\t/" >>"$RAW"
fi
rm -f "$OUT/big.data"

median() {
  awk -F'\t' -v c="$1" -v m="$2" '$1 == c && $2 == m {print $3}' "$RAW" | sort -g |
    awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2];
         else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
per_mib() { # KiB of rows per MiB of code covered
  awk -v r="$(median "$1" 'unwind table rows (peak)')" -v b="$(median "$1" 'code bytes covered (at the peak)')" \
    'BEGIN {if (b > 0) printf "%.0f KiB per MiB (%.1f MiB of code, %d rows)", r * 8 / 1024 / (b / 1048576), b / 1048576, r; else print "none"}'
}

{
  echo "wprof $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg), $ROUNDS rounds of ${SECONDS_PER_RUN} s at 997 Hz"
  echo
  echo '| binary | unwinder | timer program ns/run | ns per sample | samples | reach `main` |'
  echo '|---|---|---|---|---|---|'
  for binary in chain_fp chain_nofp; do
    for mode in tables fp; do
      n="$binary-$mode"
      echo "| $binary | $mode | $(median "$n" ns_per_run) | $(median "$n" ns_per_sample)" \
        "| $(median "$n" samples) | $(median "$n" reach_main_pct)% |"
    done
  done
  echo
  echo "table memory, chain + libc: $(per_mib chain_nofp-tables)"
  echo "table memory, bpftrace + libLLVM + libc: $(per_mib big)"
} | tee "$OUT/summary.txt"
