#!/usr/bin/env bash
# Capture benchmark: how fast wprof records, how small its files are, how fast it
# replays. See bench/README.md ("Capture benchmark") for what each number means.
#
#   bench/capture.sh [-t SECONDS] [-n ROUNDS] [-m MILLION_EVENTS]
#
#   -t SECONDS  length of each capture-throughput trial (default 2)
#   -n ROUNDS   replay rounds, alternating the two capture sizes (default 5)
#   -m N        the large replay capture holds at least N million events (default 4;
#               the small one always holds at least 1 million)
#
# Environment: WPROF (default target/release/wprof). Needs root and cc.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

TRIAL_S=2
ROUNDS=5
BIG_M=4
THREADS=2
# Zero-drop search: bisection steps, then repeats that must all be drop-free.
SEARCH_STEPS=6
CONFIRM=3
MALLOC_CALLS=300000

while [[ $# -gt 0 ]]; do
  case $1 in
    -t) TRIAL_S=$2; shift 2 ;;
    -n) ROUNDS=$2; shift 2 ;;
    -m) BIG_M=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

need_root "recording loads BPF programs"
need_wprof
command -v cc >/dev/null || die "cc is missing: it builds bench/syscall_load.c and bench/malloc_load.c"
[[ -x /usr/bin/time ]] || die "/usr/bin/time is missing (apt-get install time): it measures peak RSS"

OUT=$ROOT/bench/results/capture-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
RAW=$OUT/raw.tsv
LOG=$OUT/stderr.log
: >"$RAW"
: >"$LOG"
cc -O2 -Wall -pthread -o "$OUT/syscall_load" "$ROOT/bench/syscall_load.c"
# Frame pointers: the malloc stacks must unwind through every level.
cc -O2 -Wall -fno-omit-frame-pointer -o "$OUT/malloc_load" "$ROOT/bench/malloc_load.c"

SYSCALL_PROG='tracepoint:syscalls:sys_enter_getppid /pid == cpid/ < pid >'
MALLOC_PROG='uprobe:libc:malloc /pid == cpid/ < stack >'
# The built-in trackers are off (-f none): these captures measure a script's
# own events, one per call, which is what "kept = calls" checks
# (bench/sched.sh measures the trackers).
TRACKERS=(-f none)

record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$RAW"; }
field() { sed -n "s/.*\\b$1=\\([0-9.]*\\).*/\\1/p" <<<"$2" | head -n 1; }
fail_with_log() { echo "--- last lines of $LOG:" >&2; tail -n 15 "$LOG" >&2; die "$1"; }
calc() { awk "BEGIN {printf \"$1\", $2}"; }

# Summary facts of a capture, from `wprof -R -I`, into S_KEPT S_RB (ring buffer
# full) S_SL (stack lost) S_SE (unmatched span end) S_DAMAGE ("none" or "DAMAGED").
# (Results go to globals, not stdout: a failure inside $(...) would go unnoticed.)
summary() {
  local info
  info=$("$WPROF" -R -I -D "$1" 2>>"$LOG") || fail_with_log "wprof -R -I cannot read $1"
  read -r S_KEPT S_RB S_SL S_SE S_DAMAGE <<<"$(awk '
    /^events / {kept = $2}
    /^damage / {damage = ($2 == "none") ? "none" : "DAMAGED"}
    /^ +ring buffer full / {rb = $NF}
    /^ +stack lost / {sl = $NF}
    /^ +span end without a start / {se = $NF}
    END {print kept + 0, rb + 0, sl + 0, se + 0, damage == "" ? "DAMAGED" : damage}
  ' <<<"$info")"
}

# One recording of the getppid load: capture_trial NAME RATE SECONDS (RATE 0 =
# unlimited). Keeps $OUT/NAME.data; sets T_CALLS (getppid calls made), T_CPU
# (wprof's own CPU seconds), T_RSS (wprof's peak RSS, KB) and the S_* of summary.
capture_trial() {
  local name=$1 rate=$2 secs=$3 data=$OUT/$1.data line total_cpu
  rm -f "$data"
  /usr/bin/time -f 'tcpu=%U+%S rss=%M' -o "$OUT/$name.time" \
    "$WPROF" "${TRACKERS[@]}" -e "$SYSCALL_PROG" -D "$data" -- "$OUT/syscall_load" "$THREADS" "$secs" "$rate" \
    >"$OUT/$name.out" 2>>"$LOG" || fail_with_log "wprof failed to record ($name)"
  line=$(grep '^calls=' "$OUT/$name.out") || fail_with_log "syscall_load printed nothing ($name)"
  # wprof's own CPU: the rusage of wprof and its waited child, minus the child's own.
  total_cpu=$(sed -n 's/.*tcpu=\([0-9.+]*\).*/\1/p' "$OUT/$name.time" | awk -F+ '{print $1 + $2}')
  T_CALLS=$(field calls "$line")
  T_CPU=$(calc %.3f "$total_cpu - $(field cpu "$line")")
  T_RSS=$(sed -n 's/.*rss=\([0-9]*\).*/\1/p' "$OUT/$name.time")
  summary "$data"
}

median() {
  sort -g | awk '{a[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
vals() { awk -F'\t' -v n="$1" -v m="$2" '$1 == n && $2 == m {print $3}' "$RAW"; }
med() { vals "$1" "$2" | median; }
# (max - min) / median, in percent: how noisy the rounds were.
spread() { vals "$1" "$2" | sort -g | awk '{a[NR] = $1} END {m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; if (m > 0) printf "%.0f%%", 100 * (a[NR] - a[1]) / m; else print "-"}'; }
load_avg() { cut -d' ' -f1-3 /proc/loadavg; }

echo "results in $OUT" >&2
LOAD_BEFORE=$(load_avg)

# ---------------------------------------------------------------- 1. throughput
echo "1/3 capture throughput ($THREADS threads of getppid, ${TRIAL_S} s trials)" >&2
base=$("$OUT/syscall_load" "$THREADS" 1)
BASE_RATE=$(field rate "$base")

capture_trial unlimited 0 "$TRIAL_S"
u_calls=$T_CALLS u_kept=$S_KEPT u_rb=$S_RB u_cpu=$T_CPU
U_RATE=$(calc %.0f "$u_calls / $TRIAL_S")
U_KEPT_RATE=$(calc %.0f "$u_kept / $TRIAL_S")
echo "  unlimited: $U_RATE calls/s, $u_kept kept, $u_rb dropped" >&2

# A rate passes when the capture holds every call and counts no drop.
trial_ok() {
  capture_trial "$1" "$2" "$TRIAL_S"
  echo "  $2/s requested: $T_CALLS calls, $S_KEPT kept, $S_RB dropped" >&2
  [[ $S_RB -eq 0 && $S_KEPT -eq $T_CALLS && $S_DAMAGE == none ]]
}
lo=0 hi=$U_RATE
if ((u_rb == 0)); then
  lo=$U_RATE   # the load cannot go faster than the recorder keeps up with
else
  for ((i = 0; i < SEARCH_STEPS; i++)); do
    mid=$(((lo + hi) / 2))
    if trial_ok search "$mid"; then lo=$mid; else hi=$mid; fi
  done
fi
# Confirm: every repeat drop-free, else back off by 10% (at most 5 times).
ZERO_RATE=0
for ((attempt = 0; attempt < 5 && lo > 0; attempt++)); do
  good=1
  for ((i = 0; i < CONFIRM; i++)); do trial_ok confirm "$lo" || { good=0; break; }; done
  if ((good)); then ZERO_RATE=$lo; break; fi
  lo=$((lo * 9 / 10))
done
((ZERO_RATE > 0)) || die "no rate was drop-free (see $OUT/*.out)"
# The last clean confirm run is the zero-drop capture.
mv "$OUT/confirm.data" "$OUT/zero.data"
z_kept=$S_KEPT z_cpu=$T_CPU z_rss=$T_RSS
ZERO_CPU_US=$(calc %.2f "$z_cpu * 1e6 / ($z_kept > 0 ? $z_kept : 1)")
U_CPU_US=$(calc %.2f "$u_cpu * 1e6 / ($u_kept > 0 ? $u_kept : 1)")

# Beyond the zero-drop rate: drops per reason, and the file must stay valid.
# Valid = no damage, kept + dropped = calls, and a full NDJSON replay succeeds
# with one event line per kept event. Sets DROP_ROW.
drop_row() {
  local name=$1 rate=$2 lines valid=no
  capture_trial "$name" "$rate" "$TRIAL_S"
  lines=$("$WPROF" -R -J - -D "$OUT/$name.data" 2>>"$LOG" | grep -c '"type":"event"') ||
    fail_with_log "NDJSON replay of $name failed"
  [[ $S_DAMAGE == none && $((S_KEPT + S_RB + S_SL + S_SE)) -eq $T_CALLS && $lines -eq $S_KEPT ]] && valid=yes
  DROP_ROW="$T_CALLS $S_KEPT $S_RB $S_SL $S_SE $valid $(calc %.1f "100 * ($S_RB + $S_SL + $S_SE) / ($T_CALLS > 0 ? $T_CALLS : 1)") $(calc %.1f "$T_RSS / 1024")"
}
drop_row double $((ZERO_RATE * 2))
D2=$DROP_ROW
drop_row flood 0
DU=$DROP_ROW

# ------------------------------------------------------------ 2. bytes per event
echo "2/3 bytes per event" >&2
# getppid: the zero-drop capture; stacks: malloc from 16 call paths.
"$WPROF" -R -T "$OUT/zero.pb" -D "$OUT/zero.data" 2>>"$LOG" || fail_with_log "Perfetto replay of zero.data failed"
"$WPROF" "${TRACKERS[@]}" -e "$MALLOC_PROG" -D "$OUT/malloc.data" -- "$OUT/malloc_load" "$MALLOC_CALLS" \
  >"$OUT/malloc.out" 2>>"$LOG" || fail_with_log "wprof failed to record malloc stacks"
"$WPROF" -R -T "$OUT/malloc.pb" -D "$OUT/malloc.data" 2>>"$LOG" || fail_with_log "Perfetto replay of malloc.data failed"
summary "$OUT/malloc.data"
m_kept=$S_KEPT m_rb=$S_RB m_sl=$S_SL
M_STACKS=$("$WPROF" -R -I -D "$OUT/malloc.data" | awk '/^stacks .* used of / {print $2}')
size() { stat -c %s "$1"; }
per() { calc %.2f "$1 / ($2 > 0 ? $2 : 1)"; }

# --------------------------------------------------------------- 3. replay speed
echo "3/3 replay speed ($ROUNDS alternating rounds)" >&2
# Captures of >= 1 M and >= BIG_M M events, recorded at 90% of the zero-drop
# rate so that they hold every call: the same load, only longer.
PACE=$((ZERO_RATE * 9 / 10))
make_capture() {
  local name=$1 want=$2 secs attempt
  secs=$(calc %.2f "1.02 * $want / $PACE")
  for ((attempt = 0; attempt < 3; attempt++)); do
    capture_trial "$name" "$PACE" "$secs"
    if ((S_KEPT >= want)); then
      record "$name" record_rss_kb "$T_RSS"
      record "$name" events "$S_KEPT"
      record "$name" dropped "$S_RB"
      return
    fi
    secs=$(calc %.2f "$secs * 1.1 * $want / ($S_KEPT > 0 ? $S_KEPT : 1)")
  done
  die "could not record $want events for $name (got $S_KEPT)"
}
make_capture small 1000000
SMALL_N=$S_KEPT
make_capture big $((BIG_M * 1000000))
BIG_N=$S_KEPT

# One replay: replay NAME OUTPUT (perfetto-file, perfetto-null, ndjson-file, ndjson-null).
replay() {
  local name=$1 output=$2 target flag
  case $output in
    perfetto-*) flag=-T ;;
    ndjson-*) flag=-J ;;
  esac
  case $output in
    *-file) target=$OUT/replay.$output; rm -f "$target" ;;
    *-null) target=/dev/null ;;
  esac
  sync -f "$OUT" 2>/dev/null || true
  # Wall time in ns here (time's %e has 10 ms steps); CPU and RSS from time.
  local t0 t1
  t0=$(date +%s%N)
  /usr/bin/time -f '%U %S %M' -o "$OUT/replay.time" \
    "$WPROF" -R "$flag" "$target" -D "$OUT/$name.data" 2>>"$LOG" ||
    fail_with_log "replay of $name to $output failed"
  t1=$(date +%s%N)
  read -r user sys rss <"$OUT/replay.time"
  record "$name" "$output.wall" "$(calc %.4f "($t1 - $t0) / 1e9")"
  record "$name" "$output.cpu" "$(calc %.3f "$user + $sys")"
  record "$name" "$output.rss" "$rss"
  if [[ $output == *-file ]]; then
    record "$name" "$output.bytes" "$(size "$target")"
    rm -f "$target"
  fi
}
OUTPUTS=(perfetto-file perfetto-null ndjson-file ndjson-null)
for ((r = 1; r <= ROUNDS; r++)); do
  for name in small big; do
    for o in "${OUTPUTS[@]}"; do replay "$name" "$o"; done
  done
  echo "  round $r/$ROUNDS done" >&2
done
LOAD_AFTER=$(load_avg)

# ---------------------------------------------------------------------- report
mega() { calc %.2f "$1 / 1e6"; }
rate_of() { # events / median wall
  local w; w=$(med "$1" "$2.wall"); calc %.2f "$3 / ($w > 0 ? $w : 1e-9) / 1e6"; }
cpu_rate_of() {
  local c; c=$(med "$1" "$2.cpu"); calc %.2f "$3 / ($c > 0 ? $c : 1e-9) / 1e6"; }
mbs() { calc %.1f "$1 / 1024"; }
row() { printf '%-44s %16s %16s %12s\n' "$@"; }

{
  echo
  echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), Linux $(uname -r)"
  echo "load average before: $LOAD_BEFORE; after: $LOAD_AFTER (others share these CPUs)"
  echo "wprof: $WPROF ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))"
  echo
  echo "1. capture throughput: $THREADS threads of getppid(2), '$SYSCALL_PROG', ${TRIAL_S} s trials"
  row "" "value" "" ""
  row "untraced getppid rate (calls/s)" "$(mega "$BASE_RATE") M" "" ""
  row "unlimited load: calls/s (traced)" "$(mega "$U_RATE") M" "" ""
  row "unlimited load: events kept/s" "$(mega "$U_KEPT_RATE") M" "" ""
  row "highest zero-drop rate (events/s)" "$(mega "$ZERO_RATE") M" "" "$CONFIRM/$CONFIRM clean"
  row "recorder CPU per event at zero-drop rate" "$ZERO_CPU_US us" "" ""
  row "recorder CPU per event, unlimited" "$U_CPU_US us" "" ""
  row "recorder peak RSS at zero-drop rate" "$(calc %.1f "$z_rss / 1024") MB" "" ""
  echo
  printf '%-22s %10s %10s %10s %6s %6s %6s %6s %7s\n' "drops beyond" "calls" "kept" "ring full" "stack" "span" "lost%" "valid" "RSS MB"
  for spec in "2x zero-drop rate:$D2" "unlimited:$DU"; do
    read -r c k rb sl se valid pct rss <<<"${spec#*:}"
    printf '%-22s %10s %10s %10s %6s %6s %6s %6s %7s\n' "${spec%%:*}" "$c" "$k" "$rb" "$sl" "$se" "$pct" "$valid" "$rss"
  done
  echo
  echo "2. bytes per event"
  row "capture" "wprof.data B/ev" "Perfetto B/ev" "events"
  row "getppid < pid > (zero-drop run)" "$(per "$(size "$OUT/zero.data")" "$z_kept")" \
    "$(per "$(size "$OUT/zero.pb")" "$z_kept")" "$z_kept"
  row "malloc < stack > ($M_STACKS stacks)" "$(per "$(size "$OUT/malloc.data")" "$m_kept")" \
    "$(per "$(size "$OUT/malloc.pb")" "$m_kept")" "$m_kept"
  row "getppid, 1M replay capture" "$(per "$(size "$OUT/small.data")" "$SMALL_N")" \
    "$(per "$(med small perfetto-file.bytes)" "$SMALL_N")" "$SMALL_N"
  row "getppid, NDJSON" "" "$(per "$(med small ndjson-file.bytes)" "$SMALL_N") (JSON)" ""
  row "targets (original C wprof)" "<= 20 (56)" "<= 40 (111)" ""
  (( m_rb + m_sl == 0 )) || echo "(malloc capture dropped $m_rb ring-full, $m_sl stack-lost events)"
  echo
  echo "3. replay (median of $ROUNDS; M events/s = events / wall time; cpu = user+sys)"
  printf '%-16s %10s %9s %7s %9s %11s %12s\n' "output" "capture" "wall s" "spread" "M ev/s" "M ev/s cpu" "peak RSS MB"
  for o in "${OUTPUTS[@]}"; do
    for name in small big; do
      n=$SMALL_N; [[ $name == big ]] && n=$BIG_N
      printf '%-16s %10s %9s %7s %9s %11s %12s\n' "$o" "$(mega "$n") M" "$(med "$name" "$o.wall")" \
        "$(spread "$name" "$o.wall")" "$(rate_of "$name" "$o" "$n")" "$(cpu_rate_of "$name" "$o" "$n")" "$(mbs "$(med "$name" "$o.rss")")"
    done
  done
  echo "targets: Perfetto >= 10 M/s (original 1.4), NDJSON >= 3 M/s (original 0.34); RSS flat in capture size"
  echo "recording at $(mega "$PACE") M events/s: peak RSS $(mbs "$(med small record_rss_kb)") MB for $(mega "$SMALL_N") M events ($(med small dropped) dropped), $(mbs "$(med big record_rss_kb)") MB for $(mega "$BIG_N") M ($(med big dropped) dropped)"
} | tee "$OUT/summary.txt"

# The large captures are only needed for the numbers above.
# (zero.data and malloc.data stay, for -R -I.)
rm -f "$OUT"/{unlimited,search,confirm,double,flood,small,big}.data "$OUT"/*.pb
