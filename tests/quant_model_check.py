"""Checks a file written by `cleave quantize` (or `cleave gen --type MIX`)
with the gguf package: every tensor's type is the one llama.cpp's rules
give (restated here independently of src/quant/quant_mix.c), data offsets
are aligned, metadata is the source's plus general.file_type and
general.quantization_version, copied tensors are byte-identical and
quantized ones decode within their type's error bound of the source.
usage: quant_model_check.py OUT.gguf MIX [--pure] [--src SRC.gguf]"""
import sys
import warnings

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader
from gguf import quants

FTYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
         "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16,
         "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30, "BF16": 32}
BASE = {"F32": Q.F32, "F16": Q.F16, "BF16": Q.BF16, "Q4_0": Q.Q4_0, "Q4_1": Q.Q4_1,
        "Q8_0": Q.Q8_0, "Q5_0": Q.Q5_0, "Q5_1": Q.Q5_1, "Q2_K": Q.Q2_K, "Q3_K_S": Q.Q3_K,
        "Q3_K_M": Q.Q3_K, "Q3_K_L": Q.Q3_K, "Q4_K_S": Q.Q4_K, "Q4_K_M": Q.Q4_K,
        "Q5_K_S": Q.Q5_K, "Q5_K_M": Q.Q5_K, "Q6_K": Q.Q6_K, "IQ4_NL": Q.IQ4_NL, "IQ4_XS": Q.IQ4_XS}
BLOCK = {Q.F32: 1, Q.F16: 1, Q.BF16: 1, Q.Q4_0: 32, Q.Q4_1: 32, Q.Q5_0: 32, Q.Q5_1: 32,
         Q.Q8_0: 32, Q.IQ4_NL: 32, Q.Q2_K: 256, Q.Q3_K: 256, Q.Q4_K: 256, Q.Q5_K: 256,
         Q.Q6_K: 256, Q.IQ4_XS: 256}
# relative RMS error bounds (percent), as in quant_reference.py, with room
# for data that is not Gaussian
BOUND = {Q.F32: 0, Q.F16: 0.1, Q.BF16: 0.5, Q.Q8_0: 0.7, Q.Q6_K: 2.2, Q.Q5_K: 4.5,
         Q.Q5_1: 4.5, Q.Q5_0: 5.0, Q.Q4_K: 8.5, Q.Q4_1: 9.0, Q.Q4_0: 10.0, Q.IQ4_NL: 8.5,
         Q.IQ4_XS: 8.5, Q.Q3_K: 17.0, Q.Q2_K: 31.0}
FALLBACK = {Q.Q2_K: Q.IQ4_NL, Q.Q3_K: Q.IQ4_NL, Q.IQ4_XS: Q.IQ4_NL, Q.Q4_K: Q.Q5_0,
            Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0}


def more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def rule_type(mix, name, ne0, m):
    """llama.cpp's llama_tensor_get_type for a dense llama-family model."""
    t = BASE[mix]
    layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
    if name == "output.weight" or (not m["has_output"] and name == "token_embd.weight"):
        if ne0 % BLOCK[t]:
            t = Q.Q8_0
        elif t != Q.Q8_0:
            t = Q.Q6_K
    elif name == "token_embd.weight":
        pass
    elif "attn_v.weight" in name:
        if mix == "Q2_K":
            t = Q.Q4_K if m["gqa"] >= 4 else Q.Q3_K
        elif mix == "Q3_K_M":
            t = Q.Q5_K if layer < 2 else Q.Q4_K
        elif mix == "Q3_K_L":
            t = Q.Q5_K
        elif mix in ("IQ4_NL", "IQ4_XS") and m["gqa"] >= 4:
            t = Q.Q5_K
        elif mix in ("Q4_K_M", "Q5_K_M") and more_bits(layer, m["n_attn_v"]):
            t = Q.Q6_K
        elif mix == "Q4_K_S" and layer < 4:
            t = Q.Q5_K
    elif "ffn_down" in name:
        n = m["n_layer"]
        if mix == "Q2_K":
            t = Q.Q3_K
        elif mix == "Q3_K_M":
            t = Q.Q5_K if layer < n // 16 else Q.Q4_K
        elif mix == "Q3_K_L":
            t = Q.Q5_K
        elif mix == "Q4_K_M":
            if more_bits(layer, n):
                t = Q.Q6_K
        elif layer < n // 8 and mix in ("IQ4_NL", "IQ4_XS"):
            t = Q.Q5_K
        elif mix == "Q5_K_M" and more_bits(layer, n):
            t = Q.Q6_K
        elif mix == "Q4_K_S" and layer < n // 8:
            t = Q.Q5_K
    elif "attn_output.weight" in name:
        t = {"Q2_K": Q.Q3_K, "Q3_K_M": Q.Q4_K, "Q3_K_L": Q.Q5_K}.get(mix, t)
    return t


def expected_type(mix, pure, tensor, src_type, m):
    name, ne0 = tensor.name, int(tensor.shape[0])
    quantized = (len(tensor.shape) >= 2 and name.endswith("weight") and "_norm.weight" not in name)
    if not quantized:
        return src_type
    t = BASE[mix] if pure or BLOCK[BASE[mix]] == 1 else rule_type(mix, name, ne0, m)
    if ne0 % BLOCK[t]:
        t = FALLBACK.get(t, Q.F16)
        if ne0 % BLOCK[t]:
            t = Q.F16
    return t


def field(reader, key):
    f = reader.fields[key]
    return f.contents() if hasattr(f, "contents") else f.parts[-1].tolist()


def values(t):
    return quants.dequantize(t.data, t.tensor_type).astype(np.float64).reshape(-1)


def main():
    warnings.simplefilter("ignore", RuntimeWarning)
    args = sys.argv[1:]
    pure = "--pure" in args
    src_path = args[args.index("--src") + 1] if "--src" in args else None
    out_path, mix = args[0], {"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}.get(
        args[1].upper(), args[1].upper())
    out = GGUFReader(out_path)
    src = GGUFReader(src_path) if src_path else None
    bad = []
    arch = field(out, "general.architecture")
    n_head = field(out, f"{arch}.attention.head_count")
    n_head_kv = field(out, f"{arch}.attention.head_count_kv") if f"{arch}.attention.head_count_kv" in out.fields else n_head
    names = [t.name for t in out.tensors]
    m = {"n_layer": field(out, f"{arch}.block_count"), "gqa": n_head // n_head_kv,
         "n_attn_v": sum("attn_v.weight" in n for n in names), "has_output": "output.weight" in names}
    if field(out, "general.file_type") != FTYPE[mix]:
        bad.append(f"general.file_type is {field(out, 'general.file_type')}, expected {FTYPE[mix]}")
    if field(out, "general.quantization_version") != 2:
        bad.append("general.quantization_version is not 2")
    align = field(out, "general.alignment") if "general.alignment" in out.fields else 32
    src_tensors = {t.name: t for t in src.tensors} if src else {}
    if src:
        for key, f in src.fields.items():
            if key.startswith("GGUF.") or key in ("general.file_type", "general.quantization_version"):
                continue
            g = out.fields.get(key)
            if g is None or g.types != f.types or field(out, key) != field(src, key):
                bad.append(f"metadata {key} not copied as it was")
        if names != [t.name for t in src.tensors]:
            bad.append("tensor names or order differ from the source")
    counts = {}
    for t in out.tensors:
        if t.data_offset % align:
            bad.append(f"{t.name}: data at offset {t.data_offset} is not {align}-aligned")
        s = src_tensors.get(t.name)
        want = expected_type(mix, pure, t, s.tensor_type if s else t.tensor_type, m)
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        if t.tensor_type != want:
            bad.append(f"{t.name}: {t.tensor_type.name}, llama.cpp's rules give {want.name}")
            continue
        if not s:
            continue
        if list(t.shape) != list(s.shape):
            bad.append(f"{t.name}: shape {list(t.shape)} != source {list(s.shape)}")
            continue
        if t.tensor_type == s.tensor_type:
            if not np.array_equal(np.asarray(t.data).view(np.uint8), np.asarray(s.data).view(np.uint8)):
                bad.append(f"{t.name}: kept its type but its bytes changed")
            continue
        x, y = values(s), values(t)
        err = 100 * np.sqrt(np.mean((x - y) ** 2) / max(np.mean(x ** 2), 1e-30))
        bound = BOUND[t.tensor_type] + (BOUND[Q.Q8_0] if s.tensor_type == Q.Q8_0 else 0)
        if not np.all(np.isfinite(y)) or not err <= bound:
            bad.append(f"{t.name}: {t.tensor_type.name} error {err:.2f}% above {bound}%")
    for b in bad:
        print("FAIL:", b)
    print(f"{out_path} {mix}{' pure' if pure else ''}: {len(out.tensors)} tensors "
          f"{dict(sorted(counts.items()))}: {'ok' if not bad else 'FAILED'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
