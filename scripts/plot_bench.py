#!/usr/bin/python3
"""Plot a `specdec bench --json` result.

    /usr/bin/python3 scripts/plot_bench.py BENCH.json [-o OUT.png] [--kernels KERNELS.json]

Left panel: measured speedup over K (median of the per-pair tokens/s ratios, with the
min..max range as an error bar) beside the predicted speedup
(1 - a^(K+1)) / ((1 - a)(K c + v)) that bench computed from the measured acceptance
rate a, draft cost c and verification cost v of each K.
Right panel: per-position acceptance (accepted / drafted at draft position i) for each K.
With --kernels, a third panel shows the verification pass time for K+1 tokens relative
to one decode step (from `specdec bench --kernels --json`).

Needs matplotlib (Debian: apt-get install python3-matplotlib). No test depends on it.
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench_json", help="output of specdec bench --json")
    ap.add_argument("-o", "--out", default=None, help="PNG to write (default: BENCH.png)")
    ap.add_argument("--kernels", default=None, help="output of specdec bench --kernels --json")
    args = ap.parse_args()

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_bench.py: matplotlib is missing (apt-get install python3-matplotlib)")

    with open(args.bench_json) as f:
        bench = json.load(f)
    if bench.get("mode") != "ab" or not bench.get("summary"):
        sys.exit(f"plot_bench.py: {args.bench_json}: not an A/B bench result (mode 'ab')")
    kern = None
    if args.kernels:
        with open(args.kernels) as f:
            kern = json.load(f)
        if kern.get("mode") != "kernels":
            sys.exit(f"plot_bench.py: {args.kernels}: not a kernels result (mode 'kernels')")

    summ = sorted(bench["summary"], key=lambda s: s["k"])
    ks = [s["k"] for s in summ]

    def val(x):
        return float("nan") if x is None else x

    med = [val(s["speedup"]["median"]) for s in summ]
    lo = [m - val(s["speedup"]["min"]) for m, s in zip(med, summ)]
    hi = [val(s["speedup"]["max"]) - m for m, s in zip(med, summ)]
    pred = [val(s["predicted_speedup"]) for s in summ]

    n_panels = 3 if kern else 2
    fig, axes = plt.subplots(1, n_panels, figsize=(5.2 * n_panels, 4.2))
    ax = axes[0]
    ax.errorbar(ks, med, yerr=[lo, hi], marker="o", capsize=4, label="measured (median, min..max)")
    ax.plot(ks, pred, marker="s", linestyle="--", label="predicted")
    for s in summ:
        ax.annotate(f"a={s['acceptance_rate']:.2f}", (s["k"], val(s["speedup"]["median"])),
                    textcoords="offset points", xytext=(4, -12), fontsize=7)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("K (tokens drafted per step)")
    ax.set_ylabel("speedup over target alone (tokens/s ratio)")
    ax.set_xticks(ks)
    c = summ[0].get("c")
    ax.set_title(f"speedup, c = {c:.3f}" if c is not None else "speedup")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)

    ax = axes[1]
    for s in summ:
        pp = [val(x) for x in s["spec"]["per_position_acceptance"]]
        ax.plot(range(1, len(pp) + 1), pp, marker="o", label=f"K={s['k']}")
    ax.set_xticks(range(1, max(ks) + 1))
    ax.set_xlabel("draft position i")
    ax.set_ylabel("acceptance at position i")
    ax.set_ylim(0, 1.05)
    ax.set_title("per-position acceptance")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)

    if kern:
        ax = axes[2]
        for m in kern["models"]:
            ver = m["verify"]
            ax.plot([e["n_tokens"] for e in ver], [e["rel_decode"] for e in ver], marker=".",
                    label=f"{m['role']} ({m['decode_gbps_streamed']:.1f} GB/s decode)")
        ax.set_xlabel("tokens in one pass (K+1)")
        ax.set_ylabel("time / one decode step")
        ax.set_title(f"verification cost (mem {kern['machine']['mem_read_gbps']:.1f} GB/s)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)

    t = bench.get("target", "").split("/")[-1]
    d = bench.get("draft", "").split("/")[-1]
    p = bench.get("params", {})
    fig.suptitle(f"{t} + {d}: temp {p.get('temp')}, n {p.get('n_predict')}, "
                 f"{p.get('runs')} runs per K, {bench['machine']['threads']} threads", fontsize=9)
    fig.tight_layout()
    out = args.out or (args.bench_json.rsplit(".", 1)[0] + ".png")
    fig.savefig(out, dpi=120)
    print(out)


if __name__ == "__main__":
    main()
