/* Plain C integer dots of every block type against quantized activations:
 * the reference the AVX2 kernels are tested against, and the kernels of a
 * CPU without AVX2. Per (sub-)block the weight quants times the activation
 * quants are summed exactly in int32, then scaled in f32, so the only
 * rounding is the per-block scaling; zero points and mins go through the
 * activation block sums. The weight layouts are unpacked as
 * src/quant/dequant.c unpacks them. */
#include <string.h>

#include "cpu_qdot.h"
#include "quant/quant.h"
#include "quant/quant_internal.h"

#define F16(h) quant_f16_to_f32(h)

/* Weight j of a 32-block of nibbles: low nibbles are weights 0..15, high
 * nibbles 16..31. */
static int nib(const uint8_t *qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }
/* Bit j of a q5 block's qh: the fifth bit of weight j. */
static int hbit5(const uint8_t qh[4], int j) {
    uint32_t h;
    memcpy(&h, qh, 4);
    return (int)((h >> j) & 1);
}

static float qd_q4_0(const void *w, const void *xq, size_t n) {
    const block_q4_0 *b = w;
    const cpu_qa32 *x = xq;
    float s = 0;
    for (size_t i = 0; i < n / 32; i++) {
        int32_t isum = 0;
        for (int j = 0; j < 32; j++)
            isum += (nib(b[i].qs, j) - 8) * x[i].qs[j];
        s += F16(b[i].d) * x[i].d * (float)isum;
    }
    return s;
}

static float qd_q4_1(const void *w, const void *xq, size_t n) {
    const block_q4_1 *b = w;
    const cpu_qa32 *x = xq;
    float s = 0;
    for (size_t i = 0; i < n / 32; i++) {
        int32_t isum = 0;
        for (int j = 0; j < 32; j++)
            isum += nib(b[i].qs, j) * x[i].qs[j];
        s += F16(b[i].d) * x[i].d * (float)isum + F16(b[i].m) * x[i].d * (float)x[i].sum;
    }
    return s;
}

static float qd_q5_0(const void *w, const void *xq, size_t n) {
    const block_q5_0 *b = w;
    const cpu_qa32 *x = xq;
    float s = 0;
    for (size_t i = 0; i < n / 32; i++) {
        int32_t isum = 0;
        for (int j = 0; j < 32; j++)
            isum += ((nib(b[i].qs, j) | hbit5(b[i].qh, j) << 4) - 16) * x[i].qs[j];
        s += F16(b[i].d) * x[i].d * (float)isum;
    }
    return s;
}

static float qd_q5_1(const void *w, const void *xq, size_t n) {
    const block_q5_1 *b = w;
    const cpu_qa32 *x = xq;
    float s = 0;
    for (size_t i = 0; i < n / 32; i++) {
        int32_t isum = 0;
        for (int j = 0; j < 32; j++)
            isum += (nib(b[i].qs, j) | hbit5(b[i].qh, j) << 4) * x[i].qs[j];
        s += F16(b[i].d) * x[i].d * (float)isum + F16(b[i].m) * x[i].d * (float)x[i].sum;
    }
    return s;
}

static float qd_q8_0(const void *w, const void *xq, size_t n) {
    const block_q8_0 *b = w;
    const cpu_qa32 *x = xq;
    float s = 0;
    for (size_t i = 0; i < n / 32; i++) {
        int32_t isum = 0;
        for (int j = 0; j < 32; j++)
            isum += b[i].qs[j] * x[i].qs[j];
        s += F16(b[i].d) * x[i].d * (float)isum;
    }
    return s;
}

static float qd_iq4_nl(const void *w, const void *xq, size_t n) {
    const block_iq4_nl *b = w;
    const cpu_qa32 *x = xq;
    float s = 0;
    for (size_t i = 0; i < n / 32; i++) {
        int32_t isum = 0;
        for (int j = 0; j < 32; j++)
            isum += kvalues_iq4nl[nib(b[i].qs, j)] * x[i].qs[j];
        s += F16(b[i].d) * x[i].d * (float)isum;
    }
    return s;
}

/* MXFP4: the doubled E2M1 levels are integers, so the block's dot is one
 * integer sum, scaled by half the E8M0 scale. */
static float qd_mxfp4(const void *w, const void *xq, size_t n) {
    const block_mxfp4 *b = w;
    const cpu_qa32 *x = xq;
    float s = 0;
    for (size_t i = 0; i < n / 32; i++) {
        int32_t isum = 0;
        for (int j = 0; j < 32; j++)
            isum += kvalues_mxfp4[nib(b[i].qs, j)] * x[i].qs[j];
        s += quant_e8m0_half(b[i].e) * x[i].d * (float)isum;
    }
    return s;
}

/* Sum of the activation quants of 32-sub-block j of a 256-block. */
static int32_t bsum32(const cpu_qa256 *x, int j) { return x->bsums[2 * j] + x->bsums[2 * j + 1]; }

/* Q2_K: sixteen sub-blocks of 16; weight k = 128c + 32p + 16h + l is bits
 * 2p..2p+1 of qs[32c + 16h + l], in sub-block k / 16. */
static float qd_q2_K(const void *w, const void *xq, size_t n) {
    const block_q2_K *b = w;
    const cpu_qa256 *x = xq;
    float s = 0;
    for (size_t i = 0; i < n / QK_K; i++) {
        int32_t isum = 0, msum = 0;
        for (int k = 0; k < QK_K; k++) {
            int c = k / 128, p = (k % 128) / 32, r = k % 32;
            int q = (b[i].qs[32 * c + r] >> (2 * p)) & 3;
            isum += (b[i].scales[k / 16] & 0xF) * q * x[i].qs[k];
        }
        for (int j = 0; j < 16; j++)
            msum += (b[i].scales[j] >> 4) * x[i].bsums[j];
        s += F16(b[i].d) * x[i].d * (float)isum - F16(b[i].dmin) * x[i].d * (float)msum;
    }
    return s;
}

/* Q3_K: the Q2_K layout for the low two bits; bit 4c + p of hmask[r]
 * clear subtracts 4. */
static float qd_q3_K(const void *w, const void *xq, size_t n) {
    const block_q3_K *b = w;
    const cpu_qa256 *x = xq;
    float s = 0;
    for (size_t i = 0; i < n / QK_K; i++) {
        int8_t sc[16];
        quant_q3_K_scales(b[i].scales, sc);
        int32_t isum = 0;
        for (int k = 0; k < QK_K; k++) {
            int c = k / 128, p = (k % 128) / 32, r = k % 32;
            int q = (b[i].qs[32 * c + r] >> (2 * p)) & 3;
            if (!(b[i].hmask[r] & (1 << (4 * c + p)))) q -= 4;
            isum += sc[k / 16] * q * x[i].qs[k];
        }
        s += F16(b[i].d) * x[i].d * (float)isum;
    }
    return s;
}

/* Q4_K: eight sub-blocks of 32; sub-block j's quants are the low (j even)
 * or high nibbles of qs[32 (j / 2) ..]. */
static float qd_q4_K(const void *w, const void *xq, size_t n) {
    const block_q4_K *b = w;
    const cpu_qa256 *x = xq;
    float s = 0;
    for (size_t i = 0; i < n / QK_K; i++) {
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            quant_k4_scale_min(j, b[i].scales, &sc, &m);
            int32_t sub = 0;
            for (int l = 0; l < 32; l++) {
                uint8_t v = b[i].qs[32 * (j / 2) + l];
                sub += (j % 2 ? v >> 4 : v & 0xF) * x[i].qs[32 * j + l];
            }
            isum += sc * sub;
            msum += m * bsum32(&x[i], j);
        }
        s += F16(b[i].d) * x[i].d * (float)isum - F16(b[i].dmin) * x[i].d * (float)msum;
    }
    return s;
}

/* Q5_K: Q4_K plus bit j of qh[l] as the fifth bit of sub-block j. */
static float qd_q5_K(const void *w, const void *xq, size_t n) {
    const block_q5_K *b = w;
    const cpu_qa256 *x = xq;
    float s = 0;
    for (size_t i = 0; i < n / QK_K; i++) {
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            quant_k4_scale_min(j, b[i].scales, &sc, &m);
            int32_t sub = 0;
            for (int l = 0; l < 32; l++) {
                uint8_t v = b[i].qs[32 * (j / 2) + l];
                int q = (j % 2 ? v >> 4 : v & 0xF) | ((b[i].qh[l] >> j) & 1) << 4;
                sub += q * x[i].qs[32 * j + l];
            }
            isum += sc * sub;
            msum += m * bsum32(&x[i], j);
        }
        s += F16(b[i].d) * x[i].d * (float)isum - F16(b[i].dmin) * x[i].d * (float)msum;
    }
    return s;
}

/* Q6_K: weight k = 128c + 32g + l takes the low (g < 2) or high nibble of
 * ql[64c + 32 (g % 2) + l] and bits 2g..2g+1 of qh[32c + l]; sub-block k / 16. */
static float qd_q6_K(const void *w, const void *xq, size_t n) {
    const block_q6_K *b = w;
    const cpu_qa256 *x = xq;
    float s = 0;
    for (size_t i = 0; i < n / QK_K; i++) {
        int32_t isum = 0;
        for (int k = 0; k < QK_K; k++) {
            int c = k / 128, g = (k % 128) / 32, l = k % 32;
            uint8_t v = b[i].ql[64 * c + 32 * (g % 2) + l];
            int q = ((g < 2 ? v & 0xF : v >> 4) | ((b[i].qh[32 * c + l] >> (2 * g)) & 3) << 4) - 32;
            isum += b[i].scales[k / 16] * q * x[i].qs[k];
        }
        s += F16(b[i].d) * x[i].d * (float)isum;
    }
    return s;
}

static float qd_iq4_xs(const void *w, const void *xq, size_t n) {
    const block_iq4_xs *b = w;
    const cpu_qa256 *x = xq;
    float s = 0;
    for (size_t i = 0; i < n / QK_K; i++) {
        int32_t isum = 0;
        for (int j = 0; j < 8; j++) {
            int32_t sub = 0;
            for (int l = 0; l < 32; l++)
                sub += kvalues_iq4nl[nib(b[i].qs + 16 * j, l)] * x[i].qs[32 * j + l];
            isum += quant_iq4_xs_scale(&b[i], j) * sub;
        }
        s += F16(b[i].d) * x[i].d * (float)isum;
    }
    return s;
}

cpu_qdot_fn cpu_qdot_c_for(cleave_type t) {
    switch (t) {
    case CLEAVE_TYPE_Q4_0: return qd_q4_0;
    case CLEAVE_TYPE_Q4_1: return qd_q4_1;
    case CLEAVE_TYPE_Q5_0: return qd_q5_0;
    case CLEAVE_TYPE_Q5_1: return qd_q5_1;
    case CLEAVE_TYPE_Q8_0: return qd_q8_0;
    case CLEAVE_TYPE_IQ4_NL: return qd_iq4_nl;
    case CLEAVE_TYPE_Q2_K: return qd_q2_K;
    case CLEAVE_TYPE_Q3_K: return qd_q3_K;
    case CLEAVE_TYPE_Q4_K: return qd_q4_K;
    case CLEAVE_TYPE_Q5_K: return qd_q5_K;
    case CLEAVE_TYPE_Q6_K: return qd_q6_K;
    case CLEAVE_TYPE_IQ4_XS: return qd_iq4_xs;
    case CLEAVE_TYPE_MXFP4: return qd_mxfp4;
    default: return NULL;
    }
}
