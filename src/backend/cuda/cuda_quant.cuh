/* The block types beside q8_0 (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K,
 * IQ4_XS, MXFP4) on the GPU: their sizes, and the exact dequantization of one
 * 32-weight group for the kernels that need the weights themselves (table
 * lookups, the f16 conversion for cuBLAS, the any-alignment GEMV). These
 * take the reference's products in its order (quant/dequant.c) with no
 * fused multiply-add, so a row comes out bit-identical; they read bytes,
 * so any row alignment works. The decode GEMV has its own integer path
 * (cuda_gemvq.cuh). Weights stay in GGUF's layout on the device: the
 * engine's split-mode switch copies rows and whole-block column ranges of
 * it byte for byte, and the planner counts the file's bytes. */
#ifndef CLEAVE_CUDA_QUANT_CUH
#define CLEAVE_CUDA_QUANT_CUH

#include "cuda_common.cuh"

#define CQ_HD __host__ __device__ __forceinline__

/* Weights per block (QK) and bytes per block (BLK) of a block type. */
template <int T> struct cq_fmt;
#define CQ_FMT(T, qk, blk)                                                                         \
    template <> struct cq_fmt<T> { static constexpr int QK = qk, BLK = (int)sizeof(blk); }
CQ_FMT(CLEAVE_TYPE_Q4_0, QK4_0, block_q4_0);
CQ_FMT(CLEAVE_TYPE_Q4_1, QK4_1, block_q4_1);
CQ_FMT(CLEAVE_TYPE_Q5_0, QK5_0, block_q5_0);
CQ_FMT(CLEAVE_TYPE_Q5_1, QK5_1, block_q5_1);
CQ_FMT(CLEAVE_TYPE_IQ4_NL, QK4_NL, block_iq4_nl);
CQ_FMT(CLEAVE_TYPE_Q2_K, QK_K, block_q2_K);
CQ_FMT(CLEAVE_TYPE_Q3_K, QK_K, block_q3_K);
CQ_FMT(CLEAVE_TYPE_Q4_K, QK_K, block_q4_K);
CQ_FMT(CLEAVE_TYPE_Q5_K, QK_K, block_q5_K);
CQ_FMT(CLEAVE_TYPE_Q6_K, QK_K, block_q6_K);
CQ_FMT(CLEAVE_TYPE_IQ4_XS, QK_K, block_iq4_xs);
CQ_FMT(CLEAVE_TYPE_MXFP4, QK_MXFP4, block_mxfp4);
#undef CQ_FMT

/* Weights per block of one of these types, 0 for any other type (f32,
 * f16, bf16 and q8_0 have their own paths). */
static inline size_t cuda_qk(cleave_type t) {
    switch (t) {
    case CLEAVE_TYPE_Q4_0:
    case CLEAVE_TYPE_Q4_1:
    case CLEAVE_TYPE_Q5_0:
    case CLEAVE_TYPE_Q5_1:
    case CLEAVE_TYPE_IQ4_NL:
    case CLEAVE_TYPE_MXFP4: return 32;
    case CLEAVE_TYPE_Q2_K:
    case CLEAVE_TYPE_Q3_K:
    case CLEAVE_TYPE_Q4_K:
    case CLEAVE_TYPE_Q5_K:
    case CLEAVE_TYPE_Q6_K:
    case CLEAVE_TYPE_IQ4_XS: return 256;
    default: return 0;
    }
}

/* Batches up to this size skip the f16 GEMM path for weights of type t:
 * for the block types the GEMV takes up to cuda_gemvq_max_n() tokens (at
 * most CUDA_GEMVQ_MAX_N) and the int8 tensor-core GEMM (cuda_mmq.cuh) the
 * rest up to CUDA_MMQ_MAX_N, each reading the blocks once, where the way
 * to cuBLAS (rows to f16 first) moves 4.5 bytes per weight against
 * 0.5-0.8; cuda_gemv_max_n(t) for the others. */
#define CUDA_GEMVQ_MAX_N 8
#define CUDA_MMQ_MAX_N 32
static inline size_t cuda_gemv_limit(cleave_type t) {
    return cuda_qk(t) ? CUDA_MMQ_MAX_N : cuda_gemv_max_n(t);
}
/* The block types' GEMV serves batches of up to this many tokens
 * (CLEAVE_GEMVQ_MAX_N, default 6): it holds x of at most 4 in shared
 * memory, so 5..8 take two launches, each reading the weights. On an H200
 * (8B Q4_K_M, batched decode) 6 sequences ran at 724 tok/s through two
 * GEMV launches and 657 through the int8 GEMM, 8 at 784 and 824. */
size_t cuda_gemvq_max_n(void);

/* Runs f.template operator()<T>() for one of these types; false for any
 * other. */
template <typename F> static inline bool cuda_dispatch_q(cleave_type t, F f) {
    switch (t) {
    case CLEAVE_TYPE_Q4_0: f.template operator()<CLEAVE_TYPE_Q4_0>(); return true;
    case CLEAVE_TYPE_Q4_1: f.template operator()<CLEAVE_TYPE_Q4_1>(); return true;
    case CLEAVE_TYPE_Q5_0: f.template operator()<CLEAVE_TYPE_Q5_0>(); return true;
    case CLEAVE_TYPE_Q5_1: f.template operator()<CLEAVE_TYPE_Q5_1>(); return true;
    case CLEAVE_TYPE_IQ4_NL: f.template operator()<CLEAVE_TYPE_IQ4_NL>(); return true;
    case CLEAVE_TYPE_Q2_K: f.template operator()<CLEAVE_TYPE_Q2_K>(); return true;
    case CLEAVE_TYPE_Q3_K: f.template operator()<CLEAVE_TYPE_Q3_K>(); return true;
    case CLEAVE_TYPE_Q4_K: f.template operator()<CLEAVE_TYPE_Q4_K>(); return true;
    case CLEAVE_TYPE_Q5_K: f.template operator()<CLEAVE_TYPE_Q5_K>(); return true;
    case CLEAVE_TYPE_Q6_K: f.template operator()<CLEAVE_TYPE_Q6_K>(); return true;
    case CLEAVE_TYPE_IQ4_XS: f.template operator()<CLEAVE_TYPE_IQ4_XS>(); return true;
    case CLEAVE_TYPE_MXFP4: f.template operator()<CLEAVE_TYPE_MXFP4>(); return true;
    default: return false;
    }
}

/* The 16 levels of IQ4_NL / IQ4_XS (quant.h's kvalues_iq4nl), four int8
 * to a word: looked up in registers (a constant-memory table serializes
 * when the lanes of a warp ask for different entries). */
#define CQ_IQ4_W0 0xbfad9881u
#define CQ_IQ4_W1 0xf6eaddcfu
#define CQ_IQ4_W2 0x26190d01u
#define CQ_IQ4_W3 0x71594535u
CQ_HD int cq_iq4(int n) {
    uint32_t w = n < 8 ? (n < 4 ? CQ_IQ4_W0 : CQ_IQ4_W1) : (n < 12 ? CQ_IQ4_W2 : CQ_IQ4_W3);
    return (int)(int8_t)(uint8_t)(w >> (8 * (n & 3)));
}

/* The 16 doubled E2M1 levels of MXFP4 (quant.h's kvalues_mxfp4), in
 * registers as cq_iq4's; and half the scale of an E8M0 byte, 2^(x - 128)
 * (quant_e8m0_half). */
#define CQ_MX_W0 0x03020100u
#define CQ_MX_W1 0x0c080604u
#define CQ_MX_W2 0xfdfeff00u
#define CQ_MX_W3 0xf4f8fafcu
CQ_HD int cq_mxfp4(int n) {
    uint32_t w = n < 8 ? (n < 4 ? CQ_MX_W0 : CQ_MX_W1) : (n < 12 ? CQ_MX_W2 : CQ_MX_W3);
    return (int)(int8_t)(uint8_t)(w >> (8 * (n & 3)));
}
CQ_HD float cq_e8m0_half(uint8_t x) {
    uint32_t bits = x < 2 ? 0x00200000u << x : (uint32_t)(x - 1) << 23;
#ifdef __CUDA_ARCH__
    return __uint_as_float(bits);
#else
    float f;
    memcpy(&f, &bits, 4);
    return f;
#endif
}

/* an f16 at any byte address */
CQ_HD float cq_f16(const uint8_t *p) {
    return __half2float(__ushort_as_half((unsigned short)(p[0] | p[1] << 8)));
}
/* a * b, a * b + c and a * b - c, rounded as the C reference rounds them
 * (never fused; the host pass, for checks, has no contraction either) */
#ifdef __CUDA_ARCH__
CQ_HD float cq_mul(float a, float b) { return __fmul_rn(a, b); }
CQ_HD float cq_mad(float a, float b, float c) { return __fadd_rn(__fmul_rn(a, b), c); }
CQ_HD float cq_msub(float a, float b, float c) { return __fsub_rn(__fmul_rn(a, b), c); }
#else
CQ_HD float cq_mul(float a, float b) { return a * b; }
CQ_HD float cq_mad(float a, float b, float c) { return a * b + c; }
CQ_HD float cq_msub(float a, float b, float c) { return a * b - c; }
#endif

/* Q4_K/Q5_K: six-bit scale and min of sub-block j (quant_k4_scale_min) */
CQ_HD void cq_k4_scale_min(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}
/* Q3_K: signed six-bit scale of sub-block i (quant_q3_K_scales) */
CQ_HD int cq_q3_scale(int i, const uint8_t *p) {
    int low = i < 8 ? p[i] & 0xF : p[i - 8] >> 4;
    int high = (p[8 + i % 4] >> (2 * (i / 4))) & 3;
    return (low | high << 4) - 32;
}

/* y[0..32) = weights 32 g .. 32 g + 31 of a row of type T. */
template <int T> CQ_HD void cq_dequant32(const uint8_t *row, size_t g, float *y) {
    if constexpr (T == CLEAVE_TYPE_MXFP4) { /* an exponent byte, then the IQ4_NL-like nibbles */
        const uint8_t *b = row + g * cq_fmt<T>::BLK;
        float d = cq_e8m0_half(b[0]);
        for (int j = 0; j < 16; j++) {
            y[j] = cq_mul(d, (float)cq_mxfp4(b[1 + j] & 0xF));
            y[j + 16] = cq_mul(d, (float)cq_mxfp4(b[1 + j] >> 4));
        }
    } else if constexpr (cq_fmt<T>::QK == 32) {
        const uint8_t *b = row + g * cq_fmt<T>::BLK;
        float d = cq_f16(b);
        if constexpr (T == CLEAVE_TYPE_Q4_0 || T == CLEAVE_TYPE_IQ4_NL) {
            for (int j = 0; j < 16; j++) {
                int lo = b[2 + j] & 0xF, hi = b[2 + j] >> 4;
                if constexpr (T == CLEAVE_TYPE_Q4_0) {
                    y[j] = cq_mul((float)(lo - 8), d);
                    y[j + 16] = cq_mul((float)(hi - 8), d);
                } else {
                    y[j] = cq_mul(d, (float)cq_iq4(lo));
                    y[j + 16] = cq_mul(d, (float)cq_iq4(hi));
                }
            }
        } else if constexpr (T == CLEAVE_TYPE_Q4_1) {
            float m = cq_f16(b + 2);
            for (int j = 0; j < 16; j++) {
                y[j] = cq_mad((float)(b[4 + j] & 0xF), d, m);
                y[j + 16] = cq_mad((float)(b[4 + j] >> 4), d, m);
            }
        } else { /* Q5_0, Q5_1: qh after the scale(s), bit j for weight j */
            constexpr int qh_at = T == CLEAVE_TYPE_Q5_0 ? 2 : 4;
            float m = T == CLEAVE_TYPE_Q5_1 ? cq_f16(b + 2) : 0.0f;
            const uint8_t *q = b + qh_at + 4;
            uint32_t qh = (uint32_t)b[qh_at] | (uint32_t)b[qh_at + 1] << 8 |
                          (uint32_t)b[qh_at + 2] << 16 | (uint32_t)b[qh_at + 3] << 24;
            for (int j = 0; j < 16; j++) {
                int x0 = (q[j] & 0xF) | (int)((qh >> j) << 4 & 0x10);
                int x1 = (q[j] >> 4) | (int)((qh >> (j + 12)) & 0x10);
                if constexpr (T == CLEAVE_TYPE_Q5_0) {
                    y[j] = cq_mul((float)(x0 - 16), d);
                    y[j + 16] = cq_mul((float)(x1 - 16), d);
                } else {
                    y[j] = cq_mad((float)x0, d, m);
                    y[j + 16] = cq_mad((float)x1, d, m);
                }
            }
        }
    } else {
        const uint8_t *b = row + (g / 8) * cq_fmt<T>::BLK;
        const int k = (int)(g % 8); /* the 32-weight group inside the super-block */
        if constexpr (T == CLEAVE_TYPE_Q2_K || T == CLEAVE_TYPE_Q3_K) {
            /* group k: half j of 128 weights, shift s; 16 weights per scale */
            const int j = k / 4, s = k % 4;
            if constexpr (T == CLEAVE_TYPE_Q2_K) {
                float d = cq_f16(b + 80), dmin = cq_f16(b + 82);
                for (int hf = 0; hf < 2; hf++) {
                    int sc = b[8 * j + 2 * s + hf];
                    float dl = cq_mul(d, (float)(sc & 0xF)), ml = cq_mul(dmin, (float)(sc >> 4));
                    for (int l = 0; l < 16; l++)
                        y[16 * hf + l] =
                            cq_msub(dl, (float)((b[16 + 32 * j + 16 * hf + l] >> (2 * s)) & 3), ml);
                }
            } else {
                float d = cq_f16(b + 108);
                int m = 1 << (4 * j + s);
                for (int hf = 0; hf < 2; hf++) {
                    float dl = cq_mul(d, (float)cq_q3_scale(8 * j + 2 * s + hf, b + 96));
                    for (int l = 0; l < 16; l++) {
                        int kk = 16 * hf + l;
                        int q = ((b[32 + 32 * j + kk] >> (2 * s)) & 3) - ((b[kk] & m) ? 0 : 4);
                        y[kk] = cq_mul(dl, (float)q);
                    }
                }
            }
        } else if constexpr (T == CLEAVE_TYPE_Q4_K || T == CLEAVE_TYPE_Q5_K) {
            /* group k: sub-block k, nibble k % 2 of qs bytes 32 (k / 2) .. */
            float d = cq_f16(b), dmin = cq_f16(b + 2);
            int sc, mn;
            cq_k4_scale_min(k, b + 4, &sc, &mn);
            float dl = cq_mul(d, (float)sc), ml = cq_mul(dmin, (float)mn);
            constexpr int qs_at = T == CLEAVE_TYPE_Q4_K ? 16 : 48;
            const uint8_t *q = b + qs_at + 32 * (k / 2);
            for (int l = 0; l < 32; l++) {
                int v = (k & 1) ? q[l] >> 4 : q[l] & 0xF;
                if constexpr (T == CLEAVE_TYPE_Q5_K) v += (b[16 + l] >> k) & 1 ? 16 : 0;
                y[l] = cq_msub(dl, (float)v, ml);
            }
        } else if constexpr (T == CLEAVE_TYPE_Q6_K) {
            /* group k: half h of 128 weights, quarter g (ql byte l or l + 32,
             * low or high nibble; qh bits 2 g) */
            const int h = k / 4, g4 = k % 4;
            const uint8_t *ql = b + 64 * h + (g4 & 1) * 32, *qh = b + 128 + 32 * h;
            const int8_t *sc = (const int8_t *)(b + 192 + 8 * h);
            float d = cq_f16(b + 208);
            for (int l = 0; l < 32; l++) {
                int q = ((g4 & 2) ? ql[l] >> 4 : ql[l] & 0xF) | (((qh[l] >> (2 * g4)) & 3) << 4);
                y[l] = cq_mul(cq_mul(d, (float)sc[l / 16 + 2 * g4]), (float)(q - 32));
            }
        } else { /* IQ4_XS: sub-block k */
            float d = cq_f16(b);
            int sh = b[2] | b[3] << 8;
            int ls = (((b[4 + k / 2] >> (4 * (k % 2))) & 0xF) | (((sh >> (2 * k)) & 3) << 4)) - 32;
            float dl = cq_mul(d, (float)ls);
            const uint8_t *q = b + 8 + 16 * k;
            for (int j = 0; j < 16; j++) {
                y[j] = cq_mul(dl, (float)cq_iq4(q[j] & 0xF));
                y[j + 16] = cq_mul(dl, (float)cq_iq4(q[j] >> 4));
            }
        }
    }
}

/* ---- entry points of cuda_dequant.cu and cuda_gemvq.cu ------------------ */

/* out[i] = row ids[i] of t (a type above), a zero row for id -1. */
cleave_status cuda_get_rows_q(cuda_device *d, const be_mat *t, const int32_t *ids, size_t n,
                              float *out);
/* rows [r0, r0 + rows) of w to f16, [rows][ne0], for the GEMM path. */
cleave_status cuda_dequant_half_q(cuda_device *d, const be_mat *w, size_t r0, size_t rows,
                                  __half *out);
/* y = x . w^T (+ bias) for any row alignment: one warp a row, exact weights
 * times f32 x; the fallback where the fast GEMV cannot take a layout. */
cleave_status cuda_gemv_any_q(cuda_device *d, const be_mat *w, const float *x, size_t n,
                              const float *bias, float *y);

/* The decode GEMV (cuda_gemvq.cu): as cuda_gemv (cuda_gemv.cuh) for these
 * types and batches of up to CUDA_GEMVQ_MAX_N, a launch per weight type
 * among the matrices; false (nothing launched) when a batch or layout
 * does not fit it. */
bool cuda_gemvq(cuda_device *d, const be_mat *const *w, const float *const *bias, float *const *y,
                int count, const float *x, size_t n, cleave_status *st);
bool cuda_gemvq_swiglu(cuda_device *d, const be_mat *gate, const be_mat *up, const float *x,
                       size_t n, float *y, cleave_status *st);
/* The same GEMV over experts (be_moe_ops.matmul_id, and with wu the
 * fused gate/up of matmul_id_glu: SwiGLU or gpt-oss's clamped one): each
 * (token, slot) pair's rows of its expert ids[pair] of w (ne2 experts,
 * nb2 apart), x a row per token (x_slots 1) or per pair (x_slots k),
 * biases per expert; group: the pairs that share an expert take its rows
 * together (at most GQ_GROUP_MAX_EXPERTS experts), else a pair at a time;
 * false (nothing launched) where the type, layout or the x rows of the
 * batch do not fit it. */
bool cuda_gemvq_id(cuda_device *d, const be_mat *w, const be_mat *wu, const float *bias, const float *bias_u,
                   const float *x, size_t x_slots, size_t n, size_t k, const int32_t *ids, bool group, bool oai,
                   float alpha, float limit, float *y, cleave_status *st);
/* The batched GEMM (cuda_mmq.cu): y[s] = x . w[s]^T (+ bias[s]) for
 * `count` (at most 3) matrices of one type and width, in one launch, for
 * batches of up to CUDA_MMQ_MAX_N; false (nothing launched) when their
 * layouts do not fit it, else true with *st the launches' status. */
bool cuda_mmq(cuda_device *d, const be_mat *const *w, const float *const *bias, float *const *y,
              int count, const float *x, size_t n, cleave_status *st);
/* The same for the FFN's gate and up matrices (one type and shape) with
 * SwiGLU: y = silu(x . gate^T) * (x . up^T), [n][rows]; both in one
 * launch on x quantized once, SwiGLU in the K split's sum. */
bool cuda_mmq_swiglu(cuda_device *d, const be_mat *gate, const be_mat *up, const float *x, size_t n,
                     float *y, cleave_status *st);
/* Whether that GEMM reads weights of type t at all (a layout may still
 * refuse) */
bool cuda_mmq_has_type(cleave_type t);
/* Experts through that GEMM (cuda_mmq_id.cu), a batch of any size:
 * y[s][p] = x's row of pair p . (expert ids[p] of w[s])^T (+ that
 * expert's row of bias[s]) for the n x k (token, slot) pairs p, x a row
 * per token (x_slots 1) or per pair (x_slots k); `count` stacks (gate and
 * up: 2) of one type and shape, grouped once on the device. False
 * (nothing launched) where the type or layout does not fit it. */
bool cuda_mmq_id(cuda_device *d, const be_mat *const *w, const float *const *bias, float *const *y, int count,
                 const float *x, size_t x_slots, size_t n, size_t k, const int32_t *ids, cleave_status *st);

#endif
