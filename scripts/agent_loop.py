#!/usr/bin/env python3
"""An agent-loop trace through an OpenAI-compatible server, one turn at a time.

usage: python3 scripts/agent_loop.py --url http://127.0.0.1:8080
           [-f scripts/prompts/agent-loop.txt] [--max-tokens 256] [--draft-type T]
           [--compare EARLIER.json] [--json OUT.json]

Sends the turns of the prompt file (one a line, '# category:' lines skipped, \\n escapes
processed) in order as greedy chat completions (temperature 0, seed 1), each after the
previous one has finished, as an agent that edits the same file would; --draft-type sets
the request's draft_type (specdec). Prints one JSON object (also written to --json):
  wall_s            the sum of the turns' wall times (request sent -> response read)
  tokens            completion tokens of all turns; tok_s: tokens / wall_s
  drafted, accepted, passes   specdec's per-request "speculative" statistics, summed
                    (passes: target passes); tok_per_pass: tokens / passes
  turns             per turn: tokens, wall_s, drafted, accepted, text
  equal             with --compare: the number of turns whose text equals the same turn's
                    text in the earlier output (e.g. the same server without drafting)
Uses only the Python standard library.
"""
import argparse
import http.client
import json
import os
import sys
import time
import urllib.parse

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--url", required=True)
ap.add_argument("-f", "--prompts", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                         "prompts", "agent-loop.txt"))
ap.add_argument("--max-tokens", type=int, default=256)
ap.add_argument("--draft-type", default="")
ap.add_argument("--compare", default="")
ap.add_argument("--json", default="")
ap.add_argument("--timeout", type=float, default=600.0)
args = ap.parse_args()

u = urllib.parse.urlparse(args.url)
with open(args.prompts, encoding="utf-8") as f:
    turns = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("# category:")]
turns = [t.encode("utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")
         for t in turns]

out = {"wall_s": 0.0, "tokens": 0, "drafted": 0, "accepted": 0, "passes": 0, "turns": []}
for t in turns:
    body = {"messages": [{"role": "user", "content": t}], "max_tokens": args.max_tokens,
            "temperature": 0, "seed": 1, "stream": False}
    if args.draft_type:
        body["draft_type"] = args.draft_type
    c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=args.timeout)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    resp = c.getresponse()
    data = resp.read()
    wall = time.time() - t0
    c.close()
    if resp.status != 200:
        sys.exit(f"agent_loop.py: status {resp.status}: {data[:300]!r}")
    j = json.loads(data)
    sp = j.get("speculative") or {}
    rec = {"tokens": (j.get("usage") or {}).get("completion_tokens", 0), "wall_s": wall,
           "drafted": sp.get("drafted", 0), "accepted": sp.get("accepted", 0),
           "passes": sp.get("target_passes", 0),
           "text": j["choices"][0]["message"]["content"]}
    out["turns"].append(rec)
    out["wall_s"] += wall
    out["tokens"] += rec["tokens"]
    out["drafted"] += rec["drafted"]
    out["accepted"] += rec["accepted"]
    out["passes"] += rec["passes"]
out["tok_s"] = out["tokens"] / out["wall_s"] if out["wall_s"] > 0 else None
out["tok_per_pass"] = out["tokens"] / out["passes"] if out["passes"] > 0 else None
if args.compare:
    with open(args.compare, encoding="utf-8") as f:
        ref = json.load(f)
    out["equal"] = sum(1 for a, b in zip(out["turns"], ref["turns"]) if a["text"] == b["text"])
if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
summary = {k: v for k, v in out.items() if k != "turns"}
summary["per_turn_tokens"] = [r["tokens"] for r in out["turns"]]
print(json.dumps(summary))
