/* Element and block formats: sizes of every ggml type id (so files with
 * types cleave cannot run still parse), and reference conversions for the
 * types cleave runs: F32, F16, BF16 and the quantized types of cleave_type. */
#ifndef CLEAVE_QUANT_H
#define CLEAVE_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cleave.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Block layouts, byte for byte as ggml defines them (ggml-common.h). Scales
 * d and mins m are f16 bits. Within a 32-block of the legacy types, byte j of
 * qs holds weight j in its low nibble and weight j + 16 in its high one. */
#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK4_NL 32
#define QK_MXFP4 32
#define QK_K 256          /* weights per super-block of the K-quants and IQ4_XS */
#define K_SCALE_SIZE 12   /* 8 six-bit scales and 8 six-bit mins of Q4_K/Q5_K */

typedef struct { uint16_t d; uint8_t qs[QK4_0 / 2]; } block_q4_0;                  /* 18 B: w = d*(q-8) */
typedef struct { uint16_t d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;               /* 20 B: w = d*q+m */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0;   /* 22 B: w = d*(q-16) */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1; /* 24 B: w = d*q+m */
typedef struct { uint16_t d; int8_t qs[QK8_0]; } block_q8_0;                       /* 34 B: w = d*q */
typedef struct { uint16_t d; uint8_t qs[QK4_NL / 2]; } block_iq4_nl; /* 18 B: w = d*kvalues_iq4nl[q] */
/* OCP microscaling FP4: an E8M0 exponent e and 32 E2M1 values as 4-bit
 * indices (low nibbles weights 0..15, high 16..31) into kvalues_mxfp4,
 * which holds twice the E2M1 values: w = 2^(e - 128) * kvalues_mxfp4[q]. */
typedef struct { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; } block_mxfp4; /* 17 B */

/* 16 sub-blocks of 16: 4-bit scale and 4-bit min per sub-block, 2-bit q. */
typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d, dmin; } block_q2_K; /* 84 B */
/* 16 sub-blocks of 16: 6-bit signed scales packed in 12 bytes, 3-bit q
 * (low 2 bits in qs, high bit in hmask). */
typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; } block_q3_K; /* 110 B */
/* 8 sub-blocks of 32: 6-bit scale and min each, 4-bit q. */
typedef struct { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; } block_q4_K; /* 144 B */
/* 8 sub-blocks of 32: 6-bit scale and min each, 5-bit q. */
typedef struct { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_K; /* 176 B */
/* 16 sub-blocks of 16: 8-bit signed scales, 6-bit q (low 4 in ql, high 2 in qh). */
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; } block_q6_K; /* 210 B */
/* 8 sub-blocks of 32: 6-bit scales (low 4 in scales_l, high 2 in scales_h),
 * 4-bit indices into kvalues_iq4nl. */
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; } block_iq4_xs; /* 136 B */

/* The 16 non-uniform levels of IQ4_NL and IQ4_XS. */
extern const int8_t kvalues_iq4nl[16];
/* Twice the 16 E2M1 values (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
 * negatives), so they are integers. */
extern const int8_t kvalues_mxfp4[16];
/* 2^(x - 128) for an E8M0 byte x: half the scale it encodes, which undoes
 * the doubling of kvalues_mxfp4 (exact): a normal float's exponent field
 * x - 1 for x >= 2; below, the subnormals 2^-128 and 2^-127. */
static inline float quant_e8m0_half(uint8_t x) {
    uint32_t bits = x < 2 ? 0x00200000u << x : (uint32_t)(x - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Size facts of a ggml type id (any, not only supported ones). Return false
 * for an id that ggml does not define. */
bool quant_type_info(uint32_t type_id, const char **name, size_t *block_elems, size_t *block_bytes);
/* True for the types cleave computes with (every cleave_type). */
bool quant_type_supported(uint32_t type_id);
/* "f32, f16, ... and iq4_xs": the supported types, for messages. */
const char *quant_supported_list(void);
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
/* Converts n_rows rows of n_per_row weights of src_type into dst_type (any
 * supported types; non-f32 sources are widened to f32 first) on n_threads
 * threads (fewer when threads cannot be had). The bytes are the same for
 * every thread count. progress, called from the calling thread, may
 * cancel. */
cleave_status quant_convert_rows(cleave_type dst_type, void *dst, cleave_type src_type,
                                 const void *src, size_t n_rows, size_t n_per_row, int n_threads,
                                 cleave_progress_fn progress, void *progress_user);

#ifdef __cplusplus
}
#endif
#endif
