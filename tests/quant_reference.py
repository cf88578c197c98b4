"""cleave's block formats against the gguf package (an independent numpy
implementation of ggml's formats), for every type cleave runs:
 (a) random blocks, with scales at zero, -0, f16 subnormals, the f16
     extremes, Inf and NaN, dequantize bit-identically (NaN equals NaN);
 (b) cleave's quantized bytes, read back by gguf, give cleave's own
     dequantization, and do not depend on the thread count;
 (c) where gguf can quantize (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, BF16) the bytes
     equal gguf's;
 (d) the RMS error relative to the RMS of Gaussian data stays under a
     fixed bound per type, and zero, tiny and huge inputs give finite
     values (never NaN/Inf scales).
usage: quant_reference.py HELPER TMPDIR"""
import os
import subprocess
import sys

import warnings

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import quants

HELPER, TMP = sys.argv[1], sys.argv[2]
os.makedirs(TMP, exist_ok=True)

# type name -> (gguf type, block weights, block bytes, byte offsets of f16 scales)
TYPES = {
    "q4_0": (Q.Q4_0, 32, 18, [0]),
    "q4_1": (Q.Q4_1, 32, 20, [0, 2]),
    "q5_0": (Q.Q5_0, 32, 22, [0]),
    "q5_1": (Q.Q5_1, 32, 24, [0, 2]),
    "q8_0": (Q.Q8_0, 32, 34, [0]),
    "q2_K": (Q.Q2_K, 256, 84, [80, 82]),
    "q3_K": (Q.Q3_K, 256, 110, [108]),
    "q4_K": (Q.Q4_K, 256, 144, [0, 2]),
    "q5_K": (Q.Q5_K, 256, 176, [0, 2]),
    "q6_K": (Q.Q6_K, 256, 210, [208]),
    "iq4_nl": (Q.IQ4_NL, 32, 18, [0]),
    "iq4_xs": (Q.IQ4_XS, 256, 136, [0]),
    "mxfp4": (Q.MXFP4, 32, 17, []),  # its E8M0 exponent byte takes every value at random
    "bf16": (Q.BF16, 1, 2, []),
}
# Measured on 2^18 N(0,1) weights (percent): each bound is a little above.
ERROR_BOUND = {
    "q8_0": 0.60, "q6_K": 1.85, "q5_K": 3.9, "q5_1": 4.1, "q5_0": 4.6, "q4_K": 7.7,
    "q4_1": 8.4, "q4_0": 9.2, "iq4_nl": 7.9, "iq4_xs": 8.0, "q3_K": 15.5, "q2_K": 29.0,
    "mxfp4": 12.3, "bf16": 0.3,
}
GGUF_QUANTIZES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "mxfp4", "bf16"]
SPECIAL_F16 = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x7BFF, 0xFBFF,
               0x7C00, 0xFC00, 0x7E00, 0x1234]

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def helper(*args):
    r = subprocess.run([HELPER, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"quant_ref_helper {' '.join(args)}: {r.stderr.strip()}")


def cleave_dequant(name, raw):
    src, dst = os.path.join(TMP, name + ".blk"), os.path.join(TMP, name + ".deq")
    raw.tofile(src)
    helper("dequant", name, src, dst)
    return np.fromfile(dst, dtype=np.float32)


def cleave_quant(name, x, threads=1):
    src, dst = os.path.join(TMP, name + ".f32"), os.path.join(TMP, name + ".q")
    x.astype(np.float32).tofile(src)
    helper("quant", name, src, dst, str(threads))
    return np.fromfile(dst, dtype=np.uint8)


def same_bits(a, b):
    """Bit-identical floats, any NaN equal to any NaN."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if a.shape != b.shape:
        return False
    nan = np.isnan(a) & np.isnan(b)
    return bool(np.all(nan | (a.view(np.uint32) == b.view(np.uint32))))


def gguf_dequant(gtype, raw):
    return quants.dequantize(raw, gtype).astype(np.float32).reshape(-1)


def random_blocks(rng, name):
    gtype, be, bb, scales = TYPES[name]
    nblk = 64 if be == 256 else 512
    raw = rng.integers(0, 256, size=(nblk, bb), dtype=np.uint8)
    raw[0, :] = 0x00  # extremes of every quant field
    raw[1, :] = 0xFF
    for i in range(2, nblk):
        for k, off in enumerate(scales):
            if rng.random() < 0.6:  # a special scale, else keep random bits
                v = SPECIAL_F16[(i + 3 * k) % len(SPECIAL_F16)]
                raw[i, off], raw[i, off + 1] = v & 0xFF, v >> 8
        if name == "bf16":  # special values as whole elements
            v = [0x0000, 0x8000, 0x0001, 0x7F80, 0xFF80, 0x7FC0, 0x7F7F, 0x0080][i % 8]
            raw[i, 0], raw[i, 1] = v & 0xFF, v >> 8
    for k, off in enumerate(scales):  # a few blocks at the largest normal scale
        raw[2:6, off], raw[2:6, off + 1] = 0xFF, 0x7B
    return raw


def special_inputs(rng, n):
    """Rows of zero, -0, subnormal, tiny, huge, FLT_MAX and mixed weights."""
    rows = [
        np.zeros(n), -np.zeros(n), np.full(n, 1e-40), rng.standard_normal(n) * 1e-42,
        rng.standard_normal(n) * 1e-8, rng.standard_normal(n) * 1e6,
        rng.standard_normal(n) * 1e30, np.where(rng.random(n) < 0.5, 3.4e38, -3.4e38),
        np.full(n, -7.0), np.full(n, 5.0), np.where(np.arange(n) % 37 == 0, 100.0, 1e-3),
        np.where(np.arange(n) % 2 == 0, 1e-40, 1e20),
    ]
    return np.concatenate(rows).astype(np.float32)


def check_type(name, rng):
    gtype, be, bb, _ = TYPES[name]
    # (a) dequantization of arbitrary blocks
    raw = random_blocks(rng, name)
    if not same_bits(cleave_dequant(name, raw.reshape(-1)), gguf_dequant(gtype, raw)):
        fail(f"{name}: dequantization differs from gguf's")

    # (b) quantized bytes read back by gguf; thread-count independence
    x = rng.standard_normal(1 << 18).astype(np.float32)
    q = cleave_quant(name, x)
    q3 = cleave_quant(name, x, threads=3)
    if not np.array_equal(q, q3):
        fail(f"{name}: bytes differ between 1 and 3 threads")
    y = gguf_dequant(gtype, q.reshape(-1, bb))
    if not same_bits(y, cleave_dequant(name, q)):
        fail(f"{name}: gguf reads cleave's quantized bytes differently from cleave")

    # (d) error bound on Gaussian data
    err = 100 * np.sqrt(np.mean((y.astype(np.float64) - x) ** 2) / np.mean(x.astype(np.float64) ** 2))
    line = f"{name:7s} rms error {err:6.3f}% (bound {ERROR_BOUND[name]}%)"

    # (c) bytes against gguf's quantizer
    if name in GGUF_QUANTIZES:
        ref = quants.quantize(x.reshape(-1, 1024), gtype).reshape(-1)
        agree = float(np.mean(ref.view(np.uint8) == q))
        line += f", bytes equal to gguf's: {100 * agree:.2f}%"
        if agree != 1.0:
            fail(f"{name}: quantized bytes differ from gguf's on {100 * (1 - agree):.3f}% of bytes")
    print(line)
    if not err <= ERROR_BOUND[name]:
        fail(f"{name}: rms error {err:.3f}% above the bound {ERROR_BOUND[name]}%")

    # zero, tiny and huge inputs: finite values, zeros stay zero
    s = special_inputs(rng, 1024)
    qs = cleave_quant(name, s)
    ys = gguf_dequant(gtype, qs.reshape(-1, bb))
    if name != "bf16" and not np.all(np.isfinite(ys)):
        fail(f"{name}: non-finite values from zero/tiny/huge inputs")
    if np.any(ys[:2048] != 0):
        fail(f"{name}: all-zero rows do not dequantize to zero")
    if not same_bits(ys, cleave_dequant(name, qs)):
        fail(f"{name}: gguf reads cleave's bytes of special inputs differently")
    if name in GGUF_QUANTIZES and name != "bf16":
        # inside the f16 range of scales the bytes equal gguf's too
        inside = np.concatenate([s[4096:5120], s[8192:11264]]).reshape(-1, 1024)
        ref = quants.quantize(inside, gtype).reshape(-1)
        if not np.array_equal(ref.view(np.uint8), cleave_quant(name, inside.reshape(-1))):
            fail(f"{name}: bytes differ from gguf's on constant and outlier rows")


def main():
    # NaN/Inf scales are inputs here on purpose: numpy's warnings are noise
    warnings.simplefilter("ignore", RuntimeWarning)
    np.seterr(all="ignore")
    rng = np.random.default_rng(1234)
    for name in TYPES:
        try:
            check_type(name, rng)
        except RuntimeError as e:
            fail(str(e))
    print(f"{len(TYPES) - len({f.split(':')[0] for f in failures})} passed, "
          f"{len({f.split(':')[0] for f in failures})} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
