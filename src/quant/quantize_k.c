/* Reference quantizers of the K-quant super-blocks (Q2_K..Q6_K): each
 * 256-weight super-block is split into sub-blocks whose scales (and mins)
 * come from the searches in quant_fit.c; those are then quantized to the
 * format's few bits against one f16 super-scale, and the weights rounded
 * again on the scales as stored, so dequantization sees what was fitted.
 * Layouts are the ones src/quant/dequant.c reads. */
#include <math.h>
#include <string.h>

#include "quant_internal.h"

#define F16(h) quant_f16_to_f32(h)

/* Weights of the sub-block fits: the RMS of the super-block plus each
 * weight's magnitude, so large weights (which carry most of a dot
 * product) are reproduced closely without ignoring the small ones. */
static void fit_weights(const float *x, int n, float *w) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float av = (float)sqrt(ss / n);
    for (int i = 0; i < n; i++) w[i] = av + fabsf(x[i]);
}

/* Quantizes sub-block scales s[0..n) (all >= 0) to 0..qmax against one
 * super-scale; returns the f16 super-scale. */
static uint16_t quantize_scales_unsigned(const float *s, int n, int qmax, uint8_t *ls) {
    float smax = 0;
    for (int j = 0; j < n; j++) smax = fmaxf(smax, s[j]);
    uint16_t d16 = quant_scale_to_f16(smax / qmax);
    float d = F16(d16);
    for (int j = 0; j < n; j++) ls[j] = d > 0 ? (uint8_t)quant_nearest_int(s[j] / d, 0, qmax) : 0;
    return d16;
}

/* ---- Q2_K: 16 x 16 weights, 4-bit scale and min, q in 0..3 ---- */

static void q2_K_block(const float *x, block_q2_K *b) {
    float w[QK_K], s[16], m[16];
    uint8_t q[QK_K], ls[16], lm[16];
    fit_weights(x, QK_K, w);
    for (int j = 0; j < 16; j++) s[j] = quant_fit_affine(16, 3, x + 16 * j, w + 16 * j, q + 16 * j, &m[j]);
    b->d = quantize_scales_unsigned(s, 16, 15, ls);
    b->dmin = quantize_scales_unsigned(m, 16, 15, lm);
    float d = F16(b->d), dmin = F16(b->dmin);
    for (int j = 0; j < 16; j++) {
        b->scales[j] = (uint8_t)(ls[j] | lm[j] << 4);
        float dl = d * ls[j], ml = dmin * lm[j];
        for (int i = 0; i < 16; i++)
            q[16 * j + i] = dl > 0 ? (uint8_t)quant_nearest_int((x[16 * j + i] + ml) / dl, 0, 3) : 0;
    }
    /* weight n*128 + 32*p + k sits in bits 2p of byte n*32 + k */
    memset(b->qs, 0, sizeof b->qs);
    for (int i = 0; i < QK_K; i++)
        b->qs[(i / 128) * 32 + i % 32] |= (uint8_t)(q[i] << (2 * ((i % 128) / 32)));
}

/* ---- Q3_K: 16 x 16 weights, signed 6-bit scales, q in -4..3 ---- */

/* Signed sub-block scales to -32..31 against d = (largest-magnitude
 * scale) / -32, so that scale lands on the wide end of the range. */
static uint16_t quantize_scales_signed(const float *s, int n, int lo, int hi, int8_t *ls) {
    float amax = 0, smax = 0;
    for (int j = 0; j < n; j++) {
        if (fabsf(s[j]) > amax) amax = fabsf(s[j]), smax = s[j];
    }
    uint16_t d16 = quant_scale_to_f16(smax / (float)lo);
    float d = F16(d16);
    for (int j = 0; j < n; j++) ls[j] = d != 0 ? (int8_t)quant_nearest_int(s[j] / d, lo, hi) : 0;
    return d16;
}

static void q3_K_block(const float *x, block_q3_K *b) {
    float w[QK_K], s[16];
    int8_t q[QK_K], ls[16];
    fit_weights(x, QK_K, w);
    for (int j = 0; j < 16; j++) s[j] = quant_fit_symmetric(16, 4, x + 16 * j, w + 16 * j, q + 16 * j);
    b->d = quantize_scales_signed(s, 16, -32, 31, ls);
    float d = F16(b->d);
    memset(b->scales, 0, sizeof b->scales);
    for (int j = 0; j < 16; j++) {
        int l = ls[j] + 32; /* stored biased; quant_q3_K_scales undoes it */
        b->scales[j % 8] |= (uint8_t)((l & 0xF) << (j < 8 ? 0 : 4));
        b->scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
        float dl = d * ls[j];
        for (int i = 0; i < 16; i++)
            q[16 * j + i] = (int8_t)(dl != 0 ? quant_nearest_int(x[16 * j + i] / dl, -4, 3) : 0);
    }
    /* q + 4 in 0..7: low two bits as in Q2_K, the third in hmask bit
     * (n*4 + p) of byte k for weight n*128 + 32*p + k */
    memset(b->qs, 0, sizeof b->qs);
    memset(b->hmask, 0, sizeof b->hmask);
    for (int i = 0; i < QK_K; i++) {
        int v = q[i] + 4, n = i / 128, p = (i % 128) / 32, k = i % 32;
        b->qs[n * 32 + k] |= (uint8_t)((v & 3) << (2 * p));
        if (v & 4) b->hmask[k] |= (uint8_t)(1u << (n * 4 + p));
    }
}

/* ---- Q4_K / Q5_K: 8 x 32 weights, 6-bit scale and min ---- */

static void pack_k4_scales(const uint8_t *ls, const uint8_t *lm, uint8_t packed[K_SCALE_SIZE]) {
    memset(packed, 0, K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            packed[j] = ls[j];
            packed[j + 4] = lm[j];
        } else {
            packed[j + 4] = (uint8_t)((ls[j] & 0xF) | (lm[j] & 0xF) << 4);
            packed[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            packed[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* The 8-sub-block part both types share; q gets 0..nmax per weight. */
static void k_affine_8x32(const float *x, int nmax, uint16_t *d16, uint16_t *dmin16,
                          uint8_t packed[K_SCALE_SIZE], uint8_t *q) {
    float w[QK_K], s[8], m[8];
    uint8_t ls[8], lm[8];
    fit_weights(x, QK_K, w);
    for (int j = 0; j < 8; j++) s[j] = quant_fit_affine(32, nmax, x + 32 * j, w + 32 * j, q + 32 * j, &m[j]);
    *d16 = quantize_scales_unsigned(s, 8, 63, ls);
    *dmin16 = quantize_scales_unsigned(m, 8, 63, lm);
    pack_k4_scales(ls, lm, packed);
    float d = F16(*d16), dmin = F16(*dmin16);
    for (int j = 0; j < 8; j++) {
        float dl = d * ls[j], ml = dmin * lm[j];
        for (int i = 0; i < 32; i++)
            q[32 * j + i] = dl > 0 ? (uint8_t)quant_nearest_int((x[32 * j + i] + ml) / dl, 0, nmax) : 0;
    }
}

static void q4_K_block(const float *x, block_q4_K *b) {
    uint8_t q[QK_K];
    k_affine_8x32(x, 15, &b->d, &b->dmin, b->scales, q);
    /* per 64 weights, 32 bytes: the first 32 in low nibbles, the next high */
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            b->qs[32 * c + l] = (uint8_t)(q[64 * c + l] | q[64 * c + 32 + l] << 4);
}

static void q5_K_block(const float *x, block_q5_K *b) {
    uint8_t q[QK_K];
    k_affine_8x32(x, 31, &b->d, &b->dmin, b->scales, q);
    memset(b->qh, 0, sizeof b->qh);
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            uint8_t lo = q[64 * c + l], hi = q[64 * c + 32 + l];
            b->qs[32 * c + l] = (uint8_t)((lo & 0xF) | (hi & 0xF) << 4);
            b->qh[l] |= (uint8_t)((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
        }
    }
}

/* ---- Q6_K: 16 x 16 weights, int8 scales, q in -32..31 ---- */

static void q6_K_block(const float *x, block_q6_K *b) {
    float w[QK_K], s[16];
    int8_t q[QK_K], ls[16];
    fit_weights(x, QK_K, w);
    for (int j = 0; j < 16; j++) s[j] = quant_fit_symmetric(16, 32, x + 16 * j, w + 16 * j, q + 16 * j);
    b->d = quantize_scales_signed(s, 16, -128, 127, ls);
    float d = F16(b->d);
    for (int j = 0; j < 16; j++) {
        b->scales[j] = ls[j];
        float dl = d * ls[j];
        for (int i = 0; i < 16; i++)
            q[16 * j + i] = (int8_t)(dl != 0 ? quant_nearest_int(x[16 * j + i] / dl, -32, 31) : 0);
    }
    /* per 128 weights: 64 bytes of ql, 32 of qh; weight 32*p + l goes to
     * ql[l + 32*(p&1)] (low nibble for p < 2) and qh[l] bits 2p */
    memset(b->qh, 0, sizeof b->qh);
    for (int n = 0; n < 2; n++) {
        uint8_t *ql = b->ql + 64 * n, *qh = b->qh + 32 * n;
        const int8_t *qq = q + 128 * n;
        for (int l = 0; l < 32; l++) {
            int v[4];
            for (int p = 0; p < 4; p++) v[p] = qq[32 * p + l] + 32;
            ql[l] = (uint8_t)((v[0] & 0xF) | (v[2] & 0xF) << 4);
            ql[l + 32] = (uint8_t)((v[1] & 0xF) | (v[3] & 0xF) << 4);
            qh[l] = (uint8_t)((v[0] >> 4) | (v[1] >> 4) << 2 | (v[2] >> 4) << 4 | (v[3] >> 4) << 6);
        }
    }
}

void quant_q2_K_row(const float *x, block_q2_K *b, size_t nb) {
    for (size_t i = 0; i < nb; i++) q2_K_block(x + i * QK_K, &b[i]);
}
void quant_q3_K_row(const float *x, block_q3_K *b, size_t nb) {
    for (size_t i = 0; i < nb; i++) q3_K_block(x + i * QK_K, &b[i]);
}
void quant_q4_K_row(const float *x, block_q4_K *b, size_t nb) {
    for (size_t i = 0; i < nb; i++) q4_K_block(x + i * QK_K, &b[i]);
}
void quant_q5_K_row(const float *x, block_q5_K *b, size_t nb) {
    for (size_t i = 0; i < nb; i++) q5_K_block(x + i * QK_K, &b[i]);
}
void quant_q6_K_row(const float *x, block_q6_K *b, size_t nb) {
    for (size_t i = 0; i < nb; i++) q6_K_block(x + i * QK_K, &b[i]);
}
