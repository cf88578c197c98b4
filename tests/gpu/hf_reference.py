#!/usr/bin/env python3
"""Independent reference for the Hugging Face import: builds small random
Llama / Mistral / Qwen2 / Qwen3 models with transformers, saves them as
safetensors checkpoints, converts them with `cleave convert --from hf`, and
compares cleave's logits (CPU, and GPU with --device) with transformers' own
float32 eager forward pass on the same token ids.

Needs torch + transformers (no network). Usage:
  python3 tests/gpu/hf_reference.py --cleave build/cleave [--device cuda:0]
The cleave binary may also come from $CLEAVE. Error per case is
max|cleave - transformers| / max|transformers| over all positions; the pass
thresholds are 1e-3 on CPU (f32 weights, f32 KV) and 1e-2 on the GPU.
"""
import argparse
import math
import os
import random
import subprocess
import sys
import tempfile

import torch
import transformers

CPU_TOL = 1e-3
GPU_TOL = 1e-2

# Small shapes with GQA (8 query heads on 2 KV heads); qwen3 also has
# head_dim != hidden/heads. The llama3 case uses a tiny original context so
# the rope scaling changes most frequencies (a wrong rope_freqs shows).
BASE = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
            intermediate_size=640, vocab_size=1000, max_position_embeddings=2048,
            rms_norm_eps=1e-5)

CASES = [
    # name, config class, model class, extra config, save kwargs
    ("llama", "LlamaConfig", "LlamaForCausalLM", dict(tie_word_embeddings=False), {}),
    ("llama3-rope-tied-sharded", "LlamaConfig", "LlamaForCausalLM",
     dict(tie_word_embeddings=True, rope_theta=500000.0,
          rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                            high_freq_factor=4.0, original_max_position_embeddings=16)),
     dict(max_shard_size="1MB")),
    ("mistral", "MistralConfig", "MistralForCausalLM", dict(tie_word_embeddings=False), {}),
    ("qwen2", "Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=True,
                                                      rope_theta=1000000.0), {}),
    ("qwen3", "Qwen3Config", "Qwen3ForCausalLM", dict(tie_word_embeddings=False, head_dim=64,
                                                      rope_theta=1000000.0), {}),
]


def make_config(cls_name, extra):
    cls = getattr(transformers, cls_name)
    kw = dict(BASE)
    kw.update(extra)
    # transformers 5 keeps RoPE settings in rope_parameters; 4.x in
    # rope_theta + rope_scaling. Build whichever this version takes.
    theta = kw.pop("rope_theta", 10000.0)
    scaling = kw.pop("rope_scaling", None)
    probe = cls()
    if hasattr(probe, "rope_parameters"):
        rp = dict(rope_type="default", rope_theta=theta)
        if scaling:
            rp.update(scaling)
        kw["rope_parameters"] = rp
    else:
        kw["rope_theta"] = theta
        if scaling:
            kw["rope_scaling"] = scaling
    return cls(**kw)


def randomize(model, seed):
    """Weights with unit-gain scales so activations (and logits) are O(1),
    norms near but not at 1, and biases large enough to matter."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]))
            elif name.endswith("bias"):
                p.normal_(0.0, 0.5)
            else:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s%s" % (" ".join(cmd), r.returncode, r.stdout,
                                                      r.stderr))
    return r


def read_logits(path, n_tokens, n_vocab):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    t = torch.frombuffer(data, dtype=torch.float32)
    if t.numel() != n_tokens * n_vocab:
        raise RuntimeError("%s: %d floats, expected %d x %d" % (path, t.numel(), n_tokens, n_vocab))
    return t.reshape(n_tokens, n_vocab)


def rel_err(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cleave", default=os.environ.get("CLEAVE"), help="cleave binary ($CLEAVE)")
    ap.add_argument("--device", default=None, help="also run cleave on this device, e.g. cuda:0")
    ap.add_argument("--workdir", default=None, help="keep checkpoints and GGUFs here")
    ap.add_argument("--threads", type=int, default=0, help="cleave CPU threads (0: all)")
    ap.add_argument("--only", default=None, help="comma-separated case names")
    args = ap.parse_args()
    if not args.cleave or not os.access(args.cleave, os.X_OK):
        ap.error("give the cleave binary with --cleave or $CLEAVE")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    print("torch %s, transformers %s" % (torch.__version__, transformers.__version__))

    rng = random.Random(7)
    tokens = [1] + [rng.randrange(3, BASE["vocab_size"]) for _ in range(23)]
    tok_arg = ",".join(str(t) for t in tokens)
    work = args.workdir or tempfile.mkdtemp(prefix="cleave-hfref-")
    os.makedirs(work, exist_ok=True)

    rows, failed = [], False
    for seed, (name, cfg_cls, model_cls, extra, save_kw) in enumerate(CASES):
        if args.only and name not in args.only.split(","):
            continue
        cfg = make_config(cfg_cls, extra)
        cfg._attn_implementation = "eager"
        model = getattr(transformers, model_cls)(cfg).float().eval()
        randomize(model, 1000 + seed)
        if cfg.tie_word_embeddings:
            assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
        ckpt = os.path.join(work, name)
        model.save_pretrained(ckpt, safe_serialization=True, **save_kw)
        # Reload from disk, so the reference is exactly what cleave reads.
        dtype_kw = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
        model = getattr(transformers, model_cls).from_pretrained(
            ckpt, attn_implementation="eager", **{dtype_kw: torch.float32}).eval()
        with torch.no_grad():
            ref = model(torch.tensor([tokens])).logits[0].float()
        n_files = len([f for f in os.listdir(ckpt) if f.endswith(".safetensors")])

        gguf = os.path.join(work, name + ".gguf")
        run([args.cleave, "convert", "--from", "hf", ckpt, "-o", gguf, "--type", "f32"])
        errs = {}
        for dev, tol in [("cpu", CPU_TOL)] + ([(args.device, GPU_TOL)] if args.device else []):
            out = os.path.join(work, "%s.%s.f32" % (name, dev.replace(":", "")))
            cmd = [args.cleave, "logits", "-m", gguf, "--tokens", tok_arg, "-o", out, "-ctk",
                   "f32", "--device", dev]
            if dev == "cpu" and args.threads:
                cmd += ["-t", str(args.threads)]
            try:
                run(cmd)
                got = read_logits(out, len(tokens), BASE["vocab_size"])
                err = rel_err(got, ref)
                argmax = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
            except RuntimeError as e:
                print(e, file=sys.stderr)
                err, argmax = float("inf"), 0.0
            ok = err <= tol
            failed |= not ok
            errs[dev] = (err, tol, argmax, ok)
        rows.append((name, model_cls, n_files, float(ref.abs().max()), errs))

    print()
    print("%-26s %-20s %6s %8s  %-8s %10s %8s %7s  %s" % (
        "case", "class", "shards", "max|ref|", "device", "rel err", "tol", "argmax", "result"))
    for name, cls, n_files, mx, errs in rows:
        for dev, (err, tol, argmax, ok) in errs.items():
            print("%-26s %-20s %6d %8.3f  %-8s %10.3e %8.0e %6.0f%%  %s" % (
                name, cls, n_files, mx, dev, err, tol, 100 * argmax, "ok" if ok else "FAIL"))
    oks = [ok for r in rows for (_, _, _, ok) in r[4].values()]
    print("\n%d passed, %d failed" % (sum(oks), len(oks) - sum(oks)))
    if not args.workdir:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
