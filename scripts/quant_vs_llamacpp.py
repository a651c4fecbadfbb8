#!/usr/bin/env python3
"""specdec's quantizers and `specdec quantize` against llama.cpp itself (not a test: a
reference check printing JSON lines; needs PyPI packages gguf and llama-cpp-python, the
latter builds llama.cpp from source).

    quant_vs_llamacpp.py rmse SPECDEC [N]
        N (default 2^20) N(0, 1) values (numpy seed 0) as one F32 [N/256, 256] tensor;
        quantized by ggml's own quantize_row_*_ref (ggml_quantize_chunk in llama.cpp's
        libggml-base, through ctypes) and by `SPECDEC quantize ... TYPE`; both decoded by
        gguf-py; prints per type the two RMSEs and whether the bytes are identical.
    quant_vs_llamacpp.py mix SPECDEC MODEL.gguf RECIPE
        quantize MODEL with llama.cpp's llama_model_quantize (RECIPE = q4_k_m, q5_k_m,
        q4_k, ...; allow_requantize) and with specdec; prints per tensor the two types
        where they differ, and a summary line.
    quant_vs_llamacpp.py load FILE.gguf [PROMPT]
        llama.cpp (llama_cpp.Llama) loads FILE and greedily continues PROMPT by 16 tokens;
        prints the text and whether every logit was finite.
"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

TYPES = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"]
# llama.h LLAMA_FTYPE_MOSTLY_*
FTYPES = {"q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "q2_k": 10, "q3_k": 11,
          "q4_k": 14, "q5_k": 16, "q6_k": 18, "q4_k_m": 15, "q5_k_m": 17}


def ggml_lib():
    import llama_cpp

    d = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    lib = ctypes.CDLL(os.path.join(d, "libggml-base.so"))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.c_void_p]
    lib.ggml_quantize_init.argtypes = [ctypes.c_int]
    return lib


def rmse(a, b):
    d = a.astype(np.float64) - b.astype(np.float64)
    return float(np.sqrt(np.mean(d * d)))


def cmd_rmse(specdec, n):
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf.quants import dequantize

    lib = ggml_lib()
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32).reshape(-1, 256)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "x.gguf")
        w = gguf.GGUFWriter(src, "llama")
        w.add_tensor("blk.0.attn_q.weight", x)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        for name in TYPES:
            t = T[name.upper()]
            lib.ggml_quantize_init(int(t))
            bs, ts = gguf.GGML_QUANT_SIZES[t]
            out = np.zeros(x.size // bs * ts, dtype=np.uint8)
            lib.ggml_quantize_chunk(int(t), x.ctypes.data, out.ctypes.data, 0, x.shape[0],
                                    x.shape[1], None)
            ref = dequantize(out, t).reshape(x.shape)
            dst = os.path.join(tmp, name + ".gguf")
            subprocess.run([specdec, "quantize", src, dst, name], check=True,
                           stderr=subprocess.DEVNULL)
            tt = gguf.GGUFReader(dst).tensors[0]
            ours = dequantize(np.asarray(tt.data), tt.tensor_type).reshape(x.shape)
            same = bool(np.array_equal(np.asarray(tt.data).ravel().view(np.uint8), out))
            print(json.dumps({"type": name, "n": int(x.size), "rmse_ggml": round(rmse(ref, x), 6),
                              "rmse_specdec": round(rmse(ours, x), 6),
                              "ratio": round(rmse(ours, x) / rmse(ref, x), 4),
                              "bytes_identical": same}))
    return 0


def cmd_mix(specdec, model, recipe):
    import gguf
    import llama_cpp

    with tempfile.TemporaryDirectory() as tmp:
        a = os.path.join(tmp, "llamacpp.gguf")
        b = os.path.join(tmp, "specdec.gguf")
        p = llama_cpp.llama_model_quantize_default_params()
        p.ftype = FTYPES[recipe]
        p.allow_requantize = True
        p.pure = recipe in ("q2_k", "q3_k", "q4_k", "q5_k", "q6_k")
        rc = llama_cpp.llama_model_quantize(model.encode(), a.encode(), ctypes.byref(p))
        if rc != 0:
            print(json.dumps({"error": "llama_model_quantize failed", "rc": rc}))
            return 1
        subprocess.run([specdec, "quantize", model, b, recipe], check=True,
                       stderr=subprocess.DEVNULL)
        ta = {t.name: t.tensor_type.name.lower() for t in gguf.GGUFReader(a).tensors}
        tb = {t.name: t.tensor_type.name.lower() for t in gguf.GGUFReader(b).tensors}
        diff = 0
        for name in ta:
            if ta[name] != tb.get(name):
                diff += 1
                print(json.dumps({"tensor": name, "llama.cpp": ta[name], "specdec": tb.get(name)}))
        counts_a, counts_b = {}, {}
        for v in ta.values():
            counts_a[v] = counts_a.get(v, 0) + 1
        for v in tb.values():
            counts_b[v] = counts_b.get(v, 0) + 1
        print(json.dumps({"recipe": recipe, "tensors": len(ta), "differ": diff,
                          "llama.cpp": counts_a, "specdec": counts_b}))
    return 0


def cmd_load(path, prompt):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=path, n_ctx=256, logits_all=True, verbose=False)
    toks = llm.tokenize(prompt.encode())
    llm.eval(toks)
    out = []
    finite = bool(np.all(np.isfinite(np.asarray(llm.scores[: llm.n_tokens]))))
    for _ in range(16):
        logits = np.asarray(llm.scores[llm.n_tokens - 1])
        finite = finite and bool(np.all(np.isfinite(logits)))
        t = int(np.argmax(logits))
        out.append(t)
        llm.eval([t])
    print(json.dumps({"file": path, "prompt": prompt, "continuation":
                      llm.detokenize(out).decode("utf-8", "replace"), "tokens": out,
                      "all_logits_finite": finite}))
    return 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "rmse":
        return cmd_rmse(argv[2], int(argv[3]) if len(argv) > 3 else 1 << 20)
    if len(argv) == 5 and argv[1] == "mix":
        return cmd_mix(argv[2], argv[3], argv[4])
    if len(argv) >= 3 and argv[1] == "load":
        return cmd_load(argv[2], argv[3] if len(argv) > 3 else "Once upon a time")
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
