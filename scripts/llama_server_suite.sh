#!/usr/bin/env bash
# llama.cpp's own server test suite (tools/server/tests, pytest) against `specdec serve`
# through scripts/llama_server_compat.py (llama-server's flags in, local models, each
# dropped flag printed), or against a llama-server binary for the baseline.
#
# usage: bash scripts/llama_server_suite.sh [options] [FILE...]
#   FILE                 suite files to run, e.g. test_completion.py (default: the
#                        server-agnostic and llama-server-compatible set below)
#   --server S           specdec (default: build-release/specdec), or a path to a binary
#                        (a llama-server: the baseline run, same local models)
#   --specdec BIN        the specdec binary that converts the model (and serves)
#   --sdist DIR          an unpacked llama-cpp-python 0.3.36 sdist (or a folder holding
#                        vendor/llama.cpp/tools/server/tests); default: $SD_SUITE_SDIST,
#                        else build-peer/src/llama_cpp_python-0.3.36 (where
#                        scripts/peer_llamacpp.sh unpacks it), fetched with `pip download`
#                        into build-peer/dl when absent (the sdist only, nothing is built)
#   --no-fetch           never download: skip with one line when the sdist is absent
#   --fetch-only         fetch the sdist (when absent) and stop (.ci/run)
#   --work DIR           scratch folder: the suite's copies, the converted model, the
#                        results (default build-release/suite)
#   --out DIR            results (default WORK/out-NAME): results.txt (one
#                        line per test: FILE::TEST passed|failed|skipped|error), a JUnit
#                        XML and a log per file
#   --check LIST         fail (exit 1) when a test listed in LIST (e.g.
#                        scripts/server_suite_pass.txt) did not pass; the files run are
#                        then those LIST names. A line "NODE  needs:PATH" (two spaces)
#                        lists NODE only where PATH (from the repository root) exists
#                        (a model of models/downloaded/); otherwise it is left out, said
#                        in one line
#   -k EXPR              pytest's -k (select tests by name)
#   --timeout S          per-file wall limit (900)
# Exit: 0 done (with --check: no regression), 1 a regression or a file that could not run,
# 77 skipped (no sdist, pytest or shared data), with one line saying why.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

FILES_DEFAULT="test_basic.py test_completion.py test_chat_completion.py test_tokenize.py
test_speculative.py test_security.py test_ctx_shift.py test_metrics.py test_template.py
test_stream.py test_ignore_eos.py test_infill.py test_slot_save.py test_kv_keep_only_active.py"
server=specdec
specdec=$ROOT/build-release/specdec
sdist=${SD_SUITE_SDIST:-}
fetch=1
fetch_only=0
work=$ROOT/build-release/suite
out=""
check=""
kexpr=""
file_timeout=900
files=()
while [ $# -gt 0 ]; do
    case "$1" in
    --server) server=$2; shift 2 ;;
    --specdec) specdec=$2; shift 2 ;;
    --sdist) sdist=$2; shift 2 ;;
    --no-fetch) fetch=0; shift ;;
    --fetch-only) fetch_only=1; shift ;;
    --work) work=$(realpath -m "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --check) check=$2; shift 2 ;;
    -k) kexpr=$2; shift 2 ;;
    --timeout) file_timeout=$2; shift 2 ;;
    -h | --help) sed -n '2,34p' "$0"; exit 0 ;;
    -*) echo "llama_server_suite: unknown option $1" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
    esac
done

skip() { echo "llama_server_suite: SKIP: $*"; exit 77; }

py=${PYTHON:-python3}
# The sdist: a given folder, the cached one, or pip download.
tests=""
find_tests() {
    local d=$1
    for t in "$d/vendor/llama.cpp/tools/server/tests" "$d/tools/server/tests" "$d"; do
        [ -f "$t/utils.py" ] && [ -d "$t/unit" ] && { echo "$t"; return 0; }
    done
    return 1
}
if [ -n "$sdist" ]; then
    tests=$(find_tests "$sdist") || skip "no server tests under $sdist"
else
    sdist=$ROOT/build-peer/src/llama_cpp_python-0.3.36
    if ! tests=$(find_tests "$sdist"); then
        [ "$fetch" -eq 1 ] || skip "no sdist at $sdist (and --no-fetch)"
        dl=$ROOT/build-peer/dl
        mkdir -p "$dl" "$ROOT/build-peer/src"
        if ! "$py" -m pip download -q --no-deps --no-binary :all: --retries 1 --timeout 20 \
            -d "$dl" llama-cpp-python==0.3.36 >"$dl/pip.log" 2>&1; then
            skip "pip download llama-cpp-python==0.3.36 failed ($(tail -n 1 "$dl/pip.log"))"
        fi
        tar -xzf "$dl"/llama_cpp_python-0.3.36.tar.gz -C "$ROOT/build-peer/src" ||
            skip "could not unpack the sdist"
        tests=$(find_tests "$sdist") || skip "no server tests in the fetched sdist"
    fi
fi
[ "$fetch_only" -eq 1 ] && { echo "llama_server_suite: the suite is at $tests"; exit 0; }
"$py" -c 'import pytest, requests, wget, filelock, openai' 2>/dev/null ||
    skip "$py lacks pytest/requests/wget/filelock/openai (bash scripts/deps.sh test)"
data=${SD_SHARED_DATA:-$ROOT/../shared/data}/models
[ -f "$data/stories260K.bin" ] && [ -f "$data/tok512.bin" ] ||
    skip "no $data/stories260K.bin + tok512.bin (the shared data)"
[ -x "$specdec" ] || { echo "llama_server_suite: no $specdec (build it first)" >&2; exit 1; }
mkdir -p "$work"

case "$server" in
specdec) bin=$(realpath "$specdec") || exit 1; name=specdec ;; # the suite runs elsewhere
*) bin=$(realpath "$server") || exit 1; name=$(basename "$bin") ;;
esac
[ -x "$bin" ] || { echo "llama_server_suite: $bin is not executable" >&2; exit 1; }
# A private copy of the suite per server (it writes tmp/ and caches beside itself), at
# tools/server/tests under a root whose models/ is llama.cpp's (the suite reads chat
# templates from ../../../models/templates).
root=$work/llama-$name
suite=$root/tools/server/tests
rm -rf "$root"
mkdir -p "$root/tools/server"
cp -r "$tests" "$suite"
[ -d "$tests/../../../models" ] && ln -s "$(realpath "$tests/../../../models")" "$root/models"
mkdir -p "$suite/tmp" "$work/models"
models=$work/models
if [ ! -s "$models/stories260K.gguf" ]; then
    "$specdec" convert "$data/stories260K.bin" "$data/tok512.bin" "$models/stories260K.gguf" \
        >/dev/null || { echo "llama_server_suite: specdec convert failed" >&2; exit 1; }
fi
# test_speculative's draft (downloaded by the suite into tmp/ when absent): the
# project's TinyStories draft, the pair of the target the compat wrapper maps.
# test_speculative's draft, matching the target llama_server_compat.py maps stories15M to
if [ -f "$ROOT/models/downloaded/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    ln -sf "$ROOT/models/smollm2-draft-q8_0.gguf" "$suite/tmp/stories15M-q4_0.gguf"
else
    ln -sf "$ROOT/models/tinystories-draft-q8_0.gguf" "$suite/tmp/stories15M-q4_0.gguf"
fi

[ -n "$out" ] && out=$(realpath -m "$out") || out=$work/out-$name
rm -rf "$out"
mkdir -p "$out"
if [ -n "$check" ]; then
    # The listed tests whose file needs (needs:PATH) are there; the others left out.
    [ -f "$check" ] || { echo "llama_server_suite: no $check" >&2; exit 1; }
    listed=$out/check-list.txt
    while IFS= read -r line || [ -n "$line" ]; do
        case "$line" in
        '#'* | '') continue ;;
        *'  needs:'*)
            need=${line##*  needs:}
            if [ -e "$ROOT/$need" ]; then
                echo "${line%%  needs:*}"
            else
                echo "llama_server_suite: not checked (no $need): ${line%%  needs:*}" >&2
            fi
            ;;
        *) echo "$line" ;;
        esac
    done <"$check" >"$listed"
    check=$listed
fi
if [ -n "$check" ] && [ "${#files[@]}" -eq 0 ]; then
    mapfile -t files < <(grep -v '^#' "$check" | sed -n 's/::.*//p' | sort -u)
fi
[ "${#files[@]}" -gt 0 ] || read -r -a files <<<"$(echo $FILES_DEFAULT)"

# A port of our own (other servers may be on 8080).
port=$((20000 + RANDOM % 20000))
export SD_COMPAT_SERVER=$bin SD_COMPAT_MODELS=$models
export LLAMA_SERVER_BIN_PATH=$ROOT/scripts/llama_server_compat.py
export PORT=$port
export PYTHONPATH=$ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}
status=0
printf '%-32s %6s %6s %6s %6s\n' file passed failed skipped error
# One pytest run per file (per-file counts), or with --check a single run of the listed
# tests (pytest node ids: one start-up, CI's time).
runs=()
if [ -n "$check" ]; then runs=(ALL); else runs=("${files[@]}"); fi
for f in "${runs[@]}"; do
    base=${f%.py}
    if [ "$f" = ALL ]; then
        mapfile -t sel < <(grep -v '^#' "$check" | grep -v '^$' | sed 's|^|unit/|')
    else
        [ -f "$suite/unit/$base.py" ] || { echo "llama_server_suite: no unit/$base.py" >&2; status=1; continue; }
        sel=("unit/$base.py")
    fi
    (cd "$suite" && timeout "$file_timeout" "$py" -m pytest -p llama_server_suite_plugin \
        -p no:cacheprovider -q -rN ${kexpr:+-k "$kexpr"} "${sel[@]}" \
        --junitxml="$out/$base.xml" >"$out/$base.log" 2>&1)
    rc=$?
    if [ ! -s "$out/$base.xml" ]; then
        echo "llama_server_suite: $base did not run (rc $rc): see $out/$base.log" >&2
        status=1
        continue
    fi
    # FILE::TEST STATUS from the JUnit XML (classname unit.test_x names the file).
    "$py" - "$out/$base.xml" >>"$out/results.txt" <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
for tc in root.iter("testcase"):
    kids = {c.tag for c in tc}
    st = ("failed" if "failure" in kids else "error" if "error" in kids
          else "skipped" if "skipped" in kids else "passed")
    f = tc.get("classname", "").split(".")[-1] + ".py"
    print(f"{f}::{tc.get('name')} {st}")
EOF
done
for f in $(sed 's/::.*//' "$out/results.txt" 2>/dev/null | uniq); do
    grep "^$f::" "$out/results.txt" | awk -v f="$f" '
        {n[$NF]++} END {printf "%-32s %6d %6d %6d %6d\n", f, n["passed"], n["failed"], n["skipped"], n["error"]}'
done
awk '{n[$NF]++} END {printf "%-32s %6d %6d %6d %6d\n", "total", n["passed"], n["failed"], n["skipped"], n["error"]}' \
    "$out/results.txt" 2>/dev/null
echo "llama_server_suite: results in $out/results.txt"
if [ -n "$check" ]; then
    missing=$(grep -v '^#' "$check" | grep -v '^$' | while read -r t; do
        grep -qxF "$t passed" "$out/results.txt" || echo "$t"
    done)
    if [ -n "$missing" ]; then
        echo "llama_server_suite: REGRESSION: these tests of $check did not pass:"
        echo "$missing" | sed 's/^/  /'
        status=1
    else
        echo "llama_server_suite: every test of $check passed"
    fi
fi
exit $status
