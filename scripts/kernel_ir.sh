#!/usr/bin/env bash
# Instructions (callgrind Ir) per 16-row x 256-column super-block of the packed matmul
# kernels, per type and pass width: total and per token. Builds scripts/kernel_ir.c against
# the Release library (${SD_BUILD:-build-release}) and runs it under
# `valgrind --tool=callgrind --toggle-collect=ir_region`, one run per (type, set, width).
# Valgrind reports no AVX-512 or AVX-VNNI, so only the avx2 (and scalar) sets run under it.
# usage: bash scripts/kernel_ir.sh [--types q4_k,q6_k,q5_0,q8_0] [--toks 1,2,5,9,17]
#                                  [--set avx2] [--rows 256] [--cols 4096]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${SD_BUILD:-build-release}
types=q4_k,q6_k,q5_0,q8_0 toks=1,2,5,9,17 set=avx2 rows=256 cols=4096
while [ $# -gt 1 ]; do
    case $1 in
    --types) types=$2 ;; --toks) toks=$2 ;; --set) set=$2 ;; --rows) rows=$2 ;; --cols) cols=$2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
if [ ! -f $B/CMakeCache.txt ]; then
    cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DSD_CUDA=OFF >/dev/null
fi
cmake --build $B -j2 --target specdec_lib >/dev/null
cc -O2 -g -std=c11 -D_GNU_SOURCE -I. scripts/kernel_ir.c $B/libspecdec_lib.a -fopenmp -lpthread -lm \
    -o $B/kernel_ir
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-5s %-5s %4s %12s %10s %10s\n' type set n Ir Ir/sb Ir/sb/tok
for t in ${types//,/ }; do
    for n in ${toks//,/ }; do
        out=$(valgrind --tool=callgrind --toggle-collect=ir_region --callgrind-out-file=$tmp/cg.out \
            $B/kernel_ir --type $t --set $set --tok $n --rows $rows --cols $cols 2>$tmp/err) || {
            cat $tmp/err >&2
            exit 1
        }
        ir=$(grep -m1 '^summary:' $tmp/cg.out | awk '{print $2}')
        tiles=$(echo "$out" | sed 's/.*"tiles": \([0-9]*\).*/\1/')
        awk -v t=$t -v s=$set -v n=$n -v ir=$ir -v tl=$tiles \
            'BEGIN { printf "%-5s %-5s %4d %12d %10.1f %10.1f\n", t, s, n, ir, ir / tl, ir / tl / n }'
    done
done
