#!/usr/bin/env python3
"""PyTorch reference of a llama GGUF (SmolLM2-135M-Instruct and the drafts made for it).

usage (from the repository root; the interpreter must see torch, numpy, gguf and tokenizers,
see "Python environment" below):

    PY=out/venv/bin/python
    $PY scripts/ref_smollm2.py info
    $PY scripts/ref_smollm2.py tokenize -p "Hello world" [--special]
    $PY scripts/ref_smollm2.py tokenize -f story.txt > ids.txt
    $PY scripts/ref_smollm2.py logits --ids-file ids.txt [--npy logits.npy] > top1.txt
    $PY scripts/ref_smollm2.py logits --ids 504 3458 314 4649 [--npy logits.npy]
    $PY scripts/ref_smollm2.py generate -p "The capital of France is" -n 40
    $PY scripts/ref_smollm2.py generate --chat -p "What is the capital of France?" -n 60
    $PY scripts/ref_smollm2.py ppl -f ../shared/data/tinystories/valid.txt --max-tokens 4000
    $PY scripts/ref_smollm2.py check-tokenizer

-m/--model picks the GGUF (default models/downloaded/SmolLM2-135M-Instruct.Q4_1.gguf,
fetched by scripts/get_models.sh); every command works on any llama GGUF whose tensor types
gguf-py dequantizes (F32, F16, Q8_0, Q4_1, ...), e.g. models/smollm2-draft-f32.gguf.

Modes
  info             hyper-parameters read from the file, tensor types and bytes.
  tokenize         token ids of a text (one line, space separated). --special parses control
                   tokens such as <|im_start|> in the text (llama.cpp's parse_special); without
                   it they are plain text. No BOS is added (the file says add_bos_token=false).
  logits           given token ids, the forward pass over them (positions 0..n-1, empty cache,
                   causal): prints one line per position "POS TOP1_ID" (argmax of the logits at
                   that position, i.e. the predicted NEXT token), and with --npy writes the
                   float32 logits [n, n_vocab] (row i = logits after ids[0..i]).
  generate         greedy (or --temp T sampling) continuation, printed as text. --chat wraps the
                   prompt in the file's ChatML template (see chat_prompt()).
  ppl              mean NLL / perplexity of a text file (TinyStories format: stories split at
                   lines `<|endoftext|>`, each story scored from position 0 with no BOS).
                   --rope neox scores with the other RoPE layout: the check that the file's
                   Q/K rows are in the adjacent-pair layout (see below).
  check-tokenizer  builds the tokenizer of ../shared/data/vocab/ggml-vocab-{gpt-2,starcoder}.gguf
                   the same way and compares it with llama.cpp's test vectors (.inp/.out, no
                   special parsing); then round-trips a few strings on the model's own vocab.

Model (llama, as llama.cpp's llm_build_llama runs it for these files): x = token_embd[id];
per layer: h = x + wo(attn(rmsnorm(x) * attn_norm)); x = h + down(silu(gate(n)) * up(n)) with
n = rmsnorm(h) * ffn_norm; logits = (rmsnorm(x) * output_norm) @ W^T where W is output.weight
or, when the file has none (tied, as SmolLM2), token_embd.weight. RMSNorm eps from
llama.attention.layer_norm_rms_epsilon; attention scale 1/sqrt(head_dim); GQA: KV head g
serves query heads g*rep .. g*rep+rep-1 (rep = n_head / n_head_kv).
RoPE: on adjacent pairs (2i, 2i+1) of each head, angle = pos * base^(-2i/rope_dim), base =
llama.rope.freq_base. This is ggml's "normal" rope (mode 0). Hugging Face's llama rotates
the halves (i, i + hd/2) instead; llama.cpp's convert_hf_to_gguf.py permutes the rows of
Q and K for llama so that the adjacent form computes the same thing on the GGUF. Checked on
the SmolLM2 file with `ppl` (models/README.md): the adjacent layout gives a low perplexity on
TinyStories, the half-split layout a far higher one.

Weights are dequantized to float32 with gguf-py (gguf.quants.dequantize), the llama.cpp
project's own Python implementation; all arithmetic is float32 (softmax/NLL in float64).

Tokenizer: Hugging Face `tokenizers` (PyPI), built from the GGUF's own tokenizer.ggml.tokens
and tokenizer.ggml.merges: byte-level BPE (GPT-2 byte-to-unicode; the GGUF tokens are already
in that alphabet), no unknown token, merges by rank. Pre-tokenizer by tokenizer.ggml.pre, as
llama.cpp's llm_tokenizer_bpe splits: `smollm` and `starcoder` = split every \\p{N}
individually, then the GPT-2 regex; `gpt-2`/`default` = the GPT-2 regex alone. Control tokens
(token_type 3) are added as special tokens, matched in the text only with --special. The
builder is checked against llama.cpp's starcoder and gpt-2 vectors by `check-tokenizer`.

Python environment (the one this script and scripts/train_smollm2_draft.py were run with):
    apt-get install -y python3-torch python3-numpy python3-venv libopenblas0-pthread
    /usr/bin/python3 -m venv --system-site-packages out/venv     # out/ is git-ignored
    out/venv/bin/pip install gguf==0.19.0 tokenizers==0.23.3
Debian's torch (1.13) comes from the system site packages; gguf and tokenizers from PyPI.
"""
import argparse
import math
import os
import sys
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_MODEL = os.path.join(ROOT, "models", "downloaded", "SmolLM2-135M-Instruct.Q4_1.gguf")
SHARED = os.path.join(ROOT, "..", "shared", "data")

# Default system turn of SmolLM2's chat template (tokenizer.chat_template), used when the
# conversation has none.
SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def log(msg):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


# ---------------------------------------------------------------- GGUF

def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def read_hparams(reader, path):
    arch = field(reader, "general.architecture")
    if arch != "llama":
        raise SystemExit("%s: general.architecture is %r, this reference runs 'llama'" % (path, arch))

    def need(k):
        v = field(reader, "llama." + k)
        if v is None:
            raise SystemExit("%s: key llama.%s missing" % (path, k))
        return v

    hp = dict(n_layers=int(need("block_count")), dim=int(need("embedding_length")),
              hidden_dim=int(need("feed_forward_length")), n_heads=int(need("attention.head_count")),
              n_kv_heads=int(field(reader, "llama.attention.head_count_kv", need("attention.head_count"))),
              ctx=int(need("context_length")),
              eps=float(need("attention.layer_norm_rms_epsilon")),
              rope_base=float(field(reader, "llama.rope.freq_base", 10000.0)))
    tok = field(reader, "tokenizer.ggml.tokens")
    hp["vocab_size"] = int(field(reader, "llama.vocab_size", len(tok) if tok is not None else 0))
    hd = hp["dim"] // hp["n_heads"]
    hp["rope_dim"] = int(field(reader, "llama.rope.dimension_count", hd))
    if hp["rope_dim"] != hd:
        raise SystemExit("%s: rope.dimension_count %d != head_dim %d (partial rope not supported)"
                         % (path, hp["rope_dim"], hd))
    return hp


def load_gguf(path):
    """(hparams, {tensor name: float32 numpy array [rows, cols]}, reader)."""
    import gguf
    if not os.path.exists(path):
        raise SystemExit("%s: no such file (run scripts/get_models.sh?)" % path)
    reader = gguf.GGUFReader(path)
    hp = read_hparams(reader, path)
    w = {}
    for t in reader.tensors:
        w[t.name] = np.array(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32,
                             order="C", copy=True)
    hp["tied"] = "output.weight" not in w
    return hp, w, reader


# ---------------------------------------------------------------- model

def build_model_class():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class RMSNorm(nn.Module):
        def __init__(self, dim, eps):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def rope(x, cos, sin, neox):
        # x [B, H, T, hd]; cos/sin [B, 1, T, hd/2].
        if neox:  # pairs (i, i + hd/2): Hugging Face's rotate_half (for the layout check)
            a, b = x.chunk(2, -1)
            return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)
        a, b = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)  # pairs (2i, 2i+1)
        return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            d, hd = c["dim"], c["dim"] // c["n_heads"]
            self.nh, self.nkv, self.hd = c["n_heads"], c["n_kv_heads"], hd
            self.wq = nn.Linear(d, self.nh * hd, bias=False)
            self.wk = nn.Linear(d, self.nkv * hd, bias=False)
            self.wv = nn.Linear(d, self.nkv * hd, bias=False)
            self.wo = nn.Linear(self.nh * hd, d, bias=False)
            self.w1 = nn.Linear(d, c["hidden_dim"], bias=False)  # gate
            self.w2 = nn.Linear(c["hidden_dim"], d, bias=False)  # down
            self.w3 = nn.Linear(d, c["hidden_dim"], bias=False)  # up
            self.attention_norm = RMSNorm(d, c["eps"])
            self.ffn_norm = RMSNorm(d, c["eps"])

        def attn(self, x, cos, sin, mask, cache, neox):
            B, T, _ = x.shape
            nh, nkv, hd = self.nh, self.nkv, self.hd
            q = rope(self.wq(x).view(B, T, nh, hd).transpose(1, 2), cos, sin, neox)
            k = rope(self.wk(x).view(B, T, nkv, hd).transpose(1, 2), cos, sin, neox)
            v = self.wv(x).view(B, T, nkv, hd).transpose(1, 2)
            if cache is not None:
                # cache = [K, V, n]: K, V [B, nkv, S_max, hd]; appends at [n, n + T).
                n = cache[2]
                cache[0][:, :, n:n + T] = k
                cache[1][:, :, n:n + T] = v
                cache[2] = n + T
                k, v = cache[0][:, :, :n + T], cache[1][:, :, :n + T]
            rep = nh // nkv
            qg = q.reshape(B, nkv, rep * T, hd)  # query heads of one KV head stacked
            att = (qg @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))  # [B, nkv, rep*T, S]
            att = att.view(B, nkv, rep, T, -1)
            if mask is not None:  # [B, 1, T, S] bool, True = may attend
                att = att.masked_fill(~mask.unsqueeze(1), float("-inf"))
            y = F.softmax(att, -1).view(B, nkv, rep * T, -1) @ v  # [B, nkv, rep*T, hd]
            return self.wo(y.view(B, nh, T, hd).transpose(1, 2).reshape(B, T, nh * hd))

        def forward(self, x, cos, sin, mask, cache=None, neox=False):
            h = x + self.attn(self.attention_norm(x), cos, sin, mask, cache, neox)
            n = self.ffn_norm(h)
            return h + self.w2(F.silu(self.w1(n)) * self.w3(n))

    class Llama(nn.Module):
        """c: dim, n_layers, n_heads, n_kv_heads, hidden_dim, vocab_size, ctx, eps,
        rope_base; tied classifier unless c['tied'] is False."""

        def __init__(self, c):
            super().__init__()
            self.c = dict(c)
            self.tok_embeddings = nn.Embedding(c["vocab_size"], c["dim"])
            self.layers = nn.ModuleList(Block(c) for _ in range(c["n_layers"]))
            self.norm = RMSNorm(c["dim"], c["eps"])
            self.output = None if c.get("tied", True) else nn.Linear(c["dim"], c["vocab_size"], bias=False)
            self.neox = False
            hd = c["dim"] // c["n_heads"]
            self.register_buffer("inv_freq", 1.0 / (c["rope_base"] ** (
                torch.arange(0, hd, 2, dtype=torch.float64) / hd)), persistent=False)

        def head_weight(self):
            return self.tok_embeddings.weight if self.output is None else self.output.weight

        def rope_tables(self, pos):
            ang = pos.to(torch.float64).unsqueeze(-1) * self.inv_freq  # [B, T, hd/2]
            return (torch.cos(ang).float().unsqueeze(1), torch.sin(ang).float().unsqueeze(1))

        def hidden(self, idx, pos, mask, caches=None):
            """idx, pos [B, T] long; mask [B, 1, T, S] bool or None (all visible); caches:
            one [K, V, n] per layer (see new_caches) or None. Returns the final normed
            hidden state [B, T, dim]."""
            x = self.tok_embeddings(idx)
            cos, sin = self.rope_tables(pos)
            for i, layer in enumerate(self.layers):
                x = layer(x, cos, sin, mask, None if caches is None else caches[i], self.neox)
            return self.norm(x)

        def forward(self, idx, pos, mask, caches=None):
            return self.hidden(idx, pos, mask, caches) @ self.head_weight().t()

        def new_caches(self, B, S):
            hd = self.c["dim"] // self.c["n_heads"]
            z = lambda: torch.zeros(B, self.c["n_kv_heads"], S, hd)  # noqa: E731
            return [[z(), z(), 0] for _ in self.layers]

    return Llama


GGUF_NAMES = [("attn_norm", "attention_norm"), ("attn_q", "wq"), ("attn_k", "wk"),
              ("attn_v", "wv"), ("attn_output", "wo"), ("ffn_norm", "ffn_norm"),
              ("ffn_gate", "w1"), ("ffn_down", "w2"), ("ffn_up", "w3")]


def model_from_gguf(path):
    """(torch Llama in eval mode with the file's weights, hparams, reader)."""
    import torch
    hp, w, reader = load_gguf(path)
    model = build_model_class()(hp)
    sd = {"tok_embeddings.weight": w.pop("token_embd.weight"),
          "norm.weight": w.pop("output_norm.weight")}
    if not hp["tied"]:
        sd["output.weight"] = w.pop("output.weight")
    for i in range(hp["n_layers"]):
        for g, t in GGUF_NAMES:
            sd["layers.%d.%s.weight" % (i, t)] = w.pop("blk.%d.%s.weight" % (i, g))
    w.pop("rope_freqs.weight", None)
    if w:
        raise SystemExit("%s: tensors not used by the llama reference: %s" % (path, sorted(w)[:5]))
    model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=True)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, hp, reader


def torch_setup(seed=0, threads=1):
    import torch
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(seed)
    return torch


def forward_ids(model, ids, chunk=512):
    """Logits [n, vocab] (float32 numpy) of one sequence from position 0, causal, fed
    through the KV cache in chunks of `chunk` tokens (same result as one pass)."""
    import torch
    n = len(ids)
    caches = model.new_caches(1, n)
    out = np.empty((n, model.c["vocab_size"]), np.float32)
    with torch.no_grad():
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            idx = torch.tensor([ids[s:e]], dtype=torch.long)
            pos = torch.arange(s, e).unsqueeze(0)
            mask = (torch.arange(e).unsqueeze(0) <= pos.unsqueeze(-1)).unsqueeze(1)  # [1,1,T,e]
            out[s:e] = model(idx, pos, mask, caches)[0].numpy()
    return out


# ---------------------------------------------------------------- tokenizer

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


class Tok:
    """Byte-level BPE tokenizer built from a GGUF's tokenizer.* keys."""

    def __init__(self, reader, path="?"):
        from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
        kind = field(reader, "tokenizer.ggml.model")
        if kind != "gpt2":
            raise SystemExit("%s: tokenizer.ggml.model is %r, expected 'gpt2' (byte-level BPE)"
                             % (path, kind))
        pre = field(reader, "tokenizer.ggml.pre", "default")
        tokens = field(reader, "tokenizer.ggml.tokens")
        types = field(reader, "tokenizer.ggml.token_type")
        merges = field(reader, "tokenizer.ggml.merges")
        vocab = {t: i for i, t in enumerate(tokens)}
        if len(vocab) != len(tokens):
            raise SystemExit("%s: duplicate tokens in tokenizer.ggml.tokens" % path)
        pairs = [tuple(m.split(" ", 1)) for m in merges]
        gpt2 = pre_tokenizers.Split(Regex(GPT2_REGEX), behavior="isolated")
        if pre in ("smollm", "starcoder"):
            # llama.cpp: {"\\p{N}", GPT-2 regex}: every digit its own piece, then GPT-2.
            seq = [pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"), gpt2]
        elif pre in ("gpt-2", "default", "gpt2"):
            seq = [gpt2]
        else:
            raise SystemExit("%s: tokenizer.ggml.pre %r not handled by this reference "
                             "(smollm, starcoder, gpt-2, default)" % (path, pre))
        seq.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
        self.special = [tokens[i] for i in range(len(tokens)) if types is not None and types[i] == 3]

        def make(with_special):
            tk = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
            tk.pre_tokenizer = pre_tokenizers.Sequence(seq)
            tk.decoder = decoders.ByteLevel()
            if with_special:
                tk.add_special_tokens([AddedToken(s, special=True, normalized=False)
                                       for s in self.special])
            return tk

        # Two tokenizers: `tokenizers` always matches added tokens in the text, so plain-text
        # encoding (no special parsing) uses one that has none.
        self.tk_plain, self.tk_special = make(False), make(True)
        self.tokens, self.pre = tokens, pre
        self.bos = field(reader, "tokenizer.ggml.bos_token_id")
        self.eos = field(reader, "tokenizer.ggml.eos_token_id")

    def encode(self, text, special=False):
        """Token ids of text, no BOS/EOS; special: control tokens in the text are parsed."""
        tk = self.tk_special if special else self.tk_plain
        return list(tk.encode(text, add_special_tokens=False).ids)

    def decode(self, ids):
        return self.tk_special.decode(list(ids), skip_special_tokens=False)


def chat_prompt(user, system=SMOLLM2_SYSTEM):
    """ChatML as SmolLM2's tokenizer.chat_template renders one user turn with
    add_generation_prompt (system=None: no system turn, as llama.cpp's built-in chatml
    when the conversation has no system message)."""
    s = "" if system is None else "<|im_start|>system\n%s<|im_end|>\n" % system
    return s + "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n" % user


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


# ---------------------------------------------------------------- commands

def read_ids(a):
    if a.ids:
        return [int(x) for x in a.ids]
    with open(a.ids_file) as f:
        return [int(x) for x in f.read().split()]


def cmd_info(a):
    import gguf
    reader = gguf.GGUFReader(a.model)
    hp = read_hparams(reader, a.model)
    print("file %s (%d bytes)" % (a.model, os.path.getsize(a.model)))
    print(" ".join("%s=%s" % kv for kv in hp.items()))
    by = {}
    for t in reader.tensors:
        k = t.tensor_type.name
        n, b = by.get(k, (0, 0))
        by[k] = (n + 1, b + int(t.n_bytes))
    for k, (n, b) in sorted(by.items()):
        print("  %-6s %4d tensors %12d bytes" % (k, n, b))
    print("  total  %4d tensors %12d bytes" % (len(reader.tensors), sum(b for _, b in by.values())))
    print("tokenizer: %s pre=%s, %d tokens, bos=%s eos=%s" % (
        field(reader, "tokenizer.ggml.model"), field(reader, "tokenizer.ggml.pre"),
        len(field(reader, "tokenizer.ggml.tokens") or []), field(reader, "tokenizer.ggml.bos_token_id"),
        field(reader, "tokenizer.ggml.eos_token_id")))


def cmd_tokenize(a):
    import gguf
    tok = Tok(gguf.GGUFReader(a.model), a.model)
    text = a.prompt if a.prompt is not None else open(a.file, encoding="utf-8").read()
    print(" ".join(str(i) for i in tok.encode(text, special=a.special)))


def cmd_logits(a):
    torch_setup()
    model, hp, _ = model_from_gguf(a.model)
    ids = read_ids(a)
    if not ids:
        raise SystemExit("logits: no token ids given")
    bad = [i for i in ids if not 0 <= i < hp["vocab_size"]]
    if bad:
        raise SystemExit("logits: token id %d out of range [0, %d)" % (bad[0], hp["vocab_size"]))
    t0 = time.time()
    lg = forward_ids(model, ids)
    log("logits: %d positions in %.1f s" % (len(ids), time.time() - t0))
    top = lg.argmax(-1)
    sys.stdout.write("".join("%d %d\n" % (i, int(t)) for i, t in enumerate(top)))
    if a.npy:
        np.save(a.npy, lg)
        log("logits: wrote %s [%d, %d] float32" % (a.npy, lg.shape[0], lg.shape[1]))


def cmd_generate(a):
    import torch
    torch_setup(a.seed)
    model, hp, reader = model_from_gguf(a.model)
    tok = Tok(reader, a.model)
    text = chat_prompt(a.prompt, None if a.no_system else SMOLLM2_SYSTEM) if a.chat else a.prompt
    ids = tok.encode(text, special=a.chat or a.special)
    log("prompt: %d tokens %s" % (len(ids), ids[:40]))
    caches = model.new_caches(1, len(ids) + a.n)
    gen = torch.Generator().manual_seed(a.seed)
    out, cur, n = [], ids, 0
    stop = {tok.eos} if a.chat else set()
    with torch.no_grad():
        for _ in range(a.n):
            idx = torch.tensor([cur], dtype=torch.long)
            pos = torch.arange(n, n + len(cur)).unsqueeze(0)
            mask = (torch.arange(n + len(cur)).unsqueeze(0) <= pos.unsqueeze(-1)).unsqueeze(1)
            lg = model(idx, pos, mask, caches)[0, -1]
            n += len(cur)
            if a.temp <= 0:
                t = int(lg.argmax())
            else:
                t = int(torch.multinomial(torch.softmax(lg / a.temp, -1), 1, generator=gen))
            out.append(t)
            cur = [t]
            if t in stop:
                break
    log("generated ids: %s" % out)
    sys.stdout.write(text + tok.decode(out) + "\n")


def cmd_ppl(a):
    import torch
    torch_setup()
    model, hp, reader = model_from_gguf(a.model)
    model.neox = a.rope == "neox"
    tok = Tok(reader, a.model)
    stories = read_stories(a.file)
    tot, cnt, t0 = 0.0, 0, time.time()
    for s in stories:
        ids = tok.encode(s)[:a.ctx]
        if len(ids) < 2:
            continue
        lg = torch.from_numpy(forward_ids(model, ids[:-1])).double()
        lp = torch.log_softmax(lg, -1)
        tot -= float(lp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].sum())
        cnt += len(ids) - 1
        if cnt >= a.max_tokens:
            break
    print("ppl: %s rope=%s: %d stories-tokens predicted, NLL %.4f nats/token, perplexity %.3f (%.0f s)"
          % (os.path.basename(a.model), a.rope, cnt, tot / cnt, math.exp(tot / cnt), time.time() - t0))


def cmd_check_tokenizer(a):
    import gguf
    fails = 0
    for name in ("gpt-2", "starcoder"):
        base = os.path.join(SHARED, "vocab", "ggml-vocab-%s.gguf" % name)
        if not os.path.exists(base):
            log("check-tokenizer: %s missing, skipped" % base)
            continue
        tok = Tok(gguf.GGUFReader(base), base)
        inp = open(base + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
        outp = open(base + ".out", encoding="utf-8").read().split("\n")
        if inp and inp[-1].endswith("\n__ggml_vocab_test__"):
            inp[-1] = inp[-1][: -len("\n__ggml_vocab_test__")]
        inp = [s for s in inp]
        ok = 0
        for i, s in enumerate(inp):
            want = [int(x) for x in outp[i].split()]
            got = tok.encode(s)
            if got == want:
                ok += 1
            else:
                fails += 1
                log("  %s vector %d %r: want %s got %s" % (name, i, s[:40], want[:12], got[:12]))
            if tok.decode(got) != s:
                fails += 1
                log("  %s vector %d: decode does not round-trip" % (name, i))
        print("check-tokenizer: %s (pre=%s): %d/%d vectors equal llama.cpp's" % (name, tok.pre, ok, len(inp)))
    tok = Tok(gguf.GGUFReader(a.model), a.model)
    for s in ["Once upon a time, there was a little girl named Lily.", "The year 2024 had 366 days!",
              "  two  spaces\tand a tab\n\nnew lines", "naïve café — “quotes” 日本語 🙂",
              chat_prompt("What is the capital of France?")]:
        ids = tok.encode(s, special=s.startswith("<|im_start|>"))
        back = tok.decode(ids)
        good = back == s
        fails += not good
        print("check-tokenizer: %-3s %r -> %d ids %s%s" % ("ok" if good else "BAD", s[:48], len(ids),
                                                      ids[:16], "..." if len(ids) > 16 else ""))
    if fails:
        raise SystemExit("check-tokenizer: %d failures" % fails)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=DEFAULT_MODEL)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info")
    p = sub.add_parser("tokenize")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("-p", "--prompt")
    g.add_argument("-f", "--file")
    p.add_argument("--special", action="store_true")
    p = sub.add_parser("logits")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--ids", nargs="+")
    g.add_argument("--ids-file")
    p.add_argument("--npy")
    p = sub.add_parser("generate")
    p.add_argument("-p", "--prompt", required=True)
    p.add_argument("-n", type=int, default=40)
    p.add_argument("--temp", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--chat", action="store_true")
    p.add_argument("--no-system", action="store_true", help="--chat without the default system turn")
    p.add_argument("--special", action="store_true")
    p = sub.add_parser("ppl")
    p.add_argument("-f", "--file", default=os.path.join(SHARED, "tinystories", "valid.txt"))
    p.add_argument("--max-tokens", type=int, default=4000)
    p.add_argument("--ctx", type=int, default=1024, help="tokens scored per story at most")
    p.add_argument("--rope", choices=["adjacent", "neox"], default="adjacent")
    sub.add_parser("check-tokenizer")
    a = ap.parse_args(argv)
    {"info": cmd_info, "tokenize": cmd_tokenize, "logits": cmd_logits, "generate": cmd_generate,
     "ppl": cmd_ppl, "check-tokenizer": cmd_check_tokenizer}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
