#!/usr/bin/env python3
"""Draws bench/cpu.png from the markdown that bench/run_cpu.sh prints:
cleave beside llama.cpp per model and test, and for tg the decode limit set
by memory bandwidth (bytes of weights read once per token), for pp the
limit set by the cores' peak FLOP rate (2 FLOP per parameter per token).
usage: python3 bench/plot_cpu.py RESULTS_MD OUT_PNG [PEAK_GFLOPS]"""
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def parse(path):
    engines, section, bw = {}, None, None
    for line in open(path):
        m = re.search(r"read bandwidth.*: ([\d.]+) GB/s", line)
        if m:
            bw = float(m.group(1))
        if line.startswith("### "):
            section = "cleave" if "cleave" in line else "llama.cpp"
            engines[section] = {}
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if section and len(cols) == 7 and re.match(r"(pp|tg)\d+", cols[5]):
            test, ts = cols[5], float(cols[6].split()[0])
            v, unit = cols[2].split()
            params = float(v) * (1e9 if unit == "B" else 1e6)
            engines[section][(cols[1], test)] = (ts, params)
    return engines, bw


def gib(size):
    v, unit = size.split()
    return float(v) * (1 if unit == "GiB" else 1 / 1024) * 1.073741824  # GB


def main():
    engines, bw = parse(sys.argv[1])
    peak = float(sys.argv[3]) if len(sys.argv) > 3 else None
    keys = list(engines["cleave"].keys())
    names = {"0.99 MiB": "stories260K f32", "2.30 GiB": "1B f16", "1.22 GiB": "1B q8_0"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, kind in zip(axes, ("pp", "tg")):
        ks = [k for k in keys if k[1].startswith(kind) and not k[0].endswith("MiB")]
        x = range(len(ks))
        w = 0.38 if "llama.cpp" in engines else 0.7
        ax.bar([i - w / 2 for i in x], [engines["cleave"][k][0] for k in ks], w, label="cleave")
        if "llama.cpp" in engines:
            ax.bar([i + w / 2 for i in x], [engines["llama.cpp"].get(k, (0,))[0] for k in ks], w,
                   label="llama.cpp")
        for i, k in enumerate(ks):
            if kind == "tg" and bw:
                lim, what = bw / gib(k[0]), f"bandwidth limit ({bw:.1f} GB/s measured)"
            elif kind == "pp" and peak:
                lim, what = peak * 1e9 / (2 * engines["cleave"][k][1]), f"FLOP limit ({peak:.0f} GFLOP/s)"
            else:
                continue
            ax.hlines(lim, i - 0.45, i + 0.45, colors="k", linestyles="dashed",
                      label=what if i == 0 else None)
        ax.set_xticks(list(x))
        ax.set_xticklabels([f"{names.get(k[0], k[0])}\n{k[1]}" for k in ks])
        ax.set_ylabel("tokens/s")
        ax.set_title("prompt processing" if kind == "pp" else "generation")
        ax.legend(loc="lower right")
    fig.suptitle("cleave on the CPU (2 cores), llama-bench semantics")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
