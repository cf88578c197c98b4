#!/usr/bin/env python3
"""Plots of the phase-switch benchmarks (bench/psm/): whole requests of
58,248 prompt tokens + 128 generated, phase by phase, per plan
(bench/psm.png), and the policy grids: each plan's time over the faster
pure mode's at every (prompt, generated) point, with the policy's choice
marked (bench/psm-grid.png).
usage: bench/plot_psm.py [bench/psm]"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "psm")
out_dir = os.path.dirname(os.path.abspath(here))
PLAN = {"layer": "layer", "tensor": "tensor", "layer-tensor": "layer, then tensor",
        "tensor-layer": "tensor, then layer"}

# ---- whole requests ----------------------------------------------------------
rows = list(csv.DictReader(open(os.path.join(here, "requests.csv"))))
groups = [("8B", "yes", "8B bf16, P2P (NVLink)"), ("8B", "no", "8B bf16, no P2P"),
          ("32B", "yes", "32B bf16, P2P (NVLink)")]
phases = [("load_s", "load", "#999999"), ("prefill_s", "prefill", "#4c72b0"),
          ("switch_s", "switch", "#dd8452"), ("generation_s", "generation", "#55a868")]
fig, axes = plt.subplots(len(groups), 1, figsize=(9, 7.5))
for ax, (model, p2p, title) in zip(axes, groups):
    rs = [r for r in rows if r["model"] == model and r["p2p"] == p2p]
    names = [PLAN[r["plan"]] for r in rs]
    left = [0.0] * len(rs)
    for key, label, color in phases:
        vals = [float(r[key]) for r in rs]
        ax.barh(names, vals, left=left, color=color, label=label)
        left = [a + b for a, b in zip(left, vals)]
    for i, r in enumerate(rs):
        ax.text(left[i], i, f" {float(r['wall_s']):.2f} s", va="center", fontsize=8)
    ax.set_title(f"{title}: 58,248 prompt + 128 generated tokens", fontsize=10)
    ax.invert_yaxis()
    ax.set_xlim(0, max(left) * 1.15)
axes[-1].set_xlabel("seconds from process start (load, prefill, switch, generation)")
fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", fontsize=8, ncol=4)
fig.suptitle("cleave on 2x NVIDIA H200: prefill and generation split modes, one request", fontsize=11)
fig.tight_layout(rect=(0, 0.04, 1, 1))
fig.savefig(os.path.join(out_dir, "psm.png"), dpi=120)

# ---- the policy grids ----------------------------------------------------------
grids = [("grid-8b-p2p.csv", "8B bf16, P2P (NVLink)"), ("grid-8b-nop2p.csv", "8B bf16, no P2P")]
fig, axes = plt.subplots(1, len(grids), figsize=(12, 4.8))
for ax, (name, title) in zip(axes, grids):
    pts = {}
    for r in csv.DictReader(open(os.path.join(here, name))):
        key = (int(r["prompt"]), int(r["generated"]))
        pts.setdefault(key, {})[r["plan"]] = float(r["total_s"])
        if r["auto_plan"] == "yes":
            pts[key]["auto"] = r["plan"]
    prompts = sorted({p for p, _ in pts})
    gens = sorted({g for _, g in pts})
    for g, marker in zip(gens, "osD^v"):
        best = [min(pts[(p, g)]["layer"], pts[(p, g)]["tensor"]) for p in prompts]
        for plan, color in (("layer", "#4c72b0"), ("tensor", "#55a868"), ("layer-tensor", "#dd8452")):
            ys = [pts[(p, g)][plan] / b for p, b in zip(prompts, best)]
            ax.plot(prompts, ys, marker=marker, color=color, alpha=0.8, lw=1,
                    label=f"{PLAN[plan]}" if g == gens[0] else None)
        ys = [pts[(p, g)][pts[(p, g)]["auto"]] / b for p, b in zip(prompts, best)]
        ax.plot(prompts, ys, marker=marker, color="black", lw=0, ms=9, mfc="none",
                label="auto's choice" if g == gens[0] else None)
    ax.set_xscale("log", base=2)
    ax.set_xticks(prompts)
    ax.set_xticklabels([f"{p // 1024}k" if p >= 1024 else str(p) for p in prompts])
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.axhline(1.02, color="red", lw=0.8, ls="--")
    ax.set_ylim(0.8, 2.0)
    ax.set_xlabel("prompt tokens (markers: generated " + ", ".join(map(str, gens)) + ")")
    ax.set_ylabel("time / faster pure mode")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
fig.suptitle("--psm-policy auto on 2x NVIDIA H200: every plan's request time over the faster pure mode", fontsize=11)
fig.tight_layout()
fig.savefig(os.path.join(out_dir, "psm-grid.png"), dpi=120)
print("wrote", os.path.join(out_dir, "psm.png"), "and", os.path.join(out_dir, "psm-grid.png"))
