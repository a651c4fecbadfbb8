#!/usr/bin/env python3
"""specdec serve and llama-server side by side under the same load (scripts/load_test.py).

usage: python3 scripts/serve_vs_llamacpp.py -m TARGET.gguf [-md DRAFT.gguf]
           [--peer build-peer/native/bin/llama-server] [--clients 1,4,8,16]
           [--requests-per-client 2[,2,1,1]] [--max-tokens 128] [-t 2] [-k 4] [--p-min 0.75]
           [--rounds 1] [-f PROMPTS.txt ...]
           [--sides specdec,specdec-adaptive,llama-t1,llama-t2,llama-nodraft-t1] [--json OUT.json]
       python3 scripts/serve_vs_llamacpp.py --tables OUT.json   (the tables of a saved run)

For each client count N both servers run with N slots (-np N), a pool of N x 2048 KV
positions (-c), F16 KV, the same threads, draft, draft length and confidence cut-off, on
127.0.0.1; the load is N concurrent streamed chat requests (greedy, the prompts of -f,
default scripts/prompts/code.txt), N x requests-per-client in all (one value, or one per
client count). The sides alternate (A B A B ... over --rounds) so a machine shared with
other work weighs on both alike. Sides: specdec (fixed K), specdec-adaptive (the batcher's
K per step; specdec-tT, specdec-adaptive-tT: T threads), llama-tT (llama-server with the draft, --spec-type draft-simple, T threads
for target and draft), llama-nodraft-tT (llama-server alone); -t is specdec's threads
(llama.cpp's thread pool waits at every barrier for its slowest thread, so on a machine
whose cores other work shares it may run faster with fewer threads: both counts are
measured). specdec's runs also check every loaded request against the same request
alone (equal_alone). Prints one JSON object (every load_test result) and two Markdown
tables of the best round of each side: throughput side by side, and vLLM `bench serve`'s
figures (TTFT / TPOT / ITL / E2EL mean, median, p99; the speculative block).
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
ap = argparse.ArgumentParser()
ap.add_argument("-m", "--model", default="")
ap.add_argument("--tables", default="", help="print the tables of a saved --json run, run nothing")
ap.add_argument("-md", "--model-draft", default="")
ap.add_argument("--specdec", default=os.path.join(root, "build-release", "specdec"))
ap.add_argument("--peer", default=os.path.join(root, "build-peer", "native", "bin", "llama-server"))
ap.add_argument("--clients", default="1,4,8,16")
ap.add_argument("--requests-per-client", default="2")
ap.add_argument("--max-tokens", type=int, default=128)
ap.add_argument("-t", "--threads", type=int, default=2)
ap.add_argument("-k", "--draft-max", type=int, default=4)
ap.add_argument("--p-min", type=float, default=0.75)
ap.add_argument("--rounds", type=int, default=1)
ap.add_argument("-f", "--prompts", action="append", default=[])
ap.add_argument("--sides", default="specdec,specdec-adaptive,llama-t1,llama-t2,llama-nodraft-t1")
ap.add_argument("--port", type=int, default=18300)
ap.add_argument("--json", default="")
args = ap.parse_args()
if not args.model and not args.tables:
    ap.error("-m/--model is required (or --tables FILE)")
prompts = args.prompts or [os.path.join(here, "prompts", "code.txt")]


def wait_health(port, proc, timeout=300):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.5)
    return False


def side_threads(side):
    m = re.search(r"-t(\d+)$", side)
    return int(m.group(1)) if m else args.threads


def server_cmd(side, n, port):
    ctx = str(2048 * n)
    draft = args.model_draft and "nodraft" not in side
    if side.startswith("specdec"):
        c = [args.specdec, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
             "-np", str(n), "-c", ctx, "-t", str(side_threads(side)), "--kv-type", "f16",
             "--max-queue", str(4 * n + 8), "--log-disable"]
        if draft:
            c += ["-md", args.model_draft, "-k", str(args.draft_max), "--draft-p-min",
                  str(args.p_min), "--draft-policy",
                  "adaptive" if side.startswith("specdec-adaptive") else "fixed"]
        return c
    t = str(side_threads(side))
    c = [args.peer, "-m", args.model, "--host", "127.0.0.1", "--port", str(port), "-np", str(n),
         "-c", ctx, "-t", t, "-ctk", "f16", "-ctv", "f16", "--metrics"]
    if draft:
        c += ["-md", args.model_draft, "--spec-type", "draft-simple", "--spec-draft-n-max",
              str(args.draft_max), "--spec-draft-p-min", str(args.p_min), "-td", t]
    return c


def llama_metrics(port):
    """llama-server's /metrics counters (its speculation counts)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    except Exception:  # noqa: BLE001
        return {}
    out = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:") and " " in line:
            k, v = line.split(" ", 1)
            out[k[len("llamacpp:"):]] = float(v)
    return out


def run_side(side, n, port, rpc):
    cmd = server_cmd(side, n, port)
    log = open(f"/tmp/serve_vs_{side}_{n}.log", "w")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    try:
        if not wait_health(port, proc):
            return {"side": side, "clients": n, "error": "server did not start", "cmd": cmd}
        lt = [sys.executable, os.path.join(here, "load_test.py"), "--url",
              f"http://127.0.0.1:{port}", "--clients", str(n), "--requests",
              str(n * rpc), "--max-tokens", str(args.max_tokens), "--chat",
              "--pid", str(proc.pid), "--label", side, "--timeout", "1800", "--json"]
        for p in prompts:
            lt += ["-f", p]
        if side.startswith("specdec"):
            lt.append("--check-alone")
        r = subprocess.run(lt, capture_output=True, text=True)
        try:
            res = json.loads(r.stdout)
        except ValueError:
            res = {"error": "load_test.py: " + r.stderr[-300:]}
        res["side"], res["cmd"] = side, " ".join(cmd)
        if side.startswith("llama"):
            m = llama_metrics(port)
            d, a = m.get("spec_decode_num_draft_tokens_total"), m.get(
                "spec_decode_num_accepted_tokens_total")
            if d:
                res["acceptance"], res["drafted"], res["accepted"] = round(a / d, 4), d, a
            if m.get("n_decode_total"):
                res["tokens_per_pass"] = round(
                    m.get("tokens_predicted_total", 0) / m["n_decode_total"], 4)
        return res
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            res_code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            res_code = proc.wait()
        log.close()
        if side.startswith("specdec") and res_code != 0:
            print(f"serve_vs_llamacpp.py: {side} exited {res_code}", file=sys.stderr)


if args.tables:
    try:
        with open(args.tables) as f:
            out = json.load(f)
        results = out["results"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"serve_vs_llamacpp.py: {args.tables}: not a saved run ({e})")
    sides = list(dict.fromkeys(r["side"] for r in results))
    clients = list(dict.fromkeys(r["clients"] for r in results))
else:
    sides = args.sides.split(",")
    if not args.model_draft:
        sides = [s for s in sides if "nodraft" in s or s == "specdec"]
    clients = [int(x) for x in args.clients.split(",")]
    rpcs = [int(x) for x in args.requests_per_client.split(",")]
    rpcs = (rpcs * len(clients))[:len(clients)] if len(rpcs) == 1 else rpcs
    results = []
    cpu = ""
    with open("/proc/cpuinfo") as f:
        m = re.search(r"model name\s*:\s*(.*)", f.read())
        cpu = m.group(1) if m else ""
    for n, rpc in zip(clients, rpcs):
        for rnd in range(args.rounds):
            order = sides if rnd % 2 == 0 else list(reversed(sides))
            for side in order:
                res = run_side(side, n, args.port, rpc)
                res["round"] = rnd
                results.append(res)
                print(f"serve_vs_llamacpp.py: {side:17s} N={n:2d} round {rnd}: "
                      f"{res.get('throughput_tok_s')} tok/s, errors {res.get('errors')}, "
                      f"acceptance {res.get('acceptance')}, equal_alone {res.get('equal_alone')}",
                      file=sys.stderr)
                args.port += 1

    out = {"cpu": cpu, "cores": os.cpu_count(), "model": args.model, "draft": args.model_draft,
           "threads": args.threads, "draft_max": args.draft_max, "p_min": args.p_min,
           "max_tokens": args.max_tokens, "requests_per_client": rpcs,
           "loadavg_end": open("/proc/loadavg").read().split()[:3], "results": results}
    text = json.dumps(out, indent=2)
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            f.write(text + "\n")
        os.replace(args.json + ".tmp", args.json)
    print(text)


def best(side, n):
    rs = [r for r in results if r.get("side") == side and r.get("clients") == n and
          r.get("throughput_tok_s")]
    return max(rs, key=lambda r: r["throughput_tok_s"]) if rs else None


def fmt(r, key, sub=None):
    if not r:
        return "-"
    v = r.get(key)
    if sub and isinstance(v, dict):
        v = v.get(sub)
    return "-" if v is None else (f"{v:.3g}" if isinstance(v, float) else str(v))


print("\n| clients | " + " | ".join(f"{s} tok/s" for s in sides) +
      " | best specdec / best llama | TTFT p50 ms (" + ", ".join(sides) + ") | ITL p50 ms | acceptance | "
      "equal alone | errors |")
print("|---" * (len(sides) + 6) + "|")
for n in clients:
    b = {s: best(s, n) for s in sides}
    sp = max((b[s]["throughput_tok_s"] for s in sides if s.startswith("specdec") and b[s]),
             default=None)
    lls = [b[s]["throughput_tok_s"] for s in sides if s.startswith("llama") and b[s]]
    ratio = f"{sp / max(lls):.2f}" if sp and lls else "-"
    print(f"| {n} | " + " | ".join(fmt(b[s], "throughput_tok_s") for s in sides) + f" | {ratio} | " +
          ", ".join(fmt(b[s], "ttft_ms", "p50") for s in sides) + " | " +
          ", ".join(fmt(b[s], "itl_ms", "p50") for s in sides) + " | " +
          ", ".join(fmt(b[s], "acceptance") for s in sides) + " | " +
          ", ".join(fmt(b[s], "equal_alone_n") for s in sides if s.startswith("specdec")) + " | " +
          ", ".join(fmt(b[s], "errors") for s in sides) + " |")


def ms(r, key):
    v = ((r or {}).get("bench_serve") or {}).get(key) or {}
    return " / ".join("-" if v.get(q) is None else f"{v[q]:.0f}" for q in ("mean", "median", "p99"))


print("\n| side | clients | ok / failed | duration s | req/s | output tok/s | TTFT ms mean / median / p99 | "
      "TPOT ms | ITL ms | E2EL ms | acceptance rate | acceptance length | per position |")
print("|---" * 13 + "|")
for s_ in sides:
    for n in clients:
        r = best(s_, n)
        bs = (r or {}).get("bench_serve") or {}
        sd = bs.get("spec_decode") or {}
        pp = sd.get("per_position_acceptance") or []
        print(f"| {s_} | {n} | {bs.get('completed', '-')} / {bs.get('failed', '-')} | "
              f"{fmt(bs, 'duration_s')} | {fmt(bs, 'request_throughput')} | "
              f"{fmt(bs, 'output_throughput')} | {ms(r, 'ttft_ms')} | {ms(r, 'tpot_ms')} | "
              f"{ms(r, 'itl_ms')} | {ms(r, 'e2el_ms')} | {fmt(sd, 'acceptance_rate')} | "
              f"{fmt(sd, 'acceptance_length')} | {', '.join(f'{x:.2f}' for x in pp) or '-'} |")
