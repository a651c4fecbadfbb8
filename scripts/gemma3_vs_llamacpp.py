#!/usr/bin/env python3
"""Greedy text of specdec and llama.cpp on the same Gemma 3 file, and the float
reference's verdict at every divergence.

usage: gemma3_vs_llamacpp.py [--model F.gguf] [--peer DIR] [-n N] [--json OUT]

For each of 4 prompts (below): both runtimes' prompt tokens (specdec tokenize,
llama-tokenize) must be equal; then `specdec generate --temp 0 -n N --json` (its token
ids) and llama.cpp's llama-simple (greedy, -n N; its text). Where the texts differ, the
first diverging position i is the first of specdec's tokens whose piece no longer
continues llama.cpp's text; scripts/ref_forward.py's forward (float64, --float: no
activation rounding, weights dequantized by gguf-py) over the prompt and specdec's first
i tokens gives the reference's top two tokens and their logit margin there. A divergence
is a near-tie when both runtimes' tokens are the reference's top two and the margin is
< 0.3 logits. Prints one JSON object (also to --json); exit 0 when every prompt agrees
or diverges at a near-tie, 1 otherwise, 77 when the model or the peer is missing.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little girl named Lily who loved to",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n   ',
    "Héllo wörld!  Multiple   spaces\tand tabs, 日本語 and emoji 🙂.\n\n"
    "Question: why is the sky blue?\nAnswer:",
]
NEAR_TIE = 0.3


def run(cmd):
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode != 0:
        sys.exit("%s: exit %d: %s" % (cmd[0], r.returncode, r.stderr.decode()[-500:]))
    return r.stdout.decode("utf-8", errors="replace")


def pieces(model):
    """Token id -> text (SentencePiece: U+2581 is a space, <0xNN> a byte)."""
    import gguf
    r = gguf.GGUFReader(model)
    f = r.fields["tokenizer.ggml.tokens"]
    toks = [bytes(f.parts[i]).decode("utf-8", errors="replace") for i in f.data]
    ty = r.fields["tokenizer.ggml.token_type"]
    types = [int(ty.parts[i][0]) for i in ty.data]
    out = []
    for t, k in zip(toks, types):
        if k == 6 and t.startswith("<0x") and t.endswith(">"):
            out.append(bytes([int(t[3:-1], 16)]))
        elif k in (1, 4):  # normal, user-defined
            out.append(t.replace("\u2581", " ").encode())
        else:
            out.append(b"")
    return out


def main(argv):
    model = os.path.join(ROOT, "models/downloaded/gemma-3-270m-q4_k_m.gguf")
    peer = "/work/main/build-peer/native/bin"
    n = 48
    out_json = None
    i = 1
    while i < len(argv):
        a = argv[i]
        if a in ("--model", "--peer", "-n", "--json") and i + 1 < len(argv):
            v = argv[i + 1]
            i += 2
            if a == "--model": model = v
            elif a == "--peer": peer = v
            elif a == "-n": n = int(v)
            else: out_json = v
        else:
            sys.exit(__doc__)
    specdec = os.environ.get("SPECDEC", os.path.join(ROOT, "build-release/specdec"))
    if not os.path.exists(model) or not os.path.exists(os.path.join(peer, "llama-simple")):
        print("gemma3_vs_llamacpp: needs %s and %s/llama-simple" % (model, peer))
        return 77
    piece = pieces(model)
    ref = None
    results = []
    ok = True
    for p in PROMPTS:
        ids_s = [int(x) for x in run([specdec, "tokenize", "-m", model, "-p", p, "--ids"]).split()]
        ids_l = json.loads(run([os.path.join(peer, "llama-tokenize"), "-m", model, "-p", p,
                                "--ids", "--log-disable"]).strip())
        g = json.loads(run([specdec, "generate", "-m", model, "-p", p, "-n", str(n), "--temp",
                            "0", "-c", "1024", "--json"]))
        toks = g["tokens"]
        lt = run([os.path.join(peer, "llama-simple"), "-m", model, "-n", str(n), p])
        # llama-simple prints the prompt (with <bos>) and then the generated text
        k = lt.find(p)
        ltext = lt[k + len(p):].encode() if k >= 0 else lt.encode()
        stext = b"".join(piece[t] for t in toks)
        res = {"prompt": p, "tokens_equal": ids_s == ids_l, "n_prompt": len(ids_s),
               "specdec": stext.decode("utf-8", "replace"),
               "llama.cpp": ltext.decode("utf-8", "replace").rstrip("\n")}
        if ids_s != ids_l:
            ok = False
        at, off = None, 0
        for j, t in enumerate(toks):
            pc = piece[t]
            if ltext[off:off + len(pc)] != pc:
                at = j
                break
            off += len(pc)
        if at is None and len(ltext.rstrip(b"\n")) > off and len(toks) < n:
            at = len(toks)  # specdec stopped (EOS) where llama.cpp went on
        res["first_divergence"] = at
        if at is not None:
            if ref is None:
                import ref_forward
                ref_forward.FLOAT_ONLY = True
                ref = (ref_forward, ref_forward.parse_gguf(model))
            rf, (kv, tensors) = ref
            logits = rf.forward(kv, tensors, ids_s + toks[:at])[-1]
            o = [int(x) for x in (-logits).argsort(kind="stable")[:2]]
            margin = float(logits[o[0]] - logits[o[1]])
            lnext = [t for t in o if piece[t] and ltext[off:off + len(piece[t])] == piece[t]]
            snext = toks[at] if at < len(toks) else None
            near = margin < NEAR_TIE and snext in o and len(lnext) > 0
            res.update({"specdec_token": snext, "llama_token": lnext[0] if lnext else None,
                        "ref_top2": o, "ref_margin": round(margin, 4), "near_tie": near})
            ok = ok and near
        results.append(res)
    out = {"model": os.path.basename(model), "n_predict": n, "near_tie_below": NEAR_TIE,
           "ok": ok, "prompts": results}
    s = json.dumps(out, indent=1, ensure_ascii=False)
    print(s)
    if out_json:
        with open(out_json, "w") as f:
            f.write(s + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
