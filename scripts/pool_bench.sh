#!/usr/bin/env bash
# The thread pool against OpenMP, idle and under load (scripts/pool_bench.c).
#
#   bash scripts/pool_bench.sh [bench]   many small jobs (dot products of 16 KiB .. 4 MiB
#                                        split over the threads), for serial, the pool at
#                                        2 threads, OpenMP at 2 threads with the default
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
    case $1 in 16) echo 20000 ;; 256) echo 4000 ;; *) echo 300 ;; esac
}
load_pid=""
cleanup() { [ -n "$load_pid" ] && kill "$load_pid" 2>/dev/null || true; }
trap cleanup EXIT

run_set() { # LABEL
    local label=$1 kb j
    for kb in 16 256 4096; do
        j=$(jobs_for $kb)
        for cfg in "serial" "pool" "omp default" "omp passive"; do
            set -- $cfg
            local impl=$1 pol=${2:-}
            local line
            if [ "$impl" = omp ]; then
                if [ "$pol" = passive ]; then
                    line=$(OMP_WAIT_POLICY=passive "$B" --impl omp --threads 2 --kb $kb --jobs $j)
                else
                    line=$(env -u OMP_WAIT_POLICY "$B" --impl omp --threads 2 --kb $kb --jobs $j)
                fi
            else
                line=$("$B" --impl "$impl" --threads 2 --kb $kb --jobs $j)
            fi
            echo "{\"load\": \"$label\", \"loadavg\": \"$(cut -d' ' -f1 /proc/loadavg)\", ${line#\{}"
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
key = lambda r: (r["load"], r["kb"])
print(f"{'load':5} {'KiB':>5} {'serial us':>10} {'pool/2 us':>10} {'omp/2 us':>10} "
      f"{'omp-pass us':>11} {'pool/serial':>11} {'omp/serial':>10} {'omp-p/serial':>12}")
for k in sorted({key(r) for r in rows}, key=lambda k: (k[0] != "none", k[1])):
    g = {(r["impl"], r["omp_wait_policy"]): r["us_per_job"] for r in rows if key(r) == k}
    s, p, o, op = g[("serial", "-")], g[("pool", "-")], g[("omp", "default")], g[("omp", "passive")]
    print(f"{k[0]:5} {k[1]:5} {s:10.2f} {p:10.2f} {o:10.2f} {op:11.2f} {p/s:11.3f} {o/s:10.3f} {op/s:12.3f}")
EOF
