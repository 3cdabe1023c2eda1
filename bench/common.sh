# shellcheck shell=bash
# Shared by the benchmark scripts (sourced, not run), each sourcing it after
# its `set -euo pipefail`.
#
# ROOT: the repository. WPROF: the wprof binary (default
#   target/release/wprof; the environment's WPROF wins).
# die MESSAGE: `SCRIPT.sh: MESSAGE` on stderr, then exit 1.
# usage: the script's header comment without its `# ` (its --help).
# need_root REASON, need_wprof [HINT], need_perf [WHY]: die unless running
#   as root, $WPROF is executable, perf is installed.
# median_of_lines: the median of the numbers on stdin ("nan" for none).

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WPROF=${WPROF:-$ROOT/target/release/wprof}

# BASH_SOURCE[-1] is the script being run, whoever calls.
die() { echo "${BASH_SOURCE[-1]##*/}: $*" >&2; exit 1; }

# The comment lines after the shebang, up to the first other line.
usage() { awk 'NR == 1 {next} !/^#/ {exit} {sub(/^# ?/, ""); print}' "${BASH_SOURCE[-1]}"; }

need_root() { [[ $EUID -eq 0 ]] || die "needs root ($1)"; }

# shellcheck disable=SC2120 # the hint is optional
need_wprof() { [[ -x $WPROF ]] || die "$WPROF is missing: build it with 'cargo build --release'${1:+ $1}"; }

# shellcheck disable=SC2120 # the reason is optional
need_perf() { command -v perf >/dev/null || die "perf is missing (apt-get install linux-perf)${1:+: $1}"; }

median_of_lines() {
  sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2];
    else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
