#!/usr/bin/env bash
# Build llama.cpp's CPU tools as a peer to measure specdec against (a measuring stick
# only: nothing of it goes into specdec, and none of its code is committed here).
#
# The source is the llama.cpp that PyPI's llama-cpp-python source distribution vendors
# (vendor/llama.cpp), fetched with pip's ordinary client:
#   python3 -m pip download --no-deps --no-binary :all: llama-cpp-python==VERSION
# Everything lands in a git-ignored folder (default build-peer/ at the repo root):
#   build-peer/dl/                 the sdist
#   build-peer/src/                the unpacked sdist
#   build-peer/native/bin/         Release, -DGGML_NATIVE=ON (-march=native), no CUDA,
#                                  no curl/openssl, static
#   build-peer/noamx/bin/          only on a CPU with AMX: the same without AMX (the native
#                                  build's AMX matmul has crashed with SIGILL on batches > 1
#                                  on a Sapphire Rapids guest)
#   build-peer/avx2/bin/           only with --avx2: AVX2 + FMA + F16C, no AVX-512, no
#                                  AVX-VNNI, no AMX: llama.cpp as an AVX2-only CPU (Zen 2/3)
#                                  runs it; the peer of `SD_KERNELS=avx2` on a machine with
#                                  AVX-512 (the stand-in for an AVX2-only CPU)
#   build-peer/peer.env            what was built: version, llama.cpp commit, the builds,
#                                  each with a smoke-test verdict (ok / crashed / failed);
#                                  scripts/vs_llamacpp.sh reads it
# Tools: llama-bench, llama-completion, llama-simple, llama-speculative,
# llama-speculative-simple, llama-perplexity, llama-tokenize, llama-batched-bench,
# llama-server (those the vendored tree defines; the server is built without SSL, for the
# side-by-side run of scripts/load_test.py); --tools "A B" builds only those.
#
# Usage: bash scripts/peer_llamacpp.sh [--dir DIR] [--jobs N] [--version V|latest] [--noamx]
#                                      [--avx2] [--tools "llama-server ..."]
#   --version  llama-cpp-python version to fetch (default 0.3.36, whose CHANGELOG names
#              llama.cpp 0c1e57098); "latest" takes PyPI's newest
#   --noamx    make the AMX-off build even on a CPU without AMX (to test that path)
#   --avx2     also make the AVX2-only build (above)
# Idempotent: a finished step is skipped (the download, the unpack; cmake rebuilds only
# what changed). A build that fails or whose binary crashes on this CPU is reported and
# the script goes on. Exit 0 when at least one build passed its smoke test; 1 otherwise
# (offline: a clear message, exit 1).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

dir=build-peer
jobs=2
version=0.3.36
force_noamx=0
want_avx2=0
only_tools=""
while [ $# -gt 0 ]; do
    case "$1" in
    --dir) dir=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --noamx) force_noamx=1; shift ;;
    --avx2) want_avx2=1; shift ;;
    --tools) only_tools=$2; shift 2 ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "peer_llamacpp: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$dir" in /*) ;; *) dir=$root/$dir ;; esac
mkdir -p "$dir/dl" "$dir/src"
say() { echo "peer_llamacpp: $*" >&2; }

# ---- 1. fetch the sdist (skipped when one of this version is already here)
if [ "$version" = latest ]; then spec=llama-cpp-python; pat='llama_cpp_python-*.tar.gz'
else spec="llama-cpp-python==$version"; pat="llama_cpp_python-$version.tar.gz"; fi
sdist=$(ls -t "$dir"/dl/$pat 2>/dev/null | head -n1)
if [ -z "$sdist" ] || [ "$version" = latest ]; then
    say "downloading $spec (source distribution) ..."
    if ! python3 -m pip download --no-deps --no-binary :all: --dest "$dir/dl" "$spec" \
        >"$dir/dl/pip.log" 2>&1; then
        if [ -n "$sdist" ]; then
            say "download failed (see $dir/dl/pip.log); using $sdist"
        else
            say "cannot download $spec from PyPI: offline or no such version" \
                "(pip's log: $dir/dl/pip.log). Put the sdist into $dir/dl/ by hand, or run" \
                "again when online."
            exit 1
        fi
    fi
    sdist=$(ls -t "$dir"/dl/$pat 2>/dev/null | head -n1)
fi
[ -n "$sdist" ] || { say "no sdist matching $pat in $dir/dl"; exit 1; }
name=$(basename "$sdist" .tar.gz)
pyver=${name#llama_cpp_python-}

# ---- 2. unpack
src=$dir/src/$name
if [ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ]; then
    say "unpacking $sdist"
    rm -rf "$src.part"
    mkdir -p "$src.part"
    tar -xzf "$sdist" -C "$src.part" --strip-components=1 || { say "cannot unpack $sdist"; exit 1; }
    mv "$src.part" "$src"
fi
lsrc=$src/vendor/llama.cpp
[ -f "$lsrc/CMakeLists.txt" ] || { say "$sdist has no vendor/llama.cpp"; exit 1; }
# The sdist carries no git metadata; its CHANGELOG names the llama.cpp commit it vendors.
commit=$(sed -n "/^## \[$pyver\]/,/^## \[/p" "$src/CHANGELOG.md" 2>/dev/null |
    grep -o 'llama\.cpp@[0-9a-f]\{7,40\}' | head -n1 | cut -d@ -f2)
commit=${commit:-unknown}
say "llama-cpp-python $pyver vendors llama.cpp $commit"

# ---- 3. builds
tools="llama-bench llama-completion llama-simple llama-speculative llama-speculative-simple
       llama-perplexity llama-tokenize llama-batched-bench llama-server"
[ -n "$only_tools" ] && tools=$only_tools
common=(-DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON
    -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_COMMON=ON)
has() { grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -qx "$1"; }

# A smoke test that exercises a batch > 1 (prefill) and a decode step, on the shipped
# TinyStories target: "ok", "crashed (signal N)" or "failed (exit N)".
smoke() {
    local bin=$1 model=$root/models/tinystories-target-q8_0.gguf rc
    [ -f "$model" ] || { echo "untested (no $model)"; return; }
    if [ -x "$bin/llama-bench" ]; then
        "$bin/llama-bench" -m "$model" -p 16 -n 4 -r 1 -t 1 -o json >"$bin/../smoke.log" 2>&1
    else # --tools without llama-bench: the program runs at all
        "$bin/${tools%% *}" --version >"$bin/../smoke.log" 2>&1
    fi
    rc=$?
    if [ $rc -eq 0 ]; then echo ok
    elif [ $rc -gt 128 ]; then echo "crashed (signal $((rc - 128)))"
    else echo "failed (exit $rc)"; fi
}

build_one() { # NAME CMAKE-ARGS...
    local name=$1 b=$dir/$1 t built=""
    shift
    say "configuring $name ($*)"
    if ! cmake -S "$lsrc" -B "$b" "${common[@]}" "$@" >"$dir/$name-configure.log" 2>&1; then
        say "$name: cmake configure failed (see $dir/$name-configure.log)"
        echo "failed (configure)"
        return
    fi
    local have
    have=$(cmake --build "$b" --target help 2>/dev/null)
    for t in $tools; do
        grep -qE "(^|[ .])$t(\$| )" <<<"$have" && built="$built $t"
    done
    say "building $name:$built (-j$jobs, nice; a first build takes a long while on 2 cores)"
    if ! nice -n 10 cmake --build "$b" -j "$jobs" --target $built >"$dir/$name-build.log" 2>&1; then
        say "$name: build failed (see $dir/$name-build.log)"
        echo "failed (build)"
        return
    fi
    smoke "$b/bin"
}

results=()
v=$(build_one native -DGGML_NATIVE=ON | tail -n1)
results+=("native|$v")
say "native: $v"
if has amx_int8 || has amx_tile || [ $force_noamx = 1 ]; then
    # Explicit flags from /proc/cpuinfo instead of -march=native, AMX off.
    f=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
    for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 sse4_2:SSE42 avx_vnni:AVX_VNNI \
        avx512f:AVX512 avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
        if has "${pair%%:*}"; then f+=("-DGGML_${pair#*:}=ON"); else f+=("-DGGML_${pair#*:}=OFF"); fi
    done
    v=$(build_one noamx "${f[@]}" | tail -n1)
    results+=("noamx|$v")
    say "noamx: $v"
else
    say "this CPU has no AMX: no second (AMX-off) build"
fi

if [ $want_avx2 = 1 ]; then
    f=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
        -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF
        -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
        -DGGML_AMX_BF16=OFF)
    v=$(build_one avx2 "${f[@]}" | tail -n1)
    results+=("avx2|$v")
    say "avx2: $v"
fi

# ---- 4. record
# An AVX2 build from an earlier run (with --avx2) stays recorded when this run did not make
# one (e.g. --tools llama-server alone): the record lists every build that is there.
if [ $want_avx2 = 0 ] && [ -d "$dir/avx2/bin" ] && [ -f "$dir/peer.env" ] &&
    grep -q '^PEER_BUILDS=.*avx2' "$dir/peer.env"; then
    old=$(sed -n 's/^PEER_AVX2_SMOKE="\(.*\)"$/\1/p' "$dir/peer.env")
    results+=("avx2|${old:-untested}")
    say "avx2: kept from the earlier run (${old:-untested})"
fi
{
    echo "# written by scripts/peer_llamacpp.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "PEER_LLAMA_CPP_PYTHON=$pyver"
    echo "PEER_LLAMA_CPP_COMMIT=$commit"
    echo "PEER_CPU=\"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')\""
    builds=""
    for r in "${results[@]}"; do
        n=${r%%|*}
        builds="$builds $n"
        echo "PEER_${n^^}_BIN=$dir/$n/bin"
        echo "PEER_${n^^}_SMOKE=\"${r#*|}\""
    done
    echo "PEER_BUILDS=\"${builds# }\""
} >"$dir/peer.env"

ok=0
for r in "${results[@]}"; do
    n=${r%%|*}
    echo "peer $n: $dir/$n/bin (${r#*|})"
    [ "${r#*|}" = ok ] && ok=1
done
echo "llama.cpp $commit (llama-cpp-python $pyver); record: $dir/peer.env"
[ $ok = 1 ] || { say "no build passed its smoke test"; exit 1; }
