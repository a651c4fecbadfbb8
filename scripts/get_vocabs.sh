#!/usr/bin/env bash
# Fetches llama.cpp's test vocabularies (models/ggml-vocab-*.gguf with their .inp/.out
# tokenizer vectors) into the git-ignored models/downloaded/vocab/, where the tokenizer
# tests look before ../shared/data/vocab unless $SD_LLAMACPP_VOCAB names the one folder
# to use (tests/testutil.c, tu_llamacpp_vocab). They come from PyPI's llama-cpp-python sdist, which vendors
# llama.cpp (MIT); only those data files are taken, no code.
#
# usage: bash scripts/get_vocabs.sh     (idempotent: skips when the folder is complete)
set -euo pipefail
cd "$(dirname "$0")/.."

dest=models/downloaded/vocab
pkg=llama-cpp-python==0.3.36
# what the tests read beyond ../shared/data
want=(command-r deepseek-coder qwen35 refact mpt phi-3)
have=1
for n in "${want[@]}"; do
    for ext in gguf gguf.inp gguf.out; do
        [ -f "$dest/ggml-vocab-$n.$ext" ] || have=0
    done
done
if [ "$have" -eq 1 ]; then
    echo "get_vocabs.sh: $dest complete"
    exit 0
fi
py="${PYTHON:-python3}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if ! "$py" -m pip download -q --no-deps --no-binary :all: "$pkg" -d "$tmp" >"$tmp/pip.log" 2>&1; then
    echo "get_vocabs.sh: 'pip download $pkg' failed (offline, or PyPI unreachable?):" >&2
    tail -n 3 "$tmp/pip.log" >&2
    exit 1
fi
mkdir -p "$dest"
"$py" - "$tmp"/llama_cpp_python-*.tar.gz "$dest" <<'PY'
import os, sys, tarfile
src, dest = sys.argv[1], sys.argv[2]
n = 0
with tarfile.open(src) as t:
    for m in t.getmembers():
        base = os.path.basename(m.name)
        if (m.isfile() and "/vendor/llama.cpp/models/" in m.name and base.startswith("ggml-vocab-")
                and base.endswith((".gguf", ".gguf.inp", ".gguf.out"))):
            part = os.path.join(dest, "." + base + ".part")
            with t.extractfile(m) as f, open(part, "wb") as o:
                o.write(f.read())
            os.replace(part, os.path.join(dest, base))
            n += 1
print(f"get_vocabs.sh: wrote {n} files to {dest}")
PY
