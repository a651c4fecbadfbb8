#!/usr/bin/env python3
"""Independent reference for specdec's llama forward pass (the test oracle).

usage: ref_forward.py [--float] [--top2] [--ctx N] MODEL.gguf TOKEN [TOKEN ...]

Parses the GGUF file itself (struct + numpy; no `gguf` package), dequantizes the
weights (F32, F16, BF16, Q8_0, Q4_0), runs the llama-family forward pass over the tokens
at positions 0..n-1 in float64 and prints the logits: one line per position, n_vocab
numbers each ('%.17g'). Architectures: "llama" (RoPE on adjacent pairs; optional Llama 3
frequency factors rope_freqs.weight and linear rope scaling), "qwen2" (biases on Q, K,
V; RoPE on pairs (i, i + n_rot/2), GPT-NeoX style) and "qwen3" (no biases, NeoX RoPE; each
Q and K head RMS-normed with blk.N.attn_q_norm.weight / attn_k_norm.weight before RoPE).
"gemma3" (Gemma 3): embeddings times sqrt(n_embd), NeoX RoPE, per-head Q/K norms, sandwich
norms (post_attention_norm / post_ffw_norm on each block's output before its residual add;
the GGUF stores Gemma's 1 + w), a GELU (tanh approximation) gated FFN, local and global
layers (below), final_logit_softcapping c when set (logits c tanh(z / c)).
"phi3" (Phi-3): NeoX RoPE, Q/K/V fused in blk.N.attn_qkv.weight (rows Q, K, V) and gate/up
in blk.N.ffn_up.weight (2 n_ff rows, gate first) where the file fuses them (any
architecture), LongRoPE: rope_factors_long.weight when the session context (--ctx N,
default context_length) exceeds rope.scaling.original_context_length, else
rope_factors_short.weight, and the rotated values times rope.scaling.attn_factor; its
attention.sliding_window is ignored (as llama.cpp does).
attention.sliding_window W > 0: query i sees keys j with i - W < j <= i (Mistral) in the
local layers: every layer, or for gemma3 those with l % n < n - 1 where n is
attention.sliding_window_pattern (default 6; or one bool per layer); the local layers
rotate with rope.freq_base_swa (gemma3 default 10000) and no linear scaling.
The head size is attention.key_length where present (Qwen3's differs from
n_embd / n_head), else n_embd / n_head.

Activations entering a matmul with Q8_0/Q4_0 weights are rounded through Q8_0 first
(ggml's quantize_row_q8_0_ref: d = amax/127 stored as fp16, q = round(x/d) half away
from zero), because that is the arithmetic of the kernels under test (ggml's
vec_dot_type); everything else is float64. --float: no such rounding (the float
reference for real files). Other weight types (Q5_0, the K-quants, ...) are dequantized
with gguf-py when it is importable. --top2: per position one line "top1 top2 margin"
(ids and the logit difference) instead of the logits.
Exit status 2 on a malformed file or bad arguments.
"""
import struct
import sys

import numpy as np

F32, F16, Q4_0, Q8_0, BF16 = 0, 1, 2, 8, 30
QK = 32


class Reader:
    def __init__(self, buf):
        self.buf = buf
        self.off = 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.buf, self.off)
        self.off += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = bytes(self.buf[self.off:self.off + n])
        if len(s) != n:
            raise ValueError("truncated string")
        self.off += n
        return s.decode("utf-8", errors="replace")

    SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q",
              11: "q", 12: "d"}

    def value(self, vtype):
        if vtype in self.SCALAR:
            return self.take(self.SCALAR[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            et = self.take("I")
            n = self.take("Q")
            return [self.value(et) for _ in range(n)]
        raise ValueError("unknown metadata value type %d" % vtype)


def parse_gguf(path):
    with open(path, "rb") as f:
        buf = f.read()
    r = Reader(buf)
    if buf[:4] != b"GGUF":
        raise ValueError("bad magic")
    r.off = 4
    version = r.take("I")
    if version not in (2, 3):
        raise ValueError("unsupported version %d" % version)
    n_tensors = r.take("Q")
    n_kv = r.take("Q")
    kv = {}
    for _ in range(n_kv):
        key = r.string()
        kv[key] = r.value(r.take("I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.take("I")
        ne = [r.take("Q") for _ in range(n_dims)]
        ttype = r.take("I")
        off = r.take("Q")
        infos.append((name, ne, ttype, off))
    align = int(kv.get("general.alignment", 32))
    data0 = (r.off + align - 1) // align * align
    tensors = {}
    for name, ne, ttype, off in infos:
        n_elem = int(np.prod(ne))
        start = data0 + off
        tensors[name] = (ne, dequantize(buf, start, ttype, n_elem), ttype)
    return kv, tensors


def dequantize(buf, start, ttype, n):
    if ttype == F32:
        return np.frombuffer(buf, "<f4", n, start).astype(np.float64)
    if ttype == F16:
        return np.frombuffer(buf, "<f2", n, start).astype(np.float64)
    if ttype == BF16:
        u = np.frombuffer(buf, "<u2", n, start).astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64)
    nb = n // QK
    if ttype == Q8_0:
        blk = np.frombuffer(buf, np.dtype([("d", "<f2"), ("qs", "i1", (QK,))]), nb, start)
        return (blk["d"].astype(np.float64)[:, None] * blk["qs"].astype(np.float64)).reshape(-1)
    if ttype == Q4_0:
        blk = np.frombuffer(buf, np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))]), nb, start)
        lo = (blk["qs"] & 0x0F).astype(np.int64) - 8
        hi = (blk["qs"] >> 4).astype(np.int64) - 8
        q = np.concatenate([lo, hi], axis=1).astype(np.float64)
        return (blk["d"].astype(np.float64)[:, None] * q).reshape(-1)
    try:  # every other type through gguf-py's dequantizer, where it is installed
        import gguf
        qt = gguf.GGMLQuantizationType(ttype)
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        raw = np.frombuffer(buf, np.uint8, n // bs * ts, start)
        return gguf.quants.dequantize(raw, qt).reshape(-1).astype(np.float64)
    except (ImportError, ValueError, KeyError, NotImplementedError):
        raise ValueError("unsupported tensor type %d" % ttype)


def act_q8_0(x):
    """Round activations [n_tok, n] through Q8_0 as ggml's quantize_row_q8_0_ref."""
    b = x.reshape(x.shape[0], -1, QK)
    amax = np.abs(b).max(axis=2, keepdims=True)
    d = amax / 127.0
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    v = b * inv
    q = np.sign(v) * np.floor(np.abs(v) + 0.5)  # roundf: half away from zero
    q = np.clip(q, -128, 127)
    d16 = d.astype(np.float16).astype(np.float64)
    return (q * d16).reshape(x.shape)


class Weight:
    def __init__(self, tensors, name, rows, cols):
        if name not in tensors:
            raise ValueError("missing tensor " + name)
        ne, data, ttype = tensors[name]
        if list(ne) != [cols, rows]:
            raise ValueError("tensor %s: ne %s, expected [%d, %d]" % (name, ne, cols, rows))
        self.w = data.reshape(rows, cols)
        self.quant_act = ttype in (Q8_0, Q4_0) and not FLOAT_ONLY

    def __call__(self, x):  # x [n_tok, cols] -> [n_tok, rows]
        if self.quant_act:
            x = act_q8_0(x)
        return x @ self.w.T


FLOAT_ONLY = False  # --float


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps) * w


def rope(x, n_head, head_dim, n_rot, base, pos, neox=False, freq_scale=1.0, factors=None,
         mscale=1.0):
    # x [n_tok, n_head * head_dim]; pairs (2i, 2i+1) or, neox, (i, i + n_rot/2), i < n_rot/2,
    # by theta_i = pos * freq_scale * base^(-2i/n_rot) / factor_i.
    x = x.reshape(len(pos), n_head, head_dim).copy()
    i = np.arange(n_rot // 2)
    freq = base ** (-2.0 * i / n_rot)
    if factors is not None:
        freq = freq / factors
    theta = (pos[:, None].astype(np.float64) * freq_scale) * freq  # [n_tok, n_rot/2]
    c = np.cos(theta)[:, None, :]
    s = np.sin(theta)[:, None, :]
    if neox:
        a, b = slice(0, n_rot // 2), slice(n_rot // 2, n_rot)
    else:
        a, b = slice(0, n_rot, 2), slice(1, n_rot, 2)
    x0 = x[:, :, a].copy()
    x1 = x[:, :, b].copy()
    x[:, :, a] = (x0 * c - x1 * s) * mscale
    x[:, :, b] = (x0 * s + x1 * c) * mscale
    return x.reshape(len(pos), n_head * head_dim)


def forward(kv, tensors, tokens, n_ctx=None):
    arch = kv.get("general.architecture")
    if arch not in ("llama", "qwen2", "qwen3", "gemma3", "phi3"):
        raise ValueError("architecture %r is not llama, qwen2, qwen3, gemma3 or phi3" % arch)
    gemma = arch == "gemma3"
    A = arch + "."
    n_embd = int(kv[A + "embedding_length"])
    n_layer = int(kv[A + "block_count"])
    n_ff = int(kv[A + "feed_forward_length"])
    n_head = int(kv[A + "attention.head_count"])
    n_head_kv = int(kv.get(A + "attention.head_count_kv", n_head))
    eps = float(kv.get(A + "attention.layer_norm_rms_epsilon", 1e-5))
    base = float(kv.get(A + "rope.freq_base", 10000.0))
    head_dim = int(kv.get(A + "attention.key_length", n_embd // n_head))
    if int(kv.get(A + "attention.value_length", head_dim)) != head_dim:
        raise ValueError("attention.value_length differs from attention.key_length")
    n_rot = int(kv.get(A + "rope.dimension_count", head_dim))
    kv_dim = n_head_kv * head_dim
    q_dim = n_head * head_dim
    neox = arch in ("qwen2", "qwen3", "gemma3", "phi3")
    has_bias = arch == "qwen2"
    head_norm = arch in ("qwen3", "gemma3")
    freq_scale = 1.0
    if kv.get(A + "rope.scaling.type", "none") == "linear":
        freq_scale = 1.0 / float(kv.get(A + "rope.scaling.factor", 1.0))
    factors = tensors["rope_freqs.weight"][1] if "rope_freqs.weight" in tensors else None
    mscale = float(kv.get(A + "rope.scaling.attn_factor", 1.0))
    if factors is None and "rope_factors_long.weight" in tensors:  # LongRoPE
        ctx_train = int(kv[A + "context_length"])
        orig = int(kv.get(A + "rope.scaling.original_context_length", ctx_train))
        ctx = n_ctx if n_ctx else ctx_train
        factors = tensors["rope_factors_long.weight" if ctx > orig else
                          "rope_factors_short.weight"][1]
    ne, emb, _ = tensors["token_embd.weight"]
    n_vocab = ne[1]
    emb = emb.reshape(n_vocab, n_embd)
    n = len(tokens)
    pos = np.arange(n)
    x = emb[np.array(tokens)].copy()
    if gemma:
        x = x * np.sqrt(n_embd)
    group = n_head // n_head_kv
    causal = np.triu(np.full((n, n), -np.inf), 1)
    window = int(kv.get(A + "attention.sliding_window", 0)) if arch != "phi3" else 0
    local_mask = causal
    if window > 0:  # keys more than window - 1 positions back are masked too
        local_mask = causal + np.tril(np.full((n, n), -np.inf), -window)
    pattern = kv.get(A + "attention.sliding_window_pattern", 6 if gemma else 0)
    if isinstance(pattern, list):
        if len(pattern) != n_layer:
            raise ValueError("attention.sliding_window_pattern: %d flags" % len(pattern))
        is_local = [bool(f) for f in pattern]
    else:
        p = int(pattern)
        is_local = [p == 0 or l % p < p - 1 for l in range(n_layer)]
    R = dict(n_rot=n_rot, base=base, pos=pos, neox=neox, freq_scale=freq_scale, factors=factors,
             mscale=mscale)
    R_local = R  # Mistral: the local layers rotate as the others
    if gemma or A + "rope.freq_base_swa" in kv:  # their own base, no linear scaling
        R_local = dict(R, base=float(kv.get(A + "rope.freq_base_swa", 10000.0)), freq_scale=1.0)
    for l in range(n_layer):
        local = window > 0 and is_local[l]
        mask = local_mask if local else causal
        RL = R_local if local else R
        def W(name, rows, cols):
            return Weight(tensors, "blk.%d.%s.weight" % (l, name), rows, cols)

        def norm(name):
            return tensors["blk.%d.%s.weight" % (l, name)][1]

        def bias(name):
            return tensors["blk.%d.%s.bias" % (l, name)][1] if has_bias else 0.0

        def per_head_norm(x, heads, name):  # each head_dim slice of a row on its own
            y = rmsnorm(x.reshape(n * heads, head_dim), norm(name), eps)
            return y.reshape(n, heads * head_dim)

        h = rmsnorm(x, norm("attn_norm"), eps)
        if "blk.%d.attn_qkv.weight" % l in tensors:  # fused: rows Q, K, V
            qkv = W("attn_qkv", q_dim + 2 * kv_dim, n_embd)(h)
            q, k, v = qkv[:, :q_dim], qkv[:, q_dim:q_dim + kv_dim], qkv[:, q_dim + kv_dim:]
        else:
            q = W("attn_q", q_dim, n_embd)(h) + bias("attn_q")
            k = W("attn_k", kv_dim, n_embd)(h) + bias("attn_k")
            v = W("attn_v", kv_dim, n_embd)(h) + bias("attn_v")
        if head_norm:
            q = per_head_norm(q, n_head, "attn_q_norm")
            k = per_head_norm(k, n_head_kv, "attn_k_norm")
        q = rope(q, n_head, head_dim, **RL)
        k = rope(k, n_head_kv, head_dim, **RL)
        att = np.zeros((n, q_dim))
        for hd in range(n_head):
            g = hd // group
            qh = q[:, hd * head_dim:(hd + 1) * head_dim]
            kh = k[:, g * head_dim:(g + 1) * head_dim]
            vh = v[:, g * head_dim:(g + 1) * head_dim]
            s = qh @ kh.T / np.sqrt(head_dim) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            att[:, hd * head_dim:(hd + 1) * head_dim] = s @ vh
        o = W("attn_output", n_embd, q_dim)(att)
        if gemma:
            o = rmsnorm(o, norm("post_attention_norm"), eps)
        x = x + o
        h = rmsnorm(x, norm("ffn_norm"), eps)
        if "blk.%d.ffn_gate.weight" % l in tensors:
            gt = W("ffn_gate", n_ff, n_embd)(h)
            up = W("ffn_up", n_ff, n_embd)(h)
        else:  # fused: rows gate, up
            gu = W("ffn_up", 2 * n_ff, n_embd)(h)
            gt, up = gu[:, :n_ff], gu[:, n_ff:]
        if gemma:  # GELU, tanh approximation
            act = 0.5 * gt * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (gt + 0.044715 * gt ** 3)))
        else:
            act = gt / (1.0 + np.exp(-gt))
        o = W("ffn_down", n_embd, n_ff)(act * up)
        if gemma:
            o = rmsnorm(o, norm("post_ffw_norm"), eps)
        x = x + o
    x = rmsnorm(x, tensors["output_norm.weight"][1], eps)
    out_name = "output.weight" if "output.weight" in tensors else "token_embd.weight"
    logits = Weight(tensors, out_name, n_vocab, n_embd)(x)
    cap = float(kv.get(A + "final_logit_softcapping", 0.0))
    if cap > 0:
        logits = cap * np.tanh(logits / cap)
    return logits


def main(argv):
    global FLOAT_ONLY
    top2 = False
    n_ctx = None
    while len(argv) > 1 and argv[1] in ("--float", "--top2", "--ctx"):
        if argv[1] == "--float":
            FLOAT_ONLY = True
        elif argv[1] == "--ctx" and len(argv) > 2:
            n_ctx = int(argv[2])
            argv = argv[:1] + argv[2:]
        else:
            top2 = True
        argv = argv[:1] + argv[2:]
    if len(argv) < 3:
        sys.stderr.write("usage: ref_forward.py [--float] [--top2] [--ctx N] MODEL.gguf TOKEN ...\n")
        return 2
    try:
        kv, tensors = parse_gguf(argv[1])
        logits = forward(kv, tensors, [int(t) for t in argv[2:]], n_ctx)
    except (ValueError, KeyError, struct.error) as e:
        sys.stderr.write("ref_forward.py: %s: %s\n" % (argv[1], e))
        return 2
    out = sys.stdout
    if top2:
        for row in logits:
            o = np.argsort(-row, kind="stable")[:2]
            out.write("%d %d %.6f\n" % (o[0], o[1], row[o[0]] - row[o[1]]))
        return 0
    for row in logits:
        out.write(" ".join("%.17g" % v for v in row))
        out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
