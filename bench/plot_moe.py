"""Mixtures of experts on one H200: cleave against llama.cpp from the same
call (call N of moe-gpu-2026-12-03.md). Prints the table RESULTS.md holds
and draws cleave / llama.cpp per test. cleave's gpt-oss batched rows are
those run per pair to 32 tokens: what the code does for MXFP4 by default.

    python3 bench/plot_moe.py bench/moe-gpu-2026-12-03.md bench/moe.png
"""
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def call_section(text, name):
    start = text.index("## " + name)
    end = text.find("\n## Call", start + 1)
    return text[start:end if end > 0 else len(text)]


def parse(section):
    """{(engine, model): {test: tok/s}} from the bench and batched-bench rows."""
    out, key, base = {}, None, None
    for line in section.splitlines():
        m = re.match(r"## (cleave|llama\.cpp) (\S+)", line)
        if m:
            key = base = (m.group(1), m.group(2))
            out[key] = {}
            continue
        v = re.match(r"### per pair to (\d+)", line)
        if v and base:  # a variant of the same engine and model
            key = (base[0], base[1] + " pairs" + v.group(1))
            out[key] = {}
            continue
        if key is None or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if re.fullmatch(r"(pp|tg)\d+", cells[-2]):
            out[key][cells[-2]] = float(cells[-1].split()[0])
        elif len(cells) == 10 and cells[0] == "512":
            out[key]["batched %s" % cells[2]] = float(cells[7])  # S_TG
    return out


def main():
    text = open(sys.argv[1]).read()
    data = parse(call_section(text, "Call N"))
    for t in ("batched 8", "batched 32"):  # MXFP4's default: per pair
        data[("cleave", "gpt-oss-20b")][t] = data[("cleave", "gpt-oss-20b pairs32")][t]
    models = ["qwen3-30b-a3b", "gpt-oss-20b"]
    tests = ["pp4096", "tg128", "batched 1", "batched 8", "batched 32"]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.38
    for mi, model in enumerate(models):
        c, l = data[("cleave", model)], data[("llama.cpp", model)]
        ratios = [c[t] / l[t] for t in tests]
        for t, r in zip(tests, ratios):
            print("| %s | %s | %.1f | %.1f | %.2f |" % (model, t, c[t], l[t], r))
        xs = [i + (mi - 0.5) * width for i in range(len(tests))]
        ax.bar(xs, ratios, width, label=model)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(1.3, color="gray", linestyle="--", linewidth=0.8, label="target 1.3")
    ax.set_xticks(range(len(tests)))
    ax.set_xticklabels(tests)
    ax.set_ylabel("cleave / llama.cpp (same call)")
    ax.set_title("Mixtures of experts, one NVIDIA H200 (Q4_K_M and MXFP4 files, 2026-12-03)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
