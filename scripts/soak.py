#!/usr/bin/env python3
"""A soak of `specdec serve`: 30 clients, random request shapes, random disconnects, SIGTERM in flight.

usage: python3 scripts/soak.py [--specdec build-sanitize/specdec] [--clients 30]
           [--seconds 45] [--seed 1] [--json OUT.json]

Starts `specdec serve` (the shipped TinyStories pair, 4 sequences, 127.0.0.1, a port it
picks; an ASan build's binary makes the soak a sanitizer check too), computes the reference
text of every greedy (prompt, max_tokens) shape alone (one request at a time), then runs
--clients threads for --seconds. Each thread loops over random requests:
  completions or chat; streamed or not; max_tokens 1 .. 64; greedy or sampled (temperature
  0.8, a seed); n 1 or 2; stop strings; logprobs; draft_max 0 .. 6; a malformed body
  (must answer 400); GET /health and /metrics (200);
and disconnects at random: a stream dropped after a few events, a request whose answer is
never read (the socket closed right after sending), a connection reset (SO_LINGER 0).
At the end every thread starts one more streamed request (greedy, 200 tokens, ignore_eos) and
the server gets SIGTERM while they are in flight (final_after_sigterm counts those that
finished after it, within the server's shutdown grace; final_cut those cancelled when the
grace ran out, which end short with usage counting what was sent, or were refused / closed). Passes (exit 0) when:
  - every request that finished is correct: status as expected; a greedy answer's text (n = 1,
    no stop string) equals its reference; a streamed answer ends with [DONE]; usage counts
    add up (completion_tokens <= max_tokens x n);
  - the requests in flight at SIGTERM either finish correctly or are refused / cut (503,
    a closed connection), never answered wrongly;
  - the server exits with status 0 within --shutdown-timeout + 30 s, and its log has no
    sanitizer report ("ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer");
  - between the load and SIGTERM, /metrics shows nothing running or queued and the KV
    accounting check passed once the clients stopped.
Prints a summary (JSON with --json). Uses only the Python standard library.
"""
import argparse
import http.client
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--specdec", default=os.path.join(root, "build-release", "specdec"))
ap.add_argument("--clients", type=int, default=30)
ap.add_argument("--seconds", type=float, default=45.0)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--shutdown-timeout", type=float, default=10.0)
ap.add_argument("--json", default="")
args = ap.parse_args()

TARGET = os.path.join(root, "models", "tinystories-target-q8_0.gguf")
DRAFT = os.path.join(root, "models", "tinystories-draft-q8_0.gguf")
PROMPTS = ["Once upon a time", "The little dog", "Lily had a red ball.", "Tom and Sue went",
           "One day, a bird", "The sun was hot and", "Mom said to Ben:", "There was a big tree"]
LENS = [1, 8, 32, 64]
SANITIZER = ("ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer")

log_path = os.path.join("/tmp", f"soak-{os.getpid()}.log")
log = open(log_path, "w")
env = dict(os.environ)
env.setdefault("ASAN_OPTIONS", "detect_leaks=1:halt_on_error=1:abort_on_error=1")
env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
proc = subprocess.Popen([args.specdec, "serve", "--host", "127.0.0.1", "--port", "0", "-t", "1",
                         "-m", TARGET, "-md", DRAFT, "-np", "4", "-c", "2048",
                         "--max-queue", "256", "--shutdown-timeout",
                         str(args.shutdown_timeout)],
                        stdout=subprocess.PIPE, stderr=log, env=env, text=True)
line = proc.stdout.readline()
if "http://127.0.0.1:" not in line:
    proc.kill()
    sys.exit(f"soak.py: the server did not start: {line!r} (log {log_path})")
PORT = int(line.strip().rsplit(":", 1)[1])

stats = {"requests": 0, "ok": 0, "dropped": 0, "refused": 0, "wrong": 0, "bad_400": 0,
         "final_ok": 0, "final_cut": 0, "final_after_sigterm": 0}
wrong_examples = []
lock = threading.Lock()


def count(k, example=None):
    with lock:
        stats[k] += 1
        if example and len(wrong_examples) < 8:
            wrong_examples.append(example)


def body_of(chat, prompt, n_tok, stream, extra):
    b = {"max_tokens": n_tok, "stream": stream}
    if chat:
        b["messages"] = [{"role": "user", "content": prompt}]
    else:
        b["prompt"] = prompt
    if stream:
        b["stream_options"] = {"include_usage": True}
    b.update(extra)
    return json.dumps(b).encode()


def sse_events(resp, drop_after=None):
    """The JSON events of a stream and whether [DONE] came; stops after drop_after events."""
    events, done, buf = [], False, b""
    while not done:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: "):
                continue
            if ev[6:] == b"[DONE]":
                done = True
                break
            events.append(json.loads(ev[6:]))
            if drop_after is not None and len(events) >= drop_after:
                return events, False
    return events, done


def text_of(chat, events_or_answer, stream):
    """Choice 0's text, the finish reasons, and the usage."""
    texts, fins, usage = {}, {}, None
    items = events_or_answer if stream else [events_or_answer]
    for j in items:
        if j.get("usage"):
            usage = j["usage"]
        for c in j.get("choices") or []:
            i = c.get("index", 0)
            if chat:
                piece = (c.get("delta") or {}).get("content") if stream else \
                    (c.get("message") or {}).get("content")
            else:
                piece = c.get("text")
            texts[i] = texts.get(i, "") + (piece or "")
            if c.get("finish_reason"):
                fins[i] = c["finish_reason"]
    return texts, fins, usage


def request(chat, prompt, n_tok, stream, extra, drop=None, timeout=120):
    """Send one request. drop: None, ('events', k), 'nowait', 'reset'. Returns
    (status, texts, fins, usage, done) or None when this client dropped it."""
    path = "/v1/chat/completions" if chat else "/v1/completions"
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=timeout)
    c.request("POST", path, body=body_of(chat, prompt, n_tok, stream, extra),
              headers={"Content-Type": "application/json"})
    if drop in ("nowait", "reset"):
        if drop == "reset":
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        time.sleep(random.random() * 0.05)
        c.close()
        return None
    resp = c.getresponse()
    if resp.status != 200:
        body = resp.read()
        c.close()
        return resp.status, body, None, None, None
    if stream:
        k = drop[1] if isinstance(drop, tuple) else None
        events, done = sse_events(resp, k)
        c.close()
        if k is not None and not done:
            return None
        texts, fins, usage = text_of(chat, events, True)
        return 200, texts, fins, usage, done
    j = json.loads(resp.read())
    c.close()
    texts, fins, usage = text_of(chat, j, False)
    return 200, texts, fins, usage, True


# References: every greedy shape alone, streamed off, n = 1, no stop string.
ref = {}
for chat in (False, True):
    for p in PROMPTS:
        for n in LENS:
            r = request(chat, p, n, False, {"temperature": 0})
            if not r or r[0] != 200:
                proc.kill()
                sys.exit(f"soak.py: the reference request failed: {r}")
            ref[(chat, p, n)] = r[1][0]


def check(shape, r, n_choices, greedy_exact, max_tokens):
    status, texts, fins, usage, done = r
    if status != 200:
        return f"status {status}: {texts[:200]!r}"
    if not done:
        return "a stream without [DONE]"
    if len(fins) != n_choices or any(f not in ("stop", "length") for f in fins.values()):
        return f"finish reasons {fins}"
    if usage and usage.get("completion_tokens", 0) > max_tokens * n_choices:
        return f"usage {usage}"
    if greedy_exact and texts.get(0) != ref[shape]:
        return f"text {texts.get(0)!r} != alone {ref[shape]!r}"
    return None


def one(rng, final=False):
    chat = rng.random() < 0.5
    p = rng.choice(PROMPTS)
    n_tok = rng.choice(LENS)
    stream = final or rng.random() < 0.5
    extra = {"draft_max": rng.randint(0, 6)}
    greedy = rng.random() < 0.6
    n_choices = 1
    if greedy:
        extra["temperature"] = 0
    else:
        extra.update({"temperature": 0.8, "seed": rng.randint(0, 1 << 30)})
        if rng.random() < 0.3:
            n_choices = 2
            extra["n"] = 2
    stop = rng.random() < 0.15
    if stop:
        extra["stop"] = [rng.choice([".", "\n", " the"])]
    if rng.random() < 0.15:
        extra["logprobs"] = True if chat else 2
    if final:  # long enough to be in flight at SIGTERM
        n_tok, n_choices, stop = 200, 1, False
        extra = {"temperature": 0, "ignore_eos": True, "draft_max": rng.randint(0, 6)}
    drop = None
    if not final:
        x = rng.random()
        if x < 0.10:
            drop = "nowait"
        elif x < 0.15:
            drop = "reset"
        elif stream and x < 0.30:
            drop = ("events", rng.randint(1, 4))
    count("requests")
    try:
        r = request(chat, p, n_tok, stream, extra, drop)
    except (OSError, http.client.HTTPException) as e:
        if final:
            count("final_cut")  # SIGTERM closed it: cut, not wrong
            return
        count("wrong", f"{type(e).__name__}: {e}")
        return
    if r is None:
        count("dropped")
        return
    if final and r[0] == 503:
        count("final_cut")
        return
    if final and "abort" in r[2].values():
        count("final_cut")  # cancelled when the shutdown grace ran out (finish_reason abort)
        return
    exact = not final and greedy and n_choices == 1 and not stop
    err = check((chat, p, n_tok), r, n_choices, exact, n_tok)
    if not err and final:
        after = bool(t_term[0]) and time.time() > t_term[0]
        got = (r[3] or {}).get("completion_tokens")
        if after and got is not None and got < n_tok:
            count("final_cut")  # cancelled when the shutdown grace ran out: cut, not wrong
            return
        if got != n_tok:
            err = f"usage {r[3]} with ignore_eos"
        elif after:
            count("final_after_sigterm")
    if err:
        count("wrong", f"{'chat' if chat else 'completions'} {p!r} n={n_tok} {extra}: {err}")
    else:
        count("final_ok" if final else "ok")


def side(rng):
    """A malformed body (400) or a GET of /health or /metrics (200)."""
    count("requests")
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    try:
        if rng.random() < 0.5:
            c.request("POST", "/v1/completions", body=b'{"prompt": "a", "max_tokens": "x"',
                      headers={"Content-Type": "application/json"})
            want = 400
        else:
            c.request("GET", rng.choice(["/health", "/metrics"]))
            want = 200
        resp = c.getresponse()
        resp.read()
        if resp.status != want:
            count("wrong", f"status {resp.status}, expected {want}")
        else:
            count("bad_400" if want == 400 else "ok")
    except (OSError, http.client.HTTPException) as e:
        count("wrong", f"{type(e).__name__}: {e}")
    finally:
        c.close()


t_end = time.time() + args.seconds
t_term = [0.0]
go_final = threading.Event()
final_started = threading.Semaphore(0)
arrived = [0]


def client(k):
    rng = random.Random(args.seed * 1000 + k)
    while time.time() < t_end:
        if rng.random() < 0.1:
            side(rng)
        else:
            one(rng)
    with lock:
        arrived[0] += 1
    go_final.wait()
    final_started.release()
    one(rng, final=True)


threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(args.clients)]
for t in threads:
    t.start()
while time.time() < t_end:
    time.sleep(0.2)
    if proc.poll() is not None:
        break


def metrics():
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for ln in text.splitlines():
        if ln.startswith("specdec_") and "{" not in ln:
            k, v = ln.split(" ", 1)
            out[k[8:]] = float(v)
    return out


# Wait for the load to end (each thread finishes its request), then check the server idles.
idle = None
if proc.poll() is None:
    deadline = time.time() + 120
    while time.time() < deadline and arrived[0] < args.clients and proc.poll() is None:
        time.sleep(0.1)
    time.sleep(0.5)
    for _ in range(200):
        m = metrics()
        if not m.get("requests_running") and not m.get("queue_depth"):
            break
        time.sleep(0.1)
    time.sleep(0.5)
    m = metrics()
    idle = {"running": m.get("requests_running"), "queued": m.get("queue_depth"),
            "kv_accounting_ok": m.get("kv_accounting_ok"),
            "kv_leak_blocks": m.get("kv_blocks_used", 0) - m.get("kv_blocks_cached_idle", 0)}

# The final burst: one streamed request per client, then SIGTERM while they run.
go_final.set()
for _ in threads:
    final_started.acquire(timeout=30)
time.sleep(0.3)
t_term[0] = time.time()
if proc.poll() is None:
    proc.send_signal(signal.SIGTERM)
try:
    rc = proc.wait(timeout=args.shutdown_timeout + 30)
except subprocess.TimeoutExpired:
    proc.kill()
    rc = "hung"
stop_s = round(time.time() - t_term[0], 2)
for t in threads:
    t.join(30)
log.close()
with open(log_path, errors="replace") as f:
    log_text = f.read()
san = [ln for ln in log_text.splitlines() if any(s in ln for s in SANITIZER)]
out = dict(stats)
out.update({"exit_status": rc, "stop_s": stop_s, "sanitizer_lines": san[:5],
            "idle_before_sigterm": idle, "wrong_examples": wrong_examples, "log": log_path})
ok = (rc == 0 and not san and stats["wrong"] == 0 and idle is not None and
      idle["running"] == 0 and idle["queued"] == 0 and idle["kv_accounting_ok"] == 1 and
      idle["kv_leak_blocks"] == 0 and stats["final_after_sigterm"] > 0)
out["pass"] = ok
print(json.dumps(out, indent=2))
if args.json:
    with open(args.json, "w") as f:
        f.write(json.dumps(out, indent=2) + "\n")
sys.exit(0 if ok else 1)
