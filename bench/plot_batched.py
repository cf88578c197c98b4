"""8B bf16 on one NVIDIA H200: batched decode of 1, 8, 16 and 32 sequences
(batched-bench -npp 512 -ntg 128; bench/gemm-join-tune-gpu-2026-12-02.md):
the joined q/k/v and gate/up build beside llama.cpp from one call (2),
its mean of eight runs (calls 1-4), and the build before (mean of three,
call D of bench/decode-attn-mma-gpu-2026-12-02.md); decode and prompt
processing at a depth of 32768 cells from call E of
bench/prefill-attn-wgmma-gpu-2026-12-03.md (prefill attention on
warpgroup MMAs), with the mma.sync prefill kernel it replaced
(CLEAVE_NO_WGMMA=1, same call) and, from call C of
decode-attn-mma-gpu-2026-12-02.md, the vector decode attention. Limits: bytes a step reads over 3.8 TB/s; FLOPs
over 890 TFLOP/s for the prompt; the targets dashed. Writes
bench/batched.png."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

panels = [
    {
        "title": "batched decode (tokens/s) by sequences",
        "names": ["1", "8", "16", "32"],
        "series": [
            ("cleave (call 2)", [236.26, 1521.45, 2820.36, 5016.88]),
            ("cleave, mean of 8 (calls 1-4)", [234.3, 1492.4, 2796.3, 4944.2]),
            ("cleave before joining, mean of 3", [236.19, 1401.02, None, 4905.94]),
            ("llama.cpp (call 2)", [205.02, 1067.14, 1949.87, 4252.99]),
            ("limit", [252, 1947, 3749, 6978]),
        ],
        "target": [None, 1400, None, 5000],
        "log": True,
        "xlabel": "sequences decoded together (512 prompt + 128 generated each)",
    },
    {
        "title": "at depth 32768 (tokens/s)",
        "names": ["tg128 @ d32768", "pp512 @ d32768 (/100)"],
        "series": [
            ("cleave (E)", [186.46, 14388.22 / 100]),
            ("cleave, mma.sync prefill attention (E)", [186.73, 8491.04 / 100]),
            ("cleave, vector decode attention (12-02, C)", [147.57, None]),
            ("llama.cpp (E)", [154.23, 9352.43 / 100]),
            ("limit", [197, 27000 / 100]),
        ],
        "target": [170, 15000 / 100],
        "log": False,
        "xlabel": "",
    },
]

colors = {"cleave (call 2)": "tab:blue", "cleave, mean of 8 (calls 1-4)": "tab:orange",
          "cleave before joining, mean of 3": "tab:purple", "llama.cpp (call 2)": "tab:red",
          "cleave (E)": "tab:blue", "cleave, mma.sync prefill attention (E)": "tab:cyan",
          "cleave, vector decode attention (12-02, C)": "tab:green", "llama.cpp (E)": "tab:red",
          "limit": "lightgray"}
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
fig.suptitle("8B bf16, KV f16, one NVIDIA H200, 2026-12-02 (depth: 2026-12-03)", fontsize=10)
fig.tight_layout()
fig.savefig("bench/batched.png", dpi=110)
