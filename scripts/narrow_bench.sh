#!/usr/bin/env bash
# Builds scripts/narrow_bench.c against the Release library (${SD_BUILD:-build-release}, built
# first) and runs it with the arguments given; see the header of scripts/narrow_bench.c.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${SD_BUILD:-build-release}
if [ ! -f $B/CMakeCache.txt ]; then
    cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build $B -j2 --target specdec_lib >/dev/null
cc -O2 -std=c11 -D_GNU_SOURCE -I. scripts/narrow_bench.c $B/libspecdec_lib.a -fopenmp -lpthread -lm -o $B/narrow_bench
exec $B/narrow_bench "$@"
