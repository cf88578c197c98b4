"""Quantized 8B-shape files on one NVIDIA H200, cleave beside llama.cpp on
the same files in the same run on the machine (bench/quant-gpu-2026-12-02.md): decode
(tg128) with the HBM limit (3.8 TB/s over the bytes a token reads: the
file less the token-embedding table, of which one row is read), prompt
processing (pp4096) and batched decode of Q4_K_M. Writes bench/quant.png."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

types = ["Q4_K_M", "Q6_K", "Q4_0"]
tg_cleave = [355.73, 334.18, 361.43]
tg_llama = [273.78, 205.84, 338.40]
file_bytes = [4915656000, 6590928192, 4520695104]
embd_bytes = [128256 * 4096 * 144 / 256, 128256 * 4096 * 210 / 256, 128256 * 4096 * 18 / 32]
limit = [3.8e12 / (f - e) for f, e in zip(file_bytes, embd_bytes)]
pp_cleave = [19902.00, 19290.46, 19615.55]
pp_llama = [9720.49, 8532.86, 11383.94]
seqs = [1, 8, 16, 32]
bd_cleave = [340.57, 797.85, 1289.92, 1550.01]
bd_llama = [265.91, 954.54, 1975.39, 3058.49]

fig, axs = plt.subplots(1, 3, figsize=(14, 4.2))
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
ax.plot(seqs, bd_cleave, "o-", label="cleave")
ax.plot(seqs, bd_llama, "s-", label="llama.cpp")
for s, v in zip(seqs, bd_cleave):
    ax.text(s, v + 60, f"{v:.0f}", ha="center", fontsize=8)
for s, v in zip(seqs, bd_llama):
    ax.text(s, v + 60, f"{v:.0f}", ha="center", fontsize=8)
ax.set_xlabel("sequences (512-token prompts, 128 steps)")
ax.set_title("batched decode, Q4_K_M (S_TG)")
ax.legend(fontsize=8)
fig.suptitle("8B-shape files on one NVIDIA H200, both tools on the same files in one run on the machine (2026-12-02)")
fig.tight_layout()
fig.savefig("bench/quant.png", dpi=110)
print([round(v) for v in limit])
