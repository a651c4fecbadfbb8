#!/usr/bin/env bash
# Make GGUF pairs from llama2.c's stories260K (in ../shared/data/models, beside the
# repository): target = stories260K converted to F32, drafts = its Q4_0 and Q8_0 copies
# (cheap, close, not identical, so rejections happen), then run the Q4_0-draft config.
# Extra arguments are passed to `specdec generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc 2>/dev/null || echo 2)"
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DSD_BUILD_TESTS=OFF >/dev/null
cmake --build build-release -j "$jobs" --target specdec >/dev/null
bin=build-release/specdec
data=../shared/data/models
if [ ! -f models/stories260K-f32.gguf ] || [ ! -f models/stories260K-q4_0.gguf ] ||
    [ ! -f models/stories260K-q8_0.gguf ]; then
    if [ ! -f "$data/stories260K.bin" ]; then
        echo "stories260k.sh: $data/stories260K.bin not found (it ships beside the repo in ../shared)" >&2
        exit 1
    fi
    "$bin" convert "$data/stories260K.bin" "$data/tok512.bin" models/stories260K-f32.gguf
    "$bin" quantize models/stories260K-f32.gguf models/stories260K-q4_0.gguf q4_0
    "$bin" quantize models/stories260K-f32.gguf models/stories260K-q8_0.gguf q8_0
fi
exec "$bin" generate --config configs/stories260k-q4-draft.json "$@"
