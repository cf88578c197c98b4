"""8B bf16 on one NVIDIA H200 (bench/decode-attn-mma-gpu-2026-12-02.md):
batched decode of 1, 8 and 32 sequences (batched-bench -npp 512 -ntg 128)
and decode / prompt processing at a depth of 32768 cells: cleave beside
llama.cpp from one call (C), cleave's mean of three more runs (call D),
cleave with the decode attention it replaced (CLEAVE_DECODE_ATTN=vec, call
C), the limit (bytes a step reads over 3.8 TB/s; FLOPs over 890 TFLOP/s
for the prompt) and the targets. Writes bench/batched.png."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

panels = [
    {
        "title": "batched decode (tokens/s) by sequences",
        "names": ["1", "8", "32"],
        "series": [
            ("cleave (C)", [235.33, 1337.23, 4728.96]),
            ("cleave, mean of 3 (D)", [236.19, 1401.02, 4905.94]),
            ("cleave, vector attention (C)", [224.24, 1335.77, 4325.44]),
            ("llama.cpp (C)", [204.44, 1062.24, 4176.97]),
            ("limit", [252, 1947, 6978]),
        ],
        "target": [None, 1400, 5000],
        "log": True,
        "xlabel": "sequences decoded together (512 prompt + 128 generated each)",
    },
    {
        "title": "at depth 32768 (tokens/s)",
        "names": ["tg128 @ d32768", "pp512 @ d32768 (/100)"],
        "series": [
            ("cleave (C)", [185.89, 8495.65 / 100]),
            ("cleave, vector attention (C)", [147.57, None]),
            ("llama.cpp (C)", [152.29, 8910.17 / 100]),
            ("limit", [197, 27000 / 100]),
        ],
        "target": [170, 15000 / 100],
        "log": False,
        "xlabel": "",
    },
]

colors = {"cleave (C)": "tab:blue", "cleave, mean of 3 (D)": "tab:orange",
          "cleave, vector attention (C)": "tab:green", "llama.cpp (C)": "tab:red", "limit": "lightgray"}
fig, axs = plt.subplots(1, 2, figsize=(13, 4.4))
for ax, p in zip(axs, panels):
    k = len(p["series"])
    w = 0.8 / k
    x = range(len(p["names"]))
    for si, (label, vals) in enumerate(p["series"]):
        off = (si - (k - 1) / 2) * w
        xs = [i + off for i in x if vals[i] is not None]
        ys = [v for v in vals if v is not None]
        ax.bar(xs, ys, w, label=label, color=colors[label])
        for xi, v in zip(xs, ys):
            ax.text(xi, v * 1.01, f"{v:.0f}", ha="center", fontsize=6)
    labelled = False
    for i in x:
        if p["target"][i]:
            ax.hlines(p["target"][i], i - 0.45, i + 0.45, colors="red", linestyles="dashed",
                      label=None if labelled else "target")
            labelled = True
    ax.set_xticks(list(x), p["names"])
    ax.set_title(p["title"])
    if p["log"]:
        ax.set_yscale("log")
    ax.set_xlabel(p["xlabel"])
    ax.legend(fontsize=7)
fig.suptitle("8B bf16, KV f16, one NVIDIA H200, 2026-12-02", fontsize=10)
fig.tight_layout()
fig.savefig("bench/batched.png", dpi=110)
