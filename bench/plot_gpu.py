#!/usr/bin/env python3
"""Draws bench/gpu.png from bench/gpu-2026-11-30.md: 8B bf16 and q8_0 on one
H200, prompt processing (pp4096) and generation (tg128), cleave's two
rounds beside llama.cpp (the issue's reference measurement on the same
machine and shapes), the targets, and the hardware limits (tg: 3.8 TB/s
over the model bytes; pp: 890 TFLOP/s over ~16 GFLOP per token).
usage: python3 bench/plot_gpu.py bench/gpu-2026-11-30.md bench/gpu.png"""
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

LLAMA_CPP = {("bf16", "pp4096"): 25000, ("bf16", "tg128"): 206, ("q8_0", "pp4096"): 11400,
             ("q8_0", "tg128"): 255}
TARGET = {("bf16", "pp4096"): 35000, ("bf16", "tg128"): 225, ("q8_0", "pp4096"): 30000,
          ("q8_0", "tg128"): 330}
LIMIT = {("bf16", "pp4096"): 55600, ("bf16", "tg128"): 237, ("q8_0", "pp4096"): 55600,
         ("q8_0", "tg128"): 445}


def rows(lines):
    """(type, test) -> list of t/s in file order"""
    out = {}
    for line in lines:
        m = re.match(r"\| llama 8\.0B (\w+) .*\| (pp\d+|tg\d+) \| ([\d.]+) ±", line)
        if m:
            out.setdefault((m.group(1), m.group(2)), []).append(float(m.group(3)))
    return out


def main():
    text = open(sys.argv[1]).read()
    r2, r1 = text.split("## Round 1", 1)
    bf16_run, q8_run = r2.split("### q8_0 at commit", 1)
    new = rows(bf16_run.splitlines())
    q8 = rows(q8_run.split("### decode step")[0].splitlines())
    for k, v in q8.items():
        if k[0] == "q8_0":
            new[k] = v
    old = rows(r1.split("### after the fused ops")[1].splitlines())
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, test in zip(axes, ("pp4096", "tg128")):
        types = ["bf16", "q8_0"]
        bars = [("cleave, round 1 (batches of 512)", lambda t: old[(t, test)][-1]),
                ("cleave (batches of 512)", lambda t: new[(t, test)][0])]
        if test == "pp4096":
            bars.append(("cleave (one 4096-token batch)", lambda t: new[(t, test)][-1]))
        bars.append(("llama.cpp (reference)", lambda t: LLAMA_CPP[(t, test)]))
        w = 0.8 / len(bars)
        for i, (label, f) in enumerate(bars):
            xs = [j + (i - (len(bars) - 1) / 2) * w for j in range(len(types))]
            vals = [f(t) for t in types]
            ax.bar(xs, vals, w, label=label)
            for x, v in zip(xs, vals):
                ax.text(x, v, f"{v:.0f}", ha="center", va="bottom", fontsize=7)
        for j, t in enumerate(types):
            ax.hlines(TARGET[(t, test)], j - 0.45, j + 0.45, colors="black", linestyles="dashed",
                      label="target" if j == 0 else None)
            ax.hlines(LIMIT[(t, test)], j - 0.45, j + 0.45, colors="red",
                      label="hardware limit" if j == 0 else None)
        ax.set_xticks(range(len(types)), [f"8B {t}" for t in types])
        ax.set_ylabel("tokens/s")
        ax.set_title(f"{test}, one NVIDIA H200")
        ax.set_ylim(0, max(LIMIT[(t, test)] for t in types) * 1.45)
        ax.legend(fontsize=7, loc="upper center", ncol=2)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
