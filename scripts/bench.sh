#!/usr/bin/env bash
# The A/B sweep over K of docs/performance.md (the side-by-side table with
# llama.cpp is scripts/vs_llamacpp.sh): build, synthesize a TinyLlama-1.1B-shaped
# Q8_0 pair (target = grown copy of a 58M draft + seeded noise; ~1.2 GB, gitignored),
# measure kernels (bandwidth, verification cost, prefill) and an A/B run (target alone vs
# speculative, ABAB, greedy), and plot it.
# Usage: bash scripts/bench.sh [threads (default 1)] [noise (default 0.002)]
set -euo pipefail
cd "$(dirname "$0")/.."
threads="${1:-1}"
noise="${2:-0.002}"
out=build-release/bench
models="$out/tinyllama-q8_0-n$noise"
mkdir -p "$out"
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DSD_BUILD_TESTS=OFF >/dev/null
cmake --build build-release -j "$(nproc 2>/dev/null || echo 2)" --target specdec >/dev/null
B=build-release/specdec
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
[ -f "$models/pair.json" ] || "$B" synth --preset tinyllama --type q8_0 --noise "$noise" -o "$models"
"$B" bench --kernels --config "$models/pair.json" -t "$threads" --reps 7 --prefill 64 \
    --json "$out/kernels-t$threads.json"
"$B" bench --config "$models/pair.json" --k-list 1,2,4,8 --runs 3 -n 128 -t "$threads" \
    --json "$out/ab-t$threads.json"
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
    /usr/bin/python3 scripts/plot_bench.py "$out/ab-t$threads.json" \
        --kernels "$out/kernels-t$threads.json" -o "$out/ab-t$threads.png"
    echo "plot: $out/ab-t$threads.png" >&2
else
    echo "plot skipped: apt-get install python3-matplotlib" >&2
fi
