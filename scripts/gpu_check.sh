#!/usr/bin/env bash
# scripts/gpu_check.sh: every GPU check of the CUDA backend in one run, sized for under 8
# minutes on one H200 (the device tool's timeout_s 540). Prints ONE JSON object on stdout
# (progress on stderr) and keeps every step's output under OUTDIR.
#
#   bash scripts/gpu_check.sh --prepare   HERE (nvcc, no GPU): builds gpu-carry/, everything
#                                         the device run needs, and checks it fits the carry
#   bash scripts/gpu_check.sh [OUTDIR]    ON THE GPU MACHINE, with gpu-carry/ carried (the
#                                         device tool's carry: ["gpu-carry"]); OUTDIR:
#                                         $OUT/gpu_check if $OUT is set, else out/gpu_check
#
# gpu-carry/ (about 25 MB) holds bin/ (specdec, the GPU test programs, and two CUDA backend
# modules built for sm_90 with the CUDA runtime linked in statically: libspecdec_cuda.so,
# which needs the device's cuBLAS 13, and libspecdec_cuda_nocublas.so, which needs only the
# GPU driver and runs prefill on the batch-invariant kernels), lib/ (every shared library
# those programs need beyond glibc and the GPU driver: jansson, Criterion and its
# dependencies, libgomp, libstdc++), and manifest.txt (how it was built, sha256 of every
# file). On the device nothing is built, installed or searched for: the script restores
# the execute bits the copy may lose, checks the manifest, asks the dynamic loader (ldd)
# whether the device has cuBLAS and otherwise uses the no-cuBLAS module (saying so in the
# JSON), and makes its models with the carried specdec (synth; quantize to Q4_K_M), since
# the device reaches no network.
#
# Steps (each with its own timeout; none stops the others; a failed step is reported with
# its exit status):
#   1. device facts (nvidia-smi), the carry check
#   2. op tests: test_cuda_math (host math), test_backend (every op of every backend against
#      float64), test_backend_cuda (every op against the CPU backend, batch == single bit for
#      bit, graph replays == ops one by one, model-level checks, greedy speculative ==
#      target alone), test_backend_cuda_cli (module loading, device errors), and
#      test_backend_cuda's model tests again with SD_CUDA_GRAPHS=0
#   3. synth pairs (tinyllama: 1.1B target, 58M draft) in Q8_0, and in Q4_K_M (quantize)
#   4. GPU vs CPU: specdec compare (logits, top-1 agreement, batch == single steps) per pair,
#      and a split over 1 GPU against the unsplit GPU; greedy generate on the GPU vs on the
#      CPU, token for token
#   5. bench --kernels per pair: decode tok/s against the HBM roof (device-to-device
#      copy), v(K+1) for K+1 = 1..17, prefill; Q8_0 again with SD_CUDA_GRAPHS=0
#   6. per-op CUDA event timings (SD_CUDA_PROFILE) of a greedy generate per pair
#   7. bench A/B per pair, greedy, K = 1, 2, 4, 8: greedy speculative == target alone for
#      every K, the speedup at K = 4
#   8. the 7B shape (llama7b target, Q8_0) with bench --kernels, if 150 s are left
#   9. the batcher on the device (what generate and serve run: a paged KV cache, blocks
#      reached through block tables): greedy target-alone and speculative (K 4) text
#      through generate's batcher (F16 KV), and target alone through the old loop (-sm row:
#      a tensor-parallel target over every GPU, one here, takes it; one GPU's split gives the
#      unsplit bits), and the batcher's target alone again without CUDA graphs;
#      speculative, the loop and no graphs must give the batcher's target-alone tokens
#      ("batcher" in the JSON with the decode ms per token of each, one line on stderr)
# GPU_CHECK_ONLY=batcher: steps 1, test_backend_cuda and step 9 on a small synth pair (Q8_0)
# only (about a minute).
# A dry run of the plumbing without a GPU: GPU_CHECK_DEVICE=cpu GPU_CHECK_PRESET=tiny
# GPU_CHECK_PRESET_7B=tiny bash scripts/gpu_check.sh /tmp/gc (about 2 minutes; "ok" is
# then false: the GPU tests skip, which is not expected on a GPU machine).
# The summary's "ok" is false when a step failed, a test failed or crashed, speculative
# differed from target alone, the float-weight model's GPU greedy text differed from the
# CPU's (quantized models' may differ: docs/gpu.md), or a test skipped without a reason listed in EXPECTED_SKIPS below
# (a skip is a failure unless expected and explained).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT="$(pwd)"
CARRY="$ROOT/gpu-carry"

log() { echo "gpu_check: $*" >&2; }
die() {
    echo "gpu_check: ERROR: $*" >&2
    exit 1
}

# Skips a GPU machine may show, with why they are expected (an extended regex over the
# "[SKIP] suite::test: reason" line, a tab, the explanation).
EXPECTED_SKIPS=$(
    cat <<'EOF'
a CUDA device is present	the no-GPU error paths of test_backend_cuda_cli cannot be reached where a GPU is
shared data|SD_SHARED_DATA|stories260K	../shared/data is not carried to the device
Test is disabled	the cuda_ops tests left out by a --filter (the no-graphs rerun runs cuda_model/* only)
EOF
)

# ------------------------------------------------------------------ --prepare (no GPU here)
if [ "${1:-}" = "--prepare" ]; then
    command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || die "--prepare needs nvcc"
    export PATH="$PATH:/usr/local/cuda/bin"
    J="${GPU_CHECK_JOBS:-2}"
    common=(-DCMAKE_BUILD_TYPE=Release -DSD_CUDA=ON -DSD_NCCL=OFF -DCMAKE_CUDA_ARCHITECTURES=90
        -DCMAKE_CUDA_RUNTIME_LIBRARY=Static)
    B="$ROOT/build-gpu-carry" BN="$ROOT/build-gpu-carry-nocublas"
    cmake -S . -B "$B" "${common[@]}" -DSD_CUBLAS=ON -DSD_BUILD_TESTS=ON >&2 || die "cmake failed"
    cmake --build "$B" -j "$J" --target specdec specdec_cuda test_cuda_math test_backend \
        test_backend_cuda test_backend_cuda_cli >&2 || die "build failed"
    cmake -S . -B "$BN" "${common[@]}" -DSD_CUBLAS=OFF -DSD_BUILD_TESTS=OFF >&2 ||
        die "cmake (no cuBLAS) failed"
    cmake --build "$BN" -j "$J" --target specdec_cuda >&2 || die "build (no cuBLAS) failed"
    rm -rf "$CARRY"
    mkdir -p "$CARRY/bin" "$CARRY/lib"
    for f in specdec test_cuda_math test_backend test_backend_cuda test_backend_cuda_cli \
        libspecdec_cuda.so; do
        cp "$B/$f" "$CARRY/bin/" || die "missing $B/$f"
    done
    cp "$BN/libspecdec_cuda.so" "$CARRY/bin/libspecdec_cuda_nocublas.so"
    # Shared libraries beyond glibc, the GPU driver and the CUDA libraries of the device.
    for f in "$CARRY"/bin/*; do
        ldd "$f" | awk '/=> \// {print $3}'
    done | sort -u | while read -r lib; do
        case "$(basename "$lib")" in
        libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libresolv.so* | \
            libutil.so* | ld-linux* | libcuda.so* | libcudart.so* | libcublas* | libnccl*) ;;
        *) cp -L "$lib" "$CARRY/lib/" ;;
        esac
    done
    {
        echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(ldd --version | head -n 1)"
        echo "git: $(git describe --always --dirty 2>/dev/null || echo unknown)"
        echo "nvcc: $(nvcc --version | tail -n 1)"
        echo "cmake: ${common[*]}"
        (cd "$CARRY" && find bin lib -type f | sort | xargs sha256sum)
    } >"$CARRY/manifest.txt"
    kb=$(du -sk "$CARRY" | cut -f1)
    log "prepared $CARRY: $((kb / 1024)) MiB (carry it: the device tool's carry [\"gpu-carry\"])"
    [ "$kb" -le $((48 * 1024)) ] || die "gpu-carry/ is $((kb / 1024)) MiB: over the 48 MiB this script allows itself of the carry's 64"
    exit 0
fi

# ------------------------------------------------------------------ on the GPU machine
if [ -n "${1:-}" ]; then
    R="$1"
elif [ -n "${OUT:-}" ]; then
    R="$OUT/gpu_check"
else
    R="$ROOT/out/gpu_check"
fi
mkdir -p "$R" || die "cannot create $R"
T0=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-470} # seconds for everything (8 minutes, less a margin)
DEV=${GPU_CHECK_DEVICE:-cuda}     # cpu: a dry run of the plumbing (GPU tests then fail)
PRESET="${GPU_CHECK_PRESET:-tinyllama}"
M="${GPU_CHECK_MODELS:-/tmp/specdec_gpu_models}" # models: large, outside the repository
STEPS="$R/steps.tsv"
: >"$STEPS"
left() { echo $((BUDGET - ($(date +%s) - T0))); }

[ -f "$CARRY/manifest.txt" ] && [ -f "$CARRY/bin/specdec" ] ||
    die "no gpu-carry/: run 'bash scripts/gpu_check.sh --prepare' where nvcc is, and carry [\"gpu-carry\"]"
chmod +x "$CARRY"/bin/* 2>/dev/null # a copy may drop execute bits
BIN="$CARRY/bin"
SD="$BIN/specdec"
LDP="$CARRY/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
carry_ok=true
(cd "$CARRY" && sed -n '/^[0-9a-f]\{64\}  /p' manifest.txt | sha256sum --quiet -c -) >"$R/carry_check.txt" 2>&1 ||
    carry_ok=false
# The module: with cuBLAS when the device's loader resolves it, else without.
if LD_LIBRARY_PATH="$LDP" ldd "$BIN/libspecdec_cuda.so" >"$R/ldd_module.txt" 2>&1 &&
    ! grep -q "not found" "$R/ldd_module.txt"; then
    MODULE="$BIN/libspecdec_cuda.so"
    MODULE_NOTE="cuBLAS found by the loader: prefill of 18+ tokens on cuBLAS"
else
    MODULE="$BIN/libspecdec_cuda_nocublas.so"
    MODULE_NOTE="cuBLAS not on this machine ($(grep "not found" "$R/ldd_module.txt" | awk '{print $1}' | tr '\n' ' ')): the module without it, prefill on the batch-invariant kernels"
fi
log "module: $MODULE ($MODULE_NOTE)"

# step NAME TIMEOUT_S CMD...: run with a timeout (never beyond the budget), the carried
# libraries and module, stdout / stderr to $R/NAME.out / .err, one line in steps.tsv.
step() {
    local name="$1" t="$2"
    shift 2
    local l
    l=$(left)
    if [ "$l" -le 5 ]; then
        log "$name: not run (time budget spent)"
        printf '%s\tnot run: budget spent\t0\n' "$name" >>"$STEPS"
        return 125
    fi
    [ "$t" -gt "$l" ] && t="$l"
    log "$name (timeout ${t}s, ${l}s left)"
    local s0 rc
    s0=$(date +%s)
    timeout --signal=KILL "$t" env LD_LIBRARY_PATH="$LDP" SD_CUDA_MODULE="$MODULE" \
        SD_TEST_SPECDEC="$SD" "$@" >"$R/$name.out" 2>"$R/$name.err"
    rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - s0))" >>"$STEPS"
    [ "$rc" -ne 0 ] && log "$name: exit $rc: $(tail -n 2 "$R/$name.err" | tr '\n' ' ')"
    return "$rc"
}

# 1. device facts
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem \
        --format=csv,noheader >"$R/device.csv" 2>&1 || true
else
    echo "nvidia-smi not found" >"$R/device.csv"
fi
log "device: $(head -n 1 "$R/device.csv")"
step version 10 "$SD" --version

ONLY="${GPU_CHECK_ONLY:-}"
PROMPT="Once upon a time"
PAIRS=""
GREEDY_SET="" # models whose GPU greedy text is compared with the CPU's (below)

# 9. the batcher on the device: label, target, config (run below, or alone with ONLY=batcher)
BATCHER_PAIRS=""
batcher_checks() {
    local p="$1" tgt="$2" cfg="$3"
    BATCHER_PAIRS="$BATCHER_PAIRS $p"
    local g=(--device "$DEV" --kv-type f16 -p "$PROMPT" -n 64 --temp 0 --ignore-eos --json -v)
    step "batcher_alone_$p" 90 "$SD" generate -m "$tgt" --no-draft "${g[@]}"
    step "batcher_spec_$p" 90 "$SD" generate --config "$cfg" -k 4 --draft-policy fixed "${g[@]}"
    step "loop_alone_$p" 90 "$SD" generate -m "$tgt" --no-draft -sm row "${g[@]}"
    # the batcher's decode step without CUDA graphs (what the graphs of a paged step save)
    step "batcher_alone_nographs_$p" 90 env SD_CUDA_GRAPHS=0 "$SD" generate -m "$tgt" --no-draft "${g[@]}"
}

# 2. op tests
[ -z "$ONLY" ] && step test_cuda_math 60 "$BIN/test_cuda_math" --jobs 1 --verbose
[ -z "$ONLY" ] && step test_backend 90 "$BIN/test_backend" --jobs 1 --verbose
step test_backend_cuda 200 "$BIN/test_backend_cuda" --jobs 1 --verbose
if [ -z "$ONLY" ]; then
    step test_backend_cuda_cli 60 "$BIN/test_backend_cuda_cli" --jobs 1 --verbose
    step test_backend_cuda_nographs 120 env SD_CUDA_GRAPHS=0 "$BIN/test_backend_cuda" --jobs 1 \
        --verbose --filter 'cuda_model/*'
fi

if [ "$ONLY" = batcher ]; then
    mkdir -p "$M"
    [ -f "$M/small/pair.json" ] || step synth_small 90 "$SD" synth --preset "${GPU_CHECK_PRESET_BATCHER:-small}" --type q8_0 -o "$M/small"
    [ -f "$M/small/pair.json" ] && batcher_checks small "$M/small/target.gguf" "$M/small/pair.json"
else

# 3. pairs: synth Q8_0, then a Q4_K_M copy of it (target and draft)
mkdir -p "$M"
[ -f "$M/q8_0/pair.json" ] || step synth_q8_0 150 "$SD" synth --preset "$PRESET" --type q8_0 -o "$M/q8_0"
if [ -f "$M/q8_0/pair.json" ] && [ ! -f "$M/q4_k_m/pair.json" ]; then
    mkdir -p "$M/q4_k_m"
    step quantize_q4_k_m_target 120 "$SD" quantize "$M/q8_0/target.gguf" "$M/q4_k_m/target.gguf" q4_k_m &&
        step quantize_q4_k_m_draft 60 "$SD" quantize "$M/q8_0/draft.gguf" "$M/q4_k_m/draft.gguf" q4_k_m &&
        sed 's/"description": "[^"]*"/"description": "the q8_0 pair quantized to q4_k_m"/' \
            "$M/q8_0/pair.json" >"$M/q4_k_m/pair.json"
fi
for p in q8_0 q4_k_m; do [ -f "$M/$p/pair.json" ] && PAIRS="$PAIRS $p"; done
GREEDY_SET="f32 $PAIRS"
# A float-weight model (synth small, F32 target only, F32 KV): no activation is quantized, so
# the GPU's greedy text must be the CPU's (quantized weights turn the few-ulp differences of
# the reductions and the device libm into int8 rounding steps: docs/gpu.md, "The cause").
[ -f "$M/f32/target.gguf" ] || step synth_f32 90 "$SD" synth --preset small --type f32 --only target -o "$M/f32"
if [ -f "$M/f32/target.gguf" ]; then
    step greedy_gpu_f32 60 "$SD" generate -m "$M/f32/target.gguf" --device "$DEV" -p "Once upon a time" \
        -n 64 --temp 0 --ignore-eos --no-draft --kv-type f32 --json
    step greedy_cpu_f32 90 "$SD" generate -m "$M/f32/target.gguf" --device cpu -p "Once upon a time" \
        -n 64 --temp 0 --ignore-eos --no-draft --kv-type f32 --json
fi

for p in $PAIRS; do
    # 4. GPU vs CPU
    step "compare_$p" 120 "$SD" compare -m "$M/$p/target.gguf" --device "$DEV" -n 64 --json "$R/compare_$p.json"
    step "compare_${p}_split1" 90 "$SD" compare -m "$M/$p/target.gguf" --device "$DEV" --device-ref "$DEV" \
        --tensor-split 1 -n 32 --json "$R/compare_${p}_split1.json"
    step "greedy_gpu_$p" 60 "$SD" generate -m "$M/$p/target.gguf" --device "$DEV" -p "$PROMPT" -n 64 \
        --temp 0 --ignore-eos --no-draft --json
    step "greedy_cpu_$p" 90 "$SD" generate -m "$M/$p/target.gguf" --device cpu -p "$PROMPT" -n 64 \
        --temp 0 --ignore-eos --no-draft --json
    # 5. kernels
    step "kernels_$p" 120 "$SD" bench --config "$M/$p/pair.json" --kernels --device "$DEV" --reps 9 \
        --pos 128 --prefill 512 --bw-mib 2048 --json "$R/kernels_$p.json"
done
[ -f "$M/q8_0/pair.json" ] && step kernels_q8_0_nographs 90 env SD_CUDA_GRAPHS=0 "$SD" bench \
    --config "$M/q8_0/pair.json" --kernels --device "$DEV" --reps 5 --pos 128 --prefill 512 \
    --no-roof --json "$R/kernels_q8_0_nographs.json"
for p in $PAIRS; do
    # 6. per-op timings (graphs off while profiling), target and draft backends
    rm -f "$R/profile_$p.jsonl"
    step "profile_$p" 60 env SD_CUDA_PROFILE="$R/profile_$p.jsonl" "$SD" generate --config \
        "$M/$p/pair.json" --device "$DEV" -p "$PROMPT" -n 48 --temp 0 --ignore-eos -k 4 \
        --draft-policy fixed --json
    # 7. speculative A/B
    step "ab_$p" 150 "$SD" bench --config "$M/$p/pair.json" --device "$DEV" --k-list 1,2,4,8 --runs 3 \
        -n 128 --warmup 1 --reps 5 --json "$R/ab_$p.json"
done

# 8. the 7B shape
if [ "$(left)" -ge 150 ]; then
    [ -f "$M/l7-q8_0/target.gguf" ] || step synth_llama7b_q8_0 120 "$SD" synth \
        --preset "${GPU_CHECK_PRESET_7B:-llama7b}" --type q8_0 --only target -o "$M/l7-q8_0"
    [ -f "$M/l7-q8_0/target.gguf" ] && step kernels_7b_q8_0 120 "$SD" bench -m "$M/l7-q8_0/target.gguf" \
        --kernels --device "$DEV" --reps 5 --pos 128 --prefill 512 --bw-mib 2048 --json "$R/kernels_7b_q8_0.json"
else
    log "llama7b: not run (under 150 s left)"
    printf 'llama7b\tnot run: under 150 s left\t0\n' >>"$STEPS"
fi

# 9. the batcher on the device
[ -f "$M/q8_0/pair.json" ] && batcher_checks q8_0 "$M/q8_0/target.gguf" "$M/q8_0/pair.json"
fi # ONLY

# ------------------------------------------------------------------ one JSON object (bash only)
json_str() { # a JSON string literal of $1
    local s="$1"
    s="${s//\\/\\\\}"
    s="${s//\"/\\\"}"
    s="${s//$'\t'/\\t}"
    s="${s//$'\r'/}"
    s="${s//$'\n'/\\n}"
    printf '"%s"' "$(printf '%s' "$s" | tr -d '\000-\010\013\014\016-\037')"
}
json_file() { # the JSON file $1, or null
    if [ -s "$1" ]; then cat "$1"; else printf 'null'; fi
}
ok=true
$carry_ok || ok=false

steps_json=""
while IFS=$'\t' read -r name rc sec; do
    [ -n "$steps_json" ] && steps_json="$steps_json, "
    [ "$rc" = 0 ] || ok=false
    tail_txt=""
    [ "$rc" != 0 ] && [ -f "$R/$name.err" ] && tail_txt=$(tail -c 600 "$R/$name.err")
    steps_json="$steps_json{\"step\": $(json_str "$name"), \"rc\": $(json_str "$rc"), \"seconds\": ${sec:-0}, \"stderr_tail\": $(json_str "$tail_txt")}"
done <"$STEPS"

# Criterion: counts, failures, and every skip judged against EXPECTED_SKIPS.
tests_json=""
for t in test_cuda_math test_backend test_backend_cuda test_backend_cuda_cli test_backend_cuda_nographs; do
    f="$R/$t.err"
    [ -f "$f" ] || continue
    all=$(cat "$R/$t.out" "$f" 2>/dev/null)
    syn=$(printf '%s\n' "$all" | sed -n 's/.*Tested: \([0-9]*\) | Passing: \([0-9]*\) | Failing: \([0-9]*\) | Crashing: \([0-9]*\).*/\1 \2 \3 \4/p' | tail -n 1)
    read -r tested passing failing crashing <<<"${syn:-0 0 0 0}"
    [ -z "$syn" ] && ok=false
    [ "${failing:-0}" = 0 ] && [ "${crashing:-0}" = 0 ] || ok=false
    fails=""
    while IFS= read -r line; do
        [ -n "$fails" ] && fails="$fails, "
        fails="$fails$(json_str "$line")"
    done < <(printf '%s\n' "$all" | grep -E '^\[FAIL\]|^\[----\].*(Assertion|CRASH)' | head -n 20)
    skips=""
    while IFS= read -r line; do
        [ -z "$line" ] && continue
        why=""
        while IFS=$'\t' read -r pat reason; do
            [ -n "$pat" ] && printf '%s' "$line" | grep -Eq "$pat" && why="$reason" && break
        done <<<"$EXPECTED_SKIPS"
        [ -z "$why" ] && ok=false
        [ -n "$skips" ] && skips="$skips, "
        skips="$skips{\"skip\": $(json_str "$line"), \"expected\": $([ -n "$why" ] && echo true || echo false), \"why\": $(json_str "${why:-not expected: counts as a failure}")}"
    done < <(printf '%s\n' "$all" | grep -E '^\[SKIP\]')
    [ -n "$tests_json" ] && tests_json="$tests_json, "
    tests_json="$tests_json$(json_str "$t"): {\"tested\": ${tested:-0}, \"passing\": ${passing:-0}, \"failing\": ${failing:-0}, \"crashing\": ${crashing:-0}, \"failures\": [$fails], \"skips\": [$skips]}"
done

# Greedy: the GPU's tokens == the CPU's, per pair; speculative == target alone (bench A/B).
greedy_json=""
for p in $GREEDY_SET; do
    g=$(grep -o '"tokens": *\[[^]]*\]' "$R/greedy_gpu_$p.out" 2>/dev/null | head -n 1)
    c=$(grep -o '"tokens": *\[[^]]*\]' "$R/greedy_cpu_$p.out" 2>/dev/null | head -n 1)
    same=false first=null
    [ -n "$g" ] && [ "$g" = "$c" ] && same=true
    if ! $same && [ -n "$g" ] && [ -n "$c" ]; then # index of the first differing token
        IFS=, read -ra ga <<<"$(printf '%s' "$g" | sed 's/.*\[//; s/\].*//')"
        IFS=, read -ra ca <<<"$(printf '%s' "$c" | sed 's/.*\[//; s/\].*//')"
        for ((i = 0; i < ${#ga[@]}; i++)); do
            [ "${ga[$i]}" != "${ca[$i]:-}" ] && first=$i && break
        done
    fi
    # GPU == CPU is required with float weights only (quantized: expected to differ, docs/gpu.md)
    [ "$p" = f32 ] && ! $same && ok=false
    ab=$(grep -o '"greedy_match": *[a-z]*' "$R/ab_$p.json" 2>/dev/null | head -n 1 | sed 's/.*: *//')
    [ "$p" = f32 ] || [ "$ab" = true ] || ok=false
    [ -n "$greedy_json" ] && greedy_json="$greedy_json, "
    # the GPU's batched passes must give the bits of its single steps (compare's check)
    bi=$(grep -o '"batch_invariant": *[a-z]*' "$R/compare_$p.json" 2>/dev/null | sed 's/.*: *//')
    [ "$p" = f32 ] || [ "$bi" = true ] || ok=false
    greedy_json="$greedy_json$(json_str "$p"): {\"gpu_equals_cpu\": $same, \"first_difference\": $first, \"speculative_equals_target_alone\": ${ab:-null}, \"gpu_batch_invariant\": ${bi:-null}, \"gpu_tokens\": $(json_str "$g"), \"cpu_tokens\": $(json_str "$c")}"
done

# The batcher on the device: its target-alone tokens == its speculative tokens == those of
# the row split (-sm row) and of the run without graphs (every run is the batcher's step: the
# old loop and -v's path line are gone).
toks() { grep -o '"tokens": *\[[^]]*\]' "$R/$1.out" 2>/dev/null | head -n 1; }
batcher_json=""
for p in $BATCHER_PAIRS; do
    a=$(toks "batcher_alone_$p") sp=$(toks "batcher_spec_$p") lo=$(toks "loop_alone_$p")
    spec_eq=false loop_eq=false
    [ -n "$a" ] && [ "$a" = "$sp" ] && spec_eq=true
    [ -n "$a" ] && [ "$a" = "$lo" ] && loop_eq=true
    stat() { grep -o "\"$2\": *[0-9.e+-]*" "$R/$1.out" 2>/dev/null | head -n 1 | sed 's/.*: *//'; }
    acc=$(stat "batcher_spec_$p" acceptance_rate)
    ng=$(toks "batcher_alone_nographs_$p")
    ng_eq=false
    [ -n "$a" ] && [ "$a" = "$ng" ] && ng_eq=true
    $spec_eq && $loop_eq && $ng_eq || ok=false
    # decode: ms per token of target alone (itl), batcher (graphs, no graphs) and the loop
    itl="$(stat "batcher_alone_$p" itl_ms) $(stat "batcher_alone_nographs_$p" itl_ms) $(stat "loop_alone_$p" itl_ms)"
    log "batcher ($p): speculative == target alone: $spec_eq, batcher == loop: $loop_eq, graphs == none: $ng_eq, acceptance ${acc:-?}, itl ms batcher / no graphs / loop: $itl, speculative tok/s $(stat "batcher_spec_$p" tokens_per_s)"
    [ -n "$batcher_json" ] && batcher_json="$batcher_json, "
    batcher_json="$batcher_json$(json_str "$p"): {\"speculative_equals_target_alone\": $spec_eq, \"batcher_equals_loop\": $loop_eq, \"graphs_equal_no_graphs\": $ng_eq, \"acceptance\": $(json_str "${acc:-}"), \"itl_ms_batcher_nographs_loop\": $(json_str "$itl"), \"speculative_tokens_per_s\": $(json_str "$(stat "batcher_spec_$p" tokens_per_s)"), \"tokens\": $(json_str "$a")}"
done

files_json=""
for f in "$R"/compare_*.json "$R"/kernels_*.json "$R"/ab_*.json; do
    [ -f "$f" ] || continue
    [ -n "$files_json" ] && files_json="$files_json, "
    files_json="$files_json$(json_str "$(basename "$f" .json)"): $(json_file "$f")"
done
prof_json=""
for f in "$R"/profile_*.jsonl; do
    [ -f "$f" ] || continue
    [ -n "$prof_json" ] && prof_json="$prof_json, "
    prof_json="$prof_json$(json_str "$(basename "$f" .jsonl)"): [$(paste -sd, "$f")]"
done

echo "{\"ok\": $ok, \"elapsed_s\": $(($(date +%s) - T0)), \"device\": $(json_str "$(cat "$R/device.csv")"), \"device_flag\": $(json_str "$DEV"), \"carry\": {\"manifest_ok\": $carry_ok, \"manifest\": $(json_str "$(sed -n '1,4p' "$CARRY/manifest.txt")"), \"module\": $(json_str "$(basename "$MODULE")"), \"module_note\": $(json_str "$MODULE_NOTE")}, \"version\": $(json_str "$(cat "$R/version.out" 2>/dev/null)"), \"steps\": [$steps_json], \"tests\": {$tests_json}, \"greedy\": {$greedy_json}, \"batcher\": {$batcher_json}, \"results\": {$files_json}, \"op_timings\": {$prof_json}}" | tee "$R/gpu_check.json"
