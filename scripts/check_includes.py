#!/usr/bin/env python3
"""The include rules of specdec's parts (docs/development.md, "Layout"), checked.

usage: python3 scripts/check_includes.py [ROOT]

Every project include ("dir/file.h") of every .c/.h/.cu/.cuh file in a library part must
be the part's own file or a face the part may use; a private header (a part's internal
header, e.g. quant/cpu/kernels.h) may only be included from its own folder (and from
tests). The commands (tools/) sit on top: they may include the library's faces (but the
scorer's and the KV cache's, which the engine drives), the server's and the face of what
they share (tools/common/sd_cli.h); tools/common (flags, configs, output files) sits below
them and includes only those library faces; nothing in the library (or the server)
includes tools/, and the tests may include anything. The public face, include/specdec.h,
includes no project file; every part may include it (it defines the status codes, the
error record and the statistics the library shares with its users), and the examples
include nothing else.

Call circles: within one folder, the .c/.cu files whose functions call each other in a
circle (a calls b, b calls a, possibly through others) are one tangle that can only be
read and changed together; a helper both need belongs in a file below them. Every such
circle must be one of KNOWN_CIRCLES below (or part of one): a new circle, or a known one
that grew, is a violation. A function counts as a file's when the file defines it without
`static`; a file uses it when it names it (a call or a function pointer).

Layers: no file of the library or the server names a function that tools/ or tools/common/
defines, and no tools/common file names one of the commands' (tools/*.c): the layers call
only down, whatever a file declares by hand.

Prints one line per violation and exits 1 if there is any.
"""
import os
import re
import sys

# The library's public face (include/specdec.h): every part may include it.
PUBLIC = "include/specdec.h"

# Faces: the one public header of each part.
FACE = {
    "public": PUBLIC,
    "base": "runtime/base/sd_base.h",
    "gguf": "runtime/gguf/sd_gguf.h",
    "tokenizer": "runtime/tokenizer/sd_vocab.h",
    "model": "runtime/model/sd_model.h",
    "backend": "runtime/backend/sd_backend.h",
    "engine": "runtime/engine/sd_engine.h",
    "server": "runtime/server/sd_server.h",
    "convert": "runtime/convert/sd_convert.h",
    "quant": "quant/sd_quant.h",
    "kv": "kv/sd_kv.h",
    "draft": "draft/sd_draft.h",
    "target": "target/sd_target.h",
    "sample": "verify/sd_sample.h",
    "verify": "verify/sd_verify.h",
    "grammar": "runtime/grammar/sd_grammar.h",
    "common": "tools/common/sd_cli.h",
}

# The library's faces the commands and their shared code may include: every one but the
# scorer's (target/) and the KV cache's (kv/), which only the engine drives: a command
# reaches them through the engine's face (sd_engine.h), never past it.
LIBRARY = ["base", "gguf", "tokenizer", "model", "backend", "engine", "convert", "quant",
           "draft", "sample", "verify", "grammar"]

# Part folder -> the faces it may include (besides its own files).
ALLOWED = {
    "include": [],
    "runtime/base": [],
    "quant": ["base"],
    "kv": ["base", "quant"],
    "runtime/gguf": ["base", "quant"],
    "runtime/tokenizer": ["base", "gguf"],
    "runtime/backend": ["base", "quant", "kv"],
    "runtime/model": ["base", "gguf", "tokenizer", "backend", "quant", "kv"],
    "verify": ["base", "sample"],
    "draft": ["base", "model", "sample", "grammar"],
    "target": ["base", "model", "sample"],
    "runtime/convert": ["base", "gguf", "quant", "tokenizer"],
    "runtime/engine": ["base", "gguf", "tokenizer", "model", "quant", "kv", "draft", "target",
                       "sample", "verify", "grammar"],
    "runtime/server": ["base", "gguf", "tokenizer", "model", "quant", "kv", "draft", "target",
                       "sample", "verify", "engine", "grammar"],
    "runtime/grammar": ["base"],
    # Not the library: the commands' shared code (flags, configs, output files), then the
    # commands on top of everything.
    "tools/common": LIBRARY,
    "tools": LIBRARY + ["server", "common"],
}
# The commands and their shared code: nothing else includes them (but the tests).
TOOLS = ["tools", "tools/common"]
# Folders free to include anything, private headers too (not library parts).
FREE = ["tests"]
# Programs written against the public face alone (what a user of the installed library
# has): they may include include/specdec.h and their own files only.
USERS = ["examples"]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

# The call circles that exist and are allowed to (each a set of files of one folder): none
# left (the quantizers' fp16 conversions moved to quant/fp16.c under quant.c and
# kquants.c; the CUDA backend's error recording to status.cu under every op file, its
# stream wait into comm.cu). Never grow this list.
KNOWN_CIRCLES = []

COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                               re.S)
# A function definition at the start of a line: its return type, its name, its parameters
# and the opening brace; not static (a static function is the file's own).
DEFINITION = re.compile(r'^(?!static\b|typedef\b|extern\b|struct\b|enum\b|union\b|#)'
                        r'[A-Za-z_][\w \t*]*?\b([A-Za-z_]\w*)\s*\(([^;{}]*?)\)\s*\{', re.M)
IDENT = re.compile(r'(?<![.>\w])([A-Za-z_]\w*)\b')


def strip_code(text):
    """The text without comments and string or character literals (lines kept)."""
    return COMMENT_OR_STRING.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def find_circles(root, folders):
    """The call circles (strongly connected sets of two or more files) of each folder."""
    circles = []
    for top in folders:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            if part_of(os.path.relpath(dirpath, root)) != top:
                continue  # a deeper part of its own (tools/common under tools)
            srcs = sorted(f for f in files if f.endswith((".c", ".cu")))
            code, defs = {}, {}
            for f in srcs:
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                with open(os.path.join(dirpath, f), encoding="utf-8", errors="replace") as fh:
                    code[rel] = strip_code(fh.read())
                for m in DEFINITION.finditer(code[rel]):
                    defs.setdefault(m.group(1), rel)
            edges = {rel: set() for rel in code}
            for rel, text in code.items():
                for name in set(IDENT.findall(text)):
                    owner = defs.get(name)
                    if owner and owner != rel:
                        edges[rel].add(owner)
            circles.extend(scc for scc in strongly_connected(edges) if len(scc) > 1)
    return circles


def calls_up(root):
    """Calls against the layers, which includes alone do not catch (a prototype written
    out by hand): a library or server file naming a function that tools/ or tools/common/
    defines, or a tools/common file naming one of the commands' (tools/*.c)."""
    def defined(folder):
        names = {}
        d = os.path.join(root, folder)
        for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if f.endswith(".c") and f != "main.c":
                with open(os.path.join(d, f), encoding="utf-8", errors="replace") as fh:
                    for m in DEFINITION.finditer(strip_code(fh.read())):
                        if m.group(1).startswith("sd_"):  # the project's names
                            names.setdefault(m.group(1), folder + "/" + f)
        return names
    above = {"tools/common": defined("tools")}
    above_lib = dict(defined("tools/common"), **above["tools/common"])
    bad = []
    for top in list(ALLOWED):
        upper = above.get(top, above_lib if top not in TOOLS else None)
        if not upper:
            continue
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            if part_of(os.path.relpath(dirpath, root)) != top:
                continue
            for f in sorted(files):
                if not f.endswith((".c", ".h", ".cu", ".cuh")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                with open(os.path.join(dirpath, f), encoding="utf-8", errors="replace") as fh:
                    names = set(IDENT.findall(strip_code(fh.read())))
                for name in sorted(names & set(upper)):
                    bad.append("%s: names %s, defined above it in %s (a layer calls only "
                               "down)" % (rel, name, upper[name]))
    return bad


def strongly_connected(edges):
    """Tarjan's strongly connected components of a graph {node: set(nodes)}."""
    index, low, on, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = set()
            while True:
                w = stack.pop()
                on.discard(w)
                scc.add(w)
                if w == v:
                    break
            out.append(scc)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def part_of(path):
    """The longest ALLOWED/FREE folder that contains path."""
    best = None
    for folder in list(ALLOWED) + FREE + USERS:
        if path == folder or path.startswith(folder + "/"):
            if best is None or len(folder) > len(best):
                best = folder
    return best


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    root = os.path.abspath(root)
    faces = set(FACE.values())
    bad = []
    n_files = 0
    for top in list(ALLOWED) + FREE + USERS:
        base = os.path.join(root, top)
        for dirpath, _, files in os.walk(base):
            for f in sorted(files):
                if not f.endswith((".c", ".h", ".cu", ".cuh")):
                    continue
                full = os.path.join(dirpath, f)
                rel = os.path.relpath(full, root)
                part = part_of(rel)
                if part != top:
                    continue  # visited through its own (deeper) part
                n_files += 1
                with open(full, encoding="utf-8", errors="replace") as fh:
                    for lineno, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        if "/" not in inc:
                            inc = os.path.relpath(os.path.join(os.path.dirname(rel), inc))
                        why = check(part, inc, faces)
                        if why:
                            bad.append("%s:%d: includes %s: %s" % (rel, lineno, inc, why))
    for scc in find_circles(root, list(ALLOWED)):
        if not any(scc <= known for known in KNOWN_CIRCLES):
            bad.append("call circle: %s call each other (put what they share in a file below "
                       "them; scripts/check_includes.py's KNOWN_CIRCLES lists the allowed ones)"
                       % ", ".join(sorted(scc)))
    bad.extend(calls_up(root))
    for b in bad:
        print(b)
    if not n_files:
        print("check_includes: no source files found under %s" % root)
        return 1
    if bad:
        print("check_includes: %d violation(s) in %d files" % (len(bad), n_files))
        return 1
    print("check_includes: %d files follow the include rules" % n_files)
    return 0


def check(part, inc, faces):
    inc_part = part_of(inc)
    if part in USERS:
        if inc == PUBLIC or os.path.basename(inc) == "specdec.h" or inc_part == part:
            return None
        return "%s may include only the public face, %s" % (part, PUBLIC)
    if inc == PUBLIC:
        if part == "include":
            return "the public face includes no project file"
        return None
    if part in FREE:
        return None  # tests may include private headers for white-box tests
    if inc_part in TOOLS and part not in TOOLS:
        return "the library must not include the commands (tools/)"
    if inc_part == part:
        return None  # own files, private headers included
    if inc in faces:
        allowed = [FACE[k] for k in ALLOWED[part]]
        if inc in allowed:
            return None
        return "%s may include only %s" % (part, ", ".join(allowed) or "no other part")
    return "private to %s" % (inc_part or "an unknown folder")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
