/* The batched GEMM's block readers (src/backend/cuda/cuda_mmq_fmt.cuh),
 * compiled for the host: for every block type, random blocks with sane
 * scales, every group and every four positions, a (q - ZERO) + m must be
 * the reference dequantization's weight (cq_dequant32, itself checked
 * against quant/dequant.c by test_backend_ops' CPU reference), and the
 * quants must fit int8 as the tensor cores read them. Needs no GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_mmq_fmt.cuh"

static int failures;

static uint32_t rng = 12345u;
static uint32_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
    return rng;
}
/* a random f16 of magnitude 2^-8 .. 2^2, either sign */
static void put_f16(uint8_t *p) {
    float v = ldexpf(1.0f + (float)(next() % 1000) / 1000.0f, (int)(next() % 11) - 8);
    if (next() & 1) v = -v;
    unsigned short h = __half_as_ushort(__float2half(v));
    p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
}

template <int T> static void check(const char *name, const int *f16_at, int n_f16) {
    using F = mq<T>;
    constexpr int BLK = F::BLK, QK = F::QK;
    uint8_t blk[4 * BLK + 8];
    double worst = 0.0;
    for (int round = 0; round < 200; round++) {
        for (size_t i = 0; i < sizeof blk; i++)
            blk[i] = (uint8_t)next();
        for (int b = 0; b < 4; b++)
            for (int k = 0; k < n_f16; k++)
                put_f16(blk + b * BLK + f16_at[k]);
        if (T == CLEAVE_TYPE_MXFP4) /* an E8M0 exponent of 2^-17 .. 2^12 */
            for (int b = 0; b < 4; b++)
                blk[b * BLK] = (uint8_t)(110 + next() % 30);
        for (int b = 0; b < 4; b++) {
            const uint8_t *p = blk + b * BLK;
            float ref[256];
            for (int g32 = 0; g32 < QK / 32; g32++)
                cq_dequant32<T>(blk + (QK == 32 ? 0 : b * BLK), QK == 32 ? (size_t)b : (size_t)g32,
                                ref + 32 * g32);
            float scale = 0.0f;
            for (int i = 0; i < QK; i++)
                scale = fmaxf(scale, fabsf(ref[i]));
            for (int g = 0; g < F::NG; g++) {
                float a, m;
                typename F::hdr h;
                F::head(p, h);
                F::factors(h, p, g, a, m);
                if constexpr (F::PAIRED) /* one word's two quads, as the kernel pairs them */
                    for (int c = 0; c < 4; c++) {
                        uint32_t lo, hi;
                        F::quads(p, g * F::G + 4 * c, lo, hi);
                        if ((lo != F::quad(p, g * F::G + 4 * c) || hi != F::quad(p, g * F::G + 4 * c + 16)) &&
                            failures < 20) {
                            printf("FAIL %s: block %d group %d lane %d: paired quads differ\n", name, b, g, c);
                            failures++;
                        }
                    }
                for (int at = g * F::G; at < (g + 1) * F::G; at += 4) {
                    uint32_t q = F::quad(p, at);
                    for (int e = 0; e < 4; e++) {
                        int v = (int)(int8_t)(uint8_t)(q >> (8 * e));
                        float got = a * (float)(v - F::ZERO) + m;
                        double err = fabs((double)got - (double)ref[at + e]) / (scale > 0 ? scale : 1);
                        if (err > worst) worst = err;
                        if (!(err <= 1e-6) && failures < 20) { /* NaN fails too */
                            printf("FAIL %s: block %d position %d: %g, reference %g\n", name, b,
                                   at + e, got, ref[at + e]);
                            failures++;
                        }
                    }
                }
            }
        }
    }
    printf("%-7s worst error %.2g of the block's largest weight\n", name, worst);
}

int main(void) {
    static const int d0[] = {0}, d01[] = {0, 2}, q2k[] = {80, 82}, q3k[] = {108}, q6k[] = {208};
    check<CLEAVE_TYPE_Q4_0>("q4_0", d0, 1);
    check<CLEAVE_TYPE_Q4_1>("q4_1", d01, 2);
    check<CLEAVE_TYPE_Q5_0>("q5_0", d0, 1);
    check<CLEAVE_TYPE_Q5_1>("q5_1", d01, 2);
    check<CLEAVE_TYPE_IQ4_NL>("iq4_nl", d0, 1);
    check<CLEAVE_TYPE_MXFP4>("mxfp4", d0, 0);
    check<CLEAVE_TYPE_Q2_K>("q2_K", q2k, 2);
    check<CLEAVE_TYPE_Q3_K>("q3_K", q3k, 1);
    check<CLEAVE_TYPE_Q4_K>("q4_K", d01, 2);
    check<CLEAVE_TYPE_Q5_K>("q5_K", d01, 2);
    check<CLEAVE_TYPE_Q6_K>("q6_K", q6k, 1);
    check<CLEAVE_TYPE_IQ4_XS>("iq4_xs", d0, 1);
    printf("%s\n", failures ? "FAILED" : "all block readers match the reference");
    return failures ? 1 : 0;
}
