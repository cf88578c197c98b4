/* AVX2 integer dots of Q2_K, Q3_K and IQ4_XS rows with q8 activations of
 * 256, built like cpu_qdot_avx2_k.c's: maddubs + madd with the sub-block
 * scales per 32 weights, mins and offsets through the activation's
 * 16-sums, one float multiply-add per 256. */
#include <string.h>

#include "cpu_qtile.h"
#include "quant/quant.h"

#if CPU_X86

/* Q2_K: 2-bit quants; per 128 weights one 32-byte load holds four planes
 * of 32 (bits 2p..2p+1), each two sub-blocks of 16. Scales are the low
 * nibbles of scales[], mins the high ones. */
CPU_SIMD_INLINE void cpu_tile_q2_K(const int MR, const void *w, const char *xq, size_t xs, size_t n,
                                   float *y, size_t ldy) {
    const block_q2_K *wb = w;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
        acc[i] = _mm256_setzero_ps();
    for (size_t b = 0; b < n / QK_K; b++, wb++) {
        const cpu_qa256 *x[4];
        __m256i sumi[4];
        __m128i sm = _mm_loadu_si128((const __m128i *)wb->scales);
        __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sm, m4));
        __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m4));
        float d = _cvtsh_ss(wb->d), dmin = _cvtsh_ss(wb->dmin);
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            x[i] = (const cpu_qa256 *)(xq + i * xs) + b;
            __m256i mins =
                _mm256_madd_epi16(mn16, _mm256_loadu_si256((const __m256i *)x[i]->bsums));
            acc[i] =
                _mm256_fmadd_ps(_mm256_set1_ps(-dmin * x[i]->d), _mm256_cvtepi32_ps(mins), acc[i]);
            sumi[i] = _mm256_setzero_si256();
        }
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) {
            __m256i sc = _mm256_broadcastsi128_si256(c ? _mm256_extracti128_si256(sc16, 1)
                                                       : _mm256_castsi256_si128(sc16));
            __m256i bits = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * c));
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * p), m3);
                __m256i s = _mm256_shuffle_epi8(sc, cpu_shuf_pair(p));
#pragma GCC unroll 4
                for (int i = 0; i < MR; i++) {
                    __m256i xv = _mm256_loadu_si256((const __m256i *)(x[i]->qs + 128 * c + 32 * p));
                    sumi[i] = _mm256_add_epi32(sumi[i],
                                               _mm256_madd_epi16(s, _mm256_maddubs_epi16(q, xv)));
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++)
            acc[i] =
                _mm256_fmadd_ps(_mm256_set1_ps(d * x[i]->d), _mm256_cvtepi32_ps(sumi[i]), acc[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
        y[i * ldy] = cpu_hsum(acc[i]);
}
CPU_QTILE_DEFINE(q2_K, block_q2_K, QK_K)

/* Q3_K's sixteen signed six-bit scales (quant_q3_K_scales), four at a time. */
CPU_SIMD_INLINE __m128i cpu_q3_K_scales(const uint8_t packed[12]) {
    uint32_t a[3];
    memcpy(a, packed, 12);
    const uint32_t m4 = 0x0f0f0f0f, m2 = 0x03030303;
    __m128i s = _mm_set_epi32((int)(((a[1] >> 4) & m4) | (((a[2] >> 6) & m2) << 4)),
                              (int)(((a[0] >> 4) & m4) | (((a[2] >> 4) & m2) << 4)),
                              (int)((a[1] & m4) | (((a[2] >> 2) & m2) << 4)),
                              (int)((a[0] & m4) | ((a[2] & m2) << 4)));
    return _mm_sub_epi8(s, _mm_set1_epi8(32));
}

/* Q3_K: the Q2_K planes plus a high bit (bit 4c + p of hmask[l]); the
 * quant q2 + 4 hbit is unsigned (0..7) and the -4 offset goes through the
 * activation's 16-sums. */
CPU_SIMD_INLINE void cpu_tile_q3_K(const int MR, const void *w, const char *xq, size_t xs, size_t n,
                                   float *y, size_t ldy) {
    const block_q3_K *wb = w;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
        acc[i] = _mm256_setzero_ps();
    for (size_t b = 0; b < n / QK_K; b++, wb++) {
        const cpu_qa256 *x[4];
        __m256i sumi[4];
        __m256i sc16 = _mm256_cvtepi8_epi16(cpu_q3_K_scales(wb->scales));
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            x[i] = (const cpu_qa256 *)(xq + i * xs) + b;
            __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)x[i]->bsums));
            sumi[i] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 2));
        }
        __m256i hm = _mm256_loadu_si256((const __m256i *)wb->hmask);
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) {
            __m256i sc = _mm256_broadcastsi128_si256(c ? _mm256_extracti128_si256(sc16, 1)
                                                       : _mm256_castsi256_si128(sc16));
            __m256i bits = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * c));
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * p), m3),
                                            cpu_bit_to(hm, 4 * c + p, 2));
                __m256i s = _mm256_shuffle_epi8(sc, cpu_shuf_pair(p));
#pragma GCC unroll 4
                for (int i = 0; i < MR; i++) {
                    __m256i xv = _mm256_loadu_si256((const __m256i *)(x[i]->qs + 128 * c + 32 * p));
                    sumi[i] = _mm256_add_epi32(sumi[i],
                                               _mm256_madd_epi16(s, _mm256_maddubs_epi16(q, xv)));
                }
            }
        }
        float d = _cvtsh_ss(wb->d);
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++)
            acc[i] =
                _mm256_fmadd_ps(_mm256_set1_ps(d * x[i]->d), _mm256_cvtepi32_ps(sumi[i]), acc[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
        y[i * ldy] = cpu_hsum(acc[i]);
}
CPU_QTILE_DEFINE(q3_K, block_q3_K, QK_K)

/* IQ4_XS: the IQ4_NL levels (signed, |v| <= 127: the sign trick's maddubs
 * cannot saturate) with a signed six-bit scale per 32. */
CPU_SIMD_INLINE void cpu_tile_iq4_xs(const int MR, const void *w, const char *xq, size_t xs,
                                     size_t n, float *y, size_t ldy) {
    const block_iq4_xs *wb = w;
    const __m256i values =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
    __m256 acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
        acc[i] = _mm256_setzero_ps();
    for (size_t b = 0; b < n / QK_K; b++, wb++) {
        const cpu_qa256 *x[4];
        __m256i sumi[4];
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            x[i] = (const cpu_qa256 *)(xq + i * xs) + b;
            sumi[i] = _mm256_setzero_si256();
        }
        /* quant_iq4_xs_scale, inline: a call would spill the accumulators */
        short ls[8];
        for (int j = 0; j < 8; j++)
            ls[j] = (short)((((wb->scales_l[j / 2] >> 4 * (j % 2)) & 0xF) |
                             (((wb->scales_h >> 2 * j) & 3) << 4)) -
                            32);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m256i q = _mm256_shuffle_epi8(values, cpu_nibbles32(wb->qs + 16 * j));
            __m256i aq = _mm256_sign_epi8(q, q);
            __m256i s = _mm256_set1_epi16(ls[j]);
#pragma GCC unroll 4
            for (int i = 0; i < MR; i++) {
                __m256i xv =
                    _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(x[i]->qs + 32 * j)), q);
                sumi[i] =
                    _mm256_add_epi32(sumi[i], _mm256_madd_epi16(s, _mm256_maddubs_epi16(aq, xv)));
            }
        }
        float d = _cvtsh_ss(wb->d);
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++)
            acc[i] =
                _mm256_fmadd_ps(_mm256_set1_ps(d * x[i]->d), _mm256_cvtepi32_ps(sumi[i]), acc[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
        y[i * ldy] = cpu_hsum(acc[i]);
}
CPU_QTILE_DEFINE(iq4_xs, block_iq4_xs, QK_K)

#endif /* CPU_X86 */
