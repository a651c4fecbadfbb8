#!/usr/bin/env python3
"""Structured output against a held set of JSON Schemas, through `specdec serve`.

usage: python3 scripts/schema_check.py --specdec BIN -m TARGET [-md DRAFT] [--chat]
           [--schemas FILE] [--n-predict N] [--limit N] [--surface] [--threads N]

Starts `specdec serve` on 127.0.0.1 (a port it picks), then for every schema of the
held set (tests/data/schemas/held.jsonl: name, task, schema) asks for greedy output
constrained by the schema (OpenAI's response_format json_schema), once without a draft
(draft_type none) and once with the server's draft, one request at a time. Each output
is checked with an independent validator (Python's jsonschema, the schema's own draft
with its format checker):
  - finish_reason "stop": the text must parse as JSON and be valid against the schema;
  - finish_reason "length" (the max_tokens budget ran out inside the JSON): counted as
    truncated and excluded from the parse rate (the grammar cannot make a model close
    its JSON within a budget; it only keeps every prefix valid);
  - the text with a draft must equal the text without one, token for token (greedy).
--chat sends the task as a user message to /v1/chat/completions (instruction-tuned
models); otherwise the task is a /v1/completions prompt (the shipped TinyStories pair).
--surface adds the request-field checks: llama-server's json_schema and grammar fields
on /completion, a streamed answer equal to the non-streamed one, json_object, and the
400s (an unsupported keyword named, two constraints at once, a bad grammar).

Prints one JSON object: counts (schemas, completed, parsed_valid, truncated, invalid,
text_equal), the parse rate over completed outputs, the draft's acceptance over the run,
and the wall time of each side with the speedup (target alone / with draft). Exits 1 on
any invalid completed output, any text that differs, or a failed surface check; 77 (one
line) without jsonschema.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def post(port, path, body, timeout=600):
    req = urllib.request.Request(
        "http://127.0.0.1:%d%s" % (port, path),
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def start_server(args):
    cmd = [args.specdec, "serve", "-m", args.model, "--port", "0", "--no-prefix-cache"]
    if args.draft:
        cmd += ["-md", args.draft]
    if args.threads:
        cmd += ["-t", str(args.threads)]
    cmd += args.server_arg
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    log = []
    t0 = time.time()
    while time.time() - t0 < 120:
        line = p.stdout.readline()
        if not line:
            break
        log.append(line)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        p.kill()
        sys.exit("schema_check: the server did not start: %s" % "".join(log)[-2000:])
    return p, port


def generate(args, port, item, draft):
    body = {
        "temperature": 0,
        "max_tokens": args.n_predict,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": item["name"], "schema": item["schema"], "strict": True},
        },
    }
    if not draft:
        body["draft_type"] = "none"
    if args.chat:
        body["messages"] = [
            {"role": "system", "content": "Answer with one JSON value only."},
            {"role": "user", "content": item["task"]},
        ]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = item["task"] + "\n"
        path = "/v1/completions"
    t0 = time.perf_counter()
    code, text = post(port, path, body)
    dt = time.perf_counter() - t0
    if code != 200:
        raise RuntimeError("%s: HTTP %d: %s" % (item["name"], code, text[:300]))
    d = json.loads(text)
    ch = d["choices"][0]
    out = ch["message"]["content"] if args.chat else ch["text"]
    return out, ch["finish_reason"], d.get("speculative", {}), dt


def validate(validator_for, schema, text):
    """None if text is JSON valid against schema, else the reason."""
    def no_constants(x):
        raise ValueError("not JSON: " + x)

    try:
        inst = json.loads(text, parse_constant=no_constants)
    except ValueError as e:
        return "not JSON: %s" % e
    cls = validator_for(schema)
    errs = sorted(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(inst), key=str)
    return ("invalid: %s" % errs[0].message) if errs else None


def surface_checks(args, port, fails):
    """The request fields end to end; appends a line per failure to fails."""
    sch = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    n = args.n_predict

    def expect(cond, what):
        if not cond:
            fails.append("surface: " + what)

    # llama-server's json_schema and grammar on /completion.
    code, t = post(port, "/completion", {"prompt": "Once", "n_predict": n, "temperature": 0,
                                         "json_schema": sch})
    expect(code == 200, "/completion json_schema: HTTP %d %s" % (code, t[:200]))
    if code == 200:
        c = json.loads(t)["content"]
        expect(json.loads(c)["ok"] in (True, False), "/completion json_schema: %r" % c)
    code, t = post(port, "/completion", {"prompt": "Once", "n_predict": n, "temperature": 0,
                                         "grammar": 'root ::= "yes" | "no"'})
    expect(code == 200 and json.loads(t)["content"] in ("yes", "no"),
           "/completion grammar: HTTP %d %s" % (code, t[:200]))
    # json_object: any object.
    code, t = post(port, "/v1/completions", {"prompt": "Once", "max_tokens": n, "temperature": 0,
                                             "response_format": {"type": "json_object"}})
    expect(code == 200, "json_object: HTTP %d %s" % (code, t[:200]))
    # Streamed = not streamed (chat surface when --chat, else completions).
    body = {"max_tokens": n, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"schema": sch}}}
    if args.chat:
        body["messages"] = [{"role": "user", "content": "Is it ok?"}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = "Once"
        path = "/v1/completions"
    code, whole = post(port, path, body)
    body["stream"] = True
    code2, sse = post(port, path, body)
    if code == 200 and code2 == 200:
        ch = json.loads(whole)["choices"][0]
        want = ch["message"]["content"] if args.chat else ch["text"]
        got = ""
        for line in sse.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for c in json.loads(line[6:]).get("choices", []):
                    got += (c.get("delta", {}).get("content") or "") if args.chat else (c.get("text") or "")
        expect(got == want, "stream %r != %r" % (got, want))
    else:
        expect(False, "stream: HTTP %d / %d" % (code, code2))
    # The 400s name the field and the keyword.
    code, t = post(port, "/v1/completions", {"prompt": "x", "response_format": {
        "type": "json_schema", "json_schema": {"schema": {"type": "array", "uniqueItems": True}}}})
    expect(code == 400 and "uniqueItems" in t and json.loads(t)["error"]["param"] == "response_format",
           "uniqueItems: HTTP %d %s" % (code, t[:200]))
    code, t = post(port, "/completion", {"prompt": "x", "json_schema": {"type": "string", "format": "email"}})
    expect(code == 400 and "format" in t and "email" in t, "format email: HTTP %d %s" % (code, t[:200]))
    code, t = post(port, "/completion", {"prompt": "x", "json_schema": sch, "grammar": "root ::= \"a\""})
    expect(code == 400 and "one of" in t, "two constraints: HTTP %d %s" % (code, t[:200]))
    code, t = post(port, "/completion", {"prompt": "x", "grammar": "root ::= undefined-rule"})
    expect(code == 400 and json.loads(t)["error"]["param"] == "grammar", "bad grammar: HTTP %d %s" % (code, t[:200]))
    code, t = post(port, "/v1/completions", {"prompt": "x", "response_format": {"type": "yaml"}})
    expect(code == 400 and "response_format.type" in t, "type yaml: HTTP %d %s" % (code, t[:200]))
    code, t = post(port, "/v1/completions", {"prompt": "x", "max_tokens": 2, "response_format": {"type": "text"}})
    expect(code == 200, "type text: HTTP %d %s" % (code, t[:200]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--specdec", default=os.path.join(ROOT, "build-release", "specdec"))
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-md", "--draft", default=None)
    ap.add_argument("--schemas", default=os.path.join(ROOT, "tests", "data", "schemas", "held.jsonl"))
    ap.add_argument("--chat", action="store_true")
    ap.add_argument("--n-predict", type=int, default=256)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--surface", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="one more argument for specdec serve (repeatable)")
    args = ap.parse_args()
    try:
        import jsonschema  # noqa: F401
        from jsonschema.validators import validator_for
    except ImportError:
        print("schema_check: skip: Python's jsonschema is not installed (pip install jsonschema)")
        return 77
    items = [json.loads(l) for l in open(args.schemas) if l.strip()]
    if args.limit:
        items = items[: args.limit]
    srv, port = start_server(args)
    fails = []
    res = {"model": os.path.basename(args.model), "draft": os.path.basename(args.draft or "") or None,
           "endpoint": "chat" if args.chat else "completions", "n_predict": args.n_predict,
           "schemas": len(items), "completed": 0, "parsed_valid": 0, "truncated": 0,
           "invalid": 0, "text_equal": 0, "truncated_names": []}
    t_base = t_draft = 0.0
    drafted = accepted = toks_draft = passes_draft = 0
    res["interrupted"] = False

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)  # a stopped run still prints what it has
    try:
        for it in items:
            base, fr0, _, dt0 = generate(args, port, it, False)
            spec, fr1, st, dt1 = generate(args, port, it, True)
            t_base += dt0
            t_draft += dt1
            drafted += st.get("drafted", 0)
            accepted += st.get("accepted", 0)
            toks_draft += st.get("tokens", 0)
            passes_draft += st.get("target_passes", 0)
            res["done"] = res.get("done", 0) + 1
            if base == spec and fr0 == fr1:
                res["text_equal"] += 1
            else:
                fails.append("%s: text with a draft differs: %r vs %r" % (it["name"], spec, base))
            for out, fr, side in ((base, fr0, "target alone"), (spec, fr1, "with draft")):
                if fr == "length":
                    res["truncated"] += 1
                    if it["name"] not in res["truncated_names"]:
                        res["truncated_names"].append(it["name"])
                    continue
                res["completed"] += 1
                why = validate(validator_for, it["schema"], out)
                if why:
                    res["invalid"] += 1
                    fails.append("%s (%s, finish %s): %s: %r" % (it["name"], side, fr, why, out))
                else:
                    res["parsed_valid"] += 1
            if args.verbose:
                print("%-22s %-6s %s" % (it["name"], fr1, spec.replace("\n", "\\n")[:100]), file=sys.stderr)
        if args.surface:
            surface_checks(args, port, fails)
    except KeyboardInterrupt:
        res["interrupted"] = True
        fails.append("interrupted after %d schemas" % res.get("done", 0))
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()
    res["parse_rate"] = round(res["parsed_valid"] / res["completed"], 4) if res["completed"] else None
    res["acceptance"] = round(accepted / drafted, 4) if drafted else None
    res["tokens_per_pass"] = round(toks_draft / passes_draft, 3) if passes_draft else None
    res["seconds_target_alone"] = round(t_base, 3)
    res["seconds_with_draft"] = round(t_draft, 3)
    res["speedup"] = round(t_base / t_draft, 3) if t_draft > 0 else None
    res["failures"] = fails
    print(json.dumps(res, indent=1))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
