#!/usr/bin/env python3
"""Top-1 agreement of specdec and llama.cpp over the positions of one token sequence, and
the float reference's margin at every disagreement.

usage: arch_vs_llamacpp.py MODEL.gguf [-n N] [--bytes] [--json OUT]
       arch_vs_llamacpp.py --random ARCH DIR [-n N]   ARCH: qwen3, phi3, gemma3, mistral

Ids: the first N (default 2000) tokens of ../shared/data/tinystories/valid.txt as
`specdec tokenize` cuts them (with BOS); with --bytes (the random files, whose vocabularies
are synthetic) the text's bytes b as ids 3 + b % (n_vocab - 3) after BOS. Both runtimes
evaluate the ids as one sequence from position 0 in a context of exactly N positions, 250
per call, with logits at every position: scripts/specdec_top1.c (the Release library,
CPU, F32 KV cache) and scripts/llamacpp_logits.c (llama.cpp's public C API, the peer
build in build-peer/native, CPU); each prints per position its top-1, runner-up and their
gap. Where the top-1s differ, scripts/ref_forward.py's float64 forward (--float: no
activation rounding; gguf-py's dequantizer) over the same ids gives the reference's
logits of the two candidates: margin = ref[specdec's] - ref[llama.cpp's] (> 0: the
reference sides with specdec), and the reference's own top-1 there; the reference's
top-1 at every position is compared with both runtimes' too.

--random ARCH DIR writes small random files with scripts/make_arch.py's weights (gguf-py,
llama.cpp's tensor names) but a context of 2048 so that 2,000 positions fit: qwen3 and
phi3 as make_arch.py draws them (phi3: LongRoPE, original context 16, so the long factors
are in force), gemma3 likewise but with a window of 64 (layers 0-4 local, layer 5
global), and mistral: a `llama` file of the same sizes (head_dim 16, no head norms)
with attention.sliding_window 64. Then runs the comparison on DIR/ARCH-2k.gguf with
--bytes.

Exit 0 after printing the figures (JSON), 77 when the peer build, the model or the text
is missing (one line), 1 on a failure (a runtime that refuses the file is reported as such).
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
PEER = os.environ.get("SD_PEER_NATIVE", "/work/main/build-peer/native")
PEER_SRC = os.environ.get("SD_PEER_SRC",
                          "/work/main/build-peer/src/llama_cpp_python-0.3.36/vendor/llama.cpp")
BUILD = os.environ.get("SD_BUILD", os.path.join(ROOT, "build-release"))
TEXT = os.path.join(ROOT, "..", "shared", "data", "tinystories", "valid.txt")


def skip(msg):
    print("arch_vs_llamacpp: skipped: " + msg)
    sys.exit(77)


def tools():
    """Build the two programs into BUILD when absent; return their paths."""
    ll = os.path.join(BUILD, "llamacpp_logits")
    sd = os.path.join(BUILD, "specdec_top1")
    libs = [os.path.join(PEER, p) for p in ("src/libllama.a", "ggml/src/libggml.a",
                                            "ggml/src/libggml-cpu.a", "ggml/src/libggml-base.a")]
    if not os.path.exists(ll):
        if not all(os.path.exists(p) for p in libs) or not os.path.isdir(PEER_SRC):
            skip("no llama.cpp peer build (%s)" % PEER)
        obj = ll + ".o"
        subprocess.run(["cc", "-O2", "-std=c11", "-I" + PEER_SRC + "/include",
                        "-I" + PEER_SRC + "/ggml/include", "-c",
                        os.path.join(HERE, "llamacpp_logits.c"), "-o", obj], check=True)
        subprocess.run(["g++", obj] + libs + ["-fopenmp", "-lpthread", "-ldl", "-lm", "-o", ll],
                       check=True)
    lib = os.path.join(BUILD, "libspecdec_lib.a")
    if not os.path.exists(lib):
        subprocess.run(["cmake", "-S", ROOT, "-B", BUILD, "-DCMAKE_BUILD_TYPE=Release",
                        "-DSD_CUDA=OFF"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", BUILD, "-j2", "--target", "specdec_lib", "specdec"],
                       check=True, stdout=subprocess.DEVNULL)
    if not os.path.exists(sd) or os.path.getmtime(sd) < os.path.getmtime(lib):
        subprocess.run(["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-I" + ROOT,
                        os.path.join(HERE, "specdec_top1.c"), lib, "-fopenmp", "-lpthread",
                        "-lm", "-o", sd], check=True)
    return sd, ll


def top1_lines(cmd):
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode != 0:
        return None, r.stderr.decode(errors="replace").strip().splitlines()[-1:]
    rows = []
    for line in r.stdout.decode().split("\n"):
        if line.strip():
            p, t1, t2, gap = line.split()
            rows.append((int(t1), int(t2), float(gap)))
    return rows, None


def ids_for(model, n, as_bytes, specdec):
    with open(TEXT, "rb") as f:
        text = f.read(16 * n if not as_bytes else n)
    if as_bytes:
        import gguf
        r = gguf.GGUFReader(model)
        n_vocab = len(r.fields["tokenizer.ggml.tokens"].data)
        bos = int(r.fields["tokenizer.ggml.bos_token_id"].parts[-1][0])
        return ([bos] + [3 + b % (n_vocab - 3) for b in text])[:n]
    path = os.path.join(BUILD, "arch_vs_llamacpp.txt")
    with open(path, "wb") as f:
        f.write(text)
    out = subprocess.run([specdec, "tokenize", "-m", model, "-f", path, "--ids"],
                         capture_output=True, check=True).stdout.decode()
    ids = [int(x) for x in out.split()]
    if len(ids) < n:
        sys.exit("arch_vs_llamacpp: only %d tokens in the text" % len(ids))
    return ids[:n]


def reference(model, ids, rows):
    """The float reference's logits at positions `rows` and its top-1 at every position
    (the output matrix is applied 100 positions at a time: a 262k vocabulary's logits
    over 2,000 positions would be 4 GB). A final soft cap (monotonic) leaves the top-1s."""
    import numpy as np
    import ref_forward as rf
    rf.FLOAT_ONLY = True
    kv, tensors = rf.parse_gguf(model)
    out_name = "output.weight" if "output.weight" in tensors else "token_embd.weight"
    base = rf.Weight
    top1 = []

    class OutRows(base):
        def __init__(self, t, name, r, c):
            base.__init__(self, t, name, r, c)
            self.is_out = name == out_name

        def __call__(self, x):
            if not self.is_out:
                return base.__call__(self, x)
            for i in range(0, len(x), 100):
                top1.extend(int(t) for t in base.__call__(self, x[i:i + 100]).argmax(axis=1))
            return base.__call__(self, x[np.array(rows, dtype=np.int64)])

    rf.Weight = OutRows
    try:
        return rf.forward(kv, tensors, ids, len(ids)), top1
    finally:
        rf.Weight = base


def compare(model, n, as_bytes):
    if not os.path.exists(model):
        skip("no model " + model)
    if not os.path.exists(TEXT):
        skip("no text " + TEXT)
    sd_bin, ll_bin = tools()
    specdec = os.path.join(BUILD, "specdec")
    ids = ids_for(model, n, as_bytes, specdec)
    idf = os.path.join(BUILD, "arch_vs_llamacpp.ids")
    with open(idf, "w") as f:
        f.write("\n".join(str(i) for i in ids) + "\n")
    s, serr = top1_lines([sd_bin, model, idf])
    l, lerr = top1_lines([ll_bin, model, idf])
    res = {"model": os.path.basename(model), "positions": len(ids),
           "ids": "tinystories bytes" if as_bytes else "specdec tokenize (tinystories valid)"}
    if s is None or l is None:
        if s is None:
            res["specdec_refuses"] = serr
        if l is None:
            res["llamacpp_refuses"] = lerr
        return res, 1
    diff = [i for i in range(len(ids)) if s[i][0] != l[i][0]]
    res["agree"] = len(ids) - len(diff)
    res["agreement"] = round((len(ids) - len(diff)) / len(ids), 4)
    try:
        ref, rt = reference(model, ids, diff)
    except ValueError as e:  # an architecture ref_forward.py does not run
        res["reference"] = str(e)
        return res, 0
    res["ref_agree_specdec"] = sum(rt[i] == s[i][0] for i in range(len(ids)))
    res["ref_agree_llamacpp"] = sum(rt[i] == l[i][0] for i in range(len(ids)))
    out = []
    for k, i in enumerate(diff):
        row = ref[k]
        a, b = s[i][0], l[i][0]
        out.append({"pos": i, "specdec": a, "llamacpp": b, "specdec_gap": s[i][2],
                    "llamacpp_gap": l[i][2], "ref_margin": round(float(row[a] - row[b]), 4),
                    "ref_top1": int(row.argmax())})
    res["disagreements"] = out
    if out:
        m = [abs(d["ref_margin"]) for d in out]
        res["max_abs_ref_margin"] = max(m)
        res["ref_sides_with_specdec"] = sum(d["ref_margin"] > 0 for d in out)
        res["abs_ref_margin_below_0.3"] = sum(x < 0.3 for x in m)
        res["abs_ref_margin_below_1"] = sum(x < 1.0 for x in m)
    return res, 0


def write_random(arch, d):
    import numpy as np
    import gguf
    import make_arch as ma
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "%s-2k.gguf" % arch)
    if arch in ("qwen3", "phi3", "gemma3"):
        ma.SIZES[arch] = ma.SIZES[arch][:7] + (2048,)
        ma.GEMMA3_WINDOW = 64
        ma.write(arch, path, ma.weights(arch, ma.SEEDS[arch], 0.0), None)
        return path
    # mistral: a llama file, n_embd 64, 4 query heads / 2 KV heads of 16, window 64
    n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff = 64, 64, 2, 4, 2, 128
    hd = n_embd // n_head
    mat, vec = ma.draws(17, 0.0)
    T, M = gguf.TENSOR_NAMES, gguf.MODEL_TENSOR
    t = [(T[M.TOKEN_EMBD] + ".weight", mat(n_vocab, n_embd, 1.0))]
    for l in range(n_layer):
        def nm(x):
            return T[x].format(bid=l) + ".weight"
        t += [(nm(M.ATTN_NORM), vec(n_embd, 0.1)), (nm(M.ATTN_Q), mat(n_head * hd, n_embd)),
              (nm(M.ATTN_K), mat(n_head_kv * hd, n_embd)),
              (nm(M.ATTN_V), mat(n_head_kv * hd, n_embd)),
              (nm(M.ATTN_OUT), mat(n_embd, n_head * hd)), (nm(M.FFN_NORM), vec(n_embd, 0.1)),
              (nm(M.FFN_GATE), mat(n_ff, n_embd)), (nm(M.FFN_UP), mat(n_ff, n_embd)),
              (nm(M.FFN_DOWN), mat(n_embd, n_ff))]
    t += [(T[M.OUTPUT_NORM] + ".weight", vec(n_embd, 0.1)),
          (T[M.OUTPUT] + ".weight", mat(n_vocab, n_embd))]
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("random mistral")
    w.add_context_length(2048)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(hd)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_sliding_window(64)
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + ["t%d" % i for i in range(3, n_vocab)])
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types([2, 3, 3] + [1] * (n_vocab - 3))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    for name, data in t:
        w.add_tensor(name, np.asarray(data, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main(argv):
    n, as_bytes, out_json, model = 2000, False, None, None
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "-n" and i + 1 < len(argv):
            n = int(argv[i + 1])
            i += 2
        elif a == "--json" and i + 1 < len(argv):
            out_json = argv[i + 1]
            i += 2
        elif a == "--bytes":
            as_bytes = True
            i += 1
        elif a == "--random" and i + 2 < len(argv) and argv[i + 1] in ("qwen3", "phi3", "gemma3", "mistral"):
            model = write_random(argv[i + 1], argv[i + 2])
            as_bytes = True
            i += 3
        elif model is None and not a.startswith("-"):
            model = a
            i += 1
        else:
            sys.exit(__doc__)
    if model is None:
        sys.exit(__doc__)
    res, rc = compare(model, n, as_bytes)
    s = json.dumps(res, indent=1)
    print(s)
    if out_json:
        with open(out_json, "w") as f:
            f.write(s + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
