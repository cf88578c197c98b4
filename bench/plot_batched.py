"""8B bf16 on one NVIDIA H200 (bench/batched-bf16-gpu-2026-12-02.md): batched
decode of 1, 8 and 32 sequences (batched-bench -npp 512 -ntg 128) and
decode / prompt processing at a depth of 32768 cells, cleave's last build
(call D) and, from one call (C), cleave beside llama.cpp, with the limit
(bytes a step reads over 3.8 TB/s; FLOPs over 890 TFLOP/s for the prompt)
and the targets. Writes bench/batched.png."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

seqs = ["1", "8", "32"]
cleave_d = [230.33, 1288.26, 4035.78]
cleave_c = [220.28, 1232.67, 4040.50]
llama_c = [203.75, 1067.55, 4201.59]
limit = [235, 1825, 6580]
target = [None, 1400, 5000]

depth = ["tg128 @ d32768", "pp512 @ d32768 (/100)"]
d_cleave_d = [150.82, 8489.42 / 100]
d_cleave_c = [141.50, 8479.88 / 100]
d_llama_c = [147.25, 8417.94 / 100]
d_limit = [186, 27000 / 100]
d_target = [170, 15000 / 100]

fig, axs = plt.subplots(1, 2, figsize=(13, 4.4))
w = 0.2
for ax, names, a, b, c, lim, tgt, title in [
    (axs[0], seqs, cleave_d, cleave_c, llama_c, limit, target, "batched decode (tokens/s) by sequences"),
    (axs[1], depth, d_cleave_d, d_cleave_c, d_llama_c, d_limit, d_target, "at depth 32768 (tokens/s)"),
]:
    x = range(len(names))
    labelled = False
    ax.bar([i - 1.5 * w for i in x], a, w, label="cleave, last measured build (D)")
    ax.bar([i - 0.5 * w for i in x], b, w, label="cleave (C)")
    ax.bar([i + 0.5 * w for i in x], c, w, label="llama.cpp (C)")
    ax.bar([i + 1.5 * w for i in x], lim, w, label="limit", color="lightgray")
    for i in x:
        for off, v in [(-1.5, a[i]), (-0.5, b[i]), (0.5, c[i]), (1.5, lim[i])]:
            ax.text(i + off * w, v * 1.01, f"{v:.0f}", ha="center", fontsize=7)
        if tgt[i]:
            ax.hlines(tgt[i], i - 2 * w, i + 2 * w, colors="red", linestyles="dashed",
                      label=None if labelled else "target")
            labelled = True
    ax.set_xticks(list(x), names)
    ax.set_title(title)
    ax.legend(fontsize=7)
axs[0].set_yscale("log")
axs[0].set_xlabel("sequences decoded together (512 prompt + 128 generated each)")
fig.suptitle("8B bf16, KV f16, one NVIDIA H200, 2026-12-02", fontsize=10)
fig.tight_layout()
fig.savefig("bench/batched.png", dpi=110)
