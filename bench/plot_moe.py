"""Mixtures of experts on one H200: cleave against llama.cpp from the same
call of moe-gpu-2026-12-03.md (call AB unless named). Prints the table
RESULTS.md holds and draws cleave / llama.cpp per test, for the tests
both engines ran in that call.

    python3 bench/plot_moe.py bench/moe-gpu-2026-12-03.md bench/moe.png [CALL]
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
    call = sys.argv[3] if len(sys.argv) > 3 else "Call AB"
    data = parse(call_section(text, call))
    models = ["qwen3-30b-a3b", "gpt-oss-20b"]
    tests = [t for t in ["pp4096", "tg128"] + ["batched %d" % b for b in (1, 2, 4, 8, 16, 32)]
             if all(t in data[(e, m)] for e in ("cleave", "llama.cpp") for m in models)]
    fig, ax = plt.subplots(figsize=(11, 4))
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
    # call S's cleave tg128 ran beside llama.cpp's build (RESULTS.md says so)
    noisy = {"tg128"} if call == "Call S" else set()
    ax.set_xticklabels([t + "*" if t in noisy else t for t in tests])
    if noisy:
        ax.set_xlabel("* cleave's figure measured the CPUs shared with a compiler; batched 1 is the clean one")
    ax.set_ylabel("cleave / llama.cpp (same call)")
    ax.set_title("Mixtures of experts, one NVIDIA H200 (Q4_K_M and MXFP4 files, 2026-12-03)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
