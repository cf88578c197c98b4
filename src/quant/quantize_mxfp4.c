/* Reference quantizer of MXFP4 (32 weights, one E8M0 exponent), as ggml's
 * reference and the gguf package's quantize it: the exponent puts the
 * block's largest magnitude in [4, 8) times the scale (floor(log2(amax))
 * - 2, biased by 127), so the largest doubled E2M1 level, 12, times half
 * the scale covers it; each weight then takes the nearest level, the
 * first of equals in kvalues_mxfp4's order. */
#include <math.h>

#include "quant_internal.h"

static uint8_t nearest_mxfp4(float x, float d) {
    int best = 0;
    float err = fabsf((float)kvalues_mxfp4[0] * d - x);
    for (int i = 1; i < 16; i++) {
        float e = fabsf((float)kvalues_mxfp4[i] * d - x);
        if (e < err) best = i, err = e;
    }
    return (uint8_t)best;
}

void quant_mxfp4_row(const float *x, block_mxfp4 *b, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < QK_MXFP4; j++) amax = fmaxf(amax, fabsf(x[j]));
        /* floor(log2(amax)) is at most 127; below 2^-125 the exponent
         * would go negative, and 0 (the smallest scale) is the nearest */
        float e = amax > 0.0f ? floorf(log2f(amax)) - 2 + 127 : 0.0f;
        b[i].e = (uint8_t)(e > 0.0f ? e : 0.0f);
        float d = quant_e8m0_half(b[i].e);
        for (int j = 0; j < QK_MXFP4 / 2; j++)
            b[i].qs[j] = (uint8_t)(nearest_mxfp4(x[j], d) | nearest_mxfp4(x[j + QK_MXFP4 / 2], d) << 4);
    }
}
