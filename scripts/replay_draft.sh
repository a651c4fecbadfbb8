#!/usr/bin/env bash
# Offline replay of greedy drafting over `specdec bench --json` ids (tokens per pass exact,
# predicted speedup from v(n) and the draft step's cost c); see scripts/replay_draft.c.
# Builds it against the Release library (${SD_BUILD:-build-release}). Example (the real pair,
# code-edit prompts; v(n) of the Qwen2.5-Coder-1.5B target, docs/performance.md):
#   bash scripts/replay_draft.sh --json ref.json --category chat-edit --type suffix+llm \
#       --draft models/downloaded/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --k 16 \
#       --second-max 3 --v 2:1.20,5:1.44,9:2.32,17:4.14 --c 0.55
set -euo pipefail
cd "$(dirname "$0")/.."
B=${SD_BUILD:-build-release}
if [ ! -f $B/libspecdec_lib.a ]; then
    cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DSD_CUDA=OFF >/dev/null
fi
cmake --build $B -j2 --target specdec_lib >/dev/null
cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -I. scripts/replay_draft.c \
    $B/libspecdec_lib.a -ljansson -fopenmp -lpthread -lm -o $B/replay_draft
exec $B/replay_draft "$@"
