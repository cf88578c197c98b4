/* Element and block formats: sizes of every ggml type id (so files with
 * types cleave cannot run still parse), and reference conversions for the
 * types cleave runs: F32, F16, BF16, Q8_0. */
#ifndef CLEAVE_QUANT_H
#define CLEAVE_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleave.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Q8_0: 32 weights share one f16 scale d; w = d * q. */
#define QK8_0 32
typedef struct {
    uint16_t d;        /* f16 bits */
    int8_t qs[QK8_0];
} block_q8_0;          /* 34 bytes */

/* Size facts of a ggml type id (any, not only supported ones). Return false
 * for an id that ggml does not define. */
bool quant_type_info(uint32_t type_id, const char **name, size_t *block_elems, size_t *block_bytes);
/* True for the types cleave computes with (F32, F16, BF16, Q8_0). */
bool quant_type_supported(uint32_t type_id);
/* Bytes of a row of n elements; 0 when n is not a multiple of the block or
 * the type is unknown. */
size_t quant_row_bytes(uint32_t type_id, size_t n);

/* Scalar conversions (round to nearest even, NaN preserved). */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);

/* Row conversions; n must be a multiple of the type's block. dst for
 * quantize_row has quant_row_bytes(type, n) bytes. */
void quant_dequantize_row(cleave_type type, const void *src, float *dst, size_t n);
void quant_quantize_row(cleave_type type, const float *src, void *dst, size_t n);

#ifdef __cplusplus
}
#endif
#endif
