#!/usr/bin/env bash
# scripts/gpu_check.sh: the GPU checks of the CUDA backend in one run (issue 11), sized for
# 8 minutes on one H200. Prints ONE JSON object on stdout (progress on stderr) and keeps
# every step's output under OUTDIR.
#
#   bash scripts/gpu_check.sh [OUTDIR]   on the GPU machine (OUTDIR: $OUT/gpu_check if $OUT is
#                                        set, else out/gpu_check)
#   bash scripts/gpu_check.sh --prepare  HERE, where nvcc is installed but there is no GPU:
#                                        builds gpu-carry/ (specdec and the GPU test binaries
#                                        for sm_90, with the shared libraries the device image
#                                        may lack: jansson, Criterion and its dependencies)
#
# On the GPU machine the script uses gpu-carry/ when it runs there (carry it: the device
# tool's `carry: ["gpu-carry"]`), else builds build-gpu/ with CUDA (needs cmake, nvcc, and
# pkg-config's jansson; Criterion for the op tests). Steps, each with its own timeout, none
# of which stops the others (a failed step is reported with its exit status):
#   1. device facts (nvidia-smi) and the build
#   2. op tests: tests/test_cuda_math (host math), tests/test_backend_cuda (every op against
#      the CPU backend, batch == single bit for bit, model-level checks, greedy speculative ==
#      target-alone on the GPU), again with SD_CUDA_GRAPHS=1 for the model-level part
#   3. synth pairs: tinyllama (1.1B target, 58M draft) in q8_0, q4_0, f16
#   4. GPU vs CPU: specdec compare (top-1 agreement, max logit difference, decode and prefill
#      paths, single steps == batch) per pair; split over 1 GPU vs unsplit (bit-identical)
#   5. specdec bench --kernels --device cuda per pair: decode tok/s and GB/s against the HBM
#      roof measured by a device-to-device copy, v(K+1) for K+1 = 1..17, prefill tok/s;
#      q8_0 again with CUDA graphs
#   6. specdec bench (A/B) on the q8_0 pair, greedy, K = 1, 2, 4, 8: greedy speculative ==
#      target alone for every K, speedup at K = 4 (acceptance ~0.8 by synth's default noise)
#   7. llama7b target (dim 4096, 32 layers) in q8_0, then f16 if time is left: bench --kernels
# No `set -e`: a failing step is recorded (exit status in the JSON's "steps") and the others
# still run; only a missing binary stops the script. -u and pipefail catch script mistakes.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT="$(pwd)"

log() { echo "gpu_check: $*" >&2; }
die() { echo "gpu_check: ERROR: $*" >&2; exit 1; }

CARRY="$ROOT/gpu-carry"

# ------------------------------------------------------------------ --prepare (no GPU here)
if [ "${1:-}" = "--prepare" ]; then
    command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || die "--prepare needs nvcc"
    export PATH="$PATH:/usr/local/cuda/bin"
    B="$ROOT/build-gpu-carry"
    # sm_90 only (H100 / H200), no NCCL: the lent machine has one GPU, and NCCL's 200 MB do
    # not travel. Release, tests on.
    cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSD_CUDA=ON -DSD_NCCL=OFF \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DSD_BUILD_TESTS=ON >&2 || die "cmake failed"
    cmake --build "$B" -j "$(nproc)" --target specdec test_backend_cuda test_cuda_math test_tp >&2 \
        || die "build failed"
    rm -rf "$CARRY"
    mkdir -p "$CARRY/bin" "$CARRY/lib"
    cp "$B/specdec" "$B/test_backend_cuda" "$B/test_cuda_math" "$B/test_tp" "$CARRY/bin/"
    # Shared libraries outside glibc and the CUDA toolkit (the device image has those).
    for f in "$CARRY"/bin/*; do
        ldd "$f" | awk '/=> \// {print $3}'
    done | sort -u | while read -r lib; do
        case "$(basename "$lib")" in
        libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libresolv.so* | libnss* | \
            libutil.so* | ld-linux* | libcuda.so* | libcudart.so* | libcublas* | libnccl* | \
            libstdc++.so* | libgcc_s.so*) ;; # glibc, the C++ runtime and CUDA: the device's own
        *) cp -L "$lib" "$CARRY/lib/" ;;
        esac
    done
    du -sh "$CARRY" >&2
    log "prepared $CARRY (carry it: the device tool's carry [\"gpu-carry\"])"
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
BUDGET=${GPU_CHECK_BUDGET_S:-470} # seconds for everything (the issue's 8 minutes, less margin)
STEPS="$R/steps.tsv"
: >"$STEPS"

left() { echo $((BUDGET - ($(date +%s) - T0))); }

# step NAME TIMEOUT_S CMD...: run with a timeout (never beyond the budget) and the library
# path LDP (set below; only our programs see it), stdout and stderr to $R/NAME.out / .err,
# one line in steps.tsv. Returns the command's status.
step() {
    local name="$1" t="$2"
    shift 2
    local l
    l=$(left)
    if [ "$l" -le 5 ]; then
        log "$name: skipped (time budget spent)"
        printf '%s\tskipped\t0\n' "$name" >>"$STEPS"
        return 125
    fi
    [ "$t" -gt "$l" ] && t="$l"
    log "$name (timeout ${t}s, ${l}s left)"
    local s0 rc
    s0=$(date +%s)
    timeout --signal=KILL "$t" env LD_LIBRARY_PATH="$LDP" "$@" >"$R/$name.out" 2>"$R/$name.err"
    rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - s0))" >>"$STEPS"
    [ "$rc" -ne 0 ] && log "$name: exit $rc (see $R/$name.err): $(tail -n 2 "$R/$name.err" | tr '\n' ' ')"
    return "$rc"
}

# Device facts.
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem \
        --format=csv,noheader >"$R/device.csv" 2>&1 || true
    log "device: $(cat "$R/device.csv")"
else
    echo "nvidia-smi not found" >"$R/device.csv"
fi

# Libraries for our programs (LDP, not exported: python3 and the system tools keep theirs):
# the CUDA toolkit, and NCCL / cuBLAS from pip wheels if that is where they are.
LDP="${LD_LIBRARY_PATH:-}"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && LDP="$LDP:$d"
done
for lib in libnccl.so.2 libcublas.so.13 libcudart.so.13; do
    if ! ldconfig -p 2>/dev/null | grep -q "$lib"; then
        p=$(find /usr /opt -name "$lib" 2>/dev/null | head -n 1)
        [ -n "$p" ] && LDP="$LDP:$(dirname "$p")"
    fi
done

# The binaries: carried, else built here.
BIN=""
if [ -x "$CARRY/bin/specdec" ] &&
    LD_LIBRARY_PATH="$CARRY/lib:$LDP" "$CARRY/bin/specdec" --help >/dev/null 2>&1; then
    LDP="$CARRY/lib:$LDP"
    BIN="$CARRY/bin"
    echo carried >"$R/build_mode"
    log "using the carried binaries in $CARRY"
else
    [ -d "$CARRY" ] && log "carried binaries do not run here: $(LD_LIBRARY_PATH="$CARRY/lib:$LDP" "$CARRY/bin/specdec" --help 2>&1 | head -n 1)"
    export PATH="$PATH:/usr/local/cuda/bin"
    TESTS=OFF
    pkg-config --exists criterion 2>/dev/null && TESTS=ON
    echo "built (tests $TESTS)" >"$R/build_mode"
    step configure 120 cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSD_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DSD_BUILD_TESTS=$TESTS
    step build 300 cmake --build build-gpu -j "$(nproc)"
    [ -x build-gpu/specdec ] || {
        cat "$R/configure.err" "$R/build.err" >&2
        die "no specdec binary: neither gpu-carry/ (run scripts/gpu_check.sh --prepare where nvcc is) nor a build here"
    }
    BIN="$ROOT/build-gpu"
fi
SD="$BIN/specdec"

# 2. op tests
[ -x "$BIN/test_cuda_math" ] && step test_cuda_math 60 "$BIN/test_cuda_math" --jobs 1
[ -x "$BIN/test_backend_cuda" ] && step test_backend_cuda 200 "$BIN/test_backend_cuda" --jobs 1 --verbose
[ -x "$BIN/test_backend_cuda" ] && step test_backend_cuda_graphs 120 \
    env SD_CUDA_GRAPHS=1 "$BIN/test_backend_cuda" --jobs 1 --filter 'cuda_model/*'

# 3. synth pairs (the files are large: outside the repository, under /tmp).
# GPU_CHECK_PRESET=tiny makes a dry run of the whole script in seconds (e.g. on a CPU).
M="${GPU_CHECK_MODELS:-/tmp/specdec_gpu_models}"
PRESET="${GPU_CHECK_PRESET:-tinyllama}"
mkdir -p "$M"
for t in q8_0 q4_0 f16; do
    [ -f "$M/tl-$t/pair.json" ] || step "synth_${PRESET}_$t" 150 "$SD" synth --preset "$PRESET" --type "$t" -o "$M/tl-$t"
done

# 4. GPU vs CPU
for t in q8_0 q4_0 f16; do
    [ -f "$M/tl-$t/target.gguf" ] &&
        step "compare_$t" 90 "$SD" compare -m "$M/tl-$t/target.gguf" --device cuda -n 64 --json "$R/compare_$t.json"
done
[ -f "$M/tl-q8_0/target.gguf" ] && {
    step compare_q8_0_graphs 60 env SD_CUDA_GRAPHS=1 "$SD" compare -m "$M/tl-q8_0/target.gguf" --device cuda -n 32 \
        --json "$R/compare_q8_0_graphs.json"
    step compare_q8_0_split1 60 "$SD" compare -m "$M/tl-q8_0/target.gguf" --device cuda --tensor-split 1 -n 32 \
        --json "$R/compare_q8_0_split1.json"
}

# 5. kernels: decode, v(K+1), prefill, HBM roof
KOPT=(--kernels --device cuda --reps 9 --pos 128 --prefill 512 --bw-mib 2048)
for t in q8_0 q4_0 f16; do
    [ -f "$M/tl-$t/pair.json" ] &&
        step "kernels_$t" 120 "$SD" bench --config "$M/tl-$t/pair.json" "${KOPT[@]}" --json "$R/kernels_$t.json"
done
[ -f "$M/tl-q8_0/pair.json" ] && step kernels_q8_0_graphs 90 env SD_CUDA_GRAPHS=1 "$SD" bench \
    --config "$M/tl-q8_0/pair.json" "${KOPT[@]}" --json "$R/kernels_q8_0_graphs.json"

# 6. speculative A/B on the GPU (greedy)
[ -f "$M/tl-q8_0/pair.json" ] && step ab_q8_0 150 "$SD" bench --config "$M/tl-q8_0/pair.json" \
    --device cuda --k-list 1,2,4,8 --runs 3 -n 128 --warmup 1 --reps 5 --json "$R/ab_q8_0.json"
[ -f "$M/tl-q8_0/pair.json" ] && step ab_q8_0_graphs 90 env SD_CUDA_GRAPHS=1 "$SD" bench \
    --config "$M/tl-q8_0/pair.json" --device cuda -k 4 --runs 3 -n 128 --warmup 1 --reps 5 \
    --json "$R/ab_q8_0_graphs.json"

# 7. the 7B shape
for t in q8_0 f16; do
    if [ "$(left)" -lt 100 ]; then
        log "llama7b $t: skipped (under 100 s left)"
        printf 'llama7b_%s\tskipped\t0\n' "$t" >>"$STEPS"
        continue
    fi
    [ -f "$M/l7-$t/target.gguf" ] || step "synth_llama7b_$t" 200 "$SD" synth --preset "${GPU_CHECK_PRESET_7B:-llama7b}" --type "$t" \
        --only target -o "$M/l7-$t"
    [ -f "$M/l7-$t/target.gguf" ] && step "kernels_7b_$t" 150 "$SD" bench -m "$M/l7-$t/target.gguf" \
        "${KOPT[@]}" --json "$R/kernels_7b_$t.json"
    rm -f "$M/l7-$t/target.gguf" # 7 to 13.5 GB of disk
done

# ------------------------------------------------------------------ one JSON object
python3 - "$R" "$(($(date +%s) - T0))" <<'PY'
import json, os, re, sys
R, elapsed = sys.argv[1], int(sys.argv[2])
def load(name):
    try:
        with open(os.path.join(R, name)) as f:
            return json.load(f)
    except Exception:
        return None
def text(name):
    try:
        with open(os.path.join(R, name)) as f:
            return f.read()
    except Exception:
        return ""
out = {"elapsed_s": elapsed, "build": text("build_mode").strip(),
       "device": text("device.csv").strip()}
steps = []
for line in text("steps.tsv").splitlines():
    name, rc, sec = line.split("\t")
    steps.append({"step": name, "rc": rc, "seconds": int(sec)})
out["steps"] = steps
def criterion(name):
    m = re.search(r"Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)",
                  text(name + ".err") + text(name + ".out"))
    if not m: return None
    r = dict(zip(["tested", "passing", "failing", "crashing"], map(int, m.groups())))
    r["skipped"] = (text(name + ".err") + text(name + ".out")).count("[SKIP]")
    return r
out["op_tests"] = {n: criterion(n) for n in ["test_cuda_math", "test_backend_cuda",
                                            "test_backend_cuda_graphs"]}
out["gpu_vs_cpu"] = {k: load(f"compare_{k}.json") for k in
                     ["q8_0", "q4_0", "f16", "q8_0_graphs", "q8_0_split1"]}
kern = {}
for key, f in [("tinyllama_q8_0", "kernels_q8_0.json"), ("tinyllama_q4_0", "kernels_q4_0.json"),
               ("tinyllama_f16", "kernels_f16.json"),
               ("tinyllama_q8_0_graphs", "kernels_q8_0_graphs.json"),
               ("llama7b_q8_0", "kernels_7b_q8_0.json"), ("llama7b_f16", "kernels_7b_f16.json")]:
    j = load(f)
    if not j: continue
    roof = j["machine"].get("mem_read_gbps")
    out.setdefault("hbm_copy_gbps", roof)
    for mo in j["models"]:
        v = [x["rel_decode"] for x in mo["verify"]]
        kern[key + ("" if mo["role"] == "target" else "_draft")] = {
            "decode_ms": mo["decode_ms"], "decode_tok_s": 1000.0 / mo["decode_ms"],
            "streamed_gbps": mo["decode_gbps_streamed"],
            "fraction_of_hbm_roof": mo["fraction_of_bandwidth"],
            "v_k_plus_1": v, "v5": v[4] if len(v) > 4 else None,
            "v17": v[16] if len(v) > 16 else None,
            "prefill_tok_s": mo["prefill"]["tokens_per_s"], "prefill_n": mo["prefill"]["n_tokens"]}
out["kernels"] = kern
for key, f in [("speculative", "ab_q8_0.json"), ("speculative_graphs", "ab_q8_0_graphs.json")]:
    j = load(f)
    if not j: continue
    out[key] = {"greedy_match_all_k": j.get("greedy_match"),
                "per_k": [{"k": s["k"], "speedup_median": s["speedup"]["median"],
                           "predicted": s["predicted_speedup"], "acceptance": s["acceptance_rate"],
                           "v": s["v"], "c": s["c"], "greedy_match": s["greedy_match"],
                           "target_tok_s": s["target"]["tokens_per_s"]["median"],
                           "spec_tok_s": s["spec"]["tokens_per_s"]["median"]}
                          for s in j["summary"]]}
with open(os.path.join(R, "gpu_check.json"), "w") as f:
    json.dump(out, f, indent=1)
print(json.dumps(out))
PY
