#!/usr/bin/env bash
# Draft token cost against a target step (c) beside the byte ratio, with the fused greedy
# classifier and without; see scripts/draft_cost.c. Builds it against the Release library
# (${SD_BUILD:-build-release}, made first if missing). Example:
#   SD_KERNELS=avx2 bash scripts/draft_cost.sh \
#       --target models/downloaded/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
#       --draft models/downloaded/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --threads 1,2 --profile
set -euo pipefail
cd "$(dirname "$0")/.."
B=${SD_BUILD:-build-release}
if [ ! -f $B/libspecdec_lib.a ]; then
    cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build $B -j2 --target specdec_lib >/dev/null
cc -O2 -std=c11 -D_GNU_SOURCE -I. scripts/draft_cost.c $B/libspecdec_lib.a \
    -fopenmp -lpthread -lm -o $B/draft_cost
exec $B/draft_cost "$@"
