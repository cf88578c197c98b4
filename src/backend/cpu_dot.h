/* Row kernels of the CPU device: dot products of a weight or cache row of any
 * supported type with f32 activations, row conversions, the f32 tile GEMM the
 * batched matmul runs on, and vectorized elementwise helpers. Each kernel has
 * an AVX2+FMA+F16C version (chosen at run time, no -mavx2 needed) and a plain
 * C version; callers pass simd = false to force the C one. */
#ifndef CLEAVE_CPU_DOT_H
#define CLEAVE_CPU_DOT_H

#include <stdbool.h>
#include <stddef.h>

#include "cleave.h"

/* True when this CPU has AVX2, FMA and F16C (always false off x86). */
bool cpu_simd_available(void);

/* sum_i row[i] * x[i] over n elements; row is of the kernel's type. */
typedef float (*cpu_dot_fn)(const void *row, const float *x, size_t n);
/* dst[i] = row[i] as f32. */
typedef void (*cpu_dequant_fn)(const void *row, float *dst, size_t n);
/* y[i] += a * row[i]. */
typedef void (*cpu_axpy_fn)(const void *row, float a, float *y, size_t n);

/* acc[r] += sum_i row[i] * x[r*ldx + i] for r < m, m in 1..4: one pass over
 * the row serves up to four activation rows. */
typedef void (*cpu_mdot_fn)(const void *row, const float *x, size_t ldx, size_t m, size_t k,
                            float *acc);

/* NULL for a type the CPU device does not compute with. Q8_0 needs n to be
 * a multiple of 32 (and rows block-aligned). */
cpu_dot_fn cpu_dot_for(cleave_type t, bool simd);
cpu_mdot_fn cpu_mdot_for(cleave_type t, bool simd);
cpu_dequant_fn cpu_dequant_for(cleave_type t, bool simd);
cpu_axpy_fn cpu_axpy_for(cleave_type t, bool simd);

/* y[i*ldy + j] = sum_k x[i*ldx + k] * w[j*ldw + k] for i < n, j < m: a block
 * of the batched matmul with both operands k-contiguous (strides in floats). */
void cpu_gemm_f32(bool simd, const float *x, size_t ldx, size_t n, const float *w, size_t ldw,
                  size_t m, size_t k, float *y, size_t ldy);

/* dst = convert(src) to t (F32, F16, BF16, Q8_0); same rounding as quant.c. */
void cpu_quantize_row(bool simd, cleave_type t, const float *src, void *dst, size_t n);

/* sum x[i]^2, accumulated in f32 lanes (SIMD) or double (C). */
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
