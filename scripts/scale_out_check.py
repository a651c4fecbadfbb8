#!/usr/bin/env python3
"""The scale-out check (ctest scale_out): 2 `specdec serve` replicas behind HAProxy (configs/haproxy.cfg).

usage: python3 scripts/scale_out_check.py --specdec build-release/specdec [--haproxy haproxy]

On 127.0.0.1 with ports picked here: two replicas (the shipped TinyStories pair) and HAProxy
with configs/haproxy.cfg in front of them. Then:
 1. Affinity: 8 prefix keys (each its own long system prompt, sent as X-Prefix-Key), 3 chat
    requests each with different questions: every request of a key is answered by the same
    replica (X-Served-By), and the 2nd and 3rd of each key hit that replica's prefix cache
    (usage.prompt_tokens_details.cached_tokens > 0: the system prompt's KV blocks).
 2. Failover: 6 clients send 60 requests in all through the balancer; after the first 10 have
    finished, one replica gets SIGKILL. Lost requests (anything but 200 with a complete
    answer) must all have been in flight when it died (sent before the kill, not answered
    by then), and at most as many as there were then: every request sent after the kill is
    answered (HAProxy retries a failed connection on the other replica).
Exit 0 when both hold, 1 otherwise, 77 (skip, one line) without haproxy or the models.
Uses only the Python standard library.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--specdec", default=os.path.join(root, "build-release", "specdec"))
ap.add_argument("--haproxy", default="haproxy")
args = ap.parse_args()

TARGET = os.path.join(root, "models", "tinystories-target-q8_0.gguf")
DRAFT = os.path.join(root, "models", "tinystories-draft-q8_0.gguf")
hap = shutil.which(args.haproxy)
if not hap:
    print("scale_out_check: skip: haproxy not found (apt-get install haproxy)")
    sys.exit(77)
for f in (TARGET, DRAFT, args.specdec):
    if not os.path.exists(f):
        print(f"scale_out_check: skip: absent: {f}")
        sys.exit(77)

work = tempfile.mkdtemp(prefix="scale-out-")
procs = []


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def fail(msg):
    print(f"scale_out_check: FAIL: {msg} (logs in {work})")
    cleanup()
    sys.exit(1)


def start_replica(name):
    log = open(os.path.join(work, f"{name}.log"), "w")
    p = subprocess.Popen([args.specdec, "serve", "--host", "127.0.0.1", "--port", "0", "-t", "1",
                          "-m", TARGET, "-md", DRAFT, "-np", "2", "-c", "2048", "--kv-block",
                          "16"], stdout=subprocess.PIPE, stderr=log, text=True)
    procs.append(p)
    line = p.stdout.readline()
    if "http://127.0.0.1:" not in line:
        fail(f"replica {name} did not start: {line!r}")
    return p, int(line.strip().rsplit(":", 1)[1])


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def call(port, method, path, body=None, headers=None, timeout=120):
    """(status, parsed JSON or text, headers dict)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    data = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    try:
        data = json.loads(data)
    except ValueError:
        data = data.decode(errors="replace")
    return r.status, data, hdrs


r1, p1 = start_replica("r1")
r2, p2 = start_replica("r2")
lb_port = free_port()
env = dict(os.environ, SD_LB_BIND=f"127.0.0.1:{lb_port}", SD_REPLICA_1=f"127.0.0.1:{p1}",
           SD_REPLICA_2=f"127.0.0.1:{p2}")
lb = subprocess.Popen([hap, "-f", os.path.join(root, "configs", "haproxy.cfg"), "-db"],
                      stdout=open(os.path.join(work, "haproxy.log"), "w"),
                      stderr=subprocess.STDOUT, env=env)
procs.append(lb)
# Both replicas up behind the balancer: round robin without a key reaches each.
seen, t0 = set(), time.time()
while len(seen) < 2:
    if time.time() - t0 > 30 or lb.poll() is not None:
        fail(f"the balancer did not reach both replicas in 30 s (saw {sorted(seen)})")
    try:
        st, _, h = call(lb_port, "GET", "/health", timeout=5)
        if st == 200 and h.get("x-served-by"):
            seen.add(h["x-served-by"])
    except OSError:
        pass
    time.sleep(0.1)

# 1. Affinity and prefix-cache hits.
SYSTEM = ("You are storyteller number {k}. You tell short, happy stories for small children, "
          "with simple words, a friendly animal, a problem and a kind ending. Story set {k}.")
QUESTIONS = ["Tell me about a cat.", "Tell me about a dog.", "Tell me about a bird."]
owner = {}
for k in range(8):
    key = f"story-{k}"
    for i, q in enumerate(QUESTIONS):
        body = {"messages": [{"role": "system", "content": SYSTEM.format(k=k)},
                             {"role": "user", "content": q}], "max_tokens": 8,
                "temperature": 0}
        st, j, h = call(lb_port, "POST", "/v1/chat/completions", body, {"X-Prefix-Key": key})
        if st != 200:
            fail(f"key {key}: status {st}: {j}")
        who = h.get("x-served-by")
        if owner.setdefault(key, who) != who:
            fail(f"key {key}: answered by {owner[key]} then {who}")
        cached = j["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
        if i > 0 and cached <= 0:
            fail(f"key {key}: request {i + 1} on {who} had no prefix-cache hit")
spread = {r: sorted(k for k, w in owner.items() if w == r) for r in ("r1", "r2")}
print(f"scale_out_check: affinity: 8 keys x 3 requests, each key on one replica "
      f"(r1 {len(spread['r1'])} keys, r2 {len(spread['r2'])}), cache hits on every repeat")

# 2. Failover: SIGKILL one replica under load.
N, CLIENTS = 60, 6
results = [None] * N
lock = threading.Lock()
nxt = [0]
finished = [0]
kill_at = [None]


def client():
    while True:
        with lock:
            i = nxt[0]
            if i >= N:
                return
            nxt[0] += 1
        body = {"prompt": f"Once upon a time, story {i},", "max_tokens": 48, "temperature": 0}
        t_start = time.time()
        try:
            st, j, h = call(lb_port, "POST", "/v1/completions", body,
                            {"X-Prefix-Key": f"load-{i % 12}"})
            ok = st == 200 and j["choices"][0]["finish_reason"] in ("stop", "length")
            res = (t_start, time.time(), ok, st, h.get("x-served-by"))
        except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
            res = (t_start, time.time(), False, f"{type(e).__name__}", None)
        results[i] = res
        with lock:
            finished[0] += 1


threads = [threading.Thread(target=client, daemon=True) for _ in range(CLIENTS)]
for t in threads:
    t.start()
while finished[0] < 10:
    time.sleep(0.01)
victim = r1
kill_at[0] = time.time()
victim.send_signal(signal.SIGKILL)
victim.wait()
for t in threads:
    t.join(300)
if any(r is None for r in results):
    fail("a client did not finish in 300 s")
t_kill = kill_at[0]
in_flight = [r for r in results if r[0] < t_kill and r[1] >= t_kill]
lost = [r for r in results if not r[2]]
late_lost = [r for r in lost if r[0] >= t_kill]
print(f"scale_out_check: failover: {N} requests, SIGKILL r1 after 10: {len(in_flight)} in "
      f"flight then, {len(lost)} lost ({sorted(set(str(r[3]) for r in lost))}), "
      f"{sum(1 for r in results if r[4] == 'r2')} answered by r2")
if late_lost:
    fail(f"{len(late_lost)} requests sent after the kill were lost: {late_lost[:3]}")
if len(lost) > len(in_flight):
    fail(f"{len(lost)} lost, more than the {len(in_flight)} in flight at the kill")
st, _, h = call(lb_port, "GET", "/health", timeout=5)
if st != 200 or h.get("x-served-by") != "r2":
    fail(f"after the kill: /health {st} from {h.get('x-served-by')}")
cleanup()
shutil.rmtree(work, ignore_errors=True)
print("scale_out_check: pass")
