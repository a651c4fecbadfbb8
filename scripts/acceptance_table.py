#!/usr/bin/env python3
"""Acceptance of three drafts for the TinyStories target, K = 1..8, temp 0 and 1.

usage: python3 scripts/acceptance_table.py [--specdec build-release/specdec]
           [--prompts 20] [-n 128] [--k-max 8] [--work out/acceptance] [--json FILE]

Pairs (target = models/tinystories-target-f32.gguf):
  trained draft  models/tinystories-draft-f32.gguf (scripts/train_pair.py)
  stories260K    ../shared/data/models/stories260K.bin converted by `specdec convert`
  target Q4_0    the target quantized by `specdec quantize ... q4_0`
Prompts: the first sentence of each of the first --prompts stories of
../shared/data/tinystories/valid.txt. Each (pair, K, temperature, prompt) is one
`specdec generate --json -t 1` run of -n tokens; temp 1 is pure sampling (--top-k 0
--top-p 1) with seed = prompt index. Sums over the prompts give
  acceptance rate     = accepted / drafted
  accepted per pass   = accepted / target passes   (mean accepted tokens per target pass)
  tokens per pass     = emitted / target passes
At temp 0 every run's tokens must equal the target-alone run's (--no-draft); the script
exits 1 if any differs. Standard library only. Prints a Markdown table.
"""
import argparse
import json
import os
import re
import subprocess
import sys


def first_sentences(path, n):
    out, cur = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line == "<|endoftext|>":
                story = "\n".join(cur).strip()
                cur = []
                if not story:
                    continue
                m = re.match(r"(.+?[.!?])(\s|$)", story.replace("\n", " "))
                out.append(m.group(1) if m else story)
                if len(out) == n:
                    break
            else:
                cur.append(line)
    return out


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr.strip()))
    return r.stdout


def generate(a, target, draft, prompt, k, temp, seed):
    cmd = [a.specdec, "generate", "-m", target, "-p", prompt, "-n", str(a.n), "-t", "1",
           "--json", "--temp", str(temp), "--seed", str(seed)]
    if temp > 0:
        cmd += ["--top-k", "0", "--top-p", "1"]
    cmd += ["--no-draft"] if draft is None else ["-md", draft, "-k", str(k)]
    return json.loads(run(cmd))


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--specdec", default=os.path.join(root, "build-release", "specdec"))
    ap.add_argument("--models", default=os.path.join(root, "models"))
    ap.add_argument("--data", default=os.path.join(root, "..", "shared", "data"))
    ap.add_argument("--work", default=os.path.join(root, "out", "acceptance"))
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--k-max", type=int, default=8)
    ap.add_argument("--json", help="write every aggregate to this file")
    a = ap.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)
    target = os.path.join(a.models, "tinystories-target-f32.gguf")
    s260 = os.path.join(a.work, "stories260K-f32.gguf")
    q4 = os.path.join(a.work, "tinystories-target-q4_0.gguf")
    run([a.specdec, "convert", os.path.join(a.data, "models", "stories260K.bin"),
         os.path.join(a.data, "models", "tok512.bin"), s260])
    run([a.specdec, "quantize", target, q4, "q4_0"])
    pairs = [("trained draft", os.path.join(a.models, "tinystories-draft-f32.gguf")),
             ("stories260K", s260), ("target Q4_0", q4)]
    prompts = first_sentences(os.path.join(a.data, "tinystories", "valid.txt"), a.prompts)

    ref = [generate(a, target, None, p, 1, 0.0, i)["tokens"] for i, p in enumerate(prompts)]
    results, mismatches = [], []
    for name, draft in pairs:
        for k in range(1, a.k_max + 1):
            row = {"pair": name, "k": k}
            for temp in (0.0, 1.0):
                d = acc = passes = gen = 0
                for i, p in enumerate(prompts):
                    j = generate(a, target, draft, p, k, temp, i)
                    st = j["stats"]
                    d += st["n_drafted"]
                    acc += st["n_accepted"]
                    passes += st["n_target_passes"]
                    gen += st["n_generated"]
                    if temp == 0.0 and j["tokens"] != ref[i]:
                        mismatches.append("%s K=%d prompt %d" % (name, k, i))
                key = "t%d" % int(temp)
                row[key] = {"drafted": d, "accepted": acc, "target_passes": passes,
                            "generated": gen, "acceptance_rate": acc / d if d else 0.0,
                            "accepted_per_pass": acc / passes if passes else 0.0,
                            "tokens_per_pass": gen / passes if passes else 0.0}
            results.append(row)
            sys.stderr.write("%s K=%d: temp 0 %.3f, temp 1 %.3f\n" %
                             (name, k, row["t0"]["acceptance_rate"], row["t1"]["acceptance_rate"]))

    print("Target: `tinystories-target-f32.gguf`; %d prompts (first sentences of valid.txt "
          "stories), -n %d each; temp 1 = pure sampling (top-k 0, top-p 1). Acceptance = "
          "accepted / drafted; acc/pass = mean accepted draft tokens per target pass; tok/pass "
          "= emitted tokens per target pass." % (len(prompts), a.n))
    print()
    print("| draft | K | temp 0 acceptance | temp 0 acc/pass | temp 0 tok/pass "
          "| temp 1 acceptance | temp 1 acc/pass | temp 1 tok/pass |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        t0, t1 = r["t0"], r["t1"]
        print("| %s | %d | %.3f | %.2f | %.2f | %.3f | %.2f | %.2f |" %
              (r["pair"], r["k"], t0["acceptance_rate"], t0["accepted_per_pass"],
               t0["tokens_per_pass"], t1["acceptance_rate"], t1["accepted_per_pass"],
               t1["tokens_per_pass"]))
    print()
    n_runs = len(pairs) * a.k_max * len(prompts)
    print("Greedy speculative output equal to target-alone output: %d of %d runs "
          "(%d prompts x K = 1..%d x %d drafts)." %
          (n_runs - len(mismatches), n_runs, len(prompts), a.k_max, len(pairs)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"prompts": prompts, "n": a.n, "results": results,
                       "greedy_mismatches": mismatches}, f, indent=1)
    if mismatches:
        sys.stderr.write("greedy mismatch: %s\n" % ", ".join(mismatches))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
