#!/usr/bin/env python3
"""Writes small random GGUF files of one architecture with gguf-py (llama.cpp's own GGUF
writer and tensor-name table), for the architecture tests (tests/arch_harness.h).

usage: make_arch.py ARCH DIR      ARCH: qwen3, phi3 or gemma3

qwen3:
DIR/qwen3-target.gguf        F32; 2 layers, n_embd 64, 4 query heads and 2 KV heads of
                             head_dim 32 (attention.key_length: Q is 128 wide, not
                             n_embd / n_head = 16), n_ff 128, 64 tokens, tied output, per-head
                             Q/K RMSNorm weights attn_q_norm / attn_k_norm [32] drawn around 1
DIR/qwen3-target-q8_0.gguf   the same weights, its matrices Q8_0 (gguf-py's quantizer)
DIR/qwen3-draft.gguf         the target's weights plus noise (a draft that is often right)
DIR/qwen3-no-k-norm.gguf     the target without blk.1.attn_k_norm.weight (must be refused)
phi3:
DIR/phi3-target.gguf         F32; 2 layers, n_embd 64, 4 query heads and 2 KV heads of 16,
                             n_ff 128, 320 tokens, an output matrix; Q/K/V fused in
                             blk.N.attn_qkv.weight [128, 64] and gate/up in blk.N.ffn_up.weight
                             [256, 64] (gate first), as llama.cpp's converter writes Phi-3;
                             LongRoPE: context_length 64, rope.scaling.original_context_length
                             16, rope_factors_long.weight / rope_factors_short.weight [8],
                             rope.scaling.attn_factor 1.19; attention.sliding_window 4 (which
                             llama.cpp ignores for phi3, and so must specdec)
DIR/phi3-target-q8_0.gguf    the same weights, its matrices Q8_0
DIR/phi3-draft.gguf          the target's weights plus noise
DIR/phi3-no-short.gguf       the target without rope_factors_short.weight (must be refused)
gemma3:
DIR/gemma3-target.gguf       F32; 6 layers, n_embd 64, 4 query heads and 2 KV heads of
                             head_dim 32 (attention.key_length), n_ff 128, 64 tokens, tied
                             output; sandwich norms (post_attention_norm, post_ffw_norm),
                             per-head Q/K norms; attention.sliding_window 4 with no
                             pattern key: llama.cpp's default period 6 (layers 0-4 local,
                             layer 5 global); rope.freq_base 1e6 (global), no
                             rope.freq_base_swa (local: 10000)
DIR/gemma3-target-q8_0.gguf  the same weights, its matrices Q8_0
DIR/gemma3-pattern.gguf      the target with attention.sliding_window_pattern as one bool
                             per layer (local, global, local, global, local, global),
                             rope.freq_base_swa 500 and final_logit_softcapping 3
DIR/gemma3-w32.gguf          the target with attention.sliding_window 32 and context_length
                             1024 (paged layer groups over hundreds of positions)
DIR/gemma3-draft.gguf        the target's weights plus noise
DIR/gemma3-no-post-norm.gguf the target without blk.2.post_ffw_norm.weight (refused)

Keys and tensor names are gguf-py's (gguf.TENSOR_NAMES, GGUFWriter.add_*), not specdec's,
so the C loader is checked against llama.cpp's spelling. Norm weights are drawn around 1
(Gemma's GGUF stores 1 + w). The vocabularies are synthetic SentencePiece: qwen3 "<unk>",
"<s>", "</s>", "t3", ...; phi3 the same with the 256 byte tokens after the specials and
"t0" .. "t60", no space prefix (llama.cpp loads it); gemma3 "<pad>", "<eos>", "<bos>",
"t3", ... Exit status 3 when gguf-py (or numpy) cannot be imported: the test then skips.
"""
import os
import sys

try:
    import numpy as np
    import gguf
except ImportError as e:  # the caller skips
    sys.stderr.write("make_arch.py: %s\n" % e)
    sys.exit(3)

T = gguf.TENSOR_NAMES
M = gguf.MODEL_TENSOR
Q8_0 = gguf.GGMLQuantizationType.Q8_0

# Sizes per architecture: vocabulary, n_embd, layers, heads, KV heads, head_dim, n_ff, context
SIZES = {
    "qwen3": (64, 64, 2, 4, 2, 32, 128, 256),
    "phi3": (320, 64, 2, 4, 2, 16, 128, 64),
    "gemma3": (64, 64, 6, 4, 2, 32, 128, 256),
}
PHI3_CTX_ORIG = 16
GEMMA3_WINDOW = 4
GEMMA3_WIDE_WINDOW, GEMMA3_WIDE_CTX = 32, 1024  # gemma3-w32.gguf (tests/test_swa_groups.c)


def draws(seed, noise):
    """mat(rows, cols, scale) and vec(n, spread) drawing from one generator in call order
    (with noise > 0: each plus noise times a second generator's draw of the same shape)."""
    rng = np.random.default_rng(seed)
    nz = np.random.default_rng(seed + 1000)

    def mat(rows, cols, scale=None):
        s = scale if scale is not None else 1.0 / np.sqrt(cols)
        w = rng.normal(0.0, s, (rows, cols))
        if noise:
            w = w + noise * nz.normal(0.0, s, (rows, cols))
        return w.astype(np.float32)

    def vec(n, spread):
        v = 1.0 + spread * rng.normal(0.0, 1.0, n)
        if noise:
            v = v + noise * spread * nz.normal(0.0, 1.0, n)
        return v.astype(np.float32)

    return mat, vec


def weights(arch, seed, noise):
    """[(name, float32 array, is_matrix)] in file order; gguf-py's names are the tensors'
    base names, the files hold NAME.weight."""
    n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, _ = SIZES[arch]
    mat, vec = draws(seed, noise)
    q_dim, kv_dim = n_head * head_dim, n_head_kv * head_dim
    out = [(T[M.TOKEN_EMBD] + ".weight", mat(n_vocab, n_embd, 0.15 if arch == "gemma3" else 1.0),
            True)]
    if arch == "phi3":
        n_rope = head_dim // 2
        out += [(T[M.ROPE_FACTORS_LONG] + ".weight",
                 np.linspace(1.0, 6.0, n_rope).astype(np.float32), False),
                (T[M.ROPE_FACTORS_SHORT] + ".weight",
                 np.linspace(1.0, 1.5, n_rope).astype(np.float32), False)]
    for l in range(n_layer):
        def name(t):
            return T[t].format(bid=l) + ".weight"
        out.append((name(M.ATTN_NORM), vec(n_embd, 0.1), False))
        if arch == "phi3":  # Q/K/V fused
            out.append((name(M.ATTN_QKV), mat(q_dim + 2 * kv_dim, n_embd), True))
        else:
            out += [(name(M.ATTN_Q), mat(q_dim, n_embd), True),
                    (name(M.ATTN_K), mat(kv_dim, n_embd), True),
                    (name(M.ATTN_V), mat(kv_dim, n_embd), True),
                    (name(M.ATTN_Q_NORM), vec(head_dim, 0.3), False),
                    (name(M.ATTN_K_NORM), vec(head_dim, 0.3), False)]
        out.append((name(M.ATTN_OUT), mat(n_embd, q_dim), True))
        if arch == "gemma3":  # sandwich norms; blk.N.ffn_norm is FFN_PRE_NORM's name
            out += [(name(M.ATTN_POST_NORM), vec(n_embd, 0.2), False),
                    (name(M.FFN_PRE_NORM), vec(n_embd, 0.1), False)]
        else:
            out.append((name(M.FFN_NORM), vec(n_embd, 0.1), False))
        if arch == "phi3":  # gate/up fused, gate first
            out.append((name(M.FFN_UP), mat(2 * n_ff, n_embd), True))
        else:
            out += [(name(M.FFN_GATE), mat(n_ff, n_embd), True),
                    (name(M.FFN_UP), mat(n_ff, n_embd), True)]
        out.append((name(M.FFN_DOWN), mat(n_embd, n_ff), True))
        if arch == "gemma3":
            out.append((name(M.FFN_POST_NORM), vec(n_embd, 0.2), False))
    out.append((T[M.OUTPUT_NORM] + ".weight", vec(n_embd, 0.1), False))
    if arch == "phi3":
        out.append((T[M.OUTPUT] + ".weight", mat(n_vocab, n_embd), True))
    return out


def write(arch, path, tensors, qtype, pattern=None, base_swa=None, softcap=None, window=None,
          ctx=None):
    n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx = SIZES[arch]
    n_ctx = ctx or n_ctx
    ids = {"qwen3": gguf.MODEL_ARCH.QWEN3, "phi3": gguf.MODEL_ARCH.PHI3,
           "gemma3": gguf.MODEL_ARCH.GEMMA3}
    w = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[ids[arch]])
    # phi3: a name with "phi3" makes llama.cpp look for <|end|> and kin
    w.add_name("random" if arch == "phi3" else "random " + arch)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    if arch == "phi3":
        w.add_rope_dimension_count(head_dim)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_rope_freq_base(10000.0)
        w.add_rope_scaling_orig_ctx_len(PHI3_CTX_ORIG)
        w.add_rope_scaling_attn_factors(1.19)
        w.add_sliding_window(4)
    else:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_rope_freq_base(1000000.0)
    if arch == "gemma3":
        w.add_sliding_window(window or GEMMA3_WINDOW)
        if pattern is not None:
            w.add_sliding_window_pattern(pattern)
        if base_swa is not None:
            w.add_rope_freq_base_swa(base_swa)
        if softcap is not None:
            w.add_final_logit_softcapping(softcap)
    w.add_tokenizer_model("llama")
    if arch == "phi3":
        # llama.cpp's SentencePiece loader needs the 256 byte tokens (<0x0A> for newlines)
        w.add_token_list(["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] +
                         ["t%d" % i for i in range(n_vocab - 259)])
        w.add_token_scores([0.0] * n_vocab)
        w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (n_vocab - 259))
    elif arch == "gemma3":
        w.add_token_list(["<pad>", "<eos>", "<bos>"] + ["t%d" % i for i in range(3, n_vocab)])
        w.add_token_scores([0.0] * n_vocab)
        w.add_token_types([3, 3, 3] + [1] * (n_vocab - 3))
    else:
        w.add_token_list(["<unk>", "<s>", "</s>"] + ["t%d" % i for i in range(3, n_vocab)])
        w.add_token_scores([0.0] * n_vocab)
        w.add_token_types([2, 3, 3] + [1] * (n_vocab - 3))
    if arch == "gemma3":
        w.add_bos_token_id(2)
        w.add_eos_token_id(1)
        w.add_add_space_prefix(False)
    else:
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        if arch == "phi3":
            w.add_add_space_prefix(False)
    for name, data, is_matrix in tensors:
        if is_matrix and qtype is not None:
            w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# The seed of each architecture's target (its draft: the same seed plus noise 0.4) and the
# tensor its refused file lacks.
SEEDS = {"qwen3": 7, "phi3": 5, "gemma3": 11}
MISSING = {"qwen3": ("no-k-norm", "blk.1.attn_k_norm.weight"),
           "phi3": ("no-short", "rope_factors_short.weight"),
           "gemma3": ("no-post-norm", "blk.2.post_ffw_norm.weight")}


def main(argv):
    if len(argv) != 3 or argv[1] not in SIZES:
        sys.stderr.write("usage: make_arch.py qwen3|phi3|gemma3 DIR\n")
        return 2
    arch, d = argv[1], argv[2]

    def path(suffix):
        return os.path.join(d, "%s-%s.gguf" % (arch, suffix))

    target = weights(arch, SEEDS[arch], 0.0)
    write(arch, path("target"), target, None)
    write(arch, path("target-q8_0"), target, Q8_0)
    if arch == "gemma3":
        write(arch, path("pattern"), target, None,
              pattern=[True, False, True, False, True, False], base_swa=500.0, softcap=3.0)
        write(arch, path("w32"), target, None, window=GEMMA3_WIDE_WINDOW, ctx=GEMMA3_WIDE_CTX)
    write(arch, path("draft"), weights(arch, SEEDS[arch], 0.4), None)
    suffix, gone = MISSING[arch]
    write(arch, path(suffix), [t for t in target if t[0] != gone], None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
