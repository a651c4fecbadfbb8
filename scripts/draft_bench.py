#!/usr/bin/env python3
"""Issue 27's one bench run: every draft type (and token trees) on the three workloads, both pairs.

usage: python3 scripts/draft_bench.py [--specdec build/specdec] [--json OUT.json]
           [--pairs smollm2,qwen] [--rounds 2] [--k 8] [--sequential] [--dry-run]
           [--smollm2-runs 3] [--smollm2-n 128] [--qwen-runs 2] [--qwen-n 96]

For each pair it runs one `specdec bench --draft-types` over the workloads' prompt files
(scripts/prompts/code-edit.txt: code edits; doc-qa.txt: document questions; agent-loop.txt:
the agent loop's turns, each on its own; SmolLM2 also rewrite.txt, where its target is set):

  OMP_WAIT_POLICY=passive specdec bench --config configs/PAIR.json --draft-types TYPES
      --k-list K --chain-draft-max 3 --chain-long-match 2 --draft-p-min 0.75
      -f ... -e -n N -t 1 --runs R --rounds ROUNDS --json TMP

TYPES: none, llm (the draft model, fixed K with the 0.75 cut-off), ngram, suffix, the chains
ngram+llm and suffix+llm (the lookup, the draft model where it drafts nothing: N 3, L 2 as
docs/drafting.md's fourth round), and token trees of width 1, 2 and 4 (suffix-tree1 = 1 x K,
suffix-tree2 = 2 x K, suffix-tree4 = 4 x min(K, 4); ngram-tree2, ngram-tree4). Greedy, one
thread: each prompt runs every type in turn, ROUNDS times, every other round in reverse order
(A B .. B A), and bench pools each type's rates over the rounds. Tokens per target pass are
exact whatever the load; the speed ratios are the median over prompts of each type's tok/s
against none's on the same prompt (wall clock; process CPU time, the less load-dependent).

The pairs run at once by default (two processes; --sequential one after the other), while a
thread samples the load average every 5 s. Writes one JSON (--json, default
draft_bench.json): the CPU, the start and end, the load samples, and per pair its command,
its process's CPU and wall seconds and bench's whole JSON (rows per category and type, the
per-run records with the reference ids that scripts/replay_draft.sh replays). Prints a
markdown table per pair: tokens per pass, then the wall and CPU speedups.
Uses only the Python standard library.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TYPES = ("none,llm,ngram,suffix,ngram+llm,suffix+llm,"
         "suffix-tree1,suffix-tree2,suffix-tree4,ngram-tree2,ngram-tree4")
WORKLOADS = ["scripts/prompts/code-edit.txt", "scripts/prompts/doc-qa.txt",
             "scripts/prompts/agent-loop.txt"]
PAIRS = {
    "smollm2": {"config": "configs/smollm2-135m-pair.json",
                "extra": ["scripts/prompts/rewrite.txt"], "lane": 0},
    "qwen": {"config": "configs/qwen2.5-coder-pair.json", "extra": [], "lane": 1},
}
# The coding chat prompts (no repetition) with the config's default drafting (the Qwen
# pair's: ngram, adaptive, K <= 6): the "never below 0.97x" check.
CHAT = {"name": "qwen-chat-default", "config": "configs/qwen2.5-coder-pair.json",
        "types": "ngram-adaptive", "files": ["scripts/prompts/coding.txt"], "lane": 0}

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--specdec", default=os.path.join(ROOT, "build", "specdec"))
ap.add_argument("--json", default="draft_bench.json")
ap.add_argument("--pairs", default="smollm2,qwen")
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--k", type=int, default=8)
ap.add_argument("--sequential", action="store_true")
ap.add_argument("--dry-run", action="store_true", help="print the commands only")
ap.add_argument("--smollm2-runs", type=int, default=3)
ap.add_argument("--smollm2-n", type=int, default=128)
ap.add_argument("--qwen-runs", type=int, default=2)
ap.add_argument("--qwen-n", type=int, default=96)
ap.add_argument("--no-chat", action="store_true", help="skip the coding-chat default check")
ap.add_argument("--types", default=TYPES, help="bench's --draft-types list for both pairs")
ap.add_argument("--qwen-types", default="", help="the Qwen pair's list (default: --types)")
args = ap.parse_args()


def command(name, out):
    if name == CHAT["name"]:
        cmd = [args.specdec, "bench", "--config", CHAT["config"], "--draft-types", CHAT["types"]]
        for f in CHAT["files"]:
            cmd += ["-f", f]
        return cmd + ["-e", "-n", str(args.qwen_n), "-t", "1", "--runs", "3", "--rounds",
                      str(args.rounds), "--json", out]
    pair = PAIRS[name]
    files = WORKLOADS + pair["extra"]
    types = args.qwen_types if name == "qwen" and args.qwen_types else args.types
    cmd = [args.specdec, "bench", "--config", pair["config"], "--draft-types", types,
           "--k-list", str(args.k), "--chain-draft-max", "3", "--chain-long-match", "2",
           "--draft-p-min", "0.75"]
    for f in files:
        cmd += ["-f", f]
    cmd += ["-e", "-n", str(getattr(args, name + "_n")), "-t", "1",
            "--runs", str(getattr(args, name + "_runs")), "--rounds", str(args.rounds),
            "--json", out]
    return cmd


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


names = [n for n in args.pairs.split(",") if n]
for n in names:
    if n not in PAIRS:
        sys.exit(f"draft_bench.py: unknown pair '{n}' (known: {', '.join(PAIRS)})")
lanes = {n: PAIRS[n]["lane"] for n in names}
if "qwen" in names and not args.no_chat:
    names.append(CHAT["name"])
    lanes[CHAT["name"]] = CHAT["lane"]
tmp = "(a temporary folder)" if args.dry_run else tempfile.mkdtemp(prefix="draft_bench.")
jobs = [{"name": n, "out": os.path.join(tmp, n + ".json"),
         "lane": 0 if args.sequential else lanes[n]} for n in names]
for j in jobs:
    j["cmd"] = command(j["name"], j["out"])
    print("OMP_WAIT_POLICY=passive " + " ".join(shlex.quote(a) for a in j["cmd"]),
          file=sys.stderr)
if args.dry_run:
    sys.exit(0)

load = []
stop = threading.Event()


def sample_load():
    while True:
        load.append([round(time.time(), 1), os.getloadavg()[0]])
        if stop.wait(5.0):
            return


sampler = threading.Thread(target=sample_load, daemon=True)
sampler.start()
env = dict(os.environ, OMP_WAIT_POLICY="passive")
started = time.time()


def launch(j):
    j["t0"] = time.time()
    j["log"] = os.path.join(tmp, j["name"] + ".log")
    j["proc"] = subprocess.Popen(j["cmd"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                 stderr=open(j["log"], "w"), text=True)


def finish(j):
    _, status, ru = os.wait4(j["proc"].pid, 0)
    j["wall_s"] = time.time() - j["t0"]
    j["cpu_s"] = ru.ru_utime + ru.ru_stime
    j["table"] = j["proc"].stdout.read()
    j["rc"] = os.waitstatus_to_exitcode(status)
    j["proc"].returncode = j["rc"]


def run_lane(lane):
    for j in jobs:
        if j["lane"] == lane:
            launch(j)
            finish(j)


threads = [threading.Thread(target=run_lane, args=(lane,))
           for lane in sorted({j["lane"] for j in jobs})]
for t in threads:
    t.start()
for t in threads:
    t.join()
stop.set()
sampler.join()
ended = time.time()

result = {"cpu": cpu_model(), "cores": os.cpu_count(),
          "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
          "ended_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ended)),
          "concurrent": not args.sequential, "rounds": args.rounds, "k": args.k,
          "load": {"min": min(l for _, l in load), "max": max(l for _, l in load),
                   "mean": sum(l for _, l in load) / len(load), "samples": load},
          "pairs": []}
failed = 0
for j in jobs:
    rec = {"name": j["name"], "lane": j["lane"], "command": "OMP_WAIT_POLICY=passive " +
           " ".join(shlex.quote(a) for a in j["cmd"]),
           "rc": j["rc"], "wall_s": j["wall_s"], "cpu_s": j["cpu_s"], "table": j["table"]}
    if j["rc"] == 0:
        with open(j["out"], encoding="utf-8") as f:
            rec["bench"] = json.load(f)
    else:
        failed = 1
        with open(j["log"], encoding="utf-8", errors="replace") as f:
            rec["stderr_tail"] = f.read()[-4000:]
        print(f"draft_bench.py: {j['name']}: bench exited {j['rc']}:\n{rec['stderr_tail']}",
              file=sys.stderr)
    result["pairs"].append(rec)
with open(args.json, "w", encoding="utf-8") as f:
    json.dump(result, f, indent=1)
shutil.rmtree(tmp, ignore_errors=True)


def fmt(x, f="%.2f"):
    return "-" if x is None else f % x


print(f"{result['cpu']}, {result['cores']} cores, {result['started_utc']} - "
      f"{result['ended_utc']} UTC, load average {result['load']['min']:.1f}-"
      f"{result['load']['max']:.1f} (mean {result['load']['mean']:.1f}), pairs "
      f"{'at once' if result['concurrent'] else 'in turn'}, {args.rounds} rounds, K {args.k}")
for rec in result["pairs"]:
    b = rec.get("bench")
    if not b:
        continue
    rows = b["rows"]
    cats = []
    for r in rows:
        if r["category"] not in cats:
            cats.append(r["category"])
    drafts = []
    for r in rows:
        if r["draft"] not in drafts:
            drafts.append(r["draft"])
    by = {(r["category"], r["draft"]): r for r in rows}
    print(f"\n{rec['name']}: {b['target']} (draft {b.get('draft')}), n {b['n_predict']}, "
          f"{rec['cpu_s']:.0f} s CPU, {rec['wall_s']:.0f} s wall; greedy output equal to "
          f"target alone in every run: {'yes' if b.get('greedy_match') else 'NO'}")
    print("\ntokens per pass / speedup wall / speedup CPU (median over prompts)\n")
    print("| draft | " + " | ".join(cats) + " |")
    print("|---" * (len(cats) + 1) + "|")
    for d in drafts:
        cells = []
        for c in cats:
            r = by.get((c, d))
            if not r:
                cells.append("-")
                continue
            sp = (r.get("speedup") or {}).get("median")
            cells.append(f"{fmt(r.get('tokens_per_pass'), '%.3f')} / {fmt(sp)} / "
                         f"{fmt(r.get('cpu_speedup'))}")
        print(f"| {d} | " + " | ".join(cells) + " |")
sys.exit(failed)
