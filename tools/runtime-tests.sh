#!/usr/bin/env bash
# Runs bpftrace 0.17's own runtime tests against wprof and compares the results with
# the committed lists in tests/runtime-compat/:
#   expected-pass.txt   tests wprof passes (names only); one that fails now fails this script
#   deviations.txt      `name<TAB>reason`: tests bpftrace passes and wprof fails by design
#   bpftrace-pass.txt   tests bpftrace 0.17 itself passes on the reference machine
#                       (2 vCPU, Linux 6.18, Debian 12): the measure of what is left to do
# Newly passing tests are printed (add them with --bless).
#
# The tests are bpftrace's, not ours: Debian's bpftrace 0.17.0 source package is fetched
# with a private apt configuration (the machine's apt setup is not touched) into
# target/runtime-tests/, its test programs are built with gcc, and bpftrace's Python runner
# runs them against a `bpftrace` symlink to the wprof binary (a symlink, not a wrapper,
# so the process name is `bpftrace` as the tests expect). Nothing of bpftrace is committed.
# When the source cannot be fetched the script says why and exits 0 (skipped).
#
# Usage: tools/runtime-tests.sh [--filter 'suite.name*'] [--bless] [--tool PATH]
#   --filter GLOB  run only matching tests (bpftrace's `suite.name` glob); lists are then
#                  compared only for the tests that ran
#   --bless        rewrite expected-pass.txt: add newly passing tests, drop failing ones
#   --tool PATH    the binary under test (default: target/debug/wprof, built first);
#                  `--tool /usr/bin/bpftrace` measures bpftrace itself (bpftrace-pass.txt
#                  is a copy of the target/runtime-tests/results/pass.txt it leaves)
# Needs root (BPF), python3, gcc, systemtap-sdt-dev (tools/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
lists=$repo/tests/runtime-compat
work=$repo/target/runtime-tests
# Debian 12's bpftrace source package; the hash pins the exact release the lists describe.
orig=bpftrace_0.17.0.orig.tar.gz
orig_sha256=ccc853205b081fd7e4270016065ccc04764286644bf8e0eee9bd7f344cad63e5

filter='*'
bless=0
tool=
while (($#)); do
  case $1 in
    --filter) filter=${2:?--filter needs a glob}; shift 2 ;;
    --bless) bless=1; shift ;;
    --tool) tool=${2:?--tool needs a path}; shift 2 ;;
    *) echo "runtime-tests.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done

if ((bless)) && [ -n "$tool" ]; then
  echo "runtime-tests.sh: --bless records wprof's results; it cannot be combined with --tool" >&2
  exit 2
fi

skip() {
  echo "runtime-tests.sh: SKIPPED: $*" >&2
  exit 0
}

if [ "$(id -u)" != 0 ]; then skip "needs root (the tests load BPF programs)"; fi
for cmd in python3 gcc apt-get; do
  command -v "$cmd" >/dev/null || skip "$cmd is not installed (tools/setup.sh installs it)"
done
echo "#include <sys/sdt.h>" | gcc -E -x c - >/dev/null 2>&1 || skip "systemtap-sdt-dev is not installed (tools/setup.sh installs it)"

# One run at a time: runs share the shim, the log and the results.
mkdir -p "$work"
exec 9>"$work/lock"
flock -n 9 || { echo "runtime-tests.sh: another run holds $work/lock" >&2; exit 1; }

# 1. The source package, fetched once into target/runtime-tests/apt.
fetch_source() {
  local apt=$work/apt
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/download"
  echo "deb-src http://deb.debian.org/debian bookworm main" >"$apt/sources.list"
  local opts=(-q -o "Dir::Etc::sourcelist=$apt/sources.list" -o Dir::Etc::sourceparts=-
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Get::List-Cleanup=0)
  apt-get "${opts[@]}" update >"$apt/update.log" 2>&1 ||
    return 1
  (cd "$apt/download" && apt-get "${opts[@]}" source --download-only bpftrace=0.17.0-1) \
    >"$apt/source.log" 2>&1 || return 1
  echo "$orig_sha256  $apt/download/$orig" | sha256sum -c --quiet - >/dev/null 2>&1 || return 1
}
src=$work/src/bpftrace-0.17.0
if [ ! -e "$src/tests/runtime/engine/main.py" ]; then
  if [ ! -e "$work/apt/download/$orig" ]; then
    echo "runtime-tests.sh: fetching Debian's bpftrace 0.17.0 source package into $work" >&2
    fetch_source || skip "cannot fetch bpftrace's 0.17.0 source package with apt-get (logs: $work/apt/*.log)"
  fi
  rm -rf "$work/src" && mkdir -p "$work/src"
  tar -xzf "$work/apt/download/$orig" -C "$work/src" bpftrace-0.17.0/tests/runtime \
    bpftrace-0.17.0/tests/testprogs bpftrace-0.17.0/tests/testlibs
fi
tests=$src/tests

# 2. bpftrace's test programs and libraries, built as its CMakeLists.txt builds them.
build_tests() {
  mkdir -p "$tests/testprogs/bin" "$tests/testlibs/bin"
  local c name
  for c in "$tests"/testlibs/*.c; do
    name=$(basename "$c" .c)
    gcc -g -O0 -fPIC -shared -DHAVE_SYSTEMTAP_SYS_SDT_H "$c" -o "$tests/testlibs/lib$name.so"
    chmod -x "$tests/testlibs/lib$name.so"
  done
  for c in "$tests"/testprogs/*.c; do
    name=$(basename "$c" .c)
    local extra=()
    if [ "$name" = usdt_lib ]; then
      extra=(-fPIC -I"$tests/testlibs" -L"$tests/testlibs" -lusdt_tp -Wl,-rpath,"$tests/testlibs")
    fi
    gcc -g -O0 -no-pie -DHAVE_SYSTEMTAP_SYS_SDT_H "$c" -o "$tests/testprogs/$name" "${extra[@]}"
  done
  echo 'LIBBCC_BPF_CONTAINS_RUNTIME = False' >"$tests/runtime/engine/cmake_vars.py"
  touch "$tests/.built"
}
[ -e "$tests/.built" ] || build_tests >"$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; echo "runtime-tests.sh: building bpftrace's test programs failed" >&2; exit 1; }

# 3. The binary under test, named `bpftrace`.
if [ -z "$tool" ]; then
  cargo build -q
  tool=$repo/target/debug/wprof
fi
tool=$(realpath -e "$tool") || { echo "runtime-tests.sh: no binary at $tool" >&2; exit 2; }
shim=$work/shim
rm -rf "$shim" && mkdir -p "$shim"
ln -s "$tool" "$shim/bpftrace"

# 4. bpftrace's runner, from its tests/ directory as it expects (it runs ./testprogs/...).
log=$work/run.log
echo "runtime-tests.sh: running bpftrace's runtime tests ($filter) against $tool; log: $log" >&2
start=$(date +%s)
status=0
(cd "$tests" && BPFTRACE_RUNTIME_TEST_EXECUTABLE=$shim PATH=$shim:$PATH \
  timeout 1800 python3 -W ignore runtime/engine/main.py --filter "$filter") >"$log" 2>&1 || status=$?
elapsed=$(($(date +%s) - start))
# The runner exits 1 when a test fails; anything else means it did not finish.
if [ "$status" != 0 ] && [ "$status" != 1 ]; then
  tail -20 "$log" >&2
  echo "runtime-tests.sh: the runner stopped with status $status after ${elapsed}s" >&2
  exit 1
fi

# 5. Results: one line per test while it runs, before the summary.
results=$work/results
mkdir -p "$results"
sed -n '/ tests from .* test cases ran\./q;p' "$log" |
  sed -n -E 's/^\[ +(OK|FAILED|TIMEOUT|SKIP) +\] (.*)$/\1\t\2/p' |
  # A few names occur twice in bpftrace's suites: the second becomes `name #2`.
  awk -F'\t' '{ n = ++seen[$2]; print $1 "\t" $2 (n > 1 ? " #" n : "") }' >"$results/all.tsv"
result_names() { awk -F'\t' -v want="$1" '$1 == want { print $2 }' "$results/all.tsv" | sort -u; }
result_names OK >"$results/pass.txt"
awk -F'\t' '{ print $2 }' "$results/all.tsv" | sort -u >"$results/ran.txt"
# A skipped test also prints a RUN line but no verdict other than SKIP.
result_names SKIP >"$results/skip.txt"

sorted() { { grep -v -e '^#' -e '^$' "$1" || true; } | cut -f1 | sort -u; }
sorted "$lists/expected-pass.txt" >"$results/expected.txt"
sorted "$lists/deviations.txt" >"$results/deviations.txt"
sorted "$lists/bpftrace-pass.txt" >"$results/bpftrace.txt"
# Only the tests that ran are judged (a --filter run judges its selection).
comm -12 "$results/expected.txt" "$results/ran.txt" >"$results/expected-ran.txt"
comm -23 "$results/expected-ran.txt" "$results/pass.txt" >"$results/regressed.txt"
comm -13 "$results/expected.txt" "$results/pass.txt" >"$results/new.txt"
comm -12 "$results/deviations.txt" "$results/pass.txt" >"$results/deviation-passes.txt"
comm -12 "$results/expected.txt" "$results/deviations.txt" >"$results/both.txt"

count() { grep -c . "$1" || true; }
echo "runtime-tests.sh: $(count "$results/pass.txt") passed, $(count "$results/skip.txt") skipped," \
  "of $(count "$results/ran.txt") tests run in ${elapsed}s;" \
  "$(comm -12 "$results/pass.txt" "$results/bpftrace.txt" | grep -c . || true) of the" \
  "$(comm -12 "$results/bpftrace.txt" "$results/ran.txt" | grep -c . || true) that bpftrace 0.17 passes here;" \
  "$(count "$results/deviations.txt") documented deviations"
if [ -s "$results/new.txt" ]; then
  echo "runtime-tests.sh: newly passing (not in expected-pass.txt; --bless adds them):"
  sed 's/^/  + /' "$results/new.txt"
fi
if [ -s "$results/deviation-passes.txt" ]; then
  echo "runtime-tests.sh: listed as deviations but passing (remove them from deviations.txt):"
  sed 's/^/  ? /' "$results/deviation-passes.txt"
fi
if [ -s "$results/both.txt" ]; then
  echo "runtime-tests.sh: listed both as expected passes and as deviations:" >&2
  sed 's/^/  ! /' "$results/both.txt" >&2
  exit 1
fi
if ((bless)); then
  {
    grep '^#' "$lists/expected-pass.txt" || true
    # Tests outside the filter keep their state; the ones that ran are replaced by the results.
    comm -23 "$results/expected.txt" "$results/ran.txt"
    cat "$results/pass.txt"
  } | awk '/^#/ { print; next } { print | "sort -u" }' >"$results/blessed.txt"
  mv "$results/blessed.txt" "$lists/expected-pass.txt"
  echo "runtime-tests.sh: expected-pass.txt rewritten ($(sorted "$lists/expected-pass.txt" | grep -c .) tests)"
  exit 0
fi
# A few of bpftrace's tests count on exact timing (`i:s:1` printing 1 s): a
# timer tick the kernel skips under load fails them. Each failed expected
# pass runs once more, alone; passing then, it is reported, not failed.
if [ -s "$results/regressed.txt" ]; then
  retry_log=$work/retry.log
  : >"$retry_log"
  : >"$results/still.txt"
  while IFS= read -r name; do
    (cd "$tests" && BPFTRACE_RUNTIME_TEST_EXECUTABLE=$shim PATH=$shim:$PATH \
      timeout 300 python3 -W ignore runtime/engine/main.py --filter "${name% #*}") \
      >>"$retry_log" 2>&1 || true
    if grep -qxF "[       OK ] ${name% #*}" "$retry_log"; then
      echo "runtime-tests.sh: $name failed, then passed when run again alone (see $retry_log)"
    else
      echo "$name" >>"$results/still.txt"
    fi
  done <"$results/regressed.txt"
  mv "$results/still.txt" "$results/regressed.txt"
fi
if [ -s "$results/regressed.txt" ]; then
  echo "runtime-tests.sh: FAILED: expected to pass but did not (details in $log):" >&2
  sed 's/^/  - /' "$results/regressed.txt" >&2
  exit 1
fi
echo "runtime-tests.sh: every expected pass passed"
