#!/usr/bin/env bash
# Coverage-guided fuzzing of the script compiler and the capture reader with
# libFuzzer (fuzz/README.md). Works on the stable toolchain: the flags
# `cargo fuzz` would pass are given here, RUSTC_BOOTSTRAP=1 unlocks the
# address sanitizer.
#
#   tools/fuzz.sh build                 build both targets
#   tools/fuzz.sh run TARGET SECONDS    fuzz one target (compile | replay)
#   tools/fuzz.sh ci [SECONDS]          build, then fuzz each target SECONDS (60)
#   tools/fuzz.sh repro TARGET FILE     run one input (a crash artifact)
#
# A crash, a hang over 10 s or an allocation over 1 GiB fails the run and
# leaves the input in fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(compile replay)
TRIPLE=x86_64-unknown-linux-gnu
BIN=fuzz/target/$TRIPLE/release

build() {
    local flags=(
        -Cpasses=sancov-module
        -Cllvm-args=-sanitizer-coverage-level=4
        -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
        -Cllvm-args=-sanitizer-coverage-pc-table
        -Cllvm-args=-sanitizer-coverage-trace-compares
        --cfg fuzzing
        -Cdebug-assertions
        -Coverflow-checks
        -Cforce-frame-pointers
        -Zsanitizer=address
    )
    # --target keeps the flags off build scripts and proc macros.
    RUSTC_BOOTSTRAP=1 RUSTFLAGS="${flags[*]}" \
        cargo build --release --target "$TRIPLE" --manifest-path fuzz/Cargo.toml --bins
}

# The corpus starts from the repository's scripts (and the bpftrace tools when
# installed) or from the seed captures; what the fuzzer finds is kept there.
seed() {
    local corpus=fuzz/corpus/$1
    mkdir -p "$corpus"
    case $1 in
        compile)
            find tests probes examples -name '*.bt' -o -name '*.wp' | while read -r f; do
                cp "$f" "$corpus/$(echo "$f" | tr / _)"
            done
            cp /usr/sbin/*.bt "$corpus/" 2>/dev/null || true
            ;;
        replay) cp fuzz/seeds/replay/* "$corpus/" ;;
    esac
}

options() {
    case $1 in
        compile) echo "-dict=fuzz/dict/compile.dict -max_len=8192" ;;
        replay) echo "-max_len=32768" ;;
    esac
}

run() {
    local target=$1 seconds=$2
    seed "$target"
    mkdir -p "fuzz/artifacts/$target"
    # shellcheck disable=SC2046
    "$BIN/$target" "fuzz/corpus/$target" $(options "$target") \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
        -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$target/"
}

case ${1:-} in
    build) build ;;
    run) run "$2" "$3" ;;
    ci)
        build
        for target in "${TARGETS[@]}"; do run "$target" "${2:-60}"; done
        ;;
    repro) "$BIN/$2" "$3" ;;
    *)
        sed -n '2,13p' "$0"
        exit 2
        ;;
esac
