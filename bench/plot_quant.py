"""Decode (tg128) of quantized 8B-shape files on one NVIDIA H200: cleave
(bench/quant-gpu-2026-12-01.md), llama.cpp's figures quoted by the issue
that asked for these types (the same GPU model, not the same run), and the
HBM bandwidth limit (3.8 TB/s over the bytes a token reads: the file less
the token-embedding table, of which one row is read). Writes bench/quant.png."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

types = ["Q4_K_M", "Q6_K", "Q4_0"]
cleave = [361.96, 332.38, 364.25]
llama = [270.6, 208.1, 331.2]
file_bytes = [4915656000, 6590928192, 4520695104]
embd_bytes = [128256 * 4096 * 144 / 256, 128256 * 4096 * 210 / 256, 128256 * 4096 * 18 / 32]
limit = [3.8e12 / (f - e) for f, e in zip(file_bytes, embd_bytes)]

x = range(len(types))
w = 0.27
fig, ax = plt.subplots(figsize=(7, 4))
ax.bar([i - w for i in x], cleave, w, label="cleave")
ax.bar(list(x), llama, w, label="llama.cpp (issue's figures)")
ax.bar([i + w for i in x], limit, w, label="HBM limit", color="lightgray")
for i in x:
    ax.text(i - w, cleave[i] + 8, f"{cleave[i]:.0f}", ha="center", fontsize=8)
    ax.text(i + w, limit[i] + 8, f"{limit[i]:.0f}", ha="center", fontsize=8)
ax.set_xticks(list(x), types)
ax.set_ylabel("tg128, tokens/s")
ax.set_title("8B-shape decode on one NVIDIA H200 (2026-12-01)")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig("bench/quant.png", dpi=110)
print([round(v) for v in limit])
