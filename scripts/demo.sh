#!/usr/bin/env bash
# The main command: install what the build needs (scripts/deps.sh build: the Debian
# packages of scripts/packages.txt's build group), build specdec, run speculative
# generation on the default pair, the project's own TinyStories pair shipped in models/
# (configs/tinystories.json: 1.05M-parameter target, 131K-parameter distilled draft, both
# Q8_0, K = 4), then one A/B line on the same prompt: `specdec bench`, target alone
# against speculative (greedy, K = 4, 128 tokens, 3 runs each, ABAB): tokens/s, tokens per
# target pass, acceptance and whether the two texts are identical. Where drafting does not
# pay (this pair: its target costs less per token than drafting does), one line says so
# and names the command that shows it paying.
# Extra arguments are passed to `specdec generate` (e.g. --temp 0 -k 2 --json); a -p/--prompt
# among them is also the A/B's prompt.
# One line per stage on stderr; a package the build needs and does not find is named.
# $SD_BUILD_DIR: the build folder (build-release); SD_DEMO_AB=0: no A/B line.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc 2>/dev/null || echo 2)"
dir="${SD_BUILD_DIR:-build-release}"
bash scripts/deps.sh build
. scripts/build_stage.sh
sd_build "$dir" specdec
echo "demo.sh: $dir/specdec generate --config configs/tinystories.json $*" >&2
"$dir/specdec" generate --config configs/tinystories.json "$@"
[ "${SD_DEMO_AB:-1}" != 0 ] || exit 0

prompt="Once upon a time" # configs/tinystories.json's
prev=""
for a in "$@"; do
    case "$prev" in -p | --prompt) prompt="$a" ;; esac
    prev="$a"
done
ab="$("$dir/specdec" bench --config configs/tinystories.json -p "$prompt" --temp 0 -k 4 \
    --runs 3 -n 128 2>&1)" || {
    printf '%s\n' "$ab" | tail -n 3 >&2
    echo "demo.sh: the A/B run failed" >&2
    exit 1
}
# bench's table row for K = 4: K, target tok/s median [min,max], spec tok/s median
# [min,max], speedup, predicted, acceptance, accepted per pass, v, TTFT, ITL, c, match
row="$(printf '%s\n' "$ab" | awk '$1 == "4" && NF >= 14')"
if [ -z "$row" ]; then
    printf '%s\n' "$ab" | tail -n 5 >&2
    echo "demo.sh: no A/B row in specdec bench's output" >&2
    exit 1
fi
read -r _ ta _ tb _ speedup _ accept accps v _ _ c _ <<<"$row"
match="$(printf '%s\n' "$ab" | grep -q 'greedy speculative output equals' && echo yes || echo NO)"
echo "demo.sh: A/B \"$prompt\", greedy, 128 tokens x 3 runs: target alone $ta tok/s," \
    "speculative (K = 4) $tb tok/s (medians; the median of the per-run ratios: ${speedup}x); $(awk -v a="$accps" 'BEGIN { printf "%.2f", a + 1 }')" \
    "tokens per target pass, acceptance $accept; identical text: $match" >&2
if awk -v s="$speedup" 'BEGIN { exit !(s < 1) }'; then
    echo "demo.sh: drafting does not pay here: this 1M-parameter target is so cheap (compute-bound," \
        "not memory-bound) that a pass over K + 1 rows costs v = $v single steps and a draft" \
        "step c = $c of one, more than the accepted tokens save (generate's controller, above," \
        "switches speculation off). To see it pay: bash scripts/get_models.sh smollm2 &&" \
        "$dir/specdec bench -m models/downloaded/SmolLM2-135M-Instruct.Q4_1.gguf" \
        "--draft-types ngram -f scripts/prompts/rewrite.txt --temp 0 -k 4 --runs 2 -n 128" >&2
fi
