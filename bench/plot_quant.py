"""Quantized 8B-shape files on one NVIDIA H200, cleave beside llama.cpp on
the same files, each cleave/llama.cpp pair from one run on the machine:
decode (tg128) with the HBM limit (3.8 TB/s over the bytes a token reads:
the file less the token-embedding table, of which one row is read), Q4_K_M
from the last run (bench/decode-kernels-gpu-2026-12-02.md), Q6_K and Q4_0
with the KV cache types at depth 8192 (bench/kv-gpu-2026-12-02.md); prompt
processing (pp4096, bench/quant-gpu-2026-12-02.md); batched decode of
Q4_K_M, 8 and 32 sequences from the last run beside 1, 8, 16 and 32 from
the run before (bench/batched-norm-attn-gpu-2026-12-02.md).
Writes bench/quant.png."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

types = ["Q4_K_M", "Q6_K", "Q4_0"]
tg_cleave = [423.02, 330.66, 394.38]
tg_llama = [273.95, 209.38, 346.93]
file_bytes = [4915656000, 6590928192, 4520695104]
embd_bytes = [128256 * 4096 * 144 / 256, 128256 * 4096 * 210 / 256, 128256 * 4096 * 18 / 32]
limit = [3.8e12 / (f - e) for f, e in zip(file_bytes, embd_bytes)]
pp_cleave = [19902.00, 19290.46, 19615.55]
pp_llama = [9720.49, 8532.86, 11383.94]
seqs = [1, 8, 16, 32]
bd_cleave = [395.00, 1417.15, 2185.56, 2848.17]
bd_llama = [266.12, 941.68, 1965.65, 3046.67]
last_seqs = [8, 32]
last_cleave = [1525.57, 2933.41]
last_llama = [934.48, 3020.25]

kv_types = ["f16", "q8_0", "q4_0", "K q8_0\nV q4_0"]
kv_pp_cleave = [15038.76, 8046.28, 8202.48, 7946.06]
kv_pp_llama = [7678.13, 7492.18, 7436.81, 7432.37]
kv_tg_cleave = [266.39, 193.78, 230.23, 198.99]
kv_tg_llama = [243.21, 200.78, 199.40, 185.71]

fig, axs = plt.subplots(1, 4, figsize=(19, 4.2))
x = range(len(types))
w = 0.27
ax = axs[0]
ax.bar([i - w for i in x], tg_cleave, w, label="cleave")
ax.bar(list(x), tg_llama, w, label="llama.cpp")
ax.bar([i + w for i in x], limit, w, label="HBM limit", color="lightgray")
for i in x:
    ax.text(i - w, tg_cleave[i] + 8, f"{tg_cleave[i]:.0f}", ha="center", fontsize=8)
    ax.text(i, tg_llama[i] + 8, f"{tg_llama[i]:.0f}", ha="center", fontsize=8)
    ax.text(i + w, limit[i] + 8, f"{limit[i]:.0f}", ha="center", fontsize=8)
ax.set_xticks(list(x), types)
ax.set_ylabel("tokens/s")
ax.set_title("decode, tg128")
ax.legend(fontsize=8)

ax = axs[1]
ax.bar([i - w / 2 for i in x], pp_cleave, w, label="cleave (batches of 512)")
ax.bar([i + w / 2 for i in x], pp_llama, w, label="llama.cpp (ubatch 512)")
ax.bar([-0.5 * w - 0.9 * w], [30695.51], w * 0.8, label="cleave, one batch of 4096", color="tab:green")
for i in x:
    ax.text(i - w / 2, pp_cleave[i] + 300, f"{pp_cleave[i] / 1000:.1f}k", ha="center", fontsize=8)
    ax.text(i + w / 2, pp_llama[i] + 300, f"{pp_llama[i] / 1000:.1f}k", ha="center", fontsize=8)
ax.text(-0.5 * w - 0.9 * w, 30695.51 + 300, "30.7k", ha="center", fontsize=8)
ax.set_xticks(list(x), types)
ax.set_title("prompt, pp4096")
ax.legend(fontsize=8, loc="upper right")

ax = axs[2]
ax.plot(seqs, bd_cleave, "o--", color="tab:blue", alpha=0.45, label="cleave, run before")
ax.plot(seqs, bd_llama, "s--", color="tab:orange", alpha=0.45, label="llama.cpp, run before")
ax.plot(last_seqs, last_cleave, "o", color="tab:blue", markersize=8, label="cleave, last run")
ax.plot(last_seqs, last_llama, "s", color="tab:orange", markersize=8, label="llama.cpp, last run")
for s, v in zip(last_seqs, last_cleave):
    ax.text(s - 1.5, v + 80, f"{v:.0f}", ha="center", fontsize=8, color="tab:blue")
for s, v in zip(last_seqs, last_llama):
    ax.text(s + 1.5, v - 260, f"{v:.0f}", ha="center", fontsize=8, color="tab:orange")
ax.set_xlabel("sequences (512-token prompts, 128 steps)")
ax.set_title("batched decode, Q4_K_M (S_TG)")
ax.legend(fontsize=8)
ax = axs[3]
xk = range(len(kv_types))
ax.bar([i - w / 2 for i in xk], kv_tg_cleave, w, label="cleave tg128")
ax.bar([i + w / 2 for i in xk], kv_tg_llama, w, label="llama.cpp tg128")
for i in xk:
    ax.text(i - w / 2, kv_tg_cleave[i] + 4, f"{kv_tg_cleave[i]:.0f}", ha="center", fontsize=8)
    ax.text(i + w / 2, kv_tg_llama[i] + 4, f"{kv_tg_llama[i]:.0f}", ha="center", fontsize=8)
    ax.text(i, 12, f"pp512\n{kv_pp_cleave[i] / 1000:.1f}k\n{kv_pp_llama[i] / 1000:.1f}k", ha="center",
            fontsize=7, color="white")
ax.set_xticks(list(xk), kv_types)
ax.set_title("KV types at depth 8192, Q4_K_M\n(in the bars: pp512, cleave over llama.cpp)", fontsize=10)
ax.legend(fontsize=8, loc="upper right")
fig.suptitle("8B-shape files on one NVIDIA H200, both tools on the same files, each cleave/llama.cpp pair from one run on the machine (2026-12-02)")
fig.tight_layout()
fig.savefig("bench/quant.png", dpi=110)
print([round(v) for v in limit])
