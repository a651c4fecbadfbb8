#!/usr/bin/env python3
"""The openai Python client against `specdec serve` (run by tests/test_server.c).

usage: python3 tests/server_openai.py BASE_URL      (e.g. http://127.0.0.1:8080/v1)

Completions and chat completions, streamed and not, n > 1, stop strings, errors, and 8
concurrent streamed requests: every streamed text equals the non-streamed text of the same
request (greedy), and every concurrent request equals its own output alone. Exits 1 on
the first failure, with a line saying what differed.
"""
import sys
import threading

import openai

base = sys.argv[1]
client = openai.OpenAI(base_url=base, api_key="none", timeout=120, max_retries=0)
model = client.models.list().data[0].id


def fail(msg):
    print("server_openai.py: " + msg, file=sys.stderr)
    sys.exit(1)


def complete(prompt, **kw):
    kw.setdefault("max_tokens", 40)
    return client.completions.create(model=model, prompt=prompt, temperature=0, **kw)


def complete_stream(prompt, **kw):
    text, finish = "", None
    for ch in client.completions.create(model=model, prompt=prompt, temperature=0, max_tokens=40,
                                        stream=True, **kw):
        if ch.choices:
            text += ch.choices[0].text or ""
            finish = ch.choices[0].finish_reason or finish
    return text, finish


def chat(msgs, **kw):
    return client.chat.completions.create(model=model, messages=msgs, temperature=0,
                                          max_tokens=40, **kw)


def chat_stream(msgs, **kw):
    text, finish, usage = "", None, None
    for ch in client.chat.completions.create(model=model, messages=msgs, temperature=0,
                                             max_tokens=40, stream=True,
                                             stream_options={"include_usage": True}, **kw):
        if ch.usage:
            usage = ch.usage
        if ch.choices:
            text += ch.choices[0].delta.content or ""
            finish = ch.choices[0].finish_reason or finish
    return text, finish, usage


prompts = ["Once upon a time, there was a little girl named Lily.", "Tom had a big red ball.",
           "One day, a cat and a dog went to the park.", "The sun was hot and the sky was blue.",
           "Sara loved to eat apples.", "Ben saw a bird in the tree.",
           "Once upon a time, there was a little boy named Tim.", "The dog ran fast."]

# Completions: streamed == not streamed.
for p in prompts[:3]:
    r = complete(p)
    s, fin = complete_stream(p)
    if s != r.choices[0].text:
        fail(f"completion stream {s!r} != {r.choices[0].text!r}")
    if fin != r.choices[0].finish_reason:
        fail(f"finish_reason {fin} != {r.choices[0].finish_reason}")
    if r.usage.completion_tokens < 1 or r.usage.total_tokens != r.usage.prompt_tokens + r.usage.completion_tokens:
        fail(f"usage {r.usage}")

# Chat: streamed == not streamed; usage in the stream.
msgs = [{"role": "system", "content": "You tell stories."},
        {"role": "user", "content": "Once upon a time"}]
r = chat(msgs)
s, fin, usage = chat_stream(msgs)
if s != r.choices[0].message.content:
    fail(f"chat stream {s!r} != {r.choices[0].message.content!r}")
if r.choices[0].message.role != "assistant":
    fail("role")
if usage is None or usage.completion_tokens != r.usage.completion_tokens:
    fail(f"stream usage {usage} vs {r.usage}")

# A stop string: the text ends before its first occurrence.
full = complete(prompts[0], max_tokens=60).choices[0].text
words = full.split()
if len(words) > 4:
    stop = " " + words[3]
    cut = complete(prompts[0], max_tokens=60, stop=[stop])
    if cut.choices[0].text != full[:full.index(stop)] or cut.choices[0].finish_reason != "stop":
        fail(f"stop {stop!r}: {cut.choices[0].text!r} from {full!r}")

# n = 2 sampled choices with a seed: two answers, reproducible.
a = client.completions.create(model=model, prompt=prompts[1], temperature=1.0, max_tokens=20,
                              n=2, seed=11)
b = client.completions.create(model=model, prompt=prompts[1], temperature=1.0, max_tokens=20,
                              n=2, seed=11)
if len(a.choices) != 2 or [c.text for c in a.choices] != [c.text for c in b.choices]:
    fail("n=2 with a seed is not reproducible")

# Errors come back as the client's exceptions with the status.
try:
    client.completions.create(model=model, prompt="a", max_tokens=100000)
    fail("an over-long request was accepted")
except openai.BadRequestError as e:
    if "context" not in str(e):
        fail(f"400 without the reason: {e}")

# 8 concurrent streams: each equals its output alone.
alone = [complete_stream(p)[0] for p in prompts]
got = [None] * len(prompts)


def worker(i):
    got[i] = complete_stream(prompts[i])[0]


ts = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
for t in ts:
    t.start()
for t in ts:
    t.join()
for i, (x, y) in enumerate(zip(got, alone)):
    if x != y:
        fail(f"concurrent request {i}: {x!r} != alone {y!r}")
# Logprobs through the client's own types: chat content entries spelling the message,
# completions' arrays spelling the text, streamed chunks carrying their tokens' logprobs,
# and a logit_bias that changes the text.
r = chat(msgs, logprobs=True, top_logprobs=3)
lp = r.choices[0].logprobs.content
if len(lp) != r.usage.completion_tokens or "".join(e.token for e in lp) != r.choices[0].message.content:
    fail(f"chat logprobs {lp!r} do not spell {r.choices[0].message.content!r}")
if any(len(e.top_logprobs) != 3 or e.logprob > e.top_logprobs[0].logprob + 1e-9 for e in lp):
    fail("chat top_logprobs: not 3 each, or the token above the best")
streamed = []
for ch in client.chat.completions.create(model=model, messages=msgs, temperature=0, max_tokens=40,
                                         stream=True, logprobs=True, top_logprobs=3):
    if ch.choices and ch.choices[0].logprobs:
        streamed += ch.choices[0].logprobs.content or []
if [(e.token, e.logprob) for e in streamed] != [(e.token, e.logprob) for e in lp]:
    fail("streamed chat logprobs differ from the answer's")
c = complete(prompts[0], logprobs=2)
cl = c.choices[0].logprobs
if len(cl.tokens) != c.usage.completion_tokens or "".join(cl.tokens) != c.choices[0].text:
    fail(f"completion logprobs {cl.tokens!r} do not spell {c.choices[0].text!r}")
if len(cl.token_logprobs) != len(cl.tokens) or len(cl.top_logprobs) != len(cl.tokens):
    fail("completion logprobs arrays differ in length")
if complete(prompts[0], logit_bias={"300": 100}).choices[0].text == c.choices[0].text:
    fail("logit_bias +100 changed nothing")

print("server_openai.py: ok")
