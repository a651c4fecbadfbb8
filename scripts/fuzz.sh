#!/usr/bin/env bash
# The fuzzing habit: build the libFuzzer targets of tests/fuzz/ with clang under
# AddressSanitizer + UndefinedBehaviorSanitizer (build-fuzz/, -DSD_FUZZ=ON) and run each for
# a bounded time on its seed corpus (tests/fuzz/corpus/NAME/, read only: what the fuzzer
# finds goes to build-fuzz/corpus/NAME/). A crash, a leak, a sanitizer report or a
# per-input timeout fails the run; the input is kept as build-fuzz/artifacts/NAME/crash-*
# (replay: build-fuzz/fuzz_NAME FILE).
#
# usage: bash scripts/fuzz.sh [--time SECONDS] [NAME...]
#   --time S   seconds per target (default 12: about 12 s per target)
#   NAME       gguf, spm, bpe, chat, config, jinja, json_schema, http (default: all)
# Needs clang and libclang-rt-dev (libFuzzer, the sanitizers: the compiler-rt of the default
# clang) and libomp-dev.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=12
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
    --time)
        secs="$2"
        shift 2
        ;;
    -h | --help)
        sed -n '2,13p' "$0" | cut -c3-
        exit 0
        ;;
    *)
        targets+=("$1")
        shift
        ;;
    esac
done
if [ ${#targets[@]} -eq 0 ]; then
    for f in tests/fuzz/fuzz_*.c; do
        n="$(basename "$f" .c)"
        targets+=("${n#fuzz_}")
    done
fi
cc="${SD_FUZZ_CC:-clang}"
if ! command -v "$cc" >/dev/null; then
    echo "scripts/fuzz.sh: $cc not found (apt-get install clang libclang-rt-dev libomp-dev)" >&2
    exit 1
fi
jobs="$(nproc 2>/dev/null || echo 2)"
echo "scripts/fuzz.sh: building build-fuzz ($cc, ASan + UBSan, libFuzzer)"
mkdir -p build-fuzz
CC="$cc" cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSD_SANITIZE=ON -DSD_FUZZ=ON \
    -DSD_BUILD_TESTS=OFF -DSD_CUDA=OFF >build-fuzz/build.log 2>&1 || {
    cat build-fuzz/build.log >&2
    exit 1
}
cmake --build build-fuzz -j "$jobs" >>build-fuzz/build.log 2>&1 || {
    tail -n 30 build-fuzz/build.log >&2
    exit 1
}
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
status=0
for t in "${targets[@]}"; do
    exe="build-fuzz/fuzz_$t"
    seeds="tests/fuzz/corpus/$t"
    if [ ! -x "$exe" ] || [ ! -d "$seeds" ]; then
        echo "scripts/fuzz.sh: no target '$t' (tests/fuzz/fuzz_$t.c and $seeds)" >&2
        exit 2
    fi
    work="build-fuzz/corpus/$t"
    art="build-fuzz/artifacts/$t"
    mkdir -p "$work" "$art"
    log="build-fuzz/fuzz_$t.log"
    rc=0
    # -timeout: one input taking 10 s is a finding (a hang); -rss_limit_mb: so is 2 GB.
    "$exe" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="$art/" "$work" "$seeds" >"$log" 2>&1 || rc=$?
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
    units="$(find "$work" -type f | wc -l)"
    if [ "$rc" -ne 0 ]; then
        echo "scripts/fuzz.sh: $t: FAILED (exit $rc) after ${execs:-?} executions: $log, $art/" >&2
        grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$log" | head -n 8 >&2 || true
        status=1
    else
        echo "scripts/fuzz.sh: $t: ${execs:-?} executions in ${secs} s, no finding (corpus $units inputs)"
    fi
done
exit "$status"
