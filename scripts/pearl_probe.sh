#!/usr/bin/env bash
# Would drafting while the target verifies (PEARL) pay on this machine? The same round of
# work in turn on all threads and overlapped on half each; see scripts/pearl_probe.c. Builds
# it against the Release library (${SD_BUILD:-build-release}, made first if missing). Example:
#   SD_KERNELS=avx2 bash scripts/pearl_probe.sh \
#       --target models/downloaded/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
#       --draft models/downloaded/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --threads 2 --k 4
set -euo pipefail
cd "$(dirname "$0")/.."
B=${SD_BUILD:-build-release}
if [ ! -f $B/libspecdec_lib.a ]; then
    cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build $B -j2 --target specdec_lib >/dev/null
cc -O2 -std=c11 -D_GNU_SOURCE -I. scripts/pearl_probe.c $B/libspecdec_lib.a \
    -fopenmp -lpthread -lm -o $B/pearl_probe
exec $B/pearl_probe "$@"
