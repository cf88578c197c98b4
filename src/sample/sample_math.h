/* The arithmetic the host sampler, the batched (device) sampling algorithm
 * and its C reference share, so their choices agree: a candidate's weight,
 * the penalty formula, the rank order and the float-to-key map. Plain C
 * that nvcc also compiles for the device (SAMPLE_FN). */
#ifndef CLEAVE_SAMPLE_MATH_H
#define CLEAVE_SAMPLE_MATH_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SAMPLE_FN static __host__ __device__ __forceinline__
#else
#define SAMPLE_FN static inline
#endif

/* A candidate's weight exp(x), x <= 0 its distance below the best, to
 * 4e-6 relative: 2^(x log2 e) as 2^i (the exponent bits) times Cephes'
 * degree-6 polynomial for 2^f, f in [-0.5, 0.5], in plain arithmetic
 * that the compiler vectorizes. libm's expf took 0.5-3 ms for a 128k
 * vocabulary (slowest near underflow: a wide spread of logits), a step's
 * worth of GPU time at batch 1. Below x = -80 (a weight under 1e-35 of
 * the best's, which cannot change a draw) the weight is 0; NaN and -inf
 * weigh 0. */
SAMPLE_FN float sample_weight_exp(float x) {
    float y = (x >= -80.0f ? x : -80.0f) * 1.44269504088896341f; /* in [-115.5, 0] */
    int32_t i = (int32_t)(y - 0.5f);                                /* the nearest integer, y <= 0 */
    float f = y - (float)i;
    float p = 1.0f + f * (6.931472028550421e-1f + f * (2.402264791363012e-1f + f * (5.550332471162809e-2f +
              f * (9.618437357674640e-3f + f * (1.339887440266574e-3f + f * 1.535336188319500e-4f)))));
    uint32_t bits = (uint32_t)(i + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x >= -80.0f ? p * scale : 0.0f;
}

/* A logit as the sampler sees it: NaN cannot be drawn (-inf), +inf is the
 * largest float so softmax stays finite. */
SAMPLE_FN float sample_clean(float l) { return l != l ? -INFINITY : (l == INFINITY ? FLT_MAX : l); }

/* The penalties of a token seen `count` times in the window. Dividing a
 * negative logit would raise it, so those are multiplied; absurd penalties
 * must not bring back NaN or +inf. */
SAMPLE_FN float sample_penalize(float l, uint32_t count, float repeat, float frequency, float presence) {
    if (l == -INFINITY) return l;
    l = l <= 0.0f ? l * repeat : l / repeat;
    return sample_clean(l - ((float)count * frequency + presence));
}

/* (logit a, id ia) ranks before (b, ib): higher logit, then lower id. */
SAMPLE_FN int sample_ranks_before(float a, int32_t ia, float b, int32_t ib) {
    return a > b || (a == b && ia < ib);
}

/* A key whose unsigned order is the float order (for radix selection). */
SAMPLE_FN uint32_t sample_key(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

#endif
