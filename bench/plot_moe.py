"""Mixtures of experts on one H200: cleave against llama.cpp from the same
calls of a raw results file (moe-gpu-2026-12-04.md: call AR for the
quantized files, AM for bf16, unless named; a call named later replaces
an earlier one's rows of the same model). Prints the table RESULTS.md holds
and draws cleave / llama.cpp (its defaults) per test, for the tests both
engines ran.

    python3 bench/plot_moe.py bench/moe-gpu-2026-12-04.md bench/moe.png [CALL ...]
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
    """{(engine, model): {test: tok/s}} from the bench and batched-bench rows;
    a "### variant NAME" heading files the ppN/tgN rows after it under
    (engine, "model NAME"), batched rows always under the model itself."""
    out, base, key = {}, None, None
    for line in section.splitlines():
        m = re.match(r"## (cleave|llama\.cpp) (\S+)", line)
        if m:
            key = base = (m.group(1), m.group(2))
            out[key] = {}
            continue
        v = re.match(r"### per pair to (\d+)", line)
        if v and base:  # an older call's variant of the same engine and model
            key = (base[0], base[1] + " pairs" + v.group(1))
            out[key] = {}
            continue
        v = re.match(r"### variant (\S+)", line)
        if v and base:
            key = (base[0], base[1] + " " + v.group(1))
            out.setdefault(key, {})
            continue
        if key is None or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if re.fullmatch(r"(pp|tg)\d+", cells[-2]):
            out[key][cells[-2]] = float(cells[-1].split()[0])
        elif len(cells) == 10 and cells[0] == "512":
            out[base]["batched %s" % cells[2]] = float(cells[7])  # S_TG
    return out


def main():
    text = open(sys.argv[1]).read()
    calls = sys.argv[3:] or ["Call AR", "Call AM"]
    data = {}
    for call in calls:
        data.update(parse(call_section(text, call)))
    models = [m for m in ["qwen3-30b-a3b", "gpt-oss-20b", "qwen3-30b-a3b-bf16"]
              if ("cleave", m) in data and ("llama.cpp", m) in data]
    order = ["pp4096", "tg128"] + ["batched %d" % b for b in (1, 2, 4, 8, 16, 32)]
    fig, ax = plt.subplots(figsize=(13, 4.2))
    x, labels = 0, []
    for mi, model in enumerate(models):
        c, l = data[("cleave", model)], data[("llama.cpp", model)]
        tests = [t for t in order if t in c and t in l]
        ratios = [c[t] / l[t] for t in tests]
        for t, r in zip(tests, ratios):
            print("| %s | %s | %.1f | %.1f | %.2f |" % (model, t, c[t], l[t], r))
        xs = list(range(x, x + len(tests)))
        ax.bar(xs, ratios, 0.7, label=model, color="C%d" % mi)
        labels += tests
        x += len(tests) + 1
        labels.append("")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(1.3, color="gray", linestyle="--", linewidth=0.8, label="target 1.3")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("cleave / llama.cpp (same machine, its defaults)")
    date = re.search(r"\d{4}-\d{2}-\d{2}", sys.argv[1])
    ax.set_title("Mixtures of experts, one NVIDIA H200 (%s, %s)" % (date.group(0) if date else "", " + ".join(calls)))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
