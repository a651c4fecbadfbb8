#!/usr/bin/env bash
# The test command: build Release and ASan+UBSan, run every Criterion test in both.
# Release builds the CUDA backend where CMake finds the CUDA toolkit (its GPU tests skip
# without a GPU); the sanitizer build is CPU only.
# Usage: bash scripts/test.sh [release|sanitize|all]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
which="${1:-all}"
jobs="$(nproc 2>/dev/null || echo 2)"

run() { # name, cmake args...
    local dir="build-$1"; shift
    cmake -S . -B "$dir" "$@" >/dev/null
    cmake --build "$dir" -j "$jobs"
    ctest --test-dir "$dir" --output-on-failure
}

if [ "$which" = all ] || [ "$which" = release ]; then
    run release -DCMAKE_BUILD_TYPE=Release
fi
if [ "$which" = all ] || [ "$which" = sanitize ]; then
    # halt_on_error: a sanitizer report fails the test; detect_leaks: every allocation freed.
    export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    # CPU only: the sanitizers instrument C code, not CUDA kernels, and the Release build
    # above already compiles, links and tests the CUDA backend wherever nvcc is found.
    run sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSD_SANITIZE=ON -DSD_CUDA=OFF
fi
