#!/usr/bin/env python3
"""Draws bench/run_multi.sh's scale section: for each model, prompt and
generation rates against the GPU count under the layer and the tensor
split, and batched decode (S_TG) against the sequences, cleave beside
llama.cpp where its rows are there.

usage: bench/plot_multi.py SCALE_OUTPUT.md OUT.png"""
import re
import sys
from collections import defaultdict


def rate(cell):
    return float(cell.split("±")[0])


def parse(lines):
    """{model: {(tool, mode, n): {"pp": r, "tg": r, "batched": {B: S_TG}}}}"""
    data = defaultdict(lambda: defaultdict(lambda: {"batched": {}}))
    model = n = tool = mode = None
    kind = None
    header = None
    for line in lines:
        m = re.match(r"^### (.+), (\d+) GPUs$", line)
        if m:
            model, n = m.group(1), int(m.group(2))
            continue
        m = re.match(r"^(cleave|llama\.cpp), \d+ GPUs, (\w+):$", line)
        if m:
            tool, mode, kind, header = m.group(1), m.group(2), "bench", None
            continue
        m = re.match(r"^(llama\.cpp )?batched-bench, (\w+):$", line)
        if m:
            tool, mode, kind, header = ("llama.cpp" if m.group(1) else "cleave"), m.group(2), "batched", None
            continue
        if not line.startswith("|"):
            if line.endswith(":"):  # another label (memory, the switch): no table of rates follows
                kind = None
            continue
        if model is None or kind is None:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None or cells[0] in ("model", "PP"):
            header = cells
            continue
        if set(cells[0]) <= set("-: "):
            continue
        row = dict(zip(header, cells))
        entry = data[model][(tool, mode, n)]
        if kind == "bench" and "test" in row and "t/s" in row:
            key = "pp" if row["test"].startswith("pp") else "tg" if row["test"].startswith("tg") else None
            if key:
                entry[key] = rate(row["t/s"])
        elif kind == "batched" and "B" in row and "S_TG t/s" in row:
            entry["batched"][int(row["B"])] = float(row["S_TG t/s"])
    return data


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    data = parse(open(sys.argv[1]).read().splitlines())
    if not data:
        sys.exit("no '### MODEL, N GPUs' sections with tables in " + sys.argv[1])
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = list(data)
    fig, axes = plt.subplots(len(models), 3, figsize=(13, 3.6 * len(models)), squeeze=False)
    style = {("cleave", "layer"): "C0o-", ("cleave", "tensor"): "C1s-",
             ("llama.cpp", "layer"): "C0o--", ("llama.cpp", "tensor"): "C1s--"}
    for row, model in zip(axes, models):
        d = data[model]
        for (tool, mode), fmt in style.items():
            ns = sorted(n for (t, m, n) in d if t == tool and m == mode)
            for ax, key in ((row[0], "pp"), (row[1], "tg")):
                pts = [(n, d[(tool, mode, n)][key]) for n in ns if key in d[(tool, mode, n)]]
                if pts:
                    ax.plot(*zip(*pts), fmt, label=f"{tool} {mode}")
            for n in ns:
                b = d[(tool, mode, n)]["batched"]
                if b:
                    xs = sorted(b)
                    row[2].plot(xs, [b[x] for x in xs], fmt, alpha=0.4 + 0.6 * n / 8, label=f"{tool} {mode}, {n} GPUs")
        row[0].set_title(f"{model}: prompt", fontsize=10)
        row[1].set_title(f"{model}: generation", fontsize=10)
        row[2].set_title(f"{model}: batched decode", fontsize=10)
        for ax in row[:2]:
            ax.set_xscale("log", base=2)
            ax.set_xticks([2, 4, 8], ["2", "4", "8"])
            ax.set_xlabel("GPUs")
            ax.set_ylabel("tokens/s")
        row[2].set_xscale("log", base=2)
        row[2].set_xlabel("sequences")
        row[2].set_ylabel("S_TG tokens/s")
        row[1].legend(fontsize=7)
        row[2].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=100)


if __name__ == "__main__":
    main()
