#!/usr/bin/env bash
# Per-type matmul kernel throughput (GB/s of weights, one thread), JSON lines on stdout.
# Builds scripts/bench_quant.c against the Release library (${SD_BUILD:-build-release}, made first if
# missing) and runs it; arguments go to the benchmark (--rows --cols --reps --copies
# --types). Example: bash scripts/bench_quant.sh --types q4_0,q4_k --reps 9
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f ${SD_BUILD:-build-release}/libspecdec_lib.a ]; then
    cmake -S . -B ${SD_BUILD:-build-release} -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build ${SD_BUILD:-build-release} -j2 --target specdec_lib >/dev/null
fi
out=${SD_BUILD:-build-release}/bench_quant
cc -O2 -std=c11 -D_GNU_SOURCE -I. scripts/bench_quant.c ${SD_BUILD:-build-release}/libspecdec_lib.a \
    -fopenmp -lpthread -lm -o "$out"
exec "$out" "$@"
