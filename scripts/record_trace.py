#!/usr/bin/env python3
"""Record a cost trace for the adaptive controller's tests (tests/test_adaptive.c).

Each run is `specdec generate --draft-policy sweep -k KMAX --draft-p-min 0 -v --json`: the
sweep policy drafts K = 0, 1, .., KMAX in turn, so every pass size and the draft's cost
are sampled under the same load, pass after pass. The trace keeps what the controller
would have seen (generate's stats.passes): one line per pass

    run k drafted accepted t_draft_ms t_pass_ms

(run: the index of the prompt / seed). tests/test_adaptive.c replays it: the passes of a
run, in rounds of KMAX + 1, give the costs of every K at one moment (and, from the
K = KMAX pass, how many tokens in a row the draft got right), so the controller and every
fixed K can be simulated on the same costs.

  python3 scripts/record_trace.py --config configs/qwen2.5-coder-pair.json \\
      -f scripts/prompts/coding.txt --runs 6 -k 6 -n 160 -t 2 -o tests/data/traces/qwen-pair.trace
  python3 scripts/record_trace.py --config configs/tinystories.json --runs 6 -k 4 -n 256 \\
      --busy 1 -o tests/data/traces/tinystories-busy.trace   # beside one CPU-bound process

--busy N starts N CPU-bound processes (a Python busy loop each) for the duration of the
recording and stops them after. Standard library only.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def read_prompts(path):
    with open(path, encoding="utf-8") as f:
        lines = [l.rstrip("\r\n") for l in f]
    cat = None
    if lines and lines[0].startswith("# category:"):
        cat = lines[0].split(":", 1)[1].strip()
        lines = lines[1:]
    return [l for l in lines if l], cat


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--specdec", default="build-release/specdec")
    ap.add_argument("--config", required=True)
    ap.add_argument("-f", "--prompt-file", help="prompts, one a line (default: the config's)")
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("-k", type=int, default=6, help="largest K of the sweep")
    ap.add_argument("-n", type=int, default=160, help="tokens per run")
    ap.add_argument("-t", type=int, default=0, help="threads (0: all cores)")
    ap.add_argument("--seed", type=int, default=42, help="run i uses seed + i")
    ap.add_argument("--busy", type=int, default=0, help="CPU-bound processes beside it")
    ap.add_argument("--extra", default="", help="more generate flags (one string)")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()

    prompts, cat = ([None], None)
    if a.prompt_file:
        prompts, cat = read_prompts(a.prompt_file)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    rows = []
    try:
        time.sleep(1.0 if busy else 0.0)
        for r in range(a.runs):
            cmd = [a.specdec, "generate", "--config", a.config, "--draft-policy", "sweep",
                   "-k", str(a.k), "--draft-p-min", "0", "-n", str(a.n), "-t", str(a.t),
                   "--seed", str(a.seed + r), "-v", "--json", "-e"] + a.extra.split()
            p = prompts[r % len(prompts)]
            if p is not None:
                cmd += ["-p", p]
                if cat and (cat == "chat" or cat.startswith("chat-")):
                    cmd += ["--chat"]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                sys.exit(f"record_trace.py: {' '.join(cmd)}: {res.stderr.strip()}")
            st = json.loads(res.stdout)["stats"]
            for q in st["passes"]:
                rows.append((r, q["k"], q["drafted"], q["accepted"], q["t_draft_ms"],
                             q["t_pass_ms"]))
            print(f"record_trace.py: run {r + 1}/{a.runs}: {len(st['passes'])} passes, "
                  f"acceptance {st['acceptance_rate']}", file=sys.stderr)
    finally:
        for b in busy:
            b.kill()
            b.wait()
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"# specdec cost trace: {' '.join(os.path.basename(x) for x in [a.config])}, "
                f"prompts {os.path.basename(a.prompt_file) if a.prompt_file else 'config'}, "
                f"sweep K = 0..{a.k}, {a.n} tokens, -t {a.t}, busy {a.busy}, {cpu_name()}, "
                f"{os.cpu_count()} CPUs\n")
        f.write(f"# kmax {a.k}\n")
        f.write("# run k drafted accepted t_draft_ms t_pass_ms\n")
        for row in rows:
            f.write("%d %d %d %d %.4f %.4f\n" % row)
    os.replace(tmp, a.out)
    print(f"record_trace.py: wrote {a.out} ({len(rows)} passes)", file=sys.stderr)


if __name__ == "__main__":
    main()
