#!/usr/bin/env python3
"""Draws bench/serve.png from bench/serve-2026-11-30.md: cleave serve with
an 8B bf16 model. Left, one H200: generated tokens per second against the
number of clients (512-token prompts, 128 generated), greedy and at
temperature 1, beside batched-bench's decode rate for as many sequences
(the engine without HTTP, prompts processed first) and the HBM limit (each
decode step reads the 16.06 GB of weights once at 3.8 TB/s). Right, two
H200s: 4096-token prompts under each split mode, 1 and 16 clients. Also
prints the table RESULTS.md carries.
usage: python3 bench/plot_serve.py bench/serve-2026-11-30.md bench/serve.png"""
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

WEIGHTS = 16.06e9  # bytes of the 8B bf16 model
HBM = 3.8e12       # bytes/s, measured (cuBLAS GEMV)


def blocks(text):
    """[(header, [table rows as lists of cells])] of the '#### ...' blocks"""
    out = []
    for line in text.splitlines():
        if line.startswith("#### "):
            out.append((line[5:], []))
        elif out and line.startswith("|") and not set(line) <= set("|-: "):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[0] not in ("PP", "clients"):
                out[-1][1].append(cells)
        elif line.startswith("## How"):
            break
    return out


def main():
    text = open(sys.argv[1]).read()
    bs = blocks(text)
    # batched-bench with regions: the last block without -kvu
    bb = [rows for h, rows in bs if "batched-bench" in h and "-kvu" not in h][-1]
    engine = {int(r[2]): float(r[7]) for r in bb}
    serve = {}
    for h, rows in bs:
        m = re.search(r"--device cuda:0 .*--temp (\d)", h)
        if m and "serve" in h:
            serve[int(m.group(1))] = {int(r[0]): (float(r[2]), float(r[5].split("/")[0])) for r in rows}
    two = {}
    for h, rows in bs:
        m = re.search(r"--devices cuda:0,cuda:1 (.*?) -np", h)
        if m:
            two[m.group(1)] = {int(r[0]): float(r[2]) for r in rows}

    clients = sorted(serve[0])
    print("| clients | greedy tok/s | TPOT ms | temperature 1 tok/s | TPOT ms | batched-bench S_TG | limit |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in clients:
        lim = c * HBM / WEIGHTS
        print(f"| {c} | {serve[0][c][0]:.1f} | {serve[0][c][1]:.2f} | {serve[1][c][0]:.1f} | {serve[1][c][1]:.2f} | "
              f"{engine.get(c, float('nan')):.1f} | {lim:.0f} |")

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    a.plot(clients, [serve[0][c][0] for c in clients], "o-", label="cleave serve, greedy")
    a.plot(clients, [serve[1][c][0] for c in clients], "s-", label="cleave serve, temperature 1")
    a.plot(sorted(engine), [engine[c] for c in sorted(engine)], "^--", label="batched-bench decode (no HTTP)")
    a.plot(clients, [c * HBM / WEIGHTS for c in clients], ":", color="gray", label="HBM limit (weights once a step)")
    a.set_xscale("log", base=2)
    a.set_yscale("log")
    a.set_xticks(clients, [str(c) for c in clients])
    a.set_xlabel("clients (= sequences)")
    a.set_ylabel("generated tokens/s")
    a.set_title("1x H200, 8B bf16: 512-token prompts, 128 generated")
    a.legend(fontsize=8)
    a.grid(alpha=0.3)

    modes = list(two)
    width = 0.38
    for i, c in enumerate((1, 16)):
        b.bar([k + (i - 0.5) * width for k in range(len(modes))], [two[m][c] for m in modes], width,
              label=f"{c} client{'s' if c > 1 else ''}")
    b.set_xticks(range(len(modes)), modes)
    b.set_ylabel("generated tokens/s")
    b.set_title("2x H200 (NVLink): 4096-token prompts, 128 generated")
    b.legend(fontsize=8)
    b.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
