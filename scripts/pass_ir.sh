#!/usr/bin/env bash
# Whole-model instructions per pass width (scripts/pass_ir.c under callgrind): Ir of a pass
# over n tokens, Ir(n) / Ir(1) (a load-independent proxy of v(n) where the pass is
# compute-bound) and, with --annotate, the top functions of each width's profile.
# Valgrind reports no AVX-512 / AVX-VNNI: on an AVX-512 machine run it with SD_KERNELS=avx2
# (the stand-in for an AVX2-only CPU). Builds against ${SD_BUILD:-build-release}.
# usage: SD_KERNELS=avx2 bash scripts/pass_ir.sh M.gguf [--widths 1,2,5,9] [--annotate 25]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${SD_BUILD:-build-release}
model=$1
shift
widths=1,2,5,9 top=0
while [ $# -gt 1 ]; do
    case $1 in
    --widths) widths=$2 ;; --annotate) top=$2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
if [ ! -f $B/CMakeCache.txt ]; then
    cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DSD_CUDA=OFF >/dev/null
fi
cmake --build $B -j2 --target specdec_lib >/dev/null
cc -O2 -g -std=c11 -D_GNU_SOURCE -I. scripts/pass_ir.c $B/libspecdec_lib.a -fopenmp -lpthread -lm \
    -o $B/pass_ir
tmp=${PASS_IR_OUT:-$(mktemp -d)}
mkdir -p "$tmp"
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$tmp/cg.out \
    $B/pass_ir --model "$model" --widths "$widths" --threads 1 >$tmp/stdout 2>$tmp/err || {
    cat $tmp/err >&2
    exit 1
}
ir1=
printf '%4s %14s %8s\n' n Ir 'Ir/Ir(1)'
for f in $tmp/cg.out.*; do
    n=$(grep -m1 '^desc: Trigger: Client Request: n=' $f | sed 's/.*n=//') || continue
    ir=$(grep -m1 '^summary:' $f | awk '{print $2}')
    [ -z "$ir1" ] && [ "$n" = 1 ] && ir1=$ir
    printf '%4s %14s %8s\n' $n $ir $(awk -v a=$ir -v b=${ir1:-0} 'BEGIN{ if (b) printf "%.3f", a/b; else print "-" }')
    if [ "$top" -gt 0 ]; then
        callgrind_annotate --threshold=99.5 $f 2>/dev/null | grep -E '^ *[0-9,]+ \(' | head -$top
    fi
done
echo "profiles in $tmp"
