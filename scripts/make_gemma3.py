#!/usr/bin/env python3
"""Writes small random Gemma 3 GGUF files with gguf-py (llama.cpp's own GGUF writer and
tensor-name table), for tests/test_gemma3.c.

usage: make_gemma3.py DIR

DIR/gemma3-target.gguf       F32; 6 layers, n_embd 64, 4 query heads and 2 KV heads of
                             head_dim 32 (attention.key_length), n_ff 128, 64 tokens, tied
                             output; sandwich norms (post_attention_norm, post_ffw_norm),
                             per-head Q/K norms; attention.sliding_window 4 with no
                             pattern key: llama.cpp's default period 6 (layers 0-4 local,
                             layer 5 global); rope.freq_base 1e6 (global), no
                             rope.freq_base_swa (local: 10000)
DIR/gemma3-target-q8_0.gguf  the same weights, its matrices Q8_0 (gguf-py's quantizer)
DIR/gemma3-pattern.gguf      the target with attention.sliding_window_pattern as one bool
                             per layer (local, global, local, global, local, global),
                             rope.freq_base_swa 500 and final_logit_softcapping 3
DIR/gemma3-draft.gguf        the target's weights plus noise (a draft that is often right)
DIR/gemma3-no-post-norm.gguf the target without blk.2.post_ffw_norm.weight (refused)

Norm weights are drawn around 1, as the GGUF stores Gemma's 1 + w. The vocabulary is
synthetic SentencePiece ("<pad>", "<eos>", "<bos>", "t3", ...). Exit status 3 when gguf-py
(or numpy) cannot be imported: the test then skips.
"""
import os
import sys

try:
    import numpy as np
    import gguf
except ImportError as e:  # the caller skips
    sys.stderr.write("make_gemma3.py: %s\n" % e)
    sys.exit(3)

N_VOCAB, N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF, N_CTX = 64, 64, 6, 4, 2, 32, 128, 256
WINDOW = 4


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
    out = [(T[M.TOKEN_EMBD] + ".weight", mat(N_VOCAB, N_EMBD, 0.15), True)]
    for l in range(N_LAYER):
        def name(t):
            return T[t].format(bid=l) + ".weight"
        out += [
            (name(M.ATTN_NORM), vec(N_EMBD, 0.1), False),
            (name(M.ATTN_Q), mat(q_dim, N_EMBD), True),
            (name(M.ATTN_K), mat(kv_dim, N_EMBD), True),
            (name(M.ATTN_V), mat(kv_dim, N_EMBD), True),
            (name(M.ATTN_Q_NORM), vec(HEAD_DIM, 0.3), False),
            (name(M.ATTN_K_NORM), vec(HEAD_DIM, 0.3), False),
            (name(M.ATTN_OUT), mat(N_EMBD, q_dim), True),
            (name(M.ATTN_POST_NORM), vec(N_EMBD, 0.2), False),
            (name(M.FFN_PRE_NORM), vec(N_EMBD, 0.1), False),  # blk.N.ffn_norm
            (name(M.FFN_GATE), mat(N_FF, N_EMBD), True),
            (name(M.FFN_UP), mat(N_FF, N_EMBD), True),
            (name(M.FFN_DOWN), mat(N_EMBD, N_FF), True),
            (name(M.FFN_POST_NORM), vec(N_EMBD, 0.2), False),
        ]
    out.append((T[M.OUTPUT_NORM] + ".weight", vec(N_EMBD, 0.1), False))
    return out


def write(path, tensors, qtype, pattern=None, base_swa=None, softcap=None):
    w = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GEMMA3])
    w.add_name("random gemma3")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1000000.0)
    w.add_sliding_window(WINDOW)
    if pattern is not None:
        w.add_sliding_window_pattern(pattern)
    if base_swa is not None:
        w.add_rope_freq_base_swa(base_swa)
    if softcap is not None:
        w.add_final_logit_softcapping(softcap)
    w.add_tokenizer_model("llama")
    w.add_token_list(["<pad>", "<eos>", "<bos>"] + ["t%d" % i for i in range(3, N_VOCAB)])
    w.add_token_scores([0.0] * N_VOCAB)
    w.add_token_types([3, 3, 3] + [1] * (N_VOCAB - 3))
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
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
        sys.stderr.write("usage: make_gemma3.py DIR\n")
        return 2
    d = argv[1]
    target = weights(11, 0.0)
    write(os.path.join(d, "gemma3-target.gguf"), target, None)
    write(os.path.join(d, "gemma3-target-q8_0.gguf"), target, gguf.GGMLQuantizationType.Q8_0)
    write(os.path.join(d, "gemma3-pattern.gguf"), target, None,
          pattern=[True, False, True, False, True, False], base_swa=500.0, softcap=3.0)
    write(os.path.join(d, "gemma3-draft.gguf"), weights(11, 0.4), None)
    write(os.path.join(d, "gemma3-no-post-norm.gguf"),
          [t for t in target if t[0] != "blk.2.post_ffw_norm.weight"], None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
