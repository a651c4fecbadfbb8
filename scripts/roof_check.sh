#!/usr/bin/env bash
# The honest roof against the plain loop: builds scripts/roof_plain.c (an OpenMP sum of
# 2 GiB, one vector accumulator per thread) and runs it and `specdec bench --roof`
# alternately (ABAB, R rounds), on the same buffer size and thread counts, and prints one
# JSON object: the best of each side at 1 and all threads, and whether the probe reaches
# the plain loop (probe_ok). The probe must never be below the plain loop; on a shared
# machine look at the best over rounds.
# Usage: bash scripts/roof_check.sh [MiB (default 2048)] [rounds (default 2)]
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-2048}
rounds=${2:-2}
out=build-release/roof
mkdir -p "$out"
[ -x build-release/specdec ] || { echo "roof_check: build build-release/specdec first" >&2; exit 1; }
gcc -std=c11 -O2 -fopenmp scripts/roof_plain.c -o "$out/roof_plain"
nth=$(nproc)
for r in $(seq 1 "$rounds"); do
    "$out/roof_plain" "$mib" 10 >"$out/plain-$r.json"
    build-release/specdec bench --roof --bw-mib "$mib" -t "$nth" --json "$out/probe-$r.json" \
        >/dev/null 2>&1
done
/usr/bin/python3 - "$out" "$rounds" "$nth" <<'EOF'
import json, sys
out, rounds, nth = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
plain = [json.load(open(f"{out}/plain-{r}.json")) for r in range(1, rounds + 1)]
probe = [json.load(open(f"{out}/probe-{r}.json"))["roof"] for r in range(1, rounds + 1)]
res = {
    "buffer_mib": plain[0]["buffer_mib"], "threads": nth, "rounds": rounds,
    "plain": {"kernel": plain[0]["kernel"],
              "t1_gbps": max(p["t1_gbps"] for p in plain),
              "tn_gbps": max(p.get(f"t{nth}_gbps", p["t1_gbps"]) for p in plain)},
    "probe": {"kernel": probe[0]["tn"]["kernel"],
              "t1_gbps": max(p["t1"]["gbps"] for p in probe),
              "tn_gbps": max(p["tn"]["gbps"] for p in probe)},
}
res["probe_ok"] = (res["probe"]["t1_gbps"] >= res["plain"]["t1_gbps"] and
                   res["probe"]["tn_gbps"] >= res["plain"]["tn_gbps"])
print(json.dumps(res))
EOF
