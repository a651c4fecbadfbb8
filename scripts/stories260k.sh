#!/usr/bin/env bash
# Make GGUF pairs from llama2.c's stories260K (in the shared data beside the repository:
# $SD_SHARED_DATA, else ../shared/data; its models/ folder): target = stories260K converted
# to F32, drafts = its Q4_0 and Q8_0 copies (cheap, close, not identical, so rejections
# happen), then run the Q4_0-draft config. Extra arguments are passed to `specdec generate`.
# $SD_BUILD_DIR: the build folder (build-release).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc 2>/dev/null || echo 2)"
dir="${SD_BUILD_DIR:-build-release}"
data="${SD_SHARED_DATA:-../shared/data}/models"
bin="$dir/specdec"
need=0
for m in models/stories260K-f32.gguf models/stories260K-q4_0.gguf models/stories260K-q8_0.gguf; do
    [ -f "$m" ] || need=1
done
# the data first: nothing is built when it is not there
if [ "$need" -eq 1 ]; then
    for f in "$data/stories260K.bin" "$data/tok512.bin"; do
        if [ ! -f "$f" ]; then
            echo "stories260k.sh: $f not found (llama2.c's stories260K; set SD_SHARED_DATA to the shared data folder, ../shared/data by default)" >&2
            exit 1
        fi
    done
fi
. scripts/build_stage.sh
sd_build "$dir" specdec
if [ "$need" -eq 1 ]; then
    "$bin" convert "$data/stories260K.bin" "$data/tok512.bin" models/stories260K-f32.gguf
    "$bin" quantize models/stories260K-f32.gguf models/stories260K-q4_0.gguf q4_0
    "$bin" quantize models/stories260K-f32.gguf models/stories260K-q8_0.gguf q8_0
fi
exec "$bin" generate --config configs/stories260k-q4-draft.json "$@"
