#!/usr/bin/env python3
"""The chat page of `specdec serve` in headless Chromium (run by tests/test_server.c).

usage: python3 tests/server_page.py CHROMIUM BASE_URL WORKDIR

Drives Chromium over the DevTools protocol on a pipe (--remote-debugging-pipe: no
network port, no extra package). Opens BASE_URL/?q=QUESTION, which asks at once, and
watches the answer grow: it must stream in (several partial lengths seen before the
end), finish, equal the answer the API gives for the same request (temperature 0,
256 max tokens, as the page sends) and carry its statistics line (tok/s, acceptance).
The partial lengths are those the page itself showed (a MutationObserver, installed
before the page's script runs, notes the answer's length after each batch of DOM changes:
one per chunk of the stream the page read), not a poll's samples; and the page's network
is throttled (DevTools network emulation, 16 KB/s: about 2 s for the ~30 KB stream). The
small test model streams its whole answer in some 40 ms, which one scheduling hiccup of a
loaded machine swallows: the page would then read the stream in one chunk.
A screenshot of the answered page must differ from one of the empty page. Exits 1 with
one line on the first failure.
"""
import base64
import json
import os
import subprocess
import sys
import time
import urllib.request

chrome, base, work = sys.argv[1], sys.argv[2].rstrip("/"), sys.argv[3]
QUESTION = "Once upon a time"


def fail(msg):
    print("server_page.py: " + msg, file=sys.stderr)
    sys.exit(1)


# The API's answer to what the page sends.
req = urllib.request.Request(
    base + "/v1/chat/completions",
    data=json.dumps({"messages": [{"role": "user", "content": QUESTION}], "temperature": 0,
                     "max_tokens": 256}).encode(),
    headers={"Content-Type": "application/json"})
want = json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["message"]["content"]
if not want:
    fail("the API gave an empty answer")

to_chrome_r, to_chrome_w = os.pipe()
from_chrome_r, from_chrome_w = os.pipe()
os.set_inheritable(to_chrome_r, True)
os.set_inheritable(from_chrome_w, True)
# The protocol's pipe is fd 3 (commands in) and fd 4 (answers out) of Chromium.
argv = [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--no-first-run", "--remote-debugging-pipe",
        "--user-data-dir=" + os.path.join(work, "chrome"), "--window-size=900,700", "about:blank"]
proc = subprocess.Popen(
    ["/bin/sh", "-c", f'exec "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}', "sh"] + argv,
    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    pass_fds=(to_chrome_r, from_chrome_w))
os.close(to_chrome_r)
os.close(from_chrome_w)
buf = b""
next_id = 0


def call(method, params=None, session=None, timeout=30):
    global buf, next_id
    next_id += 1
    msg = {"id": next_id, "method": method, "params": params or {}}
    if session:
        msg["sessionId"] = session
    os.write(to_chrome_w, json.dumps(msg).encode() + b"\0")
    t0 = time.time()
    while True:
        while b"\0" in buf:
            raw, buf = buf.split(b"\0", 1)
            m = json.loads(raw)
            if m.get("id") == next_id:
                if "error" in m:
                    fail(f"{method}: {m['error']}")
                return m["result"]
        if time.time() - t0 > timeout:
            fail(f"{method}: no answer from Chromium in {timeout} s")
        chunk = os.read(from_chrome_r, 1 << 16)
        if not chunk:
            fail("Chromium closed the pipe")
        buf += chunk


# Run in the page before its own script: the answer's length after each batch of DOM
# changes (one batch per task, i.e. per chunk of the stream the page has read).
WATCH_LENGTHS = """
window.__answerLengths = [];
new MutationObserver(() => {
  const a = document.querySelector('.assistant .answer');
  if (a) window.__answerLengths.push(a.textContent.length);
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


def page(url, watch=False):
    tid = call("Target.createTarget", {"url": "about:blank"})["targetId"]
    sid = call("Target.attachToTarget", {"targetId": tid, "flatten": True})["sessionId"]
    call("Page.enable", session=sid)
    if watch:
        call("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH_LENGTHS}, session=sid)
        call("Network.enable", session=sid)
        call("Network.emulateNetworkConditions",
             {"offline": False, "latency": 0, "downloadThroughput": 16384,
              "uploadThroughput": -1}, session=sid)
    call("Page.navigate", {"url": url}, session=sid)
    return sid


def js(sid, expr):
    r = call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=sid)
    return r["result"].get("value")


def screenshot(sid, path):
    data = base64.b64decode(call("Page.captureScreenshot", {"format": "png"}, session=sid)["data"])
    with open(path, "wb") as f:
        f.write(data)
    return data


try:
    empty = page(base + "/")
    t0 = time.time()
    while js(empty, "document.getElementById('model').textContent") in (None, ""):
        if time.time() - t0 > 30:
            fail("the empty page did not load")
        time.sleep(0.05)
    shot_empty = screenshot(empty, os.path.join(work, "empty.png"))
    sid = page(base + "/?q=" + urllib.request.quote(QUESTION), watch=True)
    t0 = time.time()
    state = None
    while True:
        state = js(sid, "(() => { const a = document.querySelector('.assistant');"
                        " return a ? [a.dataset.done || '', a.querySelector('.answer').textContent,"
                        " a.querySelector('.stats').textContent] : null; })()")
        if state and state[0]:
            break
        if time.time() - t0 > 90:
            fail(f"no finished answer after 90 s: {state}")
        time.sleep(0.05)
    done, text, stats = state
    t_answer = time.time() - t0
    lengths = set(js(sid, "window.__answerLengths") or [])
    if done != "1":
        fail(f"the answer failed: {stats}")
    partial = [n for n in lengths if 0 < n < len(text)]
    if len(partial) < 2:
        fail(f"the answer did not stream in (lengths seen: {sorted(lengths)})")
    if text != want:
        fail(f"the page's answer {text!r} differs from the API's {want!r}")
    if "tok/s" not in stats or "acceptance" not in stats:
        fail(f"no statistics line: {stats!r}")
    shot = screenshot(sid, os.path.join(work, "answer.png"))
    if shot[:4] != b"\x89PNG" or len(shot) < 1000:
        fail("no screenshot")
    if shot == shot_empty:
        fail("the screenshot with an answer equals the empty page's")
    print(f"server_page.py: ok ({len(partial)} partial lengths in {t_answer:.1f} s, {stats})")
finally:
    proc.kill()
    proc.wait()
