/* Pieces of the block formats shared by the reference dequantization, the
 * quantizers and the backends' kernels (which must unpack scales exactly as
 * the reference does). */
#ifndef CLEAVE_QUANT_INTERNAL_H
#define CLEAVE_QUANT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Dequantizes n weights (a whole number of blocks) of a block type; false
 * for F32/F16/BF16 and unknown types. */
bool quant_dequantize_blocks(cleave_type type, const void *src, float *dst, size_t n);
/* Q3_K's 16 signed six-bit sub-block scales (already minus 32). */
void quant_q3_K_scales(const uint8_t packed[12], int8_t scales[16]);
/* Q4_K/Q5_K: the six-bit scale and min of sub-block j (0..7). */
void quant_k4_scale_min(int j, const uint8_t packed[K_SCALE_SIZE], uint8_t *sc, uint8_t *m);
/* IQ4_XS: the signed scale of sub-block ib (0..7), already minus 32. */
int quant_iq4_xs_scale(const block_iq4_xs *b, int ib);

/* ---- quantizers (quant_fit.c, quantize_*.c) ---- */

/* Fits x[0..n) ~ s*q - min with q in [0, nmax], s >= 0, min >= 0, by
 * weighted least squares over a fan of candidate grids; q gets the grid.
 * Returns s. n <= QK_K. */
float quant_fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *q, float *min);
/* Fits x[0..n) ~ s*q with q in [-nmax, nmax-1] (s may be negative, which
 * puts the largest magnitude on the range's longer side). Returns s. */
float quant_fit_symmetric(int n, int nmax, const float *x, const float *w, int8_t *q);
/* A scale as f16, saturated to the f16 range (never Inf or NaN). */
uint16_t quant_scale_to_f16(float d);
/* v rounded to the nearest integer (halves away from zero) in [lo, hi];
 * NaN gives lo. */
int quant_nearest_int(float v, int lo, int hi);

/* Row quantizers: nb blocks from nb * block-size weights. */
void quant_q4_0_row(const float *x, block_q4_0 *b, size_t nb);
void quant_q4_1_row(const float *x, block_q4_1 *b, size_t nb);
void quant_q5_0_row(const float *x, block_q5_0 *b, size_t nb);
void quant_q5_1_row(const float *x, block_q5_1 *b, size_t nb);
void quant_q8_0_row(const float *x, block_q8_0 *b, size_t nb);
void quant_q2_K_row(const float *x, block_q2_K *b, size_t nb);
void quant_q3_K_row(const float *x, block_q3_K *b, size_t nb);
void quant_q4_K_row(const float *x, block_q4_K *b, size_t nb);
void quant_q5_K_row(const float *x, block_q5_K *b, size_t nb);
void quant_q6_K_row(const float *x, block_q6_K *b, size_t nb);
void quant_iq4_nl_row(const float *x, block_iq4_nl *b, size_t nb);
void quant_iq4_xs_row(const float *x, block_iq4_xs *b, size_t nb);
void quant_mxfp4_row(const float *x, block_mxfp4 *b, size_t nb);

#ifdef __cplusplus
}
#endif
#endif
