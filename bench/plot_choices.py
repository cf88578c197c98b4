"""bench/choices.png: the seconds of an n = 4 request (16 tokens per
choice, 8B bf16, one H200) by prompt length, with the later choices'
prompt cells copied (on), copied where measured cheaper (auto, the
default), or processed again (off); and 2 CPU cores' copy against prefill.
Numbers from bench/serve-choices-2026-12-04.md."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

lengths = [512, 2048, 8000]
gpu = {"on": [0.391, 1.499, 5.248], "auto": [0.339, 0.679, 2.448], "off": [0.269, 0.670, 2.449]}
fig, ax = plt.subplots(1, 2, figsize=(10, 4))
w = 0.27
for k, (name, v) in enumerate(gpu.items()):
    ax[0].bar([i + (k - 1) * w for i in range(3)], v, w, label="--copy-prompt-cells " + name)
ax[0].set_xticks(range(3), [str(p) for p in lengths])
ax[0].set_xlabel("prompt tokens")
ax[0].set_ylabel("seconds, n = 4 request")
ax[0].set_title("one NVIDIA H200, 8B bf16")
ax[0].legend()
ax[1].bar([0, 1], [0.0215, 12.142], color=["tab:green", "tab:red"])
ax[1].set_yscale("log")
ax[1].set_xticks([0, 1], ["copy 511 cells", "prefill 512 tokens"])
ax[1].set_ylabel("seconds (log)")
ax[1].set_title("2 CPU cores, 1B q8_0")
fig.tight_layout()
fig.savefig("bench/choices.png", dpi=110)
