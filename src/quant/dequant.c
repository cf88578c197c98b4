/* Reference dequantization of the legacy, K-quant and IQ4 blocks: plain C,
 * one block at a time, with the products taken in the order ggml takes them
 * (scale times sub-block scale first, then times the quant), so the floats
 * are bit-identical to ggml's and to the gguf package's numpy versions.
 * The backends' fast paths are tested against these. */
#include <string.h>

#include "quant.h"
#include "quant_internal.h"

const int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                  1,    13,   25,  38,  53,  69,  89,  113};

#define F16(h) quant_f16_to_f32(h)

static void dq_q4_0(const block_q4_0 *b, float *y) {
    float d = F16(b->d);
    for (int j = 0; j < QK4_0 / 2; j++) {
        y[j] = (float)((b->qs[j] & 0xF) - 8) * d;
        y[j + QK4_0 / 2] = (float)((b->qs[j] >> 4) - 8) * d;
    }
}

static void dq_q4_1(const block_q4_1 *b, float *y) {
    float d = F16(b->d), m = F16(b->m);
    for (int j = 0; j < QK4_1 / 2; j++) {
        y[j] = (float)(b->qs[j] & 0xF) * d + m;
        y[j + QK4_1 / 2] = (float)(b->qs[j] >> 4) * d + m;
    }
}

/* Bit j of qh is the fifth bit of weight j (j < 32). */
static void dq_q5_0(const block_q5_0 *b, float *y) {
    float d = F16(b->d);
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    for (int j = 0; j < QK5_0 / 2; j++) {
        int x0 = (b->qs[j] & 0xF) | (int)(((qh >> j) << 4) & 0x10);
        int x1 = (b->qs[j] >> 4) | (int)((qh >> (j + 12)) & 0x10);
        y[j] = (float)(x0 - 16) * d;
        y[j + QK5_0 / 2] = (float)(x1 - 16) * d;
    }
}

static void dq_q5_1(const block_q5_1 *b, float *y) {
    float d = F16(b->d), m = F16(b->m);
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    for (int j = 0; j < QK5_1 / 2; j++) {
        int x0 = (b->qs[j] & 0xF) | (int)(((qh >> j) << 4) & 0x10);
        int x1 = (b->qs[j] >> 4) | (int)((qh >> (j + 12)) & 0x10);
        y[j] = (float)x0 * d + m;
        y[j + QK5_1 / 2] = (float)x1 * d + m;
    }
}

static void dq_q8_0(const block_q8_0 *b, float *y) {
    float d = F16(b->d);
    for (int j = 0; j < QK8_0; j++) y[j] = d * (float)b->qs[j];
}

static void dq_iq4_nl(const block_iq4_nl *b, float *y) {
    float d = F16(b->d);
    for (int j = 0; j < QK4_NL / 2; j++) {
        y[j] = d * (float)kvalues_iq4nl[b->qs[j] & 0xF];
        y[j + QK4_NL / 2] = d * (float)kvalues_iq4nl[b->qs[j] >> 4];
    }
}

const int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static void dq_mxfp4(const block_mxfp4 *b, float *y) {
    float d = quant_e8m0_half(b->e);
    for (int j = 0; j < QK_MXFP4 / 2; j++) {
        y[j] = d * (float)kvalues_mxfp4[b->qs[j] & 0xF];
        y[j + QK_MXFP4 / 2] = d * (float)kvalues_mxfp4[b->qs[j] >> 4];
    }
}

/* Q2_K: each 32-byte stretch of qs holds four 2-bit planes; plane p of bytes
 * [0,16) and [16,32) are sub-blocks 2p and 2p+1 of its 128 weights. */
static void dq_q2_K(const block_q2_K *b, float *y) {
    float d = F16(b->d), dmin = F16(b->dmin);
    const uint8_t *q = b->qs;
    int is = 0;
    for (int n = 0; n < QK_K; n += 128, q += 32) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half = 0; half < 2; half++) {
                uint8_t sc = b->scales[is++];
                float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
                for (int l = 0; l < 16; l++) *y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
            }
        }
    }
}

void quant_q3_K_scales(const uint8_t packed[12], int8_t scales[16]) {
    /* 16 six-bit scales: low nibbles in bytes 0..7, high 2-bit pairs in 8..11 */
    for (int i = 0; i < 16; i++) {
        int low = i < 8 ? packed[i] & 0xF : packed[i - 8] >> 4;
        int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
        scales[i] = (int8_t)((low | high << 4) - 32);
    }
}

/* Q3_K: as Q2_K for the low two bits; a clear hmask bit subtracts 4. */
static void dq_q3_K(const block_q3_K *b, float *y) {
    float d = F16(b->d);
    int8_t sc[16];
    quant_q3_K_scales(b->scales, sc);
    const uint8_t *q = b->qs;
    uint8_t m = 1;
    int is = 0;
    for (int n = 0; n < QK_K; n += 128, q += 32) {
        for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
            for (int half = 0; half < 2; half++) {
                float dl = d * (float)sc[is++];
                for (int l = 0; l < 16; l++) {
                    int k = l + 16 * half;
                    *y++ = dl * (float)(((q[k] >> shift) & 3) - ((b->hmask[k] & m) ? 0 : 4));
                }
            }
        }
    }
}

void quant_k4_scale_min(int j, const uint8_t packed[K_SCALE_SIZE], uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = packed[j] & 63;
        *m = packed[j + 4] & 63;
    } else {
        *sc = (uint8_t)((packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4));
        *m = (uint8_t)((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
    }
}

/* Q4_K: 32 bytes of qs per 64 weights, low nibbles first. */
static void dq_q4_K(const block_q4_K *b, float *y) {
    float d = F16(b->d), dmin = F16(b->dmin);
    const uint8_t *q = b->qs;
    for (int is = 0; is < 8; is += 2, q += 32) {
        uint8_t s0, m0, s1, m1;
        quant_k4_scale_min(is, b->scales, &s0, &m0);
        quant_k4_scale_min(is + 1, b->scales, &s1, &m1);
        float d0 = d * s0, mm0 = dmin * m0, d1 = d * s1, mm1 = dmin * m1;
        for (int l = 0; l < 32; l++) *y++ = d0 * (float)(q[l] & 0xF) - mm0;
        for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] >> 4) - mm1;
    }
}

/* Q5_K: Q4_K plus a fifth bit per weight, two qh bits per 64 weights. */
static void dq_q5_K(const block_q5_K *b, float *y) {
    float d = F16(b->d), dmin = F16(b->dmin);
    const uint8_t *q = b->qs;
    uint8_t u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2, q += 32, u1 <<= 2, u2 <<= 2) {
        uint8_t s0, m0, s1, m1;
        quant_k4_scale_min(is, b->scales, &s0, &m0);
        quant_k4_scale_min(is + 1, b->scales, &s1, &m1);
        float d0 = d * s0, mm0 = dmin * m0, d1 = d * s1, mm1 = dmin * m1;
        for (int l = 0; l < 32; l++) *y++ = d0 * (float)((q[l] & 0xF) + (b->qh[l] & u1 ? 16 : 0)) - mm0;
        for (int l = 0; l < 32; l++) *y++ = d1 * (float)((q[l] >> 4) + (b->qh[l] & u2 ? 16 : 0)) - mm1;
    }
}

/* Q6_K: per 128 weights, 64 bytes of ql (low nibbles) and 32 of qh (two
 * bits each for four weights 32 apart). */
static void dq_q6_K(const block_q6_K *b, float *y) {
    float d = F16(b->d);
    const uint8_t *ql = b->ql, *qh = b->qh;
    const int8_t *sc = b->scales;
    for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
    }
}

int quant_iq4_xs_scale(const block_iq4_xs *b, int ib) {
    return (((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((b->scales_h >> 2 * ib) & 3) << 4)) - 32;
}

static void dq_iq4_xs(const block_iq4_xs *b, float *y) {
    float d = F16(b->d);
    const uint8_t *qs = b->qs;
    for (int ib = 0; ib < QK_K / 32; ib++, y += 32, qs += 16) {
        float dl = d * (float)quant_iq4_xs_scale(b, ib);
        for (int j = 0; j < 16; j++) {
            y[j] = dl * (float)kvalues_iq4nl[qs[j] & 0xF];
            y[j + 16] = dl * (float)kvalues_iq4nl[qs[j] >> 4];
        }
    }
}

/* Each block is copied out first: rows may sit at any byte address (a
 * tensor split's column slice, a file's odd offset), and reading a struct
 * with 2-byte fields there is undefined behaviour. */
#define DQ_ROW(T, QK, FN)                                                                          \
    do {                                                                                           \
        const unsigned char *b = src;                                                              \
        for (size_t i = 0; i < n / (QK); i++) {                                                    \
            T blk;                                                                                 \
            memcpy(&blk, b + i * sizeof blk, sizeof blk);                                          \
            FN(&blk, dst + i * (QK));                                                              \
        }                                                                                          \
    } while (0)

bool quant_dequantize_blocks(cleave_type type, const void *src, float *dst, size_t n) {
    switch (type) {
    case CLEAVE_TYPE_Q4_0: DQ_ROW(block_q4_0, QK4_0, dq_q4_0); return true;
    case CLEAVE_TYPE_Q4_1: DQ_ROW(block_q4_1, QK4_1, dq_q4_1); return true;
    case CLEAVE_TYPE_Q5_0: DQ_ROW(block_q5_0, QK5_0, dq_q5_0); return true;
    case CLEAVE_TYPE_Q5_1: DQ_ROW(block_q5_1, QK5_1, dq_q5_1); return true;
    case CLEAVE_TYPE_Q8_0: DQ_ROW(block_q8_0, QK8_0, dq_q8_0); return true;
    case CLEAVE_TYPE_IQ4_NL: DQ_ROW(block_iq4_nl, QK4_NL, dq_iq4_nl); return true;
    case CLEAVE_TYPE_Q2_K: DQ_ROW(block_q2_K, QK_K, dq_q2_K); return true;
    case CLEAVE_TYPE_Q3_K: DQ_ROW(block_q3_K, QK_K, dq_q3_K); return true;
    case CLEAVE_TYPE_Q4_K: DQ_ROW(block_q4_K, QK_K, dq_q4_K); return true;
    case CLEAVE_TYPE_Q5_K: DQ_ROW(block_q5_K, QK_K, dq_q5_K); return true;
    case CLEAVE_TYPE_Q6_K: DQ_ROW(block_q6_K, QK_K, dq_q6_K); return true;
    case CLEAVE_TYPE_IQ4_XS: DQ_ROW(block_iq4_xs, QK_K, dq_iq4_xs); return true;
    case CLEAVE_TYPE_MXFP4: DQ_ROW(block_mxfp4, QK_MXFP4, dq_mxfp4); return true;
    default: return false;
    }
}
