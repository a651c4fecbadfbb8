#!/usr/bin/env python3
"""Writes small random Phi-3 GGUF files with gguf-py (llama.cpp's own GGUF writer and
tensor-name table), for tests/test_phi3.c.

usage: make_phi3.py DIR

DIR/phi3-target.gguf       F32; 2 layers, n_embd 64, 4 query heads and 2 KV heads of 16,
                           n_ff 128, 320 tokens, an output matrix; Q/K/V fused in
                           blk.N.attn_qkv.weight [128, 64] and gate/up in blk.N.ffn_up.weight
                           [256, 64] (gate first), as llama.cpp's converter writes Phi-3;
                           LongRoPE: context_length 64, rope.scaling.original_context_length
                           16, rope_factors_long.weight / rope_factors_short.weight [8],
                           rope.scaling.attn_factor 1.19; attention.sliding_window 4 (which
                           llama.cpp ignores for phi3, and so must specdec)
DIR/phi3-target-q8_0.gguf  the same weights, its matrices Q8_0 (gguf-py's quantizer)
DIR/phi3-draft.gguf        the target's weights plus noise (a draft that is often right)
DIR/phi3-no-short.gguf     the target without rope_factors_short.weight (must be refused)

The vocabulary is synthetic SentencePiece ("<unk>", "<s>", "</s>", the 256 byte tokens,
"t0" .. "t60"; no space prefix), which llama.cpp loads. Exit status 3 when gguf-py (or numpy) cannot be imported: the test then skips.
"""
import os
import sys

try:
    import numpy as np
    import gguf
except ImportError as e:  # the caller skips
    sys.stderr.write("make_phi3.py: %s\n" % e)
    sys.exit(3)

N_VOCAB, N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF, N_CTX, N_CTX_ORIG = 320, 64, 2, 4, 2, 128, 64, 16
HEAD_DIM = N_EMBD // N_HEAD


def weights(seed, noise):
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

    T = gguf.TENSOR_NAMES
    M = gguf.MODEL_TENSOR
    q_dim, kv_dim = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    n_rope = HEAD_DIM // 2
    out = [(T[M.TOKEN_EMBD] + ".weight", mat(N_VOCAB, N_EMBD, 1.0), True),
           (T[M.ROPE_FACTORS_LONG] + ".weight",
            np.linspace(1.0, 6.0, n_rope).astype(np.float32), False),
           (T[M.ROPE_FACTORS_SHORT] + ".weight",
            np.linspace(1.0, 1.5, n_rope).astype(np.float32), False)]
    for l in range(N_LAYER):
        def name(t):
            return T[t].format(bid=l) + ".weight"
        out += [
            (name(M.ATTN_NORM), vec(N_EMBD, 0.1), False),
            (name(M.ATTN_QKV), mat(q_dim + 2 * kv_dim, N_EMBD), True),
            (name(M.ATTN_OUT), mat(N_EMBD, q_dim), True),
            (name(M.FFN_NORM), vec(N_EMBD, 0.1), False),
            (name(M.FFN_UP), mat(2 * N_FF, N_EMBD), True),
            (name(M.FFN_DOWN), mat(N_EMBD, N_FF), True),
        ]
    out += [(T[M.OUTPUT_NORM] + ".weight", vec(N_EMBD, 0.1), False),
            (T[M.OUTPUT] + ".weight", mat(N_VOCAB, N_EMBD), True)]
    return out


def write(path, tensors, qtype):
    w = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.PHI3])
    w.add_name("random")  # a name with "phi3" makes llama.cpp look for <|end|> and kin
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_scaling_orig_ctx_len(N_CTX_ORIG)
    w.add_rope_scaling_attn_factors(1.19)
    w.add_sliding_window(4)
    w.add_tokenizer_model("llama")
    # llama.cpp's SentencePiece loader needs the 256 byte tokens (<0x0A> for newlines)
    w.add_token_list(["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] +
                     ["t%d" % i for i in range(N_VOCAB - 259)])
    w.add_token_scores([0.0] * N_VOCAB)
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (N_VOCAB - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_space_prefix(False)
    for name, data, is_matrix in tensors:
        if is_matrix and qtype is not None:
            q = gguf.quants.quantize(data, qtype)
            w.add_tensor(name, q, raw_dtype=qtype)
        else:
            w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: make_phi3.py DIR\n")
        return 2
    d = argv[1]
    target = weights(5, 0.0)
    write(os.path.join(d, "phi3-target.gguf"), target, None)
    write(os.path.join(d, "phi3-target-q8_0.gguf"), target, gguf.GGMLQuantizationType.Q8_0)
    write(os.path.join(d, "phi3-draft.gguf"), weights(5, 0.4), None)
    write(os.path.join(d, "phi3-no-short.gguf"),
          [t for t in target if t[0] != "rope_factors_short.weight"], None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
