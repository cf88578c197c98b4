#!/usr/bin/env python3
"""Draws bench/gpu2.png from bench/gpu2-2026-11-30.md: 8B bf16 on one and
two H200s, prompt processing by prompt length per split mode (left) and
generation tg128 per mode with and without peer access (right), beside
llama.cpp's numbers on the same machine (the issue's reference) and the
decode limits (3.8 TB/s over the bytes each GPU reads per token).
usage: python3 bench/plot_gpu2.py bench/gpu2-2026-11-30.md bench/gpu2.png"""
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

# llama.cpp on the same 2x H200, 8B bf16 (pp4096 and tg128)
LLAMA_CPP = {"layer": (40500, 204), "tensor": (24600, 243),
             "layer, no P2P": (24700, 202), "tensor, no P2P": (17700, 223)}
LIMIT_TG = {"one GPU": 237, "layer": 237, "tensor": 474}


def sections(text):
    """section title -> {test: t/s}"""
    out, cur = {}, None
    for line in text.split("## On the way")[0].splitlines():
        m = re.match(r"### (.*)", line)
        if m:
            cur = out.setdefault(m.group(1), {})
            continue
        m = re.match(r"\| llama .*\| (pp\d+|tg\d+) \| ([\d.]+) ±", line)
        if m and cur is not None:
            cur[m.group(1)] = float(m.group(2))
    return out


def main():
    s = sections(open(sys.argv[1]).read())
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.8))
    color = {}
    for mode, style in (("one GPU", "o-"), ("layer", "s-"), ("tensor", "^-"),
                        ("layer, no P2P", "s--"), ("tensor, no P2P", "^--")):
        pts = sorted((int(k[2:]), v) for k, v in s.get(mode, {}).items() if k.startswith("pp"))
        if pts:
            line, = a.plot([p for p, _ in pts], [v / 1000 for _, v in pts], style,
                           label=f"cleave, {mode}")
            color[mode] = line.get_color()
    for mode, (pp, _) in LLAMA_CPP.items():  # same colour as cleave's mode
        a.plot([4096], [pp / 1000], "x", ms=10, mew=2, color=color.get(mode),
               label=f"llama.cpp, {mode} (pp4096)")
    a.set_xscale("log", base=2)
    a.set_xlabel("prompt tokens (passes of 4096; layer: 512-token micro-batches)")
    a.set_ylabel("prompt processing, thousand tok/s")
    a.set_title("8B bf16 prefill, 2x H200 (NVLink)")
    a.grid(alpha=0.3)
    a.legend(fontsize=6.5, loc="lower left", ncol=2)
    modes = ["one GPU", "layer", "tensor", "layer, no P2P", "tensor, no P2P"]
    cl = [s.get(m, {}).get("tg128", 0) for m in modes]
    ll = [LLAMA_CPP.get(m, (0, 0))[1] for m in modes]
    x = range(len(modes))
    b.bar([i - 0.2 for i in x], cl, 0.4, label="cleave")
    b.bar([i + 0.2 for i in x], ll, 0.4, label="llama.cpp")
    for i, m in enumerate(modes):
        lim = LIMIT_TG.get(m.split(",")[0])
        if lim:
            b.hlines(lim, i - 0.45, i + 0.45, colors="k", linestyles=":")
        b.text(i - 0.2, cl[i] + 4, f"{cl[i]:.0f}", ha="center", fontsize=8)
    b.set_xticks(list(x))
    b.set_xticklabels(modes, fontsize=8)
    b.set_ylabel("tg128, tok/s (dotted: weight-streaming limit)")
    b.set_title("8B bf16 generation")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
