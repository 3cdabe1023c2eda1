#!/usr/bin/env bash
# Start-up benchmark: where the time from launch to recording goes.
#
# Runs `WPROF_TIMINGS=$EPOCHREALTIME wprof -d 1ms -D FILE` (the default system
# capture) ROUNDS times and prints, per step wprof reports (src/timings.rs),
# the median and the range of its own time, then the median launch →
# recording. With -b BASELINE, a second wprof binary runs in alternate
# rounds and gets its own column.
#
#   bench/startup.sh [-n ROUNDS] [-b BASELINE_WPROF] [-- EXTRA WPROF ARGS]
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ROUNDS=10
BASELINE=
while getopts "hn:b:" opt; do
  case $opt in
    n) ROUNDS=$OPTARG ;;
    b) BASELINE=$OPTARG ;;
    h) usage; exit 0 ;;
    *) die "usage: $0 [-n ROUNDS] [-b BASELINE_WPROF] [-- EXTRA WPROF ARGS]" ;;
  esac
done
shift $((OPTIND - 1))
[[ ${1:-} == -- ]] && shift
need_root "recording loads BPF programs"
need_wprof "(or set WPROF)"
OUT=$(mktemp -d /tmp/wprof-startup.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

# One run: the step lines as `tool<TAB>step<TAB>ms`.
run() {
  local tool=$1 binary=$2; shift 2
  WPROF_TIMINGS=$EPOCHREALTIME "$binary" -d 1ms -D "$OUT/s.data" "$@" \
    2>"$OUT/err" >/dev/null || { cat "$OUT/err" >&2; die "$binary failed"; }
  sed -n 's/^wprof: timing: \(.*\) +\([0-9.]*\) ms (at \([0-9.]*\) ms)$/\1\t\2\t\3/p' \
    "$OUT/err" | awk -F'\t' -v tool="$tool" '
      { print tool "\t" $1 "\t" $2 }
      $1 == "recording" { print tool "\tlaunch → recording\t" $3 + launch }
      NR == 1 && $1 ~ /^launch/ { launch = $2 }'
}

for _ in $(seq "$ROUNDS"); do
  run new "$WPROF" "$@" >>"$OUT/raw.tsv"
  [[ -n $BASELINE ]] && run base "$BASELINE" "$@" >>"$OUT/raw.tsv"
done

echo "startup.sh: $ROUNDS rounds, load average $(cut -d' ' -f1-3 /proc/loadavg)"
awk -F'\t' '
  { key = $1 SUBSEP $2; n[key]++; v[key, n[key]] = $3
    if (!($2 in seen)) { seen[$2] = 1; order[++steps] = $2 }
    tools[$1] = 1 }
  function median(key,   i, j, t, m, a) {
    m = n[key]; for (i = 1; i <= m; i++) a[i] = v[key, i]
    for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return sprintf("%.2f (%.2f–%.2f)", (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2, a[1], a[m])
  }
  END {
    header = "| step (ms: median (min–max)) | new |"; rule = "|---|---|"
    if ("base" in tools) { header = header " baseline |"; rule = rule "---|" }
    print header; print rule
    for (s = 1; s <= steps; s++) {
      line = "| " order[s] " | " median("new" SUBSEP order[s]) " |"
      if ("base" in tools) line = line " " median("base" SUBSEP order[s]) " |"
      print line
    }
  }' "$OUT/raw.tsv"
