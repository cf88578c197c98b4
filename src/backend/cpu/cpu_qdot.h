/* Integer dot products of block-quantized weight rows with activations
 * quantized once per matmul to int8 blocks (as llama.cpp's CPU backend
 * does): the 32-wide legacy types and IQ4_NL against cpu_qa32 rows, the
 * 256-wide K-quants and IQ4_XS against cpu_qa256 rows. Each kernel has a
 * plain C version (the reference, cpu_qdot_c.c) and an AVX2 version
 * (cpu_qdot_avx2_*.c) doing the same integer arithmetic. */
#ifndef CLEAVE_CPU_QDOT_H
#define CLEAVE_CPU_QDOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleave.h"

/* One activation block of 32: x[j] ~ d * qs[j], qs in [-127, 127];
 * sum = sum of qs (the zero-point and min terms of the weights need it). */
typedef struct {
    float d;
    int32_t sum;
    int8_t qs[32];
} cpu_qa32;

/* One activation block of 256 (ggml's block_q8_K): bsums[k] = sum of
 * qs[16k .. 16k+16), for the K-quants' mins and offsets. */
typedef struct {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
} cpu_qa256;

typedef enum { CPU_ACT_NONE, CPU_ACT_Q32, CPU_ACT_Q256 } cpu_act_kind;

/* The activation format a weight type's integer dot takes; CPU_ACT_NONE
 * for F32/F16/BF16 (f32 activations) and unknown types. */
cpu_act_kind cpu_act_for(cleave_type t);
/* Bytes of one quantized activation row of n elements (n a multiple of
 * the block: 32 or 256). */
size_t cpu_act_row_bytes(cpu_act_kind k, size_t n);
/* Quantizes n floats (a multiple of the block) to dst. Both versions
 * produce the same bytes: scale amax / 127, round to nearest even. */
void cpu_quantize_act(bool simd, cpu_act_kind k, const float *x, void *dst, size_t n);

/* sum_k w[k] * x[k]: one weight row of the kernel's type against one
 * quantized activation row, n elements. */
typedef float (*cpu_qdot_fn)(const void *w, const void *xq, size_t n);
/* y[i * ldy + j] = dot(weight row j, activation row i) for j < nw weight
 * rows (nb1 bytes apart) and i < nx activation rows (xs bytes apart). Each
 * output equals what the type's cpu_qdot_fn returns for that pair, bit for
 * bit, so a token's result does not depend on its batch. */
typedef void (*cpu_qtile_fn)(const void *w, size_t nb1, size_t nw, const void *xq, size_t xs,
                             size_t nx, size_t n, float *y, size_t ldy);

typedef struct {
    cpu_act_kind act;
    cpu_qdot_fn dot;
    cpu_qtile_fn tile;
} cpu_qkernel;

/* The kernels of a block type (act = CPU_ACT_NONE and NULL functions for
 * F32/F16/BF16); simd = false gives the C reference. */
cpu_qkernel cpu_qkernel_for(cleave_type t, bool simd);

/* The C references (cpu_qdot_c.c) and the AVX2 kernels, by type; NULL
 * where there is none. Internal to the dispatch above and the tests. */
cpu_qdot_fn cpu_qdot_c_for(cleave_type t);
cpu_qdot_fn cpu_qdot_avx2_for(cleave_type t);
cpu_qtile_fn cpu_qtile_avx2_for(cleave_type t);

#endif
