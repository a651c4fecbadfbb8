#!/usr/bin/env python3
"""Build a trimmed draft head (FR-Spec: Zhao et al. 2025, arXiv 2502.14856): the token ids
of a vocabulary, most frequent first, counted in text the target model itself generates on
a prompt set. `specdec generate --draft-head FILE --draft-head-n N` then makes the LLM draft
score only the first N of them (q = 0 elsewhere: exact by construction).

  python3 scripts/draft_head.py --config configs/qwen2.5-coder-pair.json \\
      -f scripts/prompts/head-build.txt \\
      -n 128 --temps 0.7 -o configs/qwen2.5-coder.head

The text is generated with the config's pair (speculative decoding: the same tokens as the
target alone, greedy and Gumbel sampling alike, only faster). Ranking: control tokens first
(end of turn, end of text: a draft must be able to propose them), then by count in the
generated tokens, then by id (a BPE vocabulary is roughly in merge order, most frequent
pieces first, which orders the ids no text reached). The file holds the first --keep ids
(default 32768) in the format of sd_draft_head_load (draft/sd_draft.h), with the
vocabulary's fingerprint, so a file for another vocabulary is refused. Needs gguf-py (the
`gguf` package) to read the vocabulary.
"""
import argparse
import collections
import json
import os
import struct
import subprocess
import sys

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK = (1 << 64) - 1


def fnv1a(h, data):
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK
    return h


def vocab_of(path):
    import gguf  # gguf-py, llama.cpp's reader

    r = gguf.GGUFReader(path)
    f = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]) for i in f.data]
    types = None
    if "tokenizer.ggml.token_type" in r.fields:
        t = r.fields["tokenizer.ggml.token_type"]
        types = [int(t.parts[i][0]) for i in t.data]
    return tokens, types


def fingerprint(tokens):
    h = fnv1a(FNV_OFFSET, struct.pack("<I", len(tokens)))
    for t in tokens:
        h = fnv1a(h, t + b"\0")
    return h


def read_prompts(path):
    with open(path, encoding="utf-8") as f:
        lines = [l.rstrip("\r\n") for l in f]
    cat = None
    if lines and lines[0].startswith("# category:"):
        cat = lines[0].split(":", 1)[1].strip()
        lines = lines[1:]
    return [l for l in lines if l], cat


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--specdec", default="build-release/specdec")
    ap.add_argument("--config", required=True)
    ap.add_argument("-f", "--prompt-file", action="append", required=True)
    ap.add_argument("-n", type=int, default=256, help="tokens generated per prompt")
    ap.add_argument("--temps", default="0,0.7", help="temperatures, each run once per prompt")
    ap.add_argument("--keep", type=int, default=32768, help="ids written (most frequent first)")
    ap.add_argument("-t", type=int, default=0)
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()

    with open(a.config) as f:
        cfg = json.load(f)
    target = os.path.join(os.path.dirname(a.config), cfg["target"])
    tokens, types = vocab_of(target)
    n_vocab = len(tokens)
    counts = collections.Counter()
    n_gen = 0
    for path in a.prompt_file:
        prompts, cat = read_prompts(path)
        chat = cat is not None and (cat == "chat" or cat.startswith("chat-"))
        for i, p in enumerate(prompts):
            for temp in a.temps.split(","):
                cmd = [a.specdec, "generate", "--config", a.config, "-p", p, "-n", str(a.n),
                       "--temp", temp, "--seed", str(1000 + i), "-t", str(a.t), "-e", "--json"]
                if chat:
                    cmd.append("--chat")
                res = subprocess.run(cmd, capture_output=True, text=True)
                if res.returncode != 0:
                    sys.exit(f"draft_head.py: {' '.join(cmd)}: {res.stderr.strip()}")
                ids = json.loads(res.stdout)["tokens"]
                counts.update(ids)
                n_gen += len(ids)
            print(f"draft_head.py: {os.path.basename(path)} {i + 1}/{len(prompts)}: {n_gen} "
                  f"tokens, {len(counts)} distinct", file=sys.stderr)
    control = set(i for i, t in enumerate(types or []) if t in (3, 4))  # CONTROL, USER_DEFINED
    order = sorted(range(n_vocab), key=lambda i: (i not in control, -counts[i], i))
    keep = order[: min(a.keep, n_vocab)]
    covered = sum(counts[i] for i in keep[: min(len(keep), 32768)])
    body = b"SDHEAD\0\0" + struct.pack("<IIQII", 1, n_vocab, fingerprint(tokens), len(keep), 0)
    body += struct.pack(f"<{len(keep)}I", *keep)
    body += struct.pack("<Q", fnv1a(FNV_OFFSET, body))
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(body)
    os.replace(tmp, a.out)
    for n in (4096, 8192, 16384, 32768):
        if n <= len(keep):
            c = sum(counts[i] for i in keep[:n])
            print(f"draft_head.py: first {n} ids cover {100.0 * c / max(n_gen, 1):.2f}% of the "
                  f"{n_gen} generated tokens", file=sys.stderr)
    print(f"draft_head.py: wrote {a.out} ({len(keep)} ids, {len(body)} bytes; {len(control)} "
          f"control tokens first; {len(counts)} distinct ids in {n_gen} tokens)",
          file=sys.stderr)


if __name__ == "__main__":
    main()
