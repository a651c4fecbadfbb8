#!/usr/bin/env bash
# The thread pool against OpenMP, idle and under load (scripts/pool_bench.c).
#
#   bash scripts/pool_bench.sh [bench]   many small jobs (dot products of 16 KiB .. 4 MiB
#                                        split over the threads), for serial, the pool at
#                                        2 threads (one slice per thread, and 4 tasks per
#                                        thread), OpenMP at 2 threads with the default
#                                        wait policy and with OMP_WAIT_POLICY=passive;
#                                        first on the machine as it is, then with one
#                                        competing CPU-bound process (`yes > /dev/null`).
#                                        One JSON object a line on stdout, a table on stderr.
#   bash scripts/pool_bench.sh tsan      the pool's stress driver built with
#                                        -fsanitize=thread (exit 1 on a race report or a
#                                        wrong result)
# Builds into build-bench/ (git-ignored). The goal: under load, 2 threads never slower
# than 1 (pool/serial <= 1).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-bench}
out=build-bench
mkdir -p "$out"
src=(scripts/pool_bench.c runtime/backend/cpu/pool.c runtime/base/base.c)
cflags=(-std=c11 -D_GNU_SOURCE -I. -Wall -Wextra -Werror -Wno-unused-parameter)

if [ "$mode" = tsan ]; then
    # No OpenMP here: libgomp is not instrumented and would drown the report in noise.
    gcc "${cflags[@]}" -O1 -g -fsanitize=thread "${src[@]}" -o "$out/pool_bench_tsan" -lpthread -lm
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" "$out/pool_bench_tsan" --stress
    exit $?
fi

gcc "${cflags[@]}" -O2 -fopenmp "${src[@]}" -o "$out/pool_bench" -lpthread -lm
B=$out/pool_bench
jobs_for() { # keep each measurement near 0.1-0.3 s per batch
    case $1 in 16) echo 10000 ;; 256) echo 2000 ;; *) echo 150 ;; esac
}
load_pid=""
cleanup() { [ -n "$load_pid" ] && kill "$load_pid" 2>/dev/null || true; }
trap cleanup EXIT

rounds=${POOL_BENCH_ROUNDS:-5}
run_set() { # LABEL: configurations interleaved (ABCDE ABCDE ...), one line per run
    local label=$1 kb j cfg line r
    for kb in 16 256 4096; do
        j=$(jobs_for $kb)
        for r in $(seq 1 "$rounds"); do
            for cfg in serial pool pool-split4 omp omp-passive; do
                case $cfg in
                serial) line=$("$B" --impl serial --kb $kb --jobs $j --batches 3) ;;
                pool) line=$("$B" --impl pool --threads 2 --kb $kb --jobs $j --batches 3) ;;
                pool-split4)
                    line=$("$B" --impl pool --threads 2 --split 4 --kb $kb --jobs $j --batches 3) ;;
                omp)
                    line=$(env -u OMP_WAIT_POLICY "$B" --impl omp --threads 2 --kb $kb --jobs $j \
                        --batches 3) ;;
                omp-passive)
                    line=$(OMP_WAIT_POLICY=passive "$B" --impl omp --threads 2 --kb $kb --jobs $j \
                        --batches 3) ;;
                esac
                echo "{\"load\": \"$label\", \"cfg\": \"$cfg\", \"round\": $r, \"loadavg\": \"$(cut -d' ' -f1 /proc/loadavg)\", ${line#\{}"
            done
        done
    done
}

{
    run_set none
    yes >/dev/null &
    load_pid=$!
    sleep 0.5
    run_set "yes"
    kill "$load_pid"
    load_pid=""
} | tee "$out/pool_bench.jsonl"

/usr/bin/python3 - "$out/pool_bench.jsonl" >&2 <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cfgs = ["serial", "pool", "pool-split4", "omp", "omp-passive"]
print("us per job (median over interleaved rounds of the median of 3 batches); "
      "x = time / serial time (under 1: 2 threads help)")
print(f"{'load':5} {'KiB':>5} " + " ".join(f"{c:>12}" for c in cfgs) + "  " +
      " ".join(f"{'x ' + c:>14}" for c in cfgs[1:]))
for load in ("none", "yes"):
    for kb in sorted({r["kb"] for r in rows}):
        g = {}
        for c in cfgs:
            xs = sorted(r["us_per_job"] for r in rows
                        if r["load"] == load and r["kb"] == kb and r["cfg"] == c)
            if xs: g[c] = xs[len(xs) // 2]
        if len(g) < len(cfgs): continue
        print(f"{load:5} {kb:5} " + " ".join(f"{g[c]:12.2f}" for c in cfgs) + "  " +
              " ".join(f"{g[c] / g['serial']:14.3f}" for c in cfgs[1:]))
EOF
