#!/usr/bin/env bash
# The main command: build specdec and run speculative generation on the default pair,
# the project's own TinyStories pair shipped in models/ (configs/tinystories.json:
# 1.05M-parameter target, 131K-parameter distilled draft, both Q8_0, K = 4).
# Extra arguments are passed to `specdec generate` (e.g. --temp 0 -k 2 --json).
# One line per stage on stderr; a package the build needs and does not find is named.
# $SD_BUILD_DIR: the build folder (build-release).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc 2>/dev/null || echo 2)"
dir="${SD_BUILD_DIR:-build-release}"
. scripts/build_stage.sh
sd_build "$dir" specdec
echo "demo.sh: $dir/specdec generate --config configs/tinystories.json $*" >&2
exec "$dir/specdec" generate --config configs/tinystories.json "$@"
