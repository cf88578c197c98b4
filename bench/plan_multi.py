#!/usr/bin/env python3
"""Where models of real shapes would go on 1, 2, 4 and 8 GPUs, as cleave
plans them (cleave info: no weights loaded, nothing placed), and what a
switch between the layer and the tensor split copies.

The models are `cleave gen --shapes-only` files (the weights a hole of
zeros, no disk space), the GPUs virtual devices given a GPU's budget, so
this runs anywhere. A placement on CUDA devices also holds the
all-reduce's buffers (a few MiB) that CPU devices keep in host memory.

usage: bench/plan_multi.py CLEAVE [--budget-mib 142000] [--link-gbs 390]
                           [--ctx 32768] [--devices 1,2,4,8] [--csv OUT] [--plot OUT.png]
prints markdown on stdout; --plot draws the most weights a device holds
under each split against the device count, beside an even share."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

MODELS = [  # preset, type, label
    ("8b", "bf16", "8B bf16"),
    ("32b", "Q5_K_M", "32B Q5_K_M"),
    ("70b", "bf16", "70B bf16"),
    ("70b", "Q4_K_M", "70B Q4_K_M"),
    ("qwen3-30b-a3b", "Q4_K_M", "Qwen3-30B-A3B Q4_K_M"),
    ("gpt-oss-120b", "MXFP4_MOE", "gpt-oss-120b MXFP4"),
]


def info(cleave, path, n, budget, ctx, link):
    devs = "cpu" if n == 1 else f"cpu:{n}"
    args = [cleave, "info", path, "--devices", devs, "--vram-budget", ",".join([str(budget)] * n), "-c", str(ctx)]
    if n > 1:
        args += ["-psm", "layer", "-sm", "tensor", "--link-gbs", str(link)]
    r = subprocess.run(args, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def parse(text, n):
    """The most weights on a device per phase, the largest contexts, the
    busiest device's copies (MiB) and their least time (ms) in the switch."""
    out = {"weights": {}, "largest": {}, "copies": None, "limit": None, "fits": None}
    phase = None
    for line in text.splitlines():
        m = re.match(r"^(prefill|generation|both phases): (\w+) split", line)
        if m:
            phase = m.group(1)
            continue
        m = re.match(r"^  (cpu(:\d+)?) +([0-9.]+) ", line)
        if m and phase:
            w = float(m.group(3))
            out["weights"][phase] = max(out["weights"].get(phase, 0.0), w)
            continue
        m = re.match(r"^  (none|layer|tensor|layer, then tensor) +(\d+)$", line)
        if m:
            out["largest"][m.group(1)] = int(m.group(2))
            continue
        if line.startswith("switch to generation:"):
            out["fits"] = line.endswith("-> fits")
        m = re.match(r"^  copies \(MiB out/in, the context full\): (.*?); at [0-9.]+ GB/s a link, at least ([0-9.]+) ms", line)
        if m and out["copies"] is None:
            pairs = re.findall(r"cpu:\d+ ([0-9.]+)/([0-9.]+)", m.group(1))
            out["copies"] = max(max(float(a), float(b)) for a, b in pairs)
            out["limit"] = float(m.group(2))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cleave")
    ap.add_argument("--budget-mib", type=int, default=142000)
    ap.add_argument("--link-gbs", type=float, default=390)
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--devices", default="1,2,4,8")
    ap.add_argument("--models", default=None, help="preset:type,... (default: the six real shapes)")
    ap.add_argument("--csv")
    ap.add_argument("--plot")
    a = ap.parse_args()
    models = MODELS
    if a.models:
        models = [(m.split(":")[0], m.split(":")[1], m.replace(":", " ")) for m in a.models.split(",")]
    counts = [int(x) for x in a.devices.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset, typ, label in models:
            path = os.path.join(tmp, f"{preset}-{typ}.gguf")
            g = subprocess.run([a.cleave, "gen", "--preset", preset, "--type", typ, "--shapes-only", "-o", path],
                               capture_output=True, text=True)
            if g.returncode:
                sys.exit(f"gen {preset} {typ}: {g.stderr.strip()}")
            size_gib = os.path.getsize(path) / 2**30
            for n in counts:
                rc, text = info(a.cleave, path, n, a.budget_mib, a.ctx, a.link_gbs)
                if rc:  # the reason, shortened to the device's need against its budget
                    m = re.search(r"device \d+ needs ([0-9.]+) MiB.*? but has ([0-9.]+) MiB", text)
                    why = f"does not fit: needs {m.group(1)} MiB of {m.group(2)}" if m else "does not fit"
                    rows.append((label, size_gib, n, None, why))
                    continue
                rows.append((label, size_gib, n, parse(text, n), None))
            os.unlink(path)
    print(f"Budget {a.budget_mib} MiB a device, context asked {a.ctx} (largest contexts searched up to "
          f"the larger of it and the model's training context), KV f16, batch 512; switch copies with the "
          f"context full, their least time at {a.link_gbs:.0f} GB/s a link.\n")
    print("| model | file GiB | devices | weights MiB, layer (most on a device) | weights MiB, tensor | "
          "largest ctx none | layer | tensor | layer, then tensor | switch: busiest device GiB | least ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    csv = open(a.csv, "w") if a.csv else None
    if csv:
        csv.write("model,devices,weights_layer_mib,weights_tensor_mib,none,layer,tensor,pair,copies_mib,limit_ms\n")
    for label, size, n, p, err in rows:
        if p is None:
            print(f"| {label} | {size:.1f} | {n} | {err} | | | | | | | |")
            continue
        L = p["largest"]
        wl = p["weights"].get("prefill", p["weights"].get("both phases"))
        wt = p["weights"].get("generation", wl)
        cp = "-" if p["copies"] is None else f"{p['copies'] / 1024:.1f}"
        lim = "-" if p["limit"] is None else f"{p['limit']:.1f}"
        if n > 1 and p["fits"] is False:
            lim += " (does not fit)"
        print(f"| {label} | {size:.1f} | {n} | {wl:.0f} | {wt:.0f} | {L.get('none', 0)} | "
              f"{L.get('layer', '-') if n > 1 else '-'} | {L.get('tensor', '-') if n > 1 else '-'} | "
              f"{L.get('layer, then tensor', '-') if n > 1 else '-'} | {cp} | {lim} |")
        if csv:
            csv.write(f"{label},{n},{wl:.0f},{wt:.0f},{L.get('none', 0)},{L.get('layer', 0)},{L.get('tensor', 0)},"
                      f"{L.get('layer, then tensor', 0)},{p['copies'] or 0},{p['limit'] or 0}\n")
    if csv:
        csv.close()
    if a.plot:
        plot(rows, a.plot, a.budget_mib)


def plot(rows, out, budget):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = list(dict.fromkeys(r[0] for r in rows))
    fig, axes = plt.subplots(2, (len(labels) + 1) // 2, figsize=(4 * ((len(labels) + 1) // 2), 7), squeeze=False)
    for ax, label in zip(axes.flat, labels):
        pts = [(n, p) for l, _, n, p, _ in rows if l == label and p is not None]
        ns = [n for n, _ in pts]
        size = next(r[1] for r in rows if r[0] == label) * 1024
        ax.plot(ns, [p["weights"].get("prefill", p["weights"].get("both phases")) / 1024 for _, p in pts], "o-",
                label="layer")
        ax.plot(ns, [p["weights"].get("generation", p["weights"].get("both phases")) / 1024 for _, p in pts], "s-",
                label="tensor")
        ax.plot(ns, [size / n / 1024 for n in ns], "k:", label="an even share")
        ax.axhline(budget / 1024, color="r", lw=0.8, label="a device's budget")
        ax.set_title(label, fontsize=10)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks([1, 2, 4, 8], ["1", "2", "4", "8"])
        ax.set_xlabel("devices")
        ax.set_ylabel("most weights on a device, GiB")
    axes.flat[0].legend(fontsize=8)
    for ax in list(axes.flat)[len(labels):]:
        ax.axis("off")
    fig.suptitle("cleave's plans (cleave info): weights per device under the layer and the tensor split")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
