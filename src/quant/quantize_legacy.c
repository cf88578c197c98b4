/* Reference quantizers of the 32-weight legacy blocks (Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0) with ggml's rounding conventions, so their bytes equal
 * ggml's and the gguf package's for every input inside the f16 range:
 * symmetric types take d = (signed largest-magnitude weight) / -2^(bits-1)
 * and q = trunc(x/d + 2^(bits-1) + 0.5), the min types d = (max-min) /
 * (2^bits - 1) and q = trunc((x-min)/d + 0.5), Q8_0 d = amax/127 and
 * q = roundf(x/d). The float operations are the same ones in the same
 * order (1/d once, then products), which is what makes the bytes equal. */
#include <math.h>
#include <string.h>

#include "quant_internal.h"

/* trunc(v) clamped to [0, hi]; NaN (an all-zero block's 0 * inf) gives 0. */
static uint8_t trunc_clamp(float v, int hi) {
    if (!(v >= 0)) return 0;
    if (v >= (float)hi) return (uint8_t)hi;
    return (uint8_t)v;
}

/* The weight of largest magnitude, sign kept (the first one on ties). */
static float signed_absmax(const float *x, int n) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

/* 32 values of 0..15 into 16 bytes: weight j low nibble, j + 16 high. */
static void pack_nibbles(const uint8_t *q, uint8_t *qs) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((q[j] & 0xF) | (q[j + 16] & 0xF) << 4);
}

/* Fifth bits of 32 values as the little-endian word qh. */
static void pack_high_bits(const uint8_t *q, uint8_t qh[4]) {
    uint32_t h = 0;
    for (int j = 0; j < 32; j++) h |= (uint32_t)(q[j] >> 4) << j;
    memcpy(qh, &h, 4);
}

/* Q4_0/Q5_0: 32 weights on 2 half levels about zero (half = 8 or 16), the
 * largest magnitude on -half; returns the scale. */
static float symmetric_block(const float *x, int half, uint8_t q[32]) {
    float d = signed_absmax(x, 32) / (float)-half, id = d ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) q[j] = trunc_clamp(x[j] * id + ((float)half + 0.5f), 2 * half - 1);
    return d;
}

void quant_q4_0_row(const float *x, block_q4_0 *b, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += QK4_0) {
        uint8_t q[QK4_0];
        b[i].d = quant_scale_to_f16(symmetric_block(x, 8, q));
        pack_nibbles(q, b[i].qs);
    }
}

void quant_q5_0_row(const float *x, block_q5_0 *b, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += QK5_0) {
        uint8_t q[QK5_0];
        b[i].d = quant_scale_to_f16(symmetric_block(x, 16, q));
        pack_high_bits(q, b[i].qh);
        pack_nibbles(q, b[i].qs);
    }
}

/* Q4_1/Q5_1: 32 weights from their min to their max in nmax steps (15 or
 * 31); returns the scale, the min in *mn. */
static float affine_block(const float *x, int nmax, uint8_t q[32], float *mn) {
    float mx = x[0];
    *mn = x[0];
    for (int j = 1; j < 32; j++) {
        if (x[j] < *mn) *mn = x[j];
        if (x[j] > mx) mx = x[j];
    }
    float d = (mx - *mn) / (float)nmax, id = d ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) q[j] = trunc_clamp((x[j] - *mn) * id + 0.5f, nmax);
    return d;
}

void quant_q4_1_row(const float *x, block_q4_1 *b, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += QK4_1) {
        uint8_t q[QK4_1];
        float mn, d = affine_block(x, 15, q, &mn);
        b[i].d = quant_scale_to_f16(d);
        b[i].m = quant_scale_to_f16(mn);
        pack_nibbles(q, b[i].qs);
    }
}

void quant_q5_1_row(const float *x, block_q5_1 *b, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += QK5_1) {
        uint8_t q[QK5_1];
        float mn, d = affine_block(x, 31, q, &mn);
        b[i].d = quant_scale_to_f16(d);
        b[i].m = quant_scale_to_f16(mn);
        pack_high_bits(q, b[i].qh);
        pack_nibbles(q, b[i].qs);
    }
}

void quant_q8_0_row(const float *x, block_q8_0 *b, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += QK8_0) {
        float amax = 0;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        b[i].d = quant_scale_to_f16(d);
        /* roundf: halves away from zero, as ggml; |x*id| <= 127 up to
         * rounding, and 0 * inf (subnormal d) is caught by the clamp */
        for (int j = 0; j < QK8_0; j++) {
            float v = x[j] * id;
            b[i].qs[j] = (int8_t)(v >= 127.0f ? 127 : v <= -127.0f ? -127 : v == v ? roundf(v) : 0);
        }
    }
}
