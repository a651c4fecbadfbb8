#!/usr/bin/env python3
"""An agent-loop trace through an OpenAI-compatible server, one turn at a time.

usage: python3 scripts/agent_loop.py (--url http://127.0.0.1:8080 | --serve "SERVE ARGS")
           [-f scripts/prompts/agent-loop.txt] [--max-tokens 256] [--draft-type T]
           [--compare EARLIER.json] [--json OUT.json] [--pid SERVER_PID] [--history]

Sends the turns of the prompt file (one a line, '# category:' lines skipped, \\n escapes
processed) in order as greedy chat completions (temperature 0, seed 1), each after the
previous one has finished, as an agent that edits the same file would; --draft-type sets
the request's draft_type (specdec). --history: each turn's request carries the earlier
turns (their user messages and the answers as the server returned them) before its own,
as a chat agent keeps its conversation, and the turns after the first send only their
instruction (the line's last paragraph: the file is the previous answer, already in the
conversation), so each prompt starts with the previous turn's prompt and answer (what the
server's prefix cache can reuse) and the answer copies the previous answer. Prints one JSON
object (also written to --json):
  wall_s            the sum of the turns' wall times (request sent -> response read)
  tokens            completion tokens of all turns; tok_s: tokens / wall_s
  drafted, accepted, passes   specdec's per-request "speculative" statistics, summed
                    (passes: target passes); tok_per_pass: tokens / passes
  turns             per turn: tokens, wall_s, drafted, accepted, text, prompt_tokens,
                    cached_tokens (usage.prompt_tokens_details: the positions the prefix
                    cache gave), prompt_ms (the server's timings, where it sends them)
  prompt_tokens, cached_tokens, prompt_ms   summed over the turns
  equal             with --compare: the number of turns whose text equals the same turn's
                    text in the earlier output (e.g. the same server without drafting)
  server_cpu_s      with --pid: the server process's CPU time (user + system) over the
                    loop, from /proc/PID/stat (less load-dependent than wall time on a busy
                    machine); per turn too
  load              the 1-minute load average before and after the loop
                    and speedup_wall, speedup_cpu: the earlier run's wall_s (server_cpu_s)
                    over this run's
--serve "ARGS": start `specdec serve ARGS --host 127.0.0.1 --port 0` (the binary: --specdec,
default build/specdec) for the loop, its port read from its first line, its CPU time
measured (as --pid), and stop it afterwards (its stderr: --serve-log, default discarded).
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
ap.add_argument("--url", default="")
ap.add_argument("--serve", default="")
ap.add_argument("--specdec", default="build/specdec")
ap.add_argument("--serve-log", default=os.devnull)
ap.add_argument("-f", "--prompts", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                         "prompts", "agent-loop.txt"))
ap.add_argument("--max-tokens", type=int, default=256)
ap.add_argument("--draft-type", default="")
ap.add_argument("--compare", default="")
ap.add_argument("--json", default="")
ap.add_argument("--timeout", type=float, default=600.0)
ap.add_argument("--pid", type=int, default=0)
ap.add_argument("--history", action="store_true")
args = ap.parse_args()
if bool(args.url) == bool(args.serve):
    sys.exit("agent_loop.py: give --url or --serve")

server = None
if args.serve:
    import atexit
    import shlex
    import subprocess
    server = subprocess.Popen([args.specdec, "serve"] + shlex.split(args.serve) +
                              ["--host", "127.0.0.1", "--port", "0"], stdout=subprocess.PIPE,
                              stderr=open(args.serve_log, "ab"), text=True)
    line = server.stdout.readline()
    if "http://127.0.0.1:" not in line:
        server.kill()
        sys.exit(f"agent_loop.py: the server did not start: {line!r}")
    args.url = "http://127.0.0.1:" + line.split("http://127.0.0.1:")[1].split()[0].strip("/")
    args.pid = server.pid
    atexit.register(lambda: server.poll() is None and server.kill())


def cpu_s(pid):
    """utime + stime of process pid in seconds (0.0 without --pid)."""
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


u = urllib.parse.urlparse(args.url)
with open(args.prompts, encoding="utf-8") as f:
    turns = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("# category:")]
turns = [t.encode("utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")
         for t in turns]

out = {"wall_s": 0.0, "tokens": 0, "drafted": 0, "accepted": 0, "passes": 0, "turns": [],
       "prompt_tokens": 0, "cached_tokens": 0, "prompt_ms": 0.0, "history": args.history,
       "load": [os.getloadavg()[0]]}
history = []
cpu0 = cpu_s(args.pid)
for t in turns:
    if args.history and history:
        t = t.rsplit("\n\n", 1)[-1]
    msgs = history + [{"role": "user", "content": t}]
    body = {"messages": msgs, "max_tokens": args.max_tokens,
            "temperature": 0, "seed": 1, "stream": False}
    if args.draft_type:
        body["draft_type"] = args.draft_type
    c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=args.timeout)
    t0 = time.time()
    c0 = cpu_s(args.pid)
    c.request("POST", "/v1/chat/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    resp = c.getresponse()
    data = resp.read()
    wall = time.time() - t0
    cpu = cpu_s(args.pid) - c0
    c.close()
    if resp.status != 200:
        sys.exit(f"agent_loop.py: status {resp.status}: {data[:300]!r}")
    j = json.loads(data)
    sp = j.get("speculative") or {}
    usage = j.get("usage") or {}
    rec = {"tokens": usage.get("completion_tokens", 0), "wall_s": wall,
           "drafted": sp.get("drafted", 0), "accepted": sp.get("accepted", 0),
           "passes": sp.get("target_passes", 0), "server_cpu_s": cpu,
           "prompt_tokens": usage.get("prompt_tokens", 0),
           "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
           "prompt_ms": (j.get("timings") or {}).get("prompt_ms", 0.0),
           "text": j["choices"][0]["message"]["content"]}
    if args.history:
        history = msgs + [{"role": "assistant", "content": rec["text"]}]
    for k in ("prompt_tokens", "cached_tokens", "prompt_ms"):
        out[k] += rec[k]
    out["turns"].append(rec)
    out["wall_s"] += wall
    out["tokens"] += rec["tokens"]
    out["drafted"] += rec["drafted"]
    out["accepted"] += rec["accepted"]
    out["passes"] += rec["passes"]
out["tok_s"] = out["tokens"] / out["wall_s"] if out["wall_s"] > 0 else None
if args.pid:
    out["server_cpu_s"] = cpu_s(args.pid) - cpu0
out["load"].append(os.getloadavg()[0])
out["tok_per_pass"] = out["tokens"] / out["passes"] if out["passes"] > 0 else None
if args.compare:
    with open(args.compare, encoding="utf-8") as f:
        ref = json.load(f)
    out["equal"] = sum(1 for a, b in zip(out["turns"], ref["turns"]) if a["text"] == b["text"])
    out["speedup_wall"] = ref["wall_s"] / out["wall_s"]
    if ref.get("server_cpu_s") and out.get("server_cpu_s"):
        out["speedup_cpu"] = ref["server_cpu_s"] / out["server_cpu_s"]
if server:
    server.terminate()
    server.wait(timeout=60)
if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
summary = {k: v for k, v in out.items() if k != "turns"}
summary["per_turn_tokens"] = [r["tokens"] for r in out["turns"]]
print(json.dumps(summary))
