#!/usr/bin/env bash
# The main command: build specdec, make the default model pair, run speculative generation.
#
# Until the project's own TinyStories pair ships in models/, the default pair is made
# from ../shared/data/models/stories260K.bin (llama2.c's 260K-parameter TinyStories
# model): target = that model converted to GGUF (F32), draft = the same model quantized
# to Q4_0 by `specdec quantize` (cheap, close, not identical, so rejections happen).
# Extra arguments are passed to `specdec generate` (e.g. --temp 1 -k 6 --json).
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
        echo "demo: $data/stories260K.bin not found (it ships beside the repo in ../shared)" >&2
        exit 1
    fi
    "$bin" convert "$data/stories260K.bin" "$data/tok512.bin" models/stories260K-f32.gguf
    "$bin" quantize models/stories260K-f32.gguf models/stories260K-q4_0.gguf q4_0
    "$bin" quantize models/stories260K-f32.gguf models/stories260K-q8_0.gguf q8_0
fi
exec "$bin" generate --config configs/stories260k-q4-draft.json "$@"
