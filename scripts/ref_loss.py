#!/usr/bin/env python3
"""Independent reference for `specdec perplexity` (the test oracle).

usage: ref_loss.py MODEL.gguf CTX IDS_FILE

IDS_FILE holds one story per line: its token ids (BOS first, as `specdec tokenize`
prints them). Each story is scored by the protocol of tools/perplexity.c: windows of
CTX tokens overlapping by one, each evaluated from position 0, every token after the
first predicted once. The forward pass is scripts/ref_forward.py's (its own GGUF parser,
numpy float64). Prints "nll <mean NLL in nats/token>" and "tokens <count>".
Exit status 2 on a malformed file or bad arguments.
"""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_forward  # noqa: E402


def story_nll(kv, tensors, ids, ctx):
    tot, cnt, s, n = 0.0, 0, 0, len(ids)
    while True:
        e = min(n, s + ctx)
        if e - s >= 2:
            logits = ref_forward.forward(kv, tensors, ids[s:e - 1])  # [e-s-1, n_vocab]
            mx = logits.max(axis=1, keepdims=True)
            lse = (mx[:, 0] + np.log(np.exp(logits - mx).sum(axis=1)))
            tgt = np.array(ids[s + 1:e])
            tot += float((lse - logits[np.arange(len(tgt)), tgt]).sum())
            cnt += len(tgt)
        if e == n:
            break
        s = e - 1
    return tot, cnt


def main(argv):
    if len(argv) != 4:
        sys.stderr.write("usage: ref_loss.py MODEL.gguf CTX IDS_FILE\n")
        return 2
    try:
        ctx = int(argv[2])
        if ctx < 2:
            raise ValueError("CTX must be >= 2")
        with open(argv[3]) as f:
            stories = [[int(t) for t in ln.split()] for ln in f if ln.strip()]
        kv, tensors = ref_forward.parse_gguf(argv[1])
        tot, cnt = 0.0, 0
        for ids in stories:
            t, c = story_nll(kv, tensors, ids, ctx)
            tot, cnt = tot + t, cnt + c
        if cnt == 0:
            raise ValueError("no token to predict")
    except (ValueError, KeyError, struct.error, OSError) as e:
        sys.stderr.write("ref_loss.py: %s\n" % e)
        return 2
    sys.stdout.write("nll %.12f\ntokens %d\n" % (tot / cnt, cnt))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
