/* Pieces of the block formats shared by the reference dequantization, the
 * quantizers and the backends' kernels (which must unpack scales exactly as
 * the reference does). */
#ifndef CLEAVE_QUANT_INTERNAL_H
#define CLEAVE_QUANT_INTERNAL_H

#include <stdbool.h>
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

#ifdef __cplusplus
}
#endif
#endif
