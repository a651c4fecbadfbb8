#!/usr/bin/env bash
# specdec side by side with llama.cpp (the peer built by scripts/peer_llamacpp.sh) on the
# SAME GGUF files, alternating the two runtimes (ABAB: specdec, llama.cpp, specdec, ...),
# and one JSON object with the roof, both runtimes' figures and the ratios, plus a table.
#
# Usage: bash scripts/vs_llamacpp.sh [--config PAIR.json]... [options]
#   --config F      a pair config (generate's keys; paths relative to it); repeatable
#                   (default: configs/tinystories.json)
#   --threads L     thread counts, e.g. 1,2 (default: 1 and every core)
#   -k K            draft length for the speculative runs (default: the config's, else 4)
#   -n N            tokens per generation (default 128)
#   --prompt TEXT   prompt of the generations (default "Once upon a time")
#   --rounds R      ABAB rounds (default 2); figures are the best round of each side
#   --reps N        repetitions inside one measurement (default 5)
#   --pos P         KV depth of the decode and verification passes (default 128)
#   --roof-mib M    roof buffer (default 2048)
#   --peer DIR      a peer's folder (default build-peer); repeatable: every build of every
#                   folder is measured (e.g. the llama-cpp-python 0.3.36 build and a newer
#                   one); --no-peer skips the peers
#   --json FILE     output (default build-release/vs/vs_llamacpp.json)
#   --quick         CI size: rounds 1, reps 2, n 32, roof 256 MiB, 1 thread
#
# What is compared, for the target AND the draft file of each pair (each side measured by
# its own tool, the closest pair of measurements):
#   decode tok/s at T threads   specdec bench --kernels (decode step at position P, median
#                               of reps)            vs llama-bench -n 16 -d P (tg16 @ dP)
#   prefill tok/s, 128 tokens   specdec bench --kernels --prefill 128 (logits for all)
#                               vs llama-bench -p 128 (pp128; logits for the last token)
#   verification pass, 2..17    specdec bench --kernels: n tokens at position P, logits for
#   tokens                      all n          vs llama-bench -p n -d P (pp n @ dP: the same
#                               batch at the same depth, but logits only for its last token,
#                               so llama.cpp skips n - 1 rows of the LM head)
#   speculative vs target alone specdec bench -k K (A/B, greedy, decode tok/s) vs
#                               llama-speculative --spec-draft-n-max K (decoded t/s) and
#                               llama-completion (eval tok/s), same prompt, n, threads, temp 0
#   roofline of specdec's passes for each n (1 = the decode step) and of prefill 128: bytes
#                               streamed, int8 multiply-adds, the memory bound (bytes / the
#                               roof: at its lowest and its best measurement, the host's two
#                               modes), the compute bound (multiply-adds / the kernel set's
#                               in-register peak x threads, from bench --kernels), the binding
#                               one (the larger, with the best roof), bound / measured, and
#                               measured / (memory bound at the lowest roof + compute bound):
#                               near 1 where the pass pays both, one after the other
# Ratios are specdec speed / llama.cpp speed (> 1: specdec faster); v(n) = pass(n) /
# decode step of the same runtime; roof fractions use the weights streamed per decode step
# (specdec's count) x tok/s / the roof at the same threads.
# The peer step is skipped (fields null, exit 0) when the peer is not built.
set -uo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PYEOF'
import json, os, re, shlex, subprocess, sys, time

args = sys.argv[1:]
opt = dict(configs=[], threads=None, k=None, n=128, prompt="Once upon a time", rounds=2, reps=5,
           pos=128, roof_mib=2048, peers=[], peer_builds=[], no_peer=False,
           json="build-release/vs/vs_llamacpp.json", quick=False)
i = 0
def need():
    global i
    if i + 1 >= len(args):
        sys.exit(f"vs_llamacpp: {args[i]} needs a value")
    i += 1
    return args[i]
while i < len(args):
    a = args[i]
    if a == "--config": opt["configs"].append(need())
    elif a == "--threads": opt["threads"] = [int(x) for x in need().split(",")]
    elif a == "-k": opt["k"] = int(need())
    elif a == "-n": opt["n"] = int(need())
    elif a == "--prompt": opt["prompt"] = need()
    elif a == "--rounds": opt["rounds"] = int(need())
    elif a == "--reps": opt["reps"] = int(need())
    elif a == "--pos": opt["pos"] = int(need())
    elif a == "--roof-mib": opt["roof_mib"] = int(need())
    elif a == "--peer": opt["peers"].append(need())
    elif a == "--no-peer": opt["no_peer"] = True
    elif a == "--peer-build": opt["peer_builds"].append(need())
    elif a == "--json": opt["json"] = need()
    elif a == "--quick": opt["quick"] = True
    elif a in ("-h", "--help"):
        with open("scripts/vs_llamacpp.sh") as f:
            for line in f.readlines()[1:40]:
                if not line.startswith("#"): break
                print(line[2:].rstrip())
        sys.exit(0)
    else:
        sys.exit(f"vs_llamacpp: unknown option '{a}' (see --help)")
    i += 1
if opt["quick"]:
    opt.update(rounds=1, reps=2, n=32, roof_mib=256)
    if opt["threads"] is None: opt["threads"] = [1]
ncores = len(os.sched_getaffinity(0))
if opt["threads"] is None:
    opt["threads"] = sorted({1, ncores})
if not opt["configs"]:
    opt["configs"] = ["configs/tinystories.json"]
if not opt["peers"]:
    opt["peers"] = ["build-peer"]
tmax = max(opt["threads"])

SPECDEC = os.environ.get("SD_SPECDEC", "build-release/specdec")
if not os.access(SPECDEC, os.X_OK):
    sys.exit("vs_llamacpp: build-release/specdec not found: cmake -S . -B build-release "
             "-DCMAKE_BUILD_TYPE=Release && cmake --build build-release -j2")
out_dir = os.path.dirname(opt["json"]) or "."
os.makedirs(out_dir, exist_ok=True)
work = os.path.join(out_dir, "vs-work")
os.makedirs(work, exist_ok=True)

def log(msg):
    print(f"vs_llamacpp: {msg}", file=sys.stderr, flush=True)

def run(cmd, timeout=3600):
    """Run; return (rc, stdout, stderr). A crash (signal) gives rc < 0."""
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return (-999, "", "timeout")
    log(f"  {shlex.join(cmd)[:150]}  ({time.time() - t0:.1f} s, rc {p.returncode})")
    return (p.returncode, p.stdout, p.stderr)

def run_logged(cmd, patterns, tries=3):
    """run() for a llama.cpp tool whose figures are on stderr: its logger is a thread of its
    own, and its last lines (the perf print) are now and then lost when the process exits,
    so a successful run missing any of `patterns` is repeated (up to `tries` runs)."""
    for _ in range(tries):
        rc, out, err = run(cmd)
        if rc != 0 or all(re.search(p, err) for p in patterns):
            break
    return rc, out, err

# ---------------------------------------------------------------- the peer
peer = None
if not opt["no_peer"]:
    builds, versions = [], []
    for pdir in opt["peers"]:
        env_path = os.path.join(pdir, "peer.env")
        if not os.path.isfile(env_path):
            log(f"peer {pdir}: {env_path} missing (build it with bash scripts/peer_llamacpp.sh)")
            continue
        env = {}
        for line in open(env_path):
            m = re.match(r'^([A-Z0-9_]+)=(.*)$', line.strip())
            if m: env[m.group(1)] = m.group(2).strip('"')
        commit = env.get("PEER_LLAMA_CPP_COMMIT")
        versions.append({"dir": pdir, "llama_cpp_python": env.get("PEER_LLAMA_CPP_PYTHON"),
                         "llama_cpp_commit": commit})
        for b in env.get("PEER_BUILDS", "").split():
            binp, smoke = env.get(f"PEER_{b.upper()}_BIN"), env.get(f"PEER_{b.upper()}_SMOKE")
            name = f"{commit or os.path.basename(pdir)}-{b}"
            if opt["peer_builds"] and b not in opt["peer_builds"]:
                continue
            if smoke == "ok" and binp and os.access(os.path.join(binp, "llama-bench"), os.X_OK):
                builds.append({"name": name, "bin": binp, "smoke": smoke, "commit": commit})
            else:
                log(f"peer build {name}: {smoke} (not used)")
    if builds:
        peer = {"versions": versions, "builds": builds,
                "llama_cpp_python": versions[0]["llama_cpp_python"],
                "llama_cpp_commit": ", ".join(v["llama_cpp_commit"] or "?" for v in versions)}
    if peer is None:
        log("no peer build passed its smoke test: llama.cpp figures skipped; build one with "
            "bash scripts/peer_llamacpp.sh")

# ---------------------------------------------------------------- helpers
def best(xs, hi=True):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return (max(xs) if hi else min(xs)) if xs else None

def ratio(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else None

def specdec_roof():
    path = os.path.join(work, "roof.json")
    rc, _, err = run([SPECDEC, "bench", "--roof", "-t", str(tmax), "--bw-mib",
                      str(opt["roof_mib"]), "--json", path])
    if rc != 0:
        sys.exit(f"vs_llamacpp: specdec bench --roof failed: {err.strip()}")
    return json.load(open(path))["roof"]

def specdec_kernels(target, t):
    path = os.path.join(work, "kernels.json")
    rc, _, err = run([SPECDEC, "bench", "--kernels", "--no-roof", "-m", target, "-t", str(t),
                      "--reps", str(opt["reps"]), "--pos", str(opt["pos"]), "--prefill", "128",
                      "--json", path])
    if rc != 0:
        log(f"specdec bench --kernels failed: {err.strip()[-300:]}")
        return None
    j = json.load(open(path))
    m = j["models"][0]
    return {"decode_ms": m["decode_ms"], "decode_tps": 1000.0 / m["decode_ms"],
            "peak_macs_per_s": j["machine"].get("peak_macs_per_s"),
            "macs": {str(v["n_tokens"]): (v.get("roofline") or {}).get("macs")
                     for v in m["verify"]},
            "prefill_macs": (m["prefill"].get("roofline") or {}).get("macs"),
            "streamed_bytes": m["streamed_bytes"], "weight_bytes": m["weight_bytes"],
            "pos": m["pos"],
            "verify_ms": {str(v["n_tokens"]): v["ms"] for v in m["verify"]},
            "prefill_tokens": m["prefill"]["n_tokens"],
            "prefill_tps": m["prefill"]["tokens_per_s"]}

def llama_bench(binp, target, t, pos):
    """pp128 @ d0; pp 2..17 @ d pos; tg16 @ d pos."""
    res = {"pp": {}, "tg_tps": None, "tg_ms": None, "prefill_tps": None}
    b = os.path.join(binp, "llama-bench")
    common = [b, "-m", target, "-t", str(t), "-r", str(opt["reps"]), "-o", "json"]
    rc, out, err = run(common + ["-p", "128", "-n", "0"])
    if rc == 0:
        for e in json.loads(out):
            if e["n_prompt"] == 128 and e["n_gen"] == 0: res["prefill_tps"] = e["avg_ts"]
    else:
        res["error"] = f"llama-bench pp128: rc {rc}: {err.strip()[-200:]}"
    rc, out, err = run(common + ["-p", ",".join(str(n) for n in range(2, 18)), "-n", "16",
                                 "-d", str(pos)])
    if rc == 0:
        for e in json.loads(out):
            if e["n_gen"] > 0:
                res["tg_tps"] = e["avg_ts"]
                res["tg_ms"] = 1000.0 / e["avg_ts"]
            else:
                res["pp"][str(e["n_prompt"])] = e["avg_ns"] / 1e6
    else:
        res["error"] = f"llama-bench pp/tg @ d{pos}: rc {rc}: {err.strip()[-200:]}"
    return res

def specdec_ab(config, k, t):
    path = os.path.join(work, "ab.json")
    rc, _, err = run([SPECDEC, "bench", "--config", config, "-p", opt["prompt"], "-k", str(k),
                      "-n", str(opt["n"]), "--runs", "3", "--warmup", "1", "-t", str(t),
                      "--temp", "0", "--json", path])
    if rc != 0:
        log(f"specdec bench (A/B) failed: {err.strip()[-300:]}")
        return None
    s = json.load(open(path))["summary"][0]
    return {"target_tps": s["target"]["tokens_per_s"]["median"],
            "spec_tps": s["spec"]["tokens_per_s"]["median"],
            "speedup": s["speedup"]["median"], "acceptance": s["acceptance_rate"],
            "tokens_per_pass": s["spec"]["tokens_per_pass"],
            "greedy_match": s["greedy_match"]}

def llama_gen(binp, target, draft, k, t, ctx):
    res = {}
    rc, out, err = run_logged([os.path.join(binp, "llama-completion"), "-m", target, "-p",
                               opt["prompt"], "-n", str(opt["n"]), "--temp", "0", "-t", str(t),
                               "-c", str(ctx), "-no-cnv", "--no-display-prompt"],
                              [r"eval time =\s*[\d.]+ ms /\s*\d+ runs"])
    m = re.search(r"eval time =\s*([\d.]+) ms /\s*(\d+) runs.*?([\d.]+) tokens per second", err)
    if rc == 0 and m:
        res["target_tps"] = float(m.group(3))
        res["target_tokens"] = int(m.group(2))
    else:
        res["target_error"] = f"llama-completion: rc {rc}: {err.strip()[-200:]}"
    rc, out, err = run_logged([os.path.join(binp, "llama-speculative"), "-m", target, "-md",
                               draft, "-p", opt["prompt"], "-n", str(opt["n"]), "--temp", "0",
                               "-t", str(t), "-td", str(t), "-c", str(ctx),
                               "--spec-draft-n-max", str(k)],
                              [r"decoded\s+\d+ tokens in", r"n_accept  = \d+"])
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", err)
    if rc == 0 and m:
        res["spec_tps"] = float(m.group(3))
        res["spec_tokens"] = int(m.group(1))
        md, ma = re.search(r"n_drafted = (\d+)", err), re.search(r"n_accept  = (\d+)", err)
        if md and ma and int(md.group(1)) > 0:
            res["acceptance"] = int(ma.group(1)) / int(md.group(1))
    else:
        res["spec_error"] = f"llama-speculative: rc {rc}: {err.strip()[-200:]}"
    return res

# ---------------------------------------------------------------- the runs
cpu = "?"
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip(); break
flags = set()
for line in open("/proc/cpuinfo"):
    if line.startswith("flags"):
        flags = set(line.split(":", 1)[1].split()); break
isa = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")
       if f in flags]

log(f"roof ({opt['roof_mib']} MiB, 1 and {tmax} threads)")
roofs = [specdec_roof()]
pairs_out = []
for cfg_path in opt["configs"]:
    cfg = json.load(open(cfg_path))
    base = os.path.dirname(os.path.abspath(cfg_path))
    target = os.path.normpath(os.path.join(base, cfg["target"]))
    draft = os.path.normpath(os.path.join(base, cfg["draft"])) if cfg.get("draft") else None
    k = opt["k"] or cfg.get("draft_tokens") or 4
    ctx = min(2048, opt["n"] + 64 + len(opt["prompt"]))
    log(f"pair {cfg_path}: target {target}, draft {draft}, K {k}")
    models = [("target", target)] + ([("draft", draft)] if draft else [])
    rounds = []
    for r in range(opt["rounds"]):
        rd = {"specdec": {}, "llamacpp": {}}
        for role, path in models:
            for t in opt["threads"]:
                log(f"round {r + 1}/{opt['rounds']}, {role}, {t} thread(s): specdec, then llama.cpp")
                rd["specdec"][f"{role}_t{t}"] = specdec_kernels(path, t)
                pos = (rd["specdec"][f"{role}_t{t}"] or {}).get("pos", opt["pos"])
                for bd in (peer or {}).get("builds", []):
                    rd["llamacpp"].setdefault(bd["name"], {})[f"{role}_t{t}"] = \
                        llama_bench(bd["bin"], path, t, pos)
        if draft:
            log(f"round {r + 1}/{opt['rounds']}: speculative, K {k}, {tmax} threads")
            rd["specdec"]["gen"] = specdec_ab(cfg_path, k, tmax)
            for bd in (peer or {}).get("builds", []):
                rd["llamacpp"].setdefault(bd["name"], {})["gen"] = \
                    llama_gen(bd["bin"], target, draft, k, tmax, ctx)
        rounds.append(rd)

    # best round of each side, per model
    sd = {}
    for role, path in models:
        sr = {"file": path}
        for t in opt["threads"]:
            xs = [rd["specdec"][f"{role}_t{t}"] for rd in rounds if rd["specdec"].get(f"{role}_t{t}")]
            if not xs: continue
            o = {"decode_tps": best([x["decode_tps"] for x in xs]),
                 "prefill_tps": best([x["prefill_tps"] for x in xs]),
                 "verify_ms": {n: best([x["verify_ms"][n] for x in xs], hi=False)
                               for n in xs[0]["verify_ms"]}}
            o["decode_ms"] = 1000.0 / o["decode_tps"]
            o["v"] = {n: o["verify_ms"][n] / o["verify_ms"]["1"] for n in o["verify_ms"]}
            o["peak_macs_per_s"] = best([x.get("peak_macs_per_s") for x in xs])
            o["macs"] = xs[0].get("macs") or {}
            o["prefill_macs"] = xs[0].get("prefill_macs")
            sr[f"t{t}"] = o
            sr["streamed_bytes"] = xs[0]["streamed_bytes"]
            sr["weight_bytes"] = xs[0]["weight_bytes"]
            sr["pos"] = xs[0]["pos"]
        sd[role] = sr
    gens = [rd["specdec"]["gen"] for rd in rounds if rd["specdec"].get("gen")]
    if gens:
        sd["gen"] = {"k": k, "threads": tmax,
                     "target_tps": best([g["target_tps"] for g in gens]),
                     "spec_tps": best([g["spec_tps"] for g in gens]),
                     "acceptance": gens[0]["acceptance"],
                     "tokens_per_pass": gens[0]["tokens_per_pass"],
                     "greedy_match": all(g["greedy_match"] for g in gens)}
        sd["gen"]["speedup"] = ratio(sd["gen"]["spec_tps"], sd["gen"]["target_tps"])
    ll = {}
    for bd in (peer or {}).get("builds", []):
        lb = {}
        for role, path in models:
            lr = {}
            for t in opt["threads"]:
                xs = [rd["llamacpp"][bd["name"]][f"{role}_t{t}"] for rd in rounds]
                o = {"decode_tps": best([x["tg_tps"] for x in xs]),
                     "prefill_tps": best([x["prefill_tps"] for x in xs]),
                     "pass_ms": {n: best([x["pp"].get(n) for x in xs], hi=False)
                                 for n in (str(j) for j in range(2, 18))},
                     "errors": [x["error"] for x in xs if x.get("error")]}
                if o["decode_tps"]:
                    o["decode_ms"] = 1000.0 / o["decode_tps"]
                    o["v"] = {n: ratio(o["pass_ms"][n], o["decode_ms"]) for n in o["pass_ms"]}
                lr[f"t{t}"] = o
            lb[role] = lr
        gl = [rd["llamacpp"][bd["name"]].get("gen") for rd in rounds]
        gl = [g for g in gl if g]
        if gl:
            lb["gen"] = {"k": k, "threads": tmax,
                         "target_tps": best([g.get("target_tps") for g in gl]),
                         "spec_tps": best([g.get("spec_tps") for g in gl]),
                         "acceptance": gl[0].get("acceptance"),
                         "errors": [e for g in gl for e in (g.get("target_error"), g.get("spec_error")) if e]}
            lb["gen"]["speedup"] = ratio(lb["gen"]["spec_tps"], lb["gen"]["target_tps"])
        ll[bd["name"]] = lb
    pairs_out.append({"config": cfg_path, "target": target, "draft": draft, "k": k,
                      "roles": [m[0] for m in models], "specdec": sd, "llamacpp": ll,
                      "rounds": rounds})

log("roof again")
roofs.append(specdec_roof())
roof = {"t1_gbps": best([r["t1"]["gbps"] for r in roofs]),
        "tn_gbps": best([r["tn"]["gbps"] for r in roofs]), "threads": tmax,
        "kernel": roofs[0]["tn"]["kernel"], "buffer_mib": opt["roof_mib"], "runs": roofs}
roof["t1_gbps_low"] = min(r["t1"]["gbps"] for r in roofs)
roof["tn_gbps_low"] = min(r["tn"]["gbps"] for r in roofs)
def roof_at(t):
    return roof["t1_gbps"] if t == 1 else roof["tn_gbps"] if t == tmax else None
def roof_low_at(t):
    return roof["t1_gbps_low"] if t == 1 else roof["tn_gbps_low"] if t == tmax else None

def roofline(nbytes, macs, peak, ms, t):
    """One pass's roofline against the roof's best and lowest measurement at t threads."""
    hi, lo = roof_at(t), roof_low_at(t)
    r = {"mb": nbytes / 1e6, "gmac": macs / 1e9 if macs else None,
         "mem_ms": nbytes / hi / 1e6 if hi else None,
         "mem_ms_low": nbytes / lo / 1e6 if lo else None,
         "cmp_ms": macs / peak * 1e3 if macs and peak else None, "ms": ms}
    if r["mem_ms"] is None or r["cmp_ms"] is None:
        r.update(bound=None, bound_ms=None, frac=None, of_sum=None)
        return r
    r["bound"] = "memory" if r["mem_ms"] >= r["cmp_ms"] else "compute"
    r["bound_ms"] = max(r["mem_ms"], r["cmp_ms"])
    r["frac"] = ratio(r["bound_ms"], ms)
    r["of_sum"] = ratio(ms, r["mem_ms_low"] + r["cmp_ms"])
    return r

# ---------------------------------------------------------------- ratios and table
for p in pairs_out:
    sd, rat = p["specdec"], {}
    for role in p["roles"]:
        sr = sd.get(role, {})
        for t in opt["threads"]:
            s_ = sr.get(f"t{t}")
            if not s_: continue
            s_["fraction_of_roof"] = ratio(sr["streamed_bytes"] * s_["decode_tps"] / 1e9, roof_at(t))
            s_["fraction_of_roof_low"] = ratio(sr["streamed_bytes"] * s_["decode_tps"] / 1e9,
                                               roof_low_at(t))
            s_["roofline"] = {n: roofline(sr["streamed_bytes"], s_["macs"].get(n),
                                          s_.get("peak_macs_per_s"), s_["verify_ms"][n], t)
                              for n in s_["verify_ms"]}
            s_["roofline_prefill"] = roofline(sr["streamed_bytes"], s_.get("prefill_macs"),
                                              s_.get("peak_macs_per_s"),
                                              128e3 / s_["prefill_tps"] if s_.get("prefill_tps")
                                              else None, t)
            for bname, lb in p["llamacpp"].items():
                l = lb.get(role, {}).get(f"t{t}", {})
                if l.get("decode_tps"):
                    l["fraction_of_roof"] = ratio(sr["streamed_bytes"] * l["decode_tps"] / 1e9,
                                                  roof_at(t))
                rb = rat.setdefault(bname, {}).setdefault(role, {})
                rb[f"decode_t{t}"] = ratio(s_["decode_tps"], l.get("decode_tps"))
                rb[f"prefill128_t{t}"] = ratio(s_["prefill_tps"], l.get("prefill_tps"))
                rb[f"pass_t{t}"] = {n: ratio(l["pass_ms"].get(n), s_["verify_ms"].get(n))
                                    for n in l.get("pass_ms", {})}
    for bname, lb in p["llamacpp"].items():
        if sd.get("gen") and lb.get("gen"):
            rb = rat.setdefault(bname, {})
            rb["spec_vs_spec"] = ratio(sd["gen"]["spec_tps"], lb["gen"]["spec_tps"])
            rb["spec_vs_target_alone"] = ratio(sd["gen"]["spec_tps"], lb["gen"]["target_tps"])
            rb["target_alone"] = ratio(sd["gen"]["target_tps"], lb["gen"]["target_tps"])
    p["ratios"] = rat

result = {"machine": {"cpu": cpu, "isa": isa, "cores": ncores, "threads": opt["threads"],
                      "sd_kernels": os.environ.get("SD_KERNELS") or "auto",
                      "loadavg": open("/proc/loadavg").read().split()[:3]},
          "peer": peer, "roof": roof,
          "params": {k2: opt[k2] for k2 in ("n", "prompt", "rounds", "reps", "pos", "roof_mib")},
          "pairs": pairs_out}
with open(opt["json"] + ".tmp", "w") as f:
    json.dump(result, f, indent=1)
os.replace(opt["json"] + ".tmp", opt["json"])

def f(x, fmt="{:.2f}"):
    return fmt.format(x) if isinstance(x, (int, float)) else "-"
print(f"{cpu} ({', '.join(isa)}), {ncores} cores; roof {f(roof['t1_gbps'])} GB/s at 1 thread, "
      f"{f(roof['tn_gbps'])} GB/s at {tmax} ({roof['kernel']} loads, {opt['roof_mib']} MiB)")
print(f"specdec kernel set: SD_KERNELS={os.environ.get('SD_KERNELS') or 'auto'}"
      + (" (the stand-in for an AVX2-only CPU)" if os.environ.get("SD_KERNELS") == "avx2"
         and "avx512f" in flags else ""))
if peer:
    print(f"peer: llama.cpp {peer['llama_cpp_commit']} (llama-cpp-python "
          f"{peer['llama_cpp_python']}), builds {', '.join(b['name'] for b in peer['builds'])}")
else:
    print("peer: not built (bash scripts/peer_llamacpp.sh); llama.cpp columns empty")
for p in pairs_out:
    sd = p["specdec"]
    print(f"\n{p['config']}: K {p['k']}")
    names = list(p["llamacpp"]) or [None]
    for bname in names:
        lb = p["llamacpp"].get(bname, {}) if bname else {}
        rb = p["ratios"].get(bname, {}) if bname else {}
        tag = f"llama.cpp[{bname}]" if bname else "llama.cpp"
        for role in p["roles"]:
            sr, lr, rr = sd.get(role, {}), lb.get(role, {}), rb.get(role, {})
            print(f"  {role} {os.path.basename(sr.get('file', ''))} "
                  f"({f(sr.get('streamed_bytes', 0) / 1e6, '{:.1f}')} MB streamed per step)")
            print(f"  {'measure':34} {'specdec':>10} {tag:>24} {'ratio':>7}")
            for t in opt["threads"]:
                s_, l = sr.get(f"t{t}", {}), lr.get(f"t{t}", {})
                print(f"  {'decode tok/s, ' + str(t) + ' thr':34} {f(s_.get('decode_tps')):>10} "
                      f"{f(l.get('decode_tps')):>24} {f(rr.get(f'decode_t{t}'), '{:.3f}'):>7}")
                print(f"  {'  fraction of roof':34} {f(s_.get('fraction_of_roof'), '{:.3f}'):>10} "
                      f"{f(l.get('fraction_of_roof'), '{:.3f}'):>24}")
                print(f"  {'prefill 128 tok/s, ' + str(t) + ' thr':34} "
                      f"{f(s_.get('prefill_tps'), '{:.1f}'):>10} "
                      f"{f(l.get('prefill_tps'), '{:.1f}'):>24} "
                      f"{f(rr.get(f'prefill128_t{t}'), '{:.3f}'):>7}")
                if s_.get("roofline"):
                    print(f"  roofline, {t} thr (specdec; roof {f(roof_low_at(t))} / "
                          f"{f(roof_at(t))} GB/s lowest / best, compute "
                          f"{f((s_.get('peak_macs_per_s') or 0) / 1e9, '{:.0f}')} GMAC/s)")
                    print(f"    {'n':>7} {'ms':>8} {'MB':>7} {'GMAC':>6} {'mem ms lo/best':>15} "
                          f"{'cmp ms':>7} {'bound':>8} {'bound/ms':>8} {'ms/(mem lo+cmp)':>15}")
                    rows = [(n, s_["roofline"][n]) for n in sorted(s_["roofline"], key=int)]
                    rows.append(("pp128", s_.get("roofline_prefill") or {}))
                    for n, r in rows:
                        print(f"    {n:>7} {f(r.get('ms'), '{:.2f}'):>8} "
                              f"{f(r.get('mb'), '{:.0f}'):>7} {f(r.get('gmac')):>6} "
                              f"{f(r.get('mem_ms_low'), '{:.1f}') + '/' + f(r.get('mem_ms'), '{:.1f}'):>15} "
                              f"{f(r.get('cmp_ms'), '{:.1f}'):>7} {r.get('bound') or '-':>8} "
                              f"{f(r.get('frac'), '{:.2f}'):>8} {f(r.get('of_sum'), '{:.2f}'):>15}")
                for n in [str(j) for j in range(2, 18)]:
                    sv, lv = s_.get("v", {}).get(n), (l.get("v") or {}).get(n)
                    print(f"  {'pass ' + n + ' tok ms (v), ' + str(t) + ' thr':34} "
                          f"{f((s_.get('verify_ms') or {}).get(n)):>5} ({f(sv)}) "
                          f"{f((l.get('pass_ms') or {}).get(n)):>17} ({f(lv)}) "
                          f"{f((rr.get(f'pass_t{t}') or {}).get(n), '{:.3f}'):>7}")
        if sd.get("gen"):
            g, lg = sd["gen"], lb.get("gen", {})
            print(f"  {'target alone tok/s, ' + str(tmax) + ' thr':34} {f(g['target_tps']):>10} "
                  f"{f(lg.get('target_tps')):>24} {f(rb.get('target_alone'), '{:.3f}'):>7}")
            print(f"  {'speculative tok/s, K ' + str(p['k']):34} {f(g['spec_tps']):>10} "
                  f"{f(lg.get('spec_tps')):>24} {f(rb.get('spec_vs_spec'), '{:.3f}'):>7}")
            print(f"  {'  speedup over own target alone':34} {f(g['speedup'], '{:.3f}'):>10} "
                  f"{f(lg.get('speedup'), '{:.3f}'):>24}")
            print(f"  {'  acceptance':34} {f(g['acceptance'], '{:.3f}'):>10} "
                  f"{f(lg.get('acceptance'), '{:.3f}'):>24}")
            print(f"  {'  specdec spec / llama.cpp target':34} {'':>10} {'':>24} "
                  f"{f(rb.get('spec_vs_target_alone'), '{:.3f}'):>7}")
print(f"\njson: {opt['json']}")
PYEOF
