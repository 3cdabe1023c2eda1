#!/usr/bin/env bash
# Compare wprof with bpftrace on the same program, alternating runs (A B A B ...).
# See bench/README.md for what each number means. Needs root.
#
#   bench/compare.sh [-n ROUNDS] [-e EVENT_ROUNDS] [-s LOAD_LOOPS] [--bpftrace-only]
#
# Environment: WPROF (default target/release/wprof), BPFTRACE (default: from PATH).
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

BPFTRACE=${BPFTRACE:-$(command -v bpftrace || true)}
ROUNDS=10
EVENT_ROUNDS=3
LOAD_LOOPS=50000
TOOLS=(bpftrace wprof)

while [[ $# -gt 0 ]]; do
  case $1 in
    -n) ROUNDS=$2; shift 2 ;;
    -e) EVENT_ROUNDS=$2; shift 2 ;;
    -s) LOAD_LOOPS=$2; shift 2 ;;
    --bpftrace-only) TOOLS=(bpftrace); shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

need_root "BPF programs and kernel.bpf_stats_enabled"
[[ -n $BPFTRACE && -x $BPFTRACE ]] || die "bpftrace not found (apt-get install bpftrace, or set BPFTRACE)"
if [[ " ${TOOLS[*]} " == *" wprof "* ]]; then
  need_wprof "(or pass --bpftrace-only)"
fi
need_perf "it generates the context-switch load"
command -v cc >/dev/null || die "cc is missing: it builds bench/launch.c"

OUT=$ROOT/bench/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
RAW=$OUT/raw.tsv
LOG=$OUT/stderr.log
: >"$RAW"
cc -O2 -Wall -o "$OUT/launch" "$ROOT/bench/launch.c"

# The measured program: every tool runs exactly these.
SCHED='tracepoint:sched:sched_switch { @[comm] = count(); }'
START_PROG="BEGIN { printf(\"ready\\n\"); } $SCHED"
# Stack values as map keys (bpftrace keeps a stack id from a stack trace map;
# a user stack's key also holds the thread id).
KSTACK_KEYS='tracepoint:sched:sched_switch { @[kstack] = count(); }'
USTACK_KEYS='tracepoint:sched:sched_switch { @[ustack] = count(); }'
ready() { echo "BEGIN { printf(\"ready\\n\"); } $1"; }
# A line printed at every switch: handing each to the reader (waking it
# costs an irq_work, a self-IPI) falls mostly outside the program's own time,
# so this one is measured as the pinned workload's slowdown.
PRINTF_EACH='tracepoint:sched:sched_switch { printf("%d %s\n", pid, comm); }'
# The shipped tool with the most events under this load that both tools run here:
# syscount counts every syscall by id and by comm. (The shipped tools keyed by
# stacks cannot run under both: biostacks needs kprobes, and bpftrace's clang
# fails on tcpdrop's headers; KSTACK_KEYS/USTACK_KEYS measure that pattern.)
TOOLS_DIR=${TOOLS_DIR:-/usr/sbin}
BUSIEST_TOOL=$TOOLS_DIR/syscount.bt
BUSIEST_READY="Counting syscalls"
# The largest shipped tool, compiled without running (--emit-elf: both dry-run).
LARGEST_TOOL=$(ls -S "$TOOLS_DIR"/*.bt 2>/dev/null | head -n 1)
EXIT_PROG="$SCHED interval:ms:200 { printf(\"bye\\n\"); exit(); }"

tool_bin() { if [[ $1 == wprof ]]; then echo "$WPROF"; else echo "$BPFTRACE"; fi; }
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$RAW"; }
field() { sed -n "s/.*$1=\\([0-9.]*\\).*/\\1/p" <<<"$2"; }

fail_with_log() { echo "--- last lines of $LOG:" >&2; tail -n 15 "$LOG" >&2; die "$1"; }

# start -> BEGIN output, SIGINT -> exit, peak RSS; then exit() -> process exit.
run_launch_round() {
  local tool=$1 round=$2 bin line
  bin=$(tool_bin "$tool")
  line=$("$OUT/launch" start ready -- "$bin" -e "$START_PROG" 2>>"$LOG") ||
    fail_with_log "$tool failed to start (round $round)"
  record "$tool" "$round" start_ms "$(field start_ms "$line")"
  record "$tool" "$round" rss_kb "$(field maxrss_kb "$line")"
  record "$tool" "$round" sigint_exit_ms "$(field exit_ms "$line")"
  record "$tool" "$round" sigints "$(field sigints "$line")"
  line=$("$OUT/launch" exit bye -- "$bin" -e "$EXIT_PROG" 2>>"$LOG") ||
    fail_with_log "$tool failed the exit() run (round $round)"
  record "$tool" "$round" exit_ms "$(field exit_ms "$line")"
}

# The BPF program of $pid with the most runs (the sched_switch one): "run_time_ns run_cnt insns".
busiest_prog() {
  local pid=$1 f best="" best_cnt=-1 cnt
  for f in /proc/"$pid"/fdinfo/*; do
    grep -q '^prog_type:' "$f" 2>/dev/null || continue
    cnt=$(awk '/^run_cnt:/ {print $2}' "$f")
    [[ -n $cnt ]] || continue
    if ((cnt > best_cnt)); then best_cnt=$cnt; best=$f; fi
  done
  [[ -n $best ]] || return 1
  awk '/^run_time_ns:/ {t=$2} /^run_cnt:/ {c=$2} /^verified_insns:/ {i=$2} END {print t, c, i}' "$best"
}

# wait_ready OUT TOOL MARKER PID...: waits until OUT (the output of TOOL,
# the last PID) holds MARKER; else kills every PID (the tools started) and dies.
wait_ready() {
  local out=$1 tool=$2 marker=$3 i
  shift 3
  for ((i = 0; i < 300; i++)); do
    grep -q "$marker" "$out" 2>/dev/null && return
    kill -0 "${@: -1}" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null || true
  fail_with_log "$tool never printed $marker (or exited first)"
}

# Seconds of the pinned context-switch load.
pinned_load_seconds() {
  taskset -c 0 perf bench sched pipe -l "$LOAD_LOOPS" 2>>"$LOG" |
    sed -n 's/.*Total time: *\([0-9.]*\).*/\1/p'
}

# The pinned load untraced, then under each tool printing at every switch,
# each traced run between two untraced ones (printf_seconds, in run order).
run_printf_round() {
  local round=$1 tool bin out pid
  for tool in "${TOOLS[@]}"; do
    record none "$round" printf_seconds "$(pinned_load_seconds)"
    bin=$(tool_bin "$tool")
    out=$OUT/printf-$tool.out
    "$bin" -e "$(ready "$PRINTF_EACH")" >"$out" 2>>"$LOG" &
    pid=$!
    wait_ready "$out" "$tool" ready "$pid"
    record "$tool" "$round" printf_seconds "$(pinned_load_seconds)"
    kill -INT "$pid"
    wait "$pid" || true
    rm -f "$out"
  done
}

# Each tool's printf_seconds against the mean of the untraced runs on either
# side: one printf_slowdown per run.
printf_slowdowns() {
  awk -F'\t' '$3 == "printf_seconds" {n[++runs] = $1; t[runs] = $4}
    END {for (i = 2; i < runs; i++) if (n[i] != "none")
      printf "%s\t0\tprintf_slowdown\t%.3f\n", n[i], t[i] / ((t[i - 1] + t[i + 1]) / 2)}' "$RAW"
}

# Per-event cost of the busiest program each tool loads for ARGS (metrics
# prefixed $2), from kernel.bpf_stats_enabled. The tools run at the same time,
# so their programs see the same events and stacks (run apart, the same
# program's cost moved by 15% between runs); the one attached first runs first
# on the tracepoint, so the order alternates between rounds.
run_event_round() {
  local round=$1 prefix=$2 marker=$3 tool bin out stats i ns cnt insns
  local -a order pids
  shift 3
  order=("${TOOLS[@]}")
  ((round % 2 == 0 && ${#order[@]} == 2)) && order=("${order[1]}" "${order[0]}")
  for tool in "${order[@]}"; do
    bin=$(tool_bin "$tool")
    out=$OUT/event-$tool-$prefix$round.out
    "$bin" "$@" >"$out" 2>>"$LOG" &
    pids+=($!)
    wait_ready "$out" "$tool (event round $round)" "$marker" "${pids[@]}"
  done
  perf bench sched pipe -l "$LOAD_LOOPS" >/dev/null 2>>"$LOG"
  for i in "${!order[@]}"; do
    tool=${order[$i]}
    stats=$(busiest_prog "${pids[$i]}") || { kill -KILL "${pids[@]}"; die "$tool: no BPF program fd with run_cnt in /proc/${pids[$i]}/fdinfo"; }
    read -r ns cnt insns <<<"$stats"
    ((cnt > 0)) || die "$tool: its busiest program never ran (is kernel.bpf_stats_enabled on?)"
    record "$tool" "$round" "${prefix}ns_per_event" "$(awk -v t="$ns" -v c="$cnt" 'BEGIN {printf "%.1f", t / c}')"
    record "$tool" "$round" "${prefix}events" "$cnt"
    record "$tool" "$round" "${prefix}verified_insns" "${insns:-0}"
  done
  kill -INT "${pids[@]}"
  wait "${pids[@]}" || true
}

median() {
  sort -g | awk '{a[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
med() { awk -F'\t' -v t="$1" -v m="$2" '$1 == t && $3 == m {print $4}' "$RAW" | median; }

old_stats=$(sysctl -n kernel.bpf_stats_enabled)
trap 'sysctl -q -w kernel.bpf_stats_enabled=$old_stats' EXIT

echo "results in $OUT; tools: ${TOOLS[*]}; $ROUNDS rounds (alternating)" >&2
for ((r = 1; r <= ROUNDS; r++)); do
  for t in "${TOOLS[@]}"; do run_launch_round "$t" "$r"; done
  echo "  start/exit round $r/$ROUNDS done" >&2
done
sysctl -q -w kernel.bpf_stats_enabled=1
for ((r = 1; r <= EVENT_ROUNDS; r++)); do
  run_event_round "$r" "" ready -e "$START_PROG"
  run_event_round "$r" kstack_ ready -e "$(ready "$KSTACK_KEYS")"
  run_event_round "$r" ustack_ ready -e "$(ready "$USTACK_KEYS")"
  [[ -f $BUSIEST_TOOL ]] && run_event_round "$r" tool_ "$BUSIEST_READY" "$BUSIEST_TOOL"
  echo "  per-event round $r/$EVENT_ROUNDS done" >&2
done
sysctl -q -w kernel.bpf_stats_enabled="$old_stats"
for ((r = 1; r <= EVENT_ROUNDS; r++)); do run_printf_round "$r"; done
record none 0 printf_seconds "$(pinned_load_seconds)"
printf_slowdowns >>"$RAW"
echo "  printf rounds done" >&2

# Compile time of the largest shipped tool: parse, check, generate, write an ELF
# object; nothing is loaded (both tools' --emit-elf).
run_compile_round() {
  local tool=$1 round=$2 bin start end
  bin=$(tool_bin "$tool")
  start=$(date +%s%N)
  "$bin" --emit-elf "$OUT/compile-$tool.o" "$LARGEST_TOOL" >/dev/null 2>>"$LOG" ||
    fail_with_log "$tool cannot compile $LARGEST_TOOL"
  end=$(date +%s%N)
  record "$tool" "$round" compile_ms "$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", (b - a) / 1e6}')"
}
if [[ -n $LARGEST_TOOL ]]; then
  for ((r = 1; r <= ROUNDS; r++)); do
    for t in "${TOOLS[@]}"; do run_compile_round "$t" "$r"; done
  done
  echo "  compile rounds of $(basename "$LARGEST_TOOL") done" >&2
fi

# Sizes. wprof: the release binary, as built and stripped. bpftrace: its binary and
# the installed size of its package plus the LLVM/clang/BCC libraries it depends on.
ldd_bytes() {
  ldd "$1" 2>/dev/null | awk '/=> \// {print $3} /^\t\// {print $1}' | xargs -r readlink -f | sort -u |
    xargs -r stat -L -c %s | awk '{s += $1} END {print s + 0}'
}
mb() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
bt_pkgs="bpftrace libbpfcc libllvm14 libclang1-14"
bt_installed_kb=$(dpkg-query -W -f '${Installed-Size}\n' $bt_pkgs 2>/dev/null | awk '{s += $1} END {print s + 0}')
size_row() { printf '%-38s %14s %14s %9s\n' "$1" "$2" "$3" "$4"; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f", a / b}'; }
row() {
  local label=$1 metric=$2 scale=${3:-1} b w
  b=$(med bpftrace "$metric")
  w=$(med wprof "$metric")
  [[ $b == - ]] || b=$(awk -v v="$b" -v s="$scale" 'BEGIN {printf "%.1f", v / s}')
  [[ $w == - ]] || w=$(awk -v v="$w" -v s="$scale" 'BEGIN {printf "%.1f", v / s}')
  size_row "$label" "$b" "$w" "$(ratio "$w" "$b")"
}

{
  echo
  echo "program: $SCHED"
  echo "medians of $ROUNDS alternating rounds (per-event: $EVENT_ROUNDS rounds of 'perf bench sched pipe -l $LOAD_LOOPS', both tools attached)"
  size_row "metric" "bpftrace" "wprof" "wprof/bt"
  size_row "------" "--------" "-----" "--------"
  row "start -> probes attached (ms)" start_ms
  row "peak RSS (MB)" rss_kb 1024
  row "exit() -> process exit (ms)" exit_ms
  row "SIGINT -> process exit (ms)" sigint_exit_ms
  row "SIGINTs sent until exit (5 s apart)" sigints
  row "sched_switch cost (ns/event)" ns_per_event
  row "sched_switch prog verified insns" verified_insns
  row "@[kstack] = count() (ns/event)" kstack_ns_per_event
  row "@[ustack] = count() (ns/event)" ustack_ns_per_event
  row "printf at every switch (slowdown, x)" printf_slowdown
  row "$(basename "$BUSIEST_TOOL") busiest prog (ns/event)" tool_ns_per_event
  row "compile $(basename "${LARGEST_TOOL:-none}") (ms)" compile_ms
  bt_bin=$(stat -c %s "$BPFTRACE")
  if [[ -x $WPROF ]]; then
    w_bin=$(stat -c %s "$WPROF")
    strip -o "$OUT/wprof.stripped" "$WPROF"
    w_strip=$(stat -c %s "$OUT/wprof.stripped")
    w_ldd=$(ldd_bytes "$WPROF")
  else
    w_bin=- w_strip=- w_ldd=-
  fi
  mbr() { if [[ $1 == - ]]; then echo -; else mb "$1"; fi; }
  size_row "binary (MB, as installed/built)" "$(mb "$bt_bin")" "$(mbr "$w_bin")" "$(ratio "$(mbr "$w_bin")" "$(mb "$bt_bin")")"
  size_row "binary stripped (MB)" "$(mb "$bt_bin")" "$(mbr "$w_strip")" "$(ratio "$(mbr "$w_strip")" "$(mb "$bt_bin")")"
  bt_ldd=$(ldd_bytes "$BPFTRACE")
  size_row "binary + shared libs (MB)" "$(mb $((bt_bin + bt_ldd)))" \
    "$(if [[ $w_bin == - ]]; then echo -; else mb $((w_bin + w_ldd)); fi)" \
    "$(if [[ $w_bin == - ]]; then echo -; else ratio "$(mb $((w_bin + w_ldd)))" "$(mb $((bt_bin + bt_ldd)))"; fi)"
  bt_inst=$(awk -v k="$bt_installed_kb" 'BEGIN {printf "%.1f", k / 1024}')
  size_row "installed size (MB)" "$bt_inst" "$(mbr "$w_strip")" "$(ratio "$(mbr "$w_strip")" "$bt_inst")"
  echo "(installed size: bpftrace = Debian Installed-Size of $bt_pkgs; wprof = stripped binary)"
} | tee "$OUT/summary.txt"
