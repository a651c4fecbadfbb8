#!/usr/bin/env python3
"""Reference checks of specdec's element types against gguf-py (PyPI package `gguf`, the
llama.cpp project's own Python implementation of the GGUF format and of the ggml block
(de)quantizers in numpy). Used by tests/test_quant_ref.c and tests/test_quantize.c.

    gguf_ref.py probe
        exit 0 if gguf and numpy import (the tests skip otherwise)
    gguf_ref.py dequant TYPE:IN:OUT ...
        IN: raw blocks of ggml type TYPE (name, e.g. q4_k); OUT: float32 little-endian,
        gguf.quants.dequantize of them (several triples: one interpreter start)
    gguf_ref.py quant TYPE:IN:OUT ...
        IN: float32 values (a multiple of the block size); OUT: gguf.quants.quantize
        bytes (gguf-py implements it for q4_0, q4_1, q5_0, q5_1, q8_0, bf16, ...)
    gguf_ref.py dequant-tensors FILE NAME:ROWS:OUT ...
        the first ROWS rows of tensor NAME of GGUF FILE (read once by gguf.GGUFReader),
        dequantized, as float32 to OUT
    gguf_ref.py compare REF FILE ...
        open GGUF REF (a float model) and each FILE (e.g. written by specdec quantize from
        it) with gguf.GGUFReader; for each FILE print {"file": FILE}, then one JSON line
        per tensor: {"name", "type", "rmse", "max_abs", "ref_rms", "n"} comparing its
        dequantized values with REF's, then {"general.file_type": N}
"""
import json
import sys

import numpy as np


def qtype(name):
    from gguf import GGMLQuantizationType

    return GGMLQuantizationType[name.upper()]


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd = argv[1]
    if cmd == "probe":
        import gguf  # noqa: F401
        import gguf.quants  # noqa: F401

        return 0
    from gguf import GGUFReader
    from gguf.quants import dequantize, quantize

    if cmd == "dequant" and len(argv) >= 3:
        for arg in argv[2:]:
            name, src, dst = arg.split(":")
            raw = np.fromfile(src, dtype=np.uint8)
            dequantize(raw, qtype(name)).astype("<f4").tofile(dst)
        return 0
    if cmd == "quant" and len(argv) >= 3:
        for arg in argv[2:]:
            name, src, dst = arg.split(":")
            q = quantize(np.fromfile(src, dtype="<f4"), qtype(name))
            np.ascontiguousarray(q).view(np.uint8).tofile(dst)
        return 0
    if cmd == "dequant-tensors" and len(argv) >= 4:
        tensors = {t.name: t for t in GGUFReader(argv[2]).tensors}
        for arg in argv[3:]:
            name, rows, dst = arg.split(":")
            if name not in tensors:
                print("tensor not found: " + name, file=sys.stderr)
                return 1
            t = tensors[name]
            data = np.asarray(t.data)
            part = data[: int(rows)] if data.ndim > 1 else data
            dequantize(part, t.tensor_type).astype("<f4").tofile(dst)
        return 0
    if cmd == "compare" and len(argv) >= 4:
        ref = {}
        for t in GGUFReader(argv[2]).tensors:
            y = dequantize(np.asarray(t.data), t.tensor_type)
            ref[t.name] = y.astype(np.float64).ravel()
        for path in argv[3:]:
            f = GGUFReader(path)
            print(json.dumps({"file": path}))
            for t in f.tensors:
                x = dequantize(np.asarray(t.data), t.tensor_type).astype(np.float64).ravel()
                y = ref[t.name]
                d = x - y
                print(json.dumps({
                    "name": t.name,
                    "type": t.tensor_type.name.lower(),
                    "rmse": float(np.sqrt(np.mean(d * d))),
                    "max_abs": float(np.max(np.abs(d))),
                    "ref_rms": float(np.sqrt(np.mean(y * y))),
                    "n": int(x.size),
                }))
            ft = f.fields.get("general.file_type")
            print(json.dumps({"general.file_type": int(ft.parts[ft.data[0]][0]) if ft else None}))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
