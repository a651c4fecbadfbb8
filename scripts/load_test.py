#!/usr/bin/env python3
"""A bounded load test of an OpenAI-compatible server (specdec serve or llama-server).

usage: python3 scripts/load_test.py --url http://127.0.0.1:8080 [--clients N] [--requests M]
           [--max-tokens T] [-f PROMPTS.txt ...] [--chat] [--temperature X] [--check-alone]
           [--pid PID] [--timeout S] [--label NAME] [--goodput ttft:MS tpot:MS e2el:MS]
           [--json [OUT.json]]

N client threads send M streamed requests in all (prompts taken in turn from the -f files,
'# category: NAME' lines skipped; default scripts/prompts/code.txt and chat.txt), each
one at a time, and stop by themselves: every request has a timeout and the whole run a
deadline. Prints vLLM `bench serve`'s report (the layout vLLM's benchmark prints, so the
figures read the same for specdec, llama-server and vLLM):
  Request / output token / total token throughput (completed requests, completion tokens,
  prompt + completion tokens per second of the run), goodput (--goodput: requests/s meeting
  every SLO given: TTFT, TPOT, E2EL in ms), and mean / median / p99 (ms) of
    TTFT  request sent -> first text chunk
    TPOT  per request: (E2EL - TTFT) / (tokens - 1) (excl. the 1st token)
    ITL   every gap between two consecutive text chunks of a request, over all requests
          (a speculative pass that emits 3 tokens in one chunk is one gap)
    E2EL  request sent -> its stream's end
  and the speculative block from the server's /metrics deltas over the run (vLLM's names:
  vllm:spec_decode_num_drafts / _draft_tokens / _accepted_tokens / _per_pos; specdec serve
  and vLLM write them): acceptance rate (accepted / draft tokens), acceptance length
  (1 + accepted / drafts) and per-position acceptance (accepted at position i / drafts).
--json prints one JSON object instead (--json FILE: the report is printed and the object
written to FILE):
  throughput_tok_s   completion tokens of all requests / wall time of the run
  ttft_ms            p50, p90, p99 over requests: request sent -> first text chunk
  itl_ms             p50, p90, p99 over requests of the mean inter-token latency
                     (last chunk - first chunk) / (tokens - 1), tokens from usage
  errors             requests that failed (status, body, exception, timeout)
  acceptance         accepted / drafted draft tokens over the run: specdec's per-request
                     "speculative" statistics, or llama-server's "timings" (draft_n,
                     draft_n_accepted) when it reports them; null when neither does
  tokens_per_pass    specdec only: generated tokens / target passes (from /metrics)
  equal_alone        with --check-alone: every prompt run alone after the load (one at a
                     time, the same request; after, so that the load does not find its
                     prompts in the prefix cache), the fraction of loaded requests whose text equals
                     its text alone (greedy: --temperature 0, the default); alone_errors
                     counts the alone runs that failed (their prompts are not compared)
  rss_mb             with --pid: the server's resident memory at start, after the first
                     10% of requests, and at the end
  kv_leak_blocks     specdec only, read once the server is idle (nothing running or
                     queued): target KV blocks still held by something other than the
                     prefix cache (blocks used minus those the prefix cache alone holds);
                     kv_draft_leak_blocks the same for the draft's pool; kv_accounting_ok
                     the server's own idle check of both pools (1: they balance)
The exit status is 1 when a request (loaded or alone) failed, or, on specdec, the server
was still busy 10 s after the run, a block leaked or the accounting check failed.
Uses only the Python standard library (http.client), so it runs anywhere python3 does.
"""
import argparse
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--url", required=True, help="server root, e.g. http://127.0.0.1:8080")
ap.add_argument("--clients", type=int, default=4)
ap.add_argument("--requests", type=int, default=32)
ap.add_argument("--max-tokens", type=int, default=128)
ap.add_argument("-f", "--prompts", action="append", default=[])
ap.add_argument("--chat", action="store_true", help="/v1/chat/completions (else completions)")
ap.add_argument("--temperature", type=float, default=0.0)
ap.add_argument("--check-alone", action="store_true")
ap.add_argument("--pid", type=int, default=0, help="the server's pid (its RSS is sampled)")
ap.add_argument("--timeout", type=float, default=600.0, help="deadline of the whole run (s)")
ap.add_argument("--request-timeout", type=float, default=300.0)
ap.add_argument("--api-key", default="")
ap.add_argument("--label", default="")
ap.add_argument("--json", nargs="?", const="-", default="",
                help="print JSON instead of the report (FILE: write it there too)")
ap.add_argument("--goodput", nargs="*", default=[], metavar="METRIC:MS",
                help="SLOs for goodput: ttft:MS tpot:MS e2el:MS")
ap.add_argument("--extra", default="{}", help="JSON object merged into every request body")
args = ap.parse_args()

u = urllib.parse.urlparse(args.url)
HOST, PORT = u.hostname, u.port or 80
here = os.path.dirname(os.path.abspath(__file__))
files = args.prompts or [os.path.join(here, "prompts", "code.txt"),
                         os.path.join(here, "prompts", "chat.txt")]
prompts = []
for fn in files:
    with open(fn, encoding="utf-8") as f:
        prompts += [l.rstrip("\n") for l in f if l.strip() and not l.startswith("# category:")]
if not prompts:
    sys.exit("load_test.py: no prompts")
extra = json.loads(args.extra)
slo = {}
for g in args.goodput:
    k, _, v = g.partition(":")
    if k not in ("ttft", "tpot", "e2el") or not v:
        sys.exit(f"load_test.py: --goodput {g}: expected ttft:MS, tpot:MS or e2el:MS")
    slo[k] = float(v)
t_deadline = time.time() + args.timeout


def headers():
    h = {"Content-Type": "application/json"}
    if args.api_key:
        h["Authorization"] = "Bearer " + args.api_key
    return h


def body_of(prompt, stream):
    b = {"max_tokens": args.max_tokens, "temperature": args.temperature, "stream": stream,
         "seed": 1}
    if stream:
        b["stream_options"] = {"include_usage": True}
    if args.chat:
        b["messages"] = [{"role": "user", "content": prompt}]
    else:
        b["prompt"] = prompt
    b.update(extra)
    return json.dumps(b)


def run_one(prompt):
    """One streamed request: dict with text, tokens, ttft, itl, drafted, accepted, error."""
    r = {"text": "", "tokens": 0, "ttft": None, "itl": None, "drafted": None, "accepted": None,
         "error": None, "prompt_tokens": 0, "gaps": [], "e2el": None}
    path = "/v1/chat/completions" if args.chat else "/v1/completions"
    t0 = time.time()
    left = min(args.request_timeout, t_deadline - t0)
    if left <= 0:
        r["error"] = "deadline"
        return r
    try:
        c = http.client.HTTPConnection(HOST, PORT, timeout=left)
        c.request("POST", path, body=body_of(prompt, True), headers=headers())
        resp = c.getresponse()
        if resp.status != 200:
            r["error"] = f"status {resp.status}: {resp.read()[:200]!r}"
            return r
        t_first = t_last = None
        buf = b""
        done = False
        while not done:
            chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                for line in ev.split(b"\n"):
                    if not line.startswith(b"data: "):
                        continue
                    data = line[6:]
                    if data == b"[DONE]":
                        done = True
                        continue
                    j = json.loads(data)
                    if j.get("usage"):
                        r["tokens"] = j["usage"].get("completion_tokens", r["tokens"])
                        r["prompt_tokens"] = j["usage"].get("prompt_tokens", 0)
                    sp = j.get("speculative")
                    if sp:
                        r["drafted"] = (r["drafted"] or 0) + sp.get("drafted", 0)
                        r["accepted"] = (r["accepted"] or 0) + sp.get("accepted", 0)
                    tm = j.get("timings")  # llama-server
                    if tm and "draft_n" in tm:
                        r["drafted"] = tm.get("draft_n", 0)
                        r["accepted"] = tm.get("draft_n_accepted", 0)
                    for ch in j.get("choices") or []:
                        piece = (ch.get("delta") or {}).get("content") if args.chat else ch.get("text")
                        if piece:
                            now = time.time()
                            if t_first is None:
                                t_first = now
                            else:
                                r["gaps"].append((now - t_last) * 1e3)
                            t_last = now
                            r["text"] += piece
            if time.time() > t0 + left:
                r["error"] = "timeout"
                break
        r["e2el"] = (time.time() - t0) * 1e3
        c.close()
        if not done and not r["error"]:
            r["error"] = "stream ended without [DONE]"
        if t_first is not None:
            r["ttft"] = (t_first - t0) * 1e3
            if r["tokens"] > 1:
                r["itl"] = (t_last - t_first) * 1e3 / (r["tokens"] - 1)
    except Exception as e:  # noqa: BLE001 - any failure of a request is an error of the run
        r["error"] = f"{type(e).__name__}: {e}"
    return r


def metrics():
    try:
        c = http.client.HTTPConnection(HOST, PORT, timeout=10)
        c.request("GET", "/metrics", headers=headers())
        resp = c.getresponse()
        text = resp.read().decode()
        if resp.status != 200:
            return {}
        out = {}
        for line in text.splitlines():
            if line.startswith("specdec_") and " " in line and "{" not in line:
                k, v = line.split(" ", 1)
                out[k[len("specdec_"):]] = float(v)
            elif line.startswith("vllm:spec_decode_num_") and " " in line:
                # vLLM's names (specdec serve and vLLM): summed over engines/models, by position
                k, v = line.rsplit(" ", 1)
                name, _, labels = k.partition("{")
                pos = None
                for lab in labels.rstrip("}").split(","):
                    if lab.startswith("position="):
                        pos = int(lab.split("=", 1)[1].strip('"'))
                key = ("vllm:" + name[5:].replace("_total", "")) if pos is None else \
                    ("vllm:per_pos", pos)
                out[key] = out.get(key, 0.0) + float(v)
        return out
    except Exception:  # noqa: BLE001 - llama-server without --metrics, or no specdec
        return {}


def rss_mb():
    if not args.pid:
        return None
    try:
        with open(f"/proc/{args.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def pct(xs, p):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return round(xs[lo] + (xs[hi] - xs[lo]) * (k - lo), 3)


m0 = metrics()
rss = {"start": rss_mb()}
results = [None] * args.requests
lock = threading.Lock()
next_req = [0]


def client():
    while True:
        with lock:
            i = next_req[0]
            if i >= args.requests or time.time() > t_deadline:
                return
            next_req[0] += 1
        results[i] = run_one(prompts[i % len(prompts)])
        if i == max(1, args.requests // 10) and rss.get("warm") is None:
            rss["warm"] = rss_mb()


def wait_idle(limit_s=10.0):
    """/metrics once nothing is running or queued (at most limit_s), then after the
    server's idle accounting check has had its moment; {} without specdec's metrics."""
    t_end = time.time() + limit_s
    m = metrics()
    while m and (m.get("requests_running") or m.get("queue_depth")) and time.time() < t_end:
        time.sleep(0.05)
        m = metrics()
    if not m:
        return m
    time.sleep(0.3)  # the server checks its pools when the engine goes idle
    return metrics()


t_start = time.time()
threads = [threading.Thread(target=client, daemon=True) for _ in range(args.clients)]
for t in threads:
    t.start()
for t in threads:
    t.join(max(0.0, t_deadline - time.time()) + 5)
wall = time.time() - t_start
rss["end"] = rss_mb()
m1 = wait_idle()
# After the load, not before: run first, the alone requests would fill the prefix cache with
# every prompt of the load, and its TTFT and throughput would be those of cached prompts.
alone = {}
if args.check_alone:
    t_deadline = time.time() + args.timeout  # the alone runs' own time
    for i in range(min(args.requests, len(prompts))):
        alone[i] = run_one(prompts[i])

done = [r for r in results if r is not None]
errors = [r["error"] for r in done if r["error"]] + ["not run"] * (args.requests - len(done))
ok = [r for r in done if not r["error"]]
tokens = sum(r["tokens"] for r in ok)
drafted = sum(r["drafted"] or 0 for r in ok)
accepted = sum(r["accepted"] or 0 for r in ok)
has_spec = any(r["drafted"] is not None for r in ok)
out = {
    "label": args.label,
    "url": args.url,
    "endpoint": "chat" if args.chat else "completions",
    "clients": args.clients,
    "requests": args.requests,
    "max_tokens": args.max_tokens,
    "temperature": args.temperature,
    "wall_s": round(wall, 3),
    "completion_tokens": tokens,
    "throughput_tok_s": round(tokens / wall, 3) if wall > 0 else None,
    "ttft_ms": {p: pct([r["ttft"] for r in ok], v) for p, v in (("p50", 50), ("p90", 90),
                                                                 ("p99", 99))},
    "itl_ms": {p: pct([r["itl"] for r in ok], v) for p, v in (("p50", 50), ("p90", 90),
                                                               ("p99", 99))},
    "errors": len(errors),
    "error_examples": sorted(set(errors))[:5],
    "acceptance": round(accepted / drafted, 4) if has_spec and drafted else None,
    "drafted": drafted if has_spec else None,
    "accepted": accepted if has_spec else None,
}
specdec_m = bool(m1) and "target_passes_total" in m1
if specdec_m:
    dp = m1.get("target_passes_total", 0) - m0.get("target_passes_total", 0)
    dg = m1.get("tokens_generated_total", 0) - m0.get("tokens_generated_total", 0)
    out["tokens_per_pass"] = round(dg / dp, 4) if dp else None
    out["idle_at_end"] = not m1.get("requests_running") and not m1.get("queue_depth")
    out["kv_leak_blocks"] = m1.get("kv_blocks_used", 0) - m1.get("kv_blocks_cached_idle", 0)
    if "kv_draft_blocks_used" in m1:
        out["kv_draft_leak_blocks"] = (m1.get("kv_draft_blocks_used", 0) -
                                       m1.get("kv_draft_blocks_cached_idle", 0))
    out["kv_accounting_ok"] = m1.get("kv_accounting_ok")
    out["prefix_cache_hit_tokens"] = m1.get("prefix_cache_hit_tokens_total", 0) - \
        m0.get("prefix_cache_hit_tokens_total", 0)
if args.check_alone:
    alone_ok = {k for k, a in alone.items() if not a["error"]}
    out["alone_errors"] = len(alone) - len(alone_ok)
    pairs = [(r, alone[i % len(prompts)]) for i, r in enumerate(results)
             if r is not None and not r["error"] and (i % len(prompts)) in alone_ok]
    same = sum(1 for r, a in pairs if r["text"] == a["text"])
    out["equal_alone"] = round(same / len(pairs), 4) if pairs else None
    out["equal_alone_n"] = f"{same}/{len(pairs)}"
if args.pid:
    out["rss_mb"] = {k: (round(v, 1) if v is not None else None) for k, v in rss.items()}


def stats_ms(xs):
    xs = [x for x in xs if x is not None]
    return {"mean": round(sum(xs) / len(xs), 3) if xs else None, "median": pct(xs, 50),
            "p99": pct(xs, 99)}


# vLLM bench serve's figures, computed here from the requests and /metrics deltas.
in_tok = sum(r["prompt_tokens"] for r in ok)
tpots = [(r["e2el"] - r["ttft"]) / (r["tokens"] - 1) if r["tokens"] > 1 and r["ttft"] is not None
         else None for r in ok]
bench = {
    "completed": len(ok),
    "failed": len(errors),
    "max_concurrency": args.clients,
    "duration_s": round(wall, 3),
    "total_input_tokens": in_tok,
    "total_output_tokens": tokens,
    "request_throughput": round(len(ok) / wall, 3) if wall > 0 else None,
    "output_throughput": round(tokens / wall, 3) if wall > 0 else None,
    "total_token_throughput": round((in_tok + tokens) / wall, 3) if wall > 0 else None,
    "ttft_ms": stats_ms([r["ttft"] for r in ok]),
    "tpot_ms": stats_ms(tpots),
    "itl_ms": stats_ms([g for r in ok for g in r["gaps"]]),
    "e2el_ms": stats_ms([r["e2el"] for r in ok]),
}
if slo:
    good = 0
    for r, tp in zip(ok, tpots):
        meets = all(v is not None and v <= slo[k] for k, v in
                    (("ttft", r["ttft"]), ("tpot", tp if tp is not None else 0.0),
                     ("e2el", r["e2el"])) if k in slo)
        good += 1 if meets else 0
    bench["goodput_slo_ms"] = slo
    bench["request_goodput"] = round(good / wall, 3) if wall > 0 else None
d_drafts = m1.get("vllm:spec_decode_num_drafts", 0) - m0.get("vllm:spec_decode_num_drafts", 0)
if m1 and "vllm:spec_decode_num_drafts" in m1 and d_drafts > 0:
    d_tok = m1.get("vllm:spec_decode_num_draft_tokens", 0) - \
        m0.get("vllm:spec_decode_num_draft_tokens", 0)
    d_acc = m1.get("vllm:spec_decode_num_accepted_tokens", 0) - \
        m0.get("vllm:spec_decode_num_accepted_tokens", 0)
    n_pos = max([k[1] + 1 for k in m1 if isinstance(k, tuple)] + [0])
    per_pos = [(m1.get(("vllm:per_pos", i), 0) - m0.get(("vllm:per_pos", i), 0)) / d_drafts
               for i in range(n_pos)]
    while per_pos and per_pos[-1] == 0:
        per_pos.pop()
    bench["spec_decode"] = {
        "drafts": int(d_drafts), "draft_tokens": int(d_tok), "accepted_tokens": int(d_acc),
        "acceptance_rate": round(d_acc / d_tok, 4) if d_tok else None,
        "acceptance_length": round(1 + d_acc / d_drafts, 4),
        "per_position_acceptance": [round(x, 4) for x in per_pos],
    }
out["bench_serve"] = bench


def report(b):
    """vLLM bench serve's layout: 40-column labels, then the value."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]

    def row(label, v, fmt="{:<10.2f}"):
        lines.append("{:<40} ".format(label) + (fmt.format(v) if v is not None else "-"))

    def block(title, key, short):
        lines.append("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        row(f"Mean {short} (ms):", b[key]["mean"])
        row(f"Median {short} (ms):", b[key]["median"])
        row(f"P99 {short} (ms):", b[key]["p99"])

    row("Successful requests:", b["completed"], "{:<10}")
    row("Failed requests:", b["failed"], "{:<10}")
    row("Maximum request concurrency:", b["max_concurrency"], "{:<10}")
    row("Benchmark duration (s):", b["duration_s"])
    row("Total input tokens:", b["total_input_tokens"], "{:<10}")
    row("Total generated tokens:", b["total_output_tokens"], "{:<10}")
    row("Request throughput (req/s):", b["request_throughput"])
    if "request_goodput" in b:
        row("Request goodput (req/s):", b["request_goodput"])
    row("Output token throughput (tok/s):", b["output_throughput"])
    row("Total Token throughput (tok/s):", b["total_token_throughput"])
    block("Time to First Token", "ttft_ms", "TTFT")
    block("Time per Output Token (excl. 1st token)", "tpot_ms", "TPOT")
    block("Inter-token Latency", "itl_ms", "ITL")
    block("End-to-end Latency", "e2el_ms", "E2EL")
    sd = b.get("spec_decode")
    if sd:
        lines.append("{s:{c}^{n}}".format(s="Speculative Decoding", n=50, c="-"))
        row("Acceptance rate (%):", sd["acceptance_rate"] * 100 if sd["acceptance_rate"]
            is not None else None)
        row("Acceptance length:", sd["acceptance_length"])
        row("Drafts:", sd["drafts"], "{:<10}")
        row("Draft tokens:", sd["draft_tokens"], "{:<10}")
        row("Accepted tokens:", sd["accepted_tokens"], "{:<10}")
        lines.append("Per-position acceptance (%):")
        for i, x in enumerate(sd["per_position_acceptance"]):
            row(f"  Position {i}:", x * 100)
    lines.append("=" * 50)
    return "\n".join(lines)


text = json.dumps(out, indent=2)
if args.json == "-":
    print(text)
else:
    print(report(bench))
    if args.label:
        print(f"label: {args.label}")
    if specdec_m:
        print(f"specdec: idle at end {out['idle_at_end']}, KV leak blocks "
              f"{out['kv_leak_blocks']}, accounting ok {out['kv_accounting_ok']}, "
              f"tokens/pass {out['tokens_per_pass']}")
    if args.check_alone:
        print(f"equal alone: {out['equal_alone_n']}")
    if errors:
        print("errors: " + "; ".join(sorted(set(errors))[:5]))
if args.json and args.json != "-":
    with open(args.json + ".tmp", "w") as f:
        f.write(text + "\n")
    os.replace(args.json + ".tmp", args.json)
leaked = specdec_m and (not out["idle_at_end"] or out["kv_leak_blocks"] or
                 out.get("kv_draft_leak_blocks") or out["kv_accounting_ok"] != 1)
sys.exit(1 if errors or out.get("alone_errors") or leaked else 0)
