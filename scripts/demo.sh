#!/usr/bin/env bash
# The main command: build specdec and run speculative generation on the default pair,
# the project's own TinyStories pair shipped in models/ (configs/tinystories.json:
# 1.05M-parameter target, 131K-parameter distilled draft, both Q8_0, K = 4).
# Extra arguments are passed to `specdec generate` (e.g. --temp 0 -k 2 --json).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc 2>/dev/null || echo 2)"
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DSD_BUILD_TESTS=OFF >/dev/null
cmake --build build-release -j "$jobs" --target specdec >/dev/null
exec build-release/specdec generate --config configs/tinystories.json "$@"
