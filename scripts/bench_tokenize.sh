#!/usr/bin/env bash
# Tokenizer speed on every shared vocabulary: vocabulary load time, and tokenize time of
# 25, 50, 100 and 200 KB of TinyStories text (linear in the size if the merging is
# O(n log n)) and of one 100 KB word with no pre-tokenizer split point (the BPE merge
# heap on a single long word). Builds scripts/bench_tokenize.c against the library and
# prints its JSON lines (best of 5 runs each, in-process wall clock).
# usage: scripts/bench_tokenize.sh [BUILD_DIR]   (default build-release; needs ../shared/data)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-release}
data=../shared/data
lib="$build/libspecdec_lib.a"
[ -f "$lib" ] || { echo "bench_tokenize: $lib not built (cmake --build $build)" >&2; exit 2; }
[ -d "$data/vocab" ] || { echo "bench_tokenize: $data/vocab not found" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -std=c11 -D_GNU_SOURCE -I. scripts/bench_tokenize.c "$lib" -o "$tmp/bench" \
    -fopenmp -lm $(pkg-config --libs jansson)
for kb in 25 50 100 200; do
    head -c $((kb * 1000)) "$data/tinystories/valid.txt" > "$tmp/stories_${kb}k.txt"
done
python3 -c "import sys; sys.stdout.write('abcab' * 20000)" > "$tmp/word_100k.txt"
for model in "$data"/vocab/ggml-vocab-*.gguf; do
    "$tmp/bench" "$model" "$tmp"/stories_{25,50,100,200}k.txt "$tmp/word_100k.txt"
done
