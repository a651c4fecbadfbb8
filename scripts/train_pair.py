#!/usr/bin/env python3
"""Train the project's TinyStories target/draft pair and export it for specdec.

usage (from the repository root; Debian's python3-torch and python3-numpy):

    /usr/bin/python3 scripts/train_pair.py all --specdec build-release/specdec

Stages (`all` runs them in this order; each can be run alone, later ones read what the
earlier ones left in --work):

  tokenize  split ../shared/data/tinystories/{train_*,valid}.txt into stories (a line
            `<|endoftext|>` ends each one) and tokenize every story with specdec's own
            tokenizer (`specdec tokenize -m stories260K.gguf -f story.txt`: BOS first), so
            training and inference agree exactly; cached in WORK/tokens-*.npz.
  target    train the target (~1 M parameters) on the train stories.
  sample    sample stories from the target (temperature 1, no top-k/top-p, KV cache).
  draft     train the draft (~8x smaller) by distillation (DistillSpec, Zhou et al. 2023):
            forward KL to the target's full next-token distribution, on a 50/50 mix of
            real stories and the target's own samples.
  export    write llama2.c legacy checkpoints (WORK/*.bin) and run `specdec convert` and
            `specdec quantize q8_0` into OUT/tinystories-{target,draft}-{f32,q8_0}.gguf.
  eval      mean NLL (nats/token) on valid.txt of target, draft and stories260K, by the
            protocol of `specdec perplexity` (below); with --check, also runs
            `specdec perplexity` on the GGUF files and compares (|diff| < 1e-3).

Architecture = what runtime/model/model.c implements (llama2.c's model.py): RMSNorm (eps
1e-5), RoPE on adjacent pairs (2i, 2i+1) with theta = pos * 10000^(-2i/head_dim)
(llama2.c's view_as_complex form), GQA (KV head g serves query heads g*rep ..
g*rep+rep-1), SwiGLU FFN w2(silu(w1 x) * w3 x), no biases, classifier tied to the token
embedding. Exported weights go to GGUF unchanged (runtime/convert/llama2c.c: no Q/K permute).

Training data: each story becomes [BOS] + tokens + [EOS]. An epoch shuffles the stories,
concatenates them into one stream and cuts rows of seq_len + 1 tokens overlapping by one;
attention is masked to stay inside one story and RoPE positions restart at 0 at each
story start and at each row start (a row that begins mid-story is like the later
windows of the perplexity protocol). Targets that cross a story boundary are ignored.

Perplexity protocol (same as tools/perplexity.c): each valid story is tokenized with
BOS (no EOS); a story of n tokens t[0..n) is scored in windows of ctx tokens that
overlap by one: window [s, e) with e = min(n, s + ctx), evaluated from position 0 on an
empty cache, predicts t[s+1 .. e) from the logits at [s .. e-1); the next window starts
at s = e - 1. Every token after BOS is predicted exactly once. NLL summed in float64.

Everything is seeded (--seed) and single-threaded (torch.set_num_threads(1)), and the
step counts are fixed, so a rerun on the same software reproduces the same weights.
"""
import argparse
import hashlib
import math
import os
import struct
import subprocess
import sys
import tempfile
import time

# One thread everywhere (a shared 2-core box; and reproducibility). Must precede numpy.
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

BOS, EOS = 1, 2
VOCAB = 512

TARGET_CFG = dict(dim=128, n_layers=5, n_heads=4, n_kv_heads=2, hidden_dim=384, seq_len=512)
DRAFT_CFG = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=192, seq_len=512)


def log(msg):
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------- data

def read_stories(path):
    """Stories of a TinyStories file: text between lines `<|endoftext|>`."""
    stories, cur = [], []
    with open(path, "r", encoding="utf-8", newline="\n") as f:
        for line in f:
            line = line.rstrip("\n")
            if line == "<|endoftext|>":
                stories.append("\n".join(cur))
                cur = []
            else:
                cur.append(line)
    if any(s.strip() for s in cur):
        stories.append("\n".join(cur))
    return [s for s in stories if s.strip()]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    return h.hexdigest()


def specdec_tokenize(specdec, gguf, stories, label):
    """Token ids of each story (BOS first) from `specdec tokenize -f`."""
    out = []
    t0 = time.time()
    with tempfile.TemporaryDirectory() as td:
        p = os.path.join(td, "story.txt")
        for i, s in enumerate(stories):
            with open(p, "wb") as f:
                f.write(s.encode("utf-8"))
            r = subprocess.run([specdec, "tokenize", "-m", gguf, "-f", p], capture_output=True,
                               text=True)
            if r.returncode != 0:
                raise SystemExit("specdec tokenize failed on %s story %d: %s" %
                                 (label, i, r.stderr.strip()))
            ids = [int(x) for x in r.stdout.split()]
            if not ids or ids[0] != BOS:
                raise SystemExit("specdec tokenize: %s story %d: expected BOS first" % (label, i))
            out.append(np.array(ids, dtype=np.int16))
            if (i + 1) % 500 == 0:
                log("  tokenized %s: %d/%d stories (%.0f s)" %
                    (label, i + 1, len(stories), time.time() - t0))
    return out


def py_tokenize(tok_path, stories):
    """SMOKE TESTS ONLY (--py-tokenizer): llama2.c run.c's encode() in Python. The real
    run uses specdec's tokenizer."""
    with open(tok_path, "rb") as f:
        b = f.read()
    off, pieces, scores = 4, [], []
    for _ in range(VOCAB):
        sc, n = struct.unpack_from("<fi", b, off)
        off += 8
        pieces.append(b[off:off + n])
        scores.append(sc)
        off += n
    index = {p: i for i, p in enumerate(pieces)}
    out = []
    for s in stories:
        toks = [index[b" "]]
        for ch in s:
            cb = ch.encode("utf-8")
            if cb in index:
                toks.append(index[cb])
            else:
                toks.extend(x + 3 for x in cb)
        while True:
            best, bi = -1e10, -1
            for i in range(len(toks) - 1):
                j = index.get(pieces[toks[i]] + pieces[toks[i + 1]])
                if j is not None and scores[j] > best:
                    best, bi, bj = scores[j], i, j
            if bi < 0:
                break
            toks[bi:bi + 2] = [bj]
        out.append(np.array([BOS] + toks, dtype=np.int16))
    return out


def save_tokens(path, seqs, meta):
    lens = np.array([len(s) for s in seqs], dtype=np.int64)
    np.savez(path, ids=np.concatenate(seqs) if seqs else np.zeros(0, np.int16), lens=lens,
             meta=np.array(meta))


def load_tokens(path):
    z = np.load(path)
    ids, lens = z["ids"], z["lens"]
    offs = np.concatenate([[0], np.cumsum(lens)])
    return [ids[offs[i]:offs[i + 1]] for i in range(len(lens))], str(z["meta"])


def stage_tokenize(a):
    os.makedirs(a.work, exist_ok=True)
    gguf = os.path.join(a.work, "stories260K-f32.gguf")
    if not a.py_tokenizer:
        run_specdec(a, ["convert", a.stories260k, a.tok512, gguf])
    files = {"train": sorted(os.path.join(a.data, "tinystories", f)
                             for f in os.listdir(os.path.join(a.data, "tinystories"))
                             if f.startswith("train_") and f.endswith(".txt")),
             "valid": [os.path.join(a.data, "tinystories", "valid.txt")]}
    for split, paths in files.items():
        tokzr = "py" if a.py_tokenizer else "specdec:" + sha256_file(gguf)
        meta = tokzr + ";" + ";".join(os.path.basename(p) + "=" + sha256_file(p) for p in paths)
        out = os.path.join(a.work, "tokens-%s.npz" % split)
        if os.path.exists(out) and load_tokens(out)[1] == meta:
            log("tokenize: %s cached in %s" % (split, out))
            continue
        stories = [s for p in paths for s in read_stories(p)]
        if a.py_tokenizer:
            stories = stories[:a.py_tokenizer]
            seqs = py_tokenize(a.tok512, stories)
        else:
            seqs = specdec_tokenize(a.specdec, gguf, stories, split)
        save_tokens(out, seqs, meta)
        n = sum(len(s) for s in seqs)
        log("tokenize: %s: %d stories, %d tokens (with BOS), %.2f bytes/token -> %s" %
            (split, len(seqs), n, sum(len(s.encode()) for s in stories) / n, out))


# ---------------------------------------------------------------- model

def torch_setup(seed):
    import torch
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(seed)
    return torch


def build_model_class():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class RMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-5):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def rope(x, cos, sin):
        # x [B, T, H, hd]; cos/sin [B, T, 1, hd/2]; pairs (2i, 2i+1) as llama2.c.
        xr, xi = x.float().reshape(*x.shape[:-1], -1, 2).unbind(-1)
        return torch.stack([xr * cos - xi * sin, xr * sin + xi * cos], -1).flatten(3)

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            d, hd = c["dim"], c["dim"] // c["n_heads"]
            self.nh, self.nkv, self.hd = c["n_heads"], c["n_kv_heads"], hd
            self.seq_len = c["seq_len"]
            self.wq = nn.Linear(d, c["n_heads"] * hd, bias=False)
            self.wk = nn.Linear(d, c["n_kv_heads"] * hd, bias=False)
            self.wv = nn.Linear(d, c["n_kv_heads"] * hd, bias=False)
            self.wo = nn.Linear(c["n_heads"] * hd, d, bias=False)
            self.w1 = nn.Linear(d, c["hidden_dim"], bias=False)
            self.w2 = nn.Linear(c["hidden_dim"], d, bias=False)
            self.w3 = nn.Linear(d, c["hidden_dim"], bias=False)
            self.attention_norm = RMSNorm(d)
            self.ffn_norm = RMSNorm(d)

        def attn(self, x, cos, sin, mask, cache):
            B, T, _ = x.shape
            q = rope(self.wq(x).view(B, T, self.nh, self.hd), cos, sin)
            k = rope(self.wk(x).view(B, T, self.nkv, self.hd), cos, sin)
            v = self.wv(x).view(B, T, self.nkv, self.hd)
            rep = self.nh // self.nkv
            if cache is not None:
                # Decode step: one new token (T == 1) at the same position for the whole
                # batch; no mask: it sees every cached key. cache = [K, V, n], K and V
                # [B, nkv, seq_len, hd] preallocated; the query heads that share a KV
                # head are stacked as rows: [B, nkv, rep * T, hd].
                n = cache[2]
                assert T == 1, "cached decode takes one token at a time"
                if cache[0] is None:
                    cache[0] = k.new_zeros(B, self.nkv, self.seq_len, self.hd)
                    cache[1] = v.new_zeros(B, self.nkv, self.seq_len, self.hd)
                cache[0][:, :, n:n + T], cache[1][:, :, n:n + T] = k.transpose(1, 2), v.transpose(1, 2)
                cache[2] = n + T
                k, v = cache[0][:, :, :n + T], cache[1][:, :, :n + T]
                qg = q.view(B, T, self.nkv, rep, self.hd).permute(0, 2, 3, 1, 4)
                qg = qg.reshape(B, self.nkv, rep * T, self.hd)
                att = (qg @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
                y = F.softmax(att, -1) @ v  # [B, nkv, rep * T, hd]
                y = y.view(B, self.nkv, rep, T, self.hd).permute(0, 3, 1, 2, 4)
                return self.wo(y.reshape(B, T, -1))
            k = k.repeat_interleave(rep, dim=2)
            v = v.repeat_interleave(rep, dim=2)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
            att = att.masked_fill(~mask, float("-inf"))
            y = F.softmax(att, -1) @ v
            return self.wo(y.transpose(1, 2).reshape(B, T, -1))

        def forward(self, x, cos, sin, mask, cache=None):
            h = x + self.attn(self.attention_norm(x), cos, sin, mask, cache)
            hn = self.ffn_norm(h)
            return h + self.w2(F.silu(self.w1(hn)) * self.w3(hn))

    class Transformer(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c = dict(c)
            self.tok_embeddings = nn.Embedding(c["vocab_size"], c["dim"])
            self.layers = nn.ModuleList(Block(c) for _ in range(c["n_layers"]))
            self.norm = RMSNorm(c["dim"])
            hd = c["dim"] // c["n_heads"]
            freqs = 1.0 / (10000.0 ** (torch.arange(0, hd, 2)[: hd // 2].float() / hd))
            ang = torch.outer(torch.arange(c["seq_len"]).float(), freqs)
            self.register_buffer("fcos", torch.cos(ang), persistent=False)
            self.register_buffer("fsin", torch.sin(ang), persistent=False)
            # llama2.c's init: N(0, 0.02), residual projections scaled by 1/sqrt(2 L).
            for n, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * c["n_layers"]) if n.endswith(("w3.weight", "wo.weight")) else 0.02
                    torch.nn.init.normal_(p, 0.0, std)

        def forward(self, idx, pos, mask):
            """idx, pos [B, T] long; mask [B, 1, T, T] bool (True = may attend)."""
            x = self.tok_embeddings(idx)
            cos, sin = self.fcos[pos].unsqueeze(2), self.fsin[pos].unsqueeze(2)
            for layer in self.layers:
                x = layer(x, cos, sin, mask)
            return self.norm(x) @ self.tok_embeddings.weight.t()

        def step(self, idx, pos, caches):
            """One decode step for a batch at a common position: idx [B, 1]."""
            x = self.tok_embeddings(idx)
            cos = self.fcos[pos].view(1, 1, 1, -1)
            sin = self.fsin[pos].view(1, 1, 1, -1)
            for layer, cache in zip(self.layers, caches):
                x = layer(x, cos, sin, None, cache)
            return (self.norm(x) @ self.tok_embeddings.weight.t())[:, -1]

    return Transformer


def make_model(cfg):
    c = dict(cfg, vocab_size=VOCAB)
    return build_model_class()(c)


def n_params(model):
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- llama2.c export / import

def export_llama2c(model, path):
    """llama2.c legacy (version 0) checkpoint: header 7 int32, then float32 tensors in
    run.c order (classifier tied: vocab_size positive)."""
    import torch
    c = model.c
    hd = c["dim"] // c["n_heads"]
    L = model.layers
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<7i", c["dim"], c["hidden_dim"], c["n_layers"], c["n_heads"],
                            c["n_kv_heads"], c["vocab_size"], c["seq_len"]))

        def w(t):
            f.write(t.detach().float().contiguous().numpy().astype("<f4").tobytes())

        w(model.tok_embeddings.weight)
        for name in ["attention_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3"]:
            for layer in L:
                w(getattr(layer, name).weight)
        w(model.norm.weight)
        freqs = 1.0 / (10000.0 ** (torch.arange(0, hd, 2)[: hd // 2].float() / hd))
        ang = torch.outer(torch.arange(c["seq_len"]).float(), freqs)
        w(torch.cos(ang))
        w(torch.sin(ang))
    os.replace(path + ".tmp", path)


def import_llama2c(path):
    """Load a llama2.c legacy checkpoint (tied classifier) into a Transformer."""
    import torch
    with open(path, "rb") as f:
        b = f.read()
    dim, hid, nl, nh, nkv, vocab, seq = struct.unpack_from("<7i", b, 0)
    if vocab <= 0:
        raise SystemExit("%s: untied classifier not supported here" % path)
    cfg = dict(dim=dim, hidden_dim=hid, n_layers=nl, n_heads=nh, n_kv_heads=nkv, seq_len=seq)
    model = build_model_class()(dict(cfg, vocab_size=vocab))
    data = np.frombuffer(b, "<f4", offset=28)
    off = [0]

    def take(shape):
        n = int(np.prod(shape))
        t = torch.from_numpy(data[off[0]:off[0] + n].copy()).view(*shape)
        off[0] += n
        return t

    kvd = nkv * (dim // nh)
    with torch.no_grad():
        model.tok_embeddings.weight.copy_(take((vocab, dim)))
        shapes = {"attention_norm": (dim,), "wq": (dim, dim), "wk": (kvd, dim),
                  "wv": (kvd, dim), "wo": (dim, dim), "ffn_norm": (dim,), "w1": (hid, dim),
                  "w2": (dim, hid), "w3": (hid, dim)}
        for name, shp in shapes.items():
            for layer in model.layers:
                getattr(layer, name).weight.copy_(take(shp))
        model.norm.weight.copy_(take((dim,)))
    off[0] += seq * (dim // nh)
    if off[0] != len(data):
        raise SystemExit("%s: %d floats, header implies %d" % (path, len(data), off[0]))
    return model


# ---------------------------------------------------------------- batches

def rows_from_stream(stream, doc, T):
    """Cut rows of T+1 tokens overlapping by one from a token stream with per-token
    story ids. Returns inputs, targets (-1 = ignored), positions [R, T] and doc ids."""
    R = (len(stream) - 1) // T
    idx = np.arange(R)[:, None] * T + np.arange(T + 1)[None, :]
    toks, docs = stream[idx], doc[idx]
    x, y = toks[:, :-1].astype(np.int64), toks[:, 1:].astype(np.int64)
    dx = docs[:, :-1]
    y = np.where(docs[:, 1:] == dx, y, -1)
    return x, y, positions(dx), dx


def positions(dx):
    T = dx.shape[1]
    ar = np.broadcast_to(np.arange(T), dx.shape)
    new = np.ones_like(dx, dtype=bool)
    new[:, 1:] = dx[:, 1:] != dx[:, :-1]
    start = np.maximum.accumulate(np.where(new, ar, 0), axis=1)
    return ar - start


def epoch_rows(seqs, T, rng):
    """One epoch: stories ([BOS] .. [EOS]) shuffled, concatenated and cut into rows."""
    order = rng.permutation(len(seqs))
    parts = [seqs[i].astype(np.int64) for i in order]
    stream = np.concatenate(parts)
    doc = np.concatenate([np.full(len(p), k, np.int64) for k, p in enumerate(parts)])
    return rows_from_stream(stream, doc, T)


def to_batch(torch, x, y, pos, dx):
    d = torch.from_numpy(dx)
    T = dx.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    mask = (d[:, :, None] == d[:, None, :]) & causal
    return (torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(pos), mask.unsqueeze(1))


def eval_rows(seqs, ctx):
    """Windows of the perplexity protocol, packed into rows of ctx tokens (one window
    per segment, padding ignored). Yields (x, y, pos, doc) arrays."""
    segs = []
    for s in seqs:
        n, st = len(s), 0
        while True:
            e = min(n, st + ctx)
            if e - st >= 2:
                segs.append(s[st:e].astype(np.int64))
            if e == n:
                break
            st = e - 1
    rows, cur, used = [], [], 0
    for g in segs:
        if used + len(g) - 1 > ctx:
            rows.append(cur)
            cur, used = [], 0
        cur.append(g)
        used += len(g) - 1
    if cur:
        rows.append(cur)
    R = len(rows)
    x = np.zeros((R, ctx), np.int64)
    y = np.full((R, ctx), -1, np.int64)
    dx = np.full((R, ctx), -1, np.int64)
    k = 0
    for r, row in enumerate(rows):
        p = 0
        for g in row:
            m = len(g) - 1
            x[r, p:p + m], y[r, p:p + m], dx[r, p:p + m] = g[:-1], g[1:], k
            k += 1
            p += m
        dx[r, p:] = np.arange(p, ctx) + 10 ** 9  # padding: each its own doc
    return x, y, positions(dx), dx


def eval_nll(torch, model, seqs, ctx, batch=16):
    """(sum of NLL in float64, number of predicted tokens) by the perplexity protocol."""
    import torch.nn.functional as F
    x, y, pos, dx = eval_rows(seqs, ctx)
    tot, cnt = 0.0, 0
    model.eval()
    with torch.no_grad():
        for i in range(0, len(x), batch):
            bx, by, bp, bm = to_batch(torch, x[i:i + batch], y[i:i + batch], pos[i:i + batch],
                                      dx[i:i + batch])
            logits = model(bx, bp, bm)
            nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), by.reshape(-1),
                                  ignore_index=-1, reduction="sum")
            tot += float(nll)
            cnt += int((by >= 0).sum())
    model.train()
    return tot, cnt


# ---------------------------------------------------------------- training

def lr_at(step, steps, lr, warmup):
    if step < warmup:
        return lr * (step + 1) / warmup
    p = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def make_optimizer(torch, model, lr, wd):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                              {"params": nodecay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)


class RowSource:
    """Batches of rows, reshuffled every epoch from a seeded RNG."""

    def __init__(self, seqs, T, seed):
        self.seqs, self.T = seqs, T
        self.rng = np.random.default_rng(seed)
        self.epoch, self.i = 0, 0
        self._new_epoch()

    def _new_epoch(self):
        self.rows = epoch_rows(self.seqs, self.T, self.rng)
        self.perm = self.rng.permutation(len(self.rows[0]))
        self.i = 0
        self.epoch += 1

    def next(self, B):
        if self.i + B > len(self.perm):
            self._new_epoch()
        sel = self.perm[self.i:self.i + B]
        self.i += B
        return tuple(r[sel] for r in self.rows)


def train(a, torch, model, name, steps, batch, lr, train_seqs, valid_seqs, teacher=None,
          mix_seqs=None):
    """Train `model`; CE on the data, or with `teacher` forward KL (soft CE) to the
    teacher's distribution. With mix_seqs, half of each batch comes from them."""
    import torch.nn.functional as F
    T = model.c["seq_len"]
    src = RowSource(train_seqs, T, a.seed + 1)
    src2 = RowSource(mix_seqs, T, a.seed + 2) if mix_seqs else None
    opt = make_optimizer(torch, model, lr, 0.1)
    warmup = max(1, steps // 30)
    vsub = valid_seqs[:a.valid_every_stories]
    t0, c0 = time.time(), time.process_time()
    ntok = 0
    ema = None
    log("%s: %d params, %d steps x %d rows x %d tokens, lr %g%s" %
        (name, n_params(model), steps, batch, T, lr,
         ", distilled from the target" + (" on 50% real / 50% target samples" if src2 else "")
         if teacher is not None else ""))
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup)
        if src2 is not None:
            h = batch // 2
            r1, r2 = src.next(batch - h), src2.next(h)
            rows = tuple(np.concatenate([u, v]) for u, v in zip(r1, r2))
        else:
            rows = src.next(batch)
        x, y, pos, mask = to_batch(torch, *rows)
        logits = model(x, pos, mask).reshape(-1, VOCAB)
        valid = (y.reshape(-1) >= 0)
        ce = F.cross_entropy(logits, y.reshape(-1), ignore_index=-1)
        if teacher is not None:
            with torch.no_grad():
                tp = F.softmax(teacher(x, pos, mask).reshape(-1, VOCAB), -1)
            lq = F.log_softmax(logits, -1)
            loss = -(tp * lq).sum(-1)[valid].mean()
        else:
            loss = ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ntok += int(valid.sum())
        ema = float(ce) if ema is None else 0.95 * ema + 0.05 * float(ce)
        last = step == steps - 1
        if step % a.log_every == 0 or last:
            el = time.time() - t0
            msg = ("%s step %5d/%d  ce %.4f (ema %.4f)  lr %.2e  %6.0f tok/s  %5.1f min (cpu %.1f)"
                   "  ETA %5.1f min  epoch %d") % (
                name, step, steps, float(ce), ema, opt.param_groups[0]["lr"], ntok / max(el, 1e-9),
                el / 60, (time.process_time() - c0) / 60, el / (step + 1) * (steps - step - 1) / 60,
                src.epoch)
            if teacher is not None:
                msg += "  kd %.4f" % float(loss)
            if (step % a.eval_every == 0 and step > 0) or last:
                tot, cnt = eval_nll(torch, model, vsub, T)
                msg += "  valid(%d stories) %.4f" % (len(vsub), tot / cnt)
            log(msg)
    minutes, cpu = (time.time() - t0) / 60, (time.process_time() - c0) / 60
    log("%s: %.1f min wall, %.1f min cpu (one thread)" % (name, minutes, cpu))
    write_note(a, name + "_minutes", "%.1f" % minutes)
    write_note(a, name + "_cpu_minutes", "%.1f" % cpu)
    write_note(a, name + "_train_ce_ema", "%.4f" % ema)
    return minutes, ema


def load_split(a, split):
    seqs, meta = load_tokens(os.path.join(a.work, "tokens-%s.npz" % split))
    if a.py_tokenizer:
        log("WARNING: --py-tokenizer data (smoke test only)")
    return seqs


def with_eos(seqs):
    """Training sequences: [BOS] + story + [EOS], so the models learn to end a story."""
    return [np.append(s, EOS).astype(np.int16) for s in seqs]


def stage_target(a):
    torch = torch_setup(a.seed)
    model = make_model(TARGET_CFG)
    tr, va = load_split(a, "train"), load_split(a, "valid")
    minutes, ema = train(a, torch, model, "target", a.target_steps, a.batch, a.target_lr,
                         with_eos(tr), va)
    torch.save(model.state_dict(), os.path.join(a.work, "target.pt"))
    log("target: %.1f minutes, saved %s" % (minutes, os.path.join(a.work, "target.pt")))


def load_trained(a, torch, which):
    model = make_model(TARGET_CFG if which == "target" else DRAFT_CFG)
    model.load_state_dict(torch.load(os.path.join(a.work, which + ".pt")))
    model.eval()
    return model


def stage_sample(a):
    torch = torch_setup(a.seed + 3)
    model = load_trained(a, torch, "target")
    T = model.c["seq_len"]
    gen = torch.Generator().manual_seed(a.seed + 3)
    seqs, total, t0 = [], 0, time.time()
    with torch.no_grad():
        while total < a.sample_tokens:
            B = a.sample_batch
            caches = [[None, None, 0] for _ in model.layers]
            tok = torch.full((B, 1), BOS, dtype=torch.long)
            out = [tok]
            done = torch.zeros(B, dtype=torch.bool)
            for p in range(T - 1):
                logits = model.step(tok, p, caches)
                tok = torch.multinomial(torch.softmax(logits.float(), -1), 1, generator=gen)
                out.append(tok)
                done |= tok[:, 0] == EOS
                if bool(done.all()):
                    break
            ids = torch.cat(out, 1).numpy()
            for row in ids:
                e = np.nonzero(row == EOS)[0]
                row = row[:e[0] + 1] if len(e) else row  # [BOS] + story + [EOS], or cut at T
                seqs.append(row.astype(np.int16))
                total += len(row)
            log("sample: %d stories, %d tokens, %.0f tok/s" %
                (len(seqs), total, total / (time.time() - t0)))
    save_tokens(os.path.join(a.work, "tokens-samples.npz"), seqs, "target samples")
    write_note(a, "sample_minutes", (time.time() - t0) / 60)


def stage_draft(a):
    torch = torch_setup(a.seed + 4)
    teacher = load_trained(a, torch, "target")
    for p in teacher.parameters():
        p.requires_grad_(False)
    model = make_model(DRAFT_CFG)
    tr, va = load_split(a, "train"), load_split(a, "valid")
    samples = load_tokens(os.path.join(a.work, "tokens-samples.npz"))[0]
    minutes, ema = train(a, torch, model, "draft", a.draft_steps, a.batch, a.draft_lr,
                         with_eos(tr), va, teacher=teacher, mix_seqs=samples)
    torch.save(model.state_dict(), os.path.join(a.work, "draft.pt"))
    log("draft: %.1f minutes, saved %s" % (minutes, os.path.join(a.work, "draft.pt")))


def run_specdec(a, args):
    r = subprocess.run([a.specdec] + args, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("specdec %s failed: %s" % (" ".join(args), r.stderr.strip()))
    return r.stdout


def stage_export(a):
    torch = torch_setup(a.seed)
    os.makedirs(a.out, exist_ok=True)
    for which in ("target", "draft"):
        model = load_trained(a, torch, which)
        b = os.path.join(a.work, "tinystories-%s.bin" % which)
        export_llama2c(model, b)
        f32 = os.path.join(a.out, "tinystories-%s-f32.gguf" % which)
        q8 = os.path.join(a.out, "tinystories-%s-q8_0.gguf" % which)
        run_specdec(a, ["convert", b, a.tok512, f32])
        run_specdec(a, ["quantize", f32, q8, "q8_0"])
        log("export: %s (%d params) -> %s, %s" % (which, n_params(model), f32, q8))


def stage_eval(a):
    torch = torch_setup(a.seed)
    va = load_split(a, "valid")
    models = [("target", lambda: load_trained(a, torch, "target"),
               os.path.join(a.out, "tinystories-target-f32.gguf")),
              ("draft", lambda: load_trained(a, torch, "draft"),
               os.path.join(a.out, "tinystories-draft-f32.gguf")),
              ("stories260K", lambda: import_llama2c(a.stories260k),
               os.path.join(a.work, "stories260K-f32.gguf"))]
    tr = load_split(a, "train") if a.train_loss else None
    for name, load, gguf in models:
        model = load()
        ctx = model.c["seq_len"]
        t0 = time.time()
        tot, cnt = eval_nll(torch, model, va, ctx)
        line = "eval: %-12s valid NLL %.6f nats/token (ppl %.4f) over %d tokens, ctx %d (%.0f s)" % (
            name, tot / cnt, math.exp(tot / cnt), cnt, ctx, time.time() - t0)
        if tr is not None:
            ttot, tcnt = eval_nll(torch, model, tr, ctx)
            line += "; train NLL %.6f over %d tokens" % (ttot / tcnt, tcnt)
        log(line)
        write_note(a, name + "_valid_nll", tot / cnt)
        if a.check:
            out = run_specdec(a, ["perplexity", "-m", gguf, "-f",
                                  os.path.join(a.data, "tinystories", "valid.txt")])
            c_nll = None
            for ln in out.splitlines():
                if ln.startswith("nll "):
                    c_nll = float(ln.split()[1])
            if c_nll is None:
                raise SystemExit("eval: cannot read specdec perplexity output:\n" + out)
            d = abs(c_nll - tot / cnt)
            log("eval: %-12s specdec perplexity %.6f, |diff| %.2e %s" %
                (name, c_nll, d, "OK" if d < 1e-3 else "MISMATCH"))
            if d >= 1e-3:
                raise SystemExit(1)


def write_note(a, key, value):
    p = os.path.join(a.work, "notes.txt")
    lines = []
    if os.path.exists(p):
        with open(p) as f:
            lines = [ln for ln in f.read().splitlines() if not ln.startswith(key + " ")]
    lines.append("%s %s" % (key, value))
    with open(p, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=["all", "tokenize", "target", "sample", "draft", "export",
                                      "eval"])
    ap.add_argument("--specdec", default=os.path.join(root, "build-release", "specdec"))
    ap.add_argument("--data", default=os.path.join(root, "..", "shared", "data"))
    ap.add_argument("--work", default=os.path.join(root, "out", "train_pair"),
                    help="caches and checkpoints (gitignored)")
    ap.add_argument("--out", default=os.path.join(root, "models"))
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--batch", type=int, default=8, help="rows of seq_len tokens per step")
    ap.add_argument("--target-steps", type=int, default=1500)
    ap.add_argument("--target-lr", type=float, default=3e-3)
    ap.add_argument("--draft-steps", type=int, default=1500)
    ap.add_argument("--draft-lr", type=float, default=4e-3)
    ap.add_argument("--sample-tokens", type=int, default=600000)
    ap.add_argument("--sample-batch", type=int, default=128)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--valid-every-stories", type=int, default=60,
                    help="valid stories scored during training (eval scores all)")
    ap.add_argument("--check", action="store_true",
                    help="eval: compare with `specdec perplexity` on the GGUF files")
    ap.add_argument("--train-loss", action="store_true",
                    help="eval: also the NLL over all train stories")
    ap.add_argument("--py-tokenizer", type=int, default=0, metavar="N",
                    help="SMOKE TEST ONLY: tokenize the first N stories in Python")
    a = ap.parse_args(argv)
    a.stories260k = os.path.join(a.data, "models", "stories260K.bin")
    a.tok512 = os.path.join(a.data, "models", "tok512.bin")
    os.makedirs(a.work, exist_ok=True)
    stages = {"tokenize": stage_tokenize, "target": stage_target, "sample": stage_sample,
              "draft": stage_draft, "export": stage_export, "eval": stage_eval}
    order = list(stages) if a.stage == "all" else [a.stage]
    for s in order:
        t0 = time.time()
        stages[s](a)
        log("== %s done in %.1f min" % (s, (time.time() - t0) / 60))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
