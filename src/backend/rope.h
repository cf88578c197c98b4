/* RoPE context scaling as every device applies it: be_rope_prepare turns a
 * call's be_rope into the few numbers each rotated pair needs (once per
 * call, on the host), and be_rope_pair_scale, shared by the C and CUDA
 * kernels so both compute the same angles, gives pair i's frequency
 * multiplier. */
#ifndef CLEAVE_BACKEND_ROPE_H
#define CLEAVE_BACKEND_ROPE_H

#include <math.h>

#include "backend/backend.h"

#ifdef __CUDACC__
#define BE_ROPE_FN __host__ __device__ static inline
#else
#define BE_ROPE_FN static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct be_rope_prep {
    double freq_scale;       /* the interpolated angle's multiplier */
    double ext_factor;       /* 0: no YaRN ramp */
    double corr_lo, corr_hi; /* the ramp runs from 1 at pair corr_lo to 0 at corr_hi */
    float mscale;            /* multiplies cos and sin */
} be_rope_prep;

/* Checks p's scaling (p->scaling NULL: plain RoPE, multiplier 1 for every
 * pair, mscale 1) and fills out. */
cleave_status be_rope_prepare(const be_rope *p, be_rope_prep *out);

#ifdef __cplusplus
}
#endif

/* YaRN blends the interpolated angle (pos * f * freq_scale) toward the
 * extrapolated one (pos * f) on the fast-rotating pairs below corr_lo, which
 * turn many times within the original context and need no interpolation;
 * both angles are linear in pos, so the blend is one multiplier of f. */
BE_ROPE_FN double be_rope_pair_scale(const be_rope_prep *r, size_t i) {
    if (r->ext_factor == 0.0) return r->freq_scale;
    double y = ((double)i - r->corr_lo) / fmax(0.001, r->corr_hi - r->corr_lo);
    double mix = (1.0 - fmin(1.0, fmax(0.0, y))) * r->ext_factor;
    return r->freq_scale * (1.0 - mix) + mix;
}

#endif
