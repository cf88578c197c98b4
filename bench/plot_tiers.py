#!/usr/bin/env python3
"""Draws bench/tiers.png from bench/tiers-2026-11-30.md: the 8B shape (bf16,
KV f16) on one H200 with the whole cache in device memory and with half of
it (N = depth / 2) in pinned host memory. Left: decode (tg128) against the
limit a tail allows when its copies and the step run one after the other:
the tail's bytes over 55 GB/s (host to device) plus the all-in-VRAM step.
Right: prefill with the tail as a share of all-in-VRAM prefill, with the
80% target. Also prints the table RESULTS.md carries.
usage: python3 bench/plot_tiers.py bench/tiers-2026-11-30.md bench/tiers.png"""
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

# one cell of the 8B shape's cache: K and V of 32 layers, 8 kv heads x 128, f16
CELL_BYTES = 32 * 2 * 8 * 128 * 2
H2D = 55e9  # bytes/s, pinned host to device on this machine
TG = 128


def parse(text):
    """(devices, depth, cells) -> {test: t/s} from the '#### ...' blocks"""
    out, key = {}, None
    for line in text.splitlines():
        m = re.match(r"#### (2x tensor )?depth (\d+), --kv-vram-cells (\w+)\s*$", line)
        if m:
            key = (2 if m.group(1) else 1, int(m.group(2)), m.group(3))
            out.setdefault(key, {})
            continue
        if line.startswith("#"):
            key = None  # a block of another kind: its rows are not this table's
            continue
        m = re.match(r"\|.*\| (pp\d+|tg\d+) @ d\d+ \| ([\d.]+) ±", line)
        if m and key:
            out[key][m.group(1)] = float(m.group(2))
    return out


def tail_limit(depth, cells, all_tg, devices):
    """tok/s if each step copied its tail (split over the devices' own
    links) and then ran as fast as all in VRAM"""
    tail = (depth + TG / 2 - cells) * CELL_BYTES / devices
    return 1.0 / (tail / H2D + 1.0 / all_tg)


def overlap_ceiling(depth, cells, all_tg, devices):
    """tok/s if the copies ran entirely beside the step: the slower of the two"""
    tail = (depth + TG / 2 - cells) * CELL_BYTES / devices
    return 1.0 / max(tail / H2D, 1.0 / all_tg)


def main():
    # the runs of the final code come before "## Earlier runs"
    runs = parse(open(sys.argv[1]).read().split("## Earlier runs")[0])
    rows = []
    for (dev, depth, cells), r in sorted(runs.items()):
        if cells == "all" or (dev, depth, "all") not in runs:
            continue
        a = runs[(dev, depth, "all")]
        lim = tail_limit(depth, int(cells), a["tg128"], dev)
        ceil = overlap_ceiling(depth, int(cells), a["tg128"], dev)
        rows.append((dev, depth, int(cells), a, r, lim, ceil))
    print("| GPUs | depth | cells in VRAM | pp512 all / tiered | share | pp4096 all / tiered | share "
          "| tg128 all | tg128 tiered | limit (copy + step) | share | ceiling (copy beside step) | share |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for dev, depth, cells, a, r, lim, ceil in rows:
        print(f"| {dev} | {depth // 1024}k | {cells} | {a['pp512']:.0f} / {r['pp512']:.0f} | "
              f"{100 * r['pp512'] / a['pp512']:.1f}% | {a['pp4096']:.0f} / {r['pp4096']:.0f} | "
              f"{100 * r['pp4096'] / a['pp4096']:.1f}% | {a['tg128']:.2f} | {r['tg128']:.2f} | "
              f"{lim:.2f} | {100 * r['tg128'] / lim:.0f}% | {ceil:.2f} | {100 * r['tg128'] / ceil:.0f}% |")

    one = [x for x in rows if x[0] == 1]
    depths = [x[1] // 1024 for x in one]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6))
    ax1.plot(depths, [x[3]["tg128"] for x in one], "o-", label="whole cache in VRAM")
    ax1.plot(depths, [x[4]["tg128"] for x in one], "s-", label="half in host memory (N = depth/2)")
    ax1.plot(depths, [x[5] for x in one], "k--",
             label="limit with that tail: tail bytes / 55 GB/s + VRAM step")
    ax1.plot(depths, [x[6] for x in one], "k:",
             label="ceiling with the copies beside the step: max of the two")
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xticks(depths, [f"{d}k" for d in depths])
    ax1.set_xlabel("context depth (tokens)")
    ax1.set_ylabel("decode tg128 (tok/s)")
    ax1.set_title("decode: copies overlap the layer before")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize=8)
    w = 0.35
    xs = range(len(one))
    ax2.bar([x - w / 2 for x in xs], [100 * x[4]["pp512"] / x[3]["pp512"] for x in one], w, label="pp512")
    ax2.bar([x + w / 2 for x in xs], [100 * x[4]["pp4096"] / x[3]["pp4096"] for x in one], w, label="pp4096")
    ax2.axhline(80, color="r", ls="--", label="target 80%")
    ax2.set_xticks(list(xs), [f"{d}k" for d in depths])
    ax2.set_ylim(0, 105)
    ax2.set_xlabel("context depth (tokens)")
    ax2.set_ylabel("tiered prefill, % of all-in-VRAM")
    ax2.set_title("prefill with half the cache in host memory")
    ax2.legend(fontsize=8, loc="lower right")
    fig.suptitle("cleave tiered KV cache, 8B bf16 (KV f16), one NVIDIA H200, 2026-11-30")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
