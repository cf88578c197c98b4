/* Row conversions between f32 and every type cleave runs: the one entry
 * the engine, the backends and the tools call, dispatching to the element
 * conversions (quant.c), the block dequantizers (dequant.c) and the
 * quantizers (quantize_*.c). Kept apart from quant.c so the type table and
 * the scalar conversions stay a leaf the others build on. */
#include <string.h>

#include "quant.h"
#include "quant_internal.h"

void quant_dequantize_row(cleave_type type, const void *src, float *dst, size_t n) {
    switch (type) {
    case CLEAVE_TYPE_F32: memcpy(dst, src, n * sizeof(float)); return;
    case CLEAVE_TYPE_F16: {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = quant_f16_to_f32(s[i]);
        return;
    }
    case CLEAVE_TYPE_BF16: {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = quant_bf16_to_f32(s[i]);
        return;
    }
    default: quant_dequantize_blocks(type, src, dst, n); return;
    }
}

void quant_quantize_row(cleave_type type, const float *src, void *dst, size_t n) {
    switch (type) {
    case CLEAVE_TYPE_F32: memcpy(dst, src, n * sizeof(float)); return;
    case CLEAVE_TYPE_F16: {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = quant_f32_to_f16(src[i]);
        return;
    }
    case CLEAVE_TYPE_BF16: {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = quant_f32_to_bf16(src[i]);
        return;
    }
    case CLEAVE_TYPE_Q8_0: quant_q8_0_row(src, dst, n / QK8_0); return;
    case CLEAVE_TYPE_Q4_0: quant_q4_0_row(src, dst, n / QK4_0); return;
    case CLEAVE_TYPE_Q4_1: quant_q4_1_row(src, dst, n / QK4_1); return;
    case CLEAVE_TYPE_Q5_0: quant_q5_0_row(src, dst, n / QK5_0); return;
    case CLEAVE_TYPE_Q5_1: quant_q5_1_row(src, dst, n / QK5_1); return;
    case CLEAVE_TYPE_Q2_K: quant_q2_K_row(src, dst, n / QK_K); return;
    case CLEAVE_TYPE_Q3_K: quant_q3_K_row(src, dst, n / QK_K); return;
    case CLEAVE_TYPE_Q4_K: quant_q4_K_row(src, dst, n / QK_K); return;
    case CLEAVE_TYPE_Q5_K: quant_q5_K_row(src, dst, n / QK_K); return;
    case CLEAVE_TYPE_Q6_K: quant_q6_K_row(src, dst, n / QK_K); return;
    case CLEAVE_TYPE_IQ4_NL: quant_iq4_nl_row(src, dst, n / QK4_NL); return;
    case CLEAVE_TYPE_IQ4_XS: quant_iq4_xs_row(src, dst, n / QK_K); return;
    case CLEAVE_TYPE_MXFP4: quant_mxfp4_row(src, dst, n / QK_MXFP4); return;
    default: return;
    }
}
