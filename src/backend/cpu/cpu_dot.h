/* Row kernels of the CPU device: dot products of a weight or cache row of any
 * supported type with f32 activations, row conversions, and the register-
 * tiled GEMM that batched matmuls run on. Each kernel has an AVX2+FMA+F16C
 * version (chosen at run time, no -mavx2 needed) and a plain C version;
 * callers pass simd = false to force the C one. */
#ifndef CLEAVE_CPU_DOT_H
#define CLEAVE_CPU_DOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleave.h"

/* True when this CPU has AVX2, FMA and F16C (always false off x86). */
bool cpu_simd_available(void);

/* sum_i row[i] * x[i] over n elements; row is of the kernel's type. */
typedef float (*cpu_dot_fn)(const void *row, const float *x, size_t n);
/* dst[i] = row[i] as f32. */
typedef void (*cpu_dequant_fn)(const void *row, float *dst, size_t n);
/* y[i] += a * row[i]. */
typedef void (*cpu_axpy_fn)(const void *row, float a, float *y, size_t n);

/* NULL for a type the CPU device does not compute with. Block types need
 * n to be a multiple of their block (32 or 256) and rows block-aligned. */
cpu_dot_fn cpu_dot_for(cleave_type t, bool simd);
cpu_dequant_fn cpu_dequant_for(cleave_type t, bool simd);
cpu_axpy_fn cpu_axpy_for(cleave_type t, bool simd);
/* The same for the block types other than Q8_0 (cpu_dot_blocks.c). */
cpu_dot_fn cpu_dot_blocks_for(cleave_type t, bool simd);
cpu_dequant_fn cpu_dequant_blocks_for(cleave_type t, bool simd);
cpu_axpy_fn cpu_axpy_blocks_for(cleave_type t, bool simd);

/* y[i*ldy + j] = sum_k x[i*ldx + k] * w_j[k] for i < n, j < m, where weight
 * row j of type t (F32, F16, BF16; block types take cpu_qdot.h's integer
 * tiles) starts nb1 bytes after row j-1: register-tiled, weights converted
 * once per tile of 4 rows of x. */
void cpu_gemm(bool simd, cleave_type t, const float *x, size_t ldx, size_t n, const void *w,
              size_t nb1, size_t m, size_t k, float *y, size_t ldy);

#endif
