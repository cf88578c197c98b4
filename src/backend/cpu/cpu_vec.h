/* Elementwise kernels of the CPU device: cache row conversion, the pieces
 * of rms_norm and softmax, SwiGLU and residual adds, in AVX2 and plain C
 * versions (simd = false forces C). */
#ifndef CLEAVE_CPU_VEC_H
#define CLEAVE_CPU_VEC_H

#include <stdbool.h>
#include <stddef.h>

#include "cleave.h"

/* dst = convert(src) to t (F32, F16, BF16, Q8_0); same rounding as quant.c. */
void cpu_quantize_row(bool simd, cleave_type t, const float *src, void *dst, size_t n);

/* sum x[i]^2, accumulated in double (both versions). */
double cpu_sum_sq(bool simd, const float *x, size_t n);
/* y[i] = x[i] * s * w[i]; y may be x. */
void cpu_scale_mul(bool simd, const float *x, float s, const float *w, float *y, size_t n);
/* s[i] = exp(s[i] - max) (0 for s[i] = -inf); returns the sum. */
float cpu_exp_sub_sum(bool simd, float *s, size_t n, float max);
/* out[i] = gate[i] / (1 + exp(-gate[i])) * up[i]; out may alias gate or up. */
void cpu_swiglu_row(bool simd, const float *gate, const float *up, float *out, size_t n);
/* y[i] += x[i]. */
void cpu_add_row(bool simd, float *y, const float *x, size_t n);
/* y[i] *= s. */
void cpu_scale_row(bool simd, float *y, float s, size_t n);

#endif
