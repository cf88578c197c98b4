/* AVX2 integer dots of Q4_K, Q5_K and Q6_K rows with q8 activations of
 * 256 (the types of a Q4_K_M file): per 32 weights one maddubs (unsigned
 * weight quants times signed activation quants, pair sums in int16) and
 * one madd with the sub-block scales (int32), one float multiply-add per
 * 256. Mins and offsets come from the activation's 16-sums. The unpacking
 * of a weight block is shared by the MR activation rows of a tile. */
#include <string.h>

#include "cpu_qtile.h"
#include "quant/quant.h"

#if CPU_X86

/* The eight six-bit scales (bytes 0..7) and mins (bytes 8..15) of a
 * Q4_K/Q5_K block, as quant_k4_scale_min unpacks them, four at a time. */
CPU_SIMD_INLINE __m128i cpu_k4_scales_mins(const uint8_t packed[12]) {
    uint32_t u[3];
    memcpy(u, packed, 12);
    const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
    uint32_t sc_lo = u[0] & m6, mn_lo = u[1] & m6;
    uint32_t sc_hi = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);
    uint32_t mn_hi = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4);
    return _mm_set_epi32((int)mn_hi, (int)mn_lo, (int)sc_hi, (int)sc_lo);
}

/* Shared by Q4_K and Q5_K: the min term of every row (straight into its
 * float sum: a separate one would hold MR more registers), the scales
 * broadcast to both lanes, and the integer sums zeroed. */
CPU_SIMD_INLINE __m256i cpu_k4_begin(const int MR, const uint8_t packed[12], float dmin,
                                     const cpu_qa256 *const x[4], __m256 acc[4], __m256i sumi[4]) {
    __m256i sm = _mm256_cvtepu8_epi16(cpu_k4_scales_mins(packed));
    __m128i mins = _mm256_extracti128_si256(sm, 1);
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) {
        __m256i bs = _mm256_loadu_si256((const __m256i *)x[i]->bsums);
        /* sums of 32 activation quants: one per sub-block */
        __m128i s32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        __m256i prod = _mm256_zextsi128_si256(_mm_madd_epi16(mins, s32)); /* upper lanes 0 */
        acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(-dmin * x[i]->d), _mm256_cvtepi32_ps(prod), acc[i]);
        sumi[i] = _mm256_setzero_si256();
    }
    return _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sm));
}

/* cpu_shuf_k4(k) for k = 0..7, read from memory inside the chunk loop:
 * as constants the compiler hoists all eight shuffles out of it and
 * spills them. */
static const int16_t cpu_k4_masks[8][16] __attribute__((aligned(32))) = {
#define K4M(k) (int16_t)((2 * (k) + 1) << 8 | 2 * (k))
#define K4ROW(k)                                                                                   \
    {                                                                                              \
        K4M(k), K4M(k), K4M(k), K4M(k), K4M(k), K4M(k), K4M(k), K4M(k), K4M(k), K4M(k), K4M(k),    \
            K4M(k), K4M(k), K4M(k), K4M(k), K4M(k)                                                 \
    }
    K4ROW(0), K4ROW(1), K4ROW(2), K4ROW(3), K4ROW(4), K4ROW(5), K4ROW(6), K4ROW(7),
#undef K4ROW
#undef K4M
};

/* One 64-weight chunk of a Q4_K/Q5_K block: low (ql) and high (qh)
 * nibble planes against MR activation rows. */
CPU_SIMD_INLINE void cpu_k4_chunk(const int MR, __m256i ql, __m256i qh, __m256i scales, int c,
                                  const cpu_qa256 *const x[4], __m256i sumi[4]) {
    __m256i sl =
        _mm256_shuffle_epi8(scales, _mm256_load_si256((const __m256i *)cpu_k4_masks[2 * c]));
    __m256i sh =
        _mm256_shuffle_epi8(scales, _mm256_load_si256((const __m256i *)cpu_k4_masks[2 * c + 1]));
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) {
        __m256i xl = _mm256_loadu_si256((const __m256i *)(x[i]->qs + 64 * c));
        __m256i xh = _mm256_loadu_si256((const __m256i *)(x[i]->qs + 64 * c + 32));
        __m256i pl = _mm256_madd_epi16(sl, _mm256_maddubs_epi16(ql, xl));
        __m256i ph = _mm256_madd_epi16(sh, _mm256_maddubs_epi16(qh, xh));
        sumi[i] = _mm256_add_epi32(sumi[i], _mm256_add_epi32(pl, ph));
    }
}

CPU_SIMD_INLINE void cpu_tile_q4_K(const int MR, const void *w, const char *xq, size_t xs, size_t n,
                                   float *y, size_t ldy) {
    const block_q4_K *wb = w;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
        acc[i] = _mm256_setzero_ps();
    for (size_t b = 0; b < n / QK_K; b++, wb++) {
        const cpu_qa256 *x[4];
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++)
            x[i] = (const cpu_qa256 *)(xq + i * xs) + b;
        __m256i sumi[4];
        __m256i scales = cpu_k4_begin(MR, wb->scales, _cvtsh_ss(wb->dmin), x, acc, sumi);
#pragma GCC unroll 1
        for (int c = 0; c < 4; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * c));
            cpu_k4_chunk(MR, _mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                         scales, c, x, sumi);
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
CPU_QTILE_DEFINE(q4_K, block_q4_K, QK_K)

/* Q5_K: Q4_K with bit j of qh[l] as the fifth bit of sub-block j; the
 * bits move down two places per chunk (a 16-bit shift carries bits of the
 * high byte only into bits 6-7 of the low one, which are never read). */
CPU_SIMD_INLINE void cpu_tile_q5_K(const int MR, const void *w, const char *xq, size_t xs, size_t n,
                                   float *y, size_t ldy) {
    const block_q5_K *wb = w;
    const __m256i m4 = _mm256_set1_epi8(0xF), m16 = _mm256_set1_epi8(0x10);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
        acc[i] = _mm256_setzero_ps();
    for (size_t b = 0; b < n / QK_K; b++, wb++) {
        const cpu_qa256 *x[4];
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++)
            x[i] = (const cpu_qa256 *)(xq + i * xs) + b;
        __m256i sumi[4];
        __m256i scales = cpu_k4_begin(MR, wb->scales, _cvtsh_ss(wb->dmin), x, acc, sumi);
        __m256i hb = _mm256_loadu_si256((const __m256i *)wb->qh);
#pragma GCC unroll 1
        for (int c = 0; c < 4; c++, hb = _mm256_srli_epi16(hb, 2)) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * c));
            __m256i ql = _mm256_or_si256(_mm256_and_si256(q, m4),
                                         _mm256_and_si256(_mm256_slli_epi16(hb, 4), m16));
            __m256i qh = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                         _mm256_and_si256(_mm256_slli_epi16(hb, 3), m16));
            cpu_k4_chunk(MR, ql, qh, scales, c, x, sumi);
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
CPU_QTILE_DEFINE(q5_K, block_q5_K, QK_K)

/* Q6_K: six-bit quants taken unsigned (0..63); the -32 offset is one
 * madd of the sixteen scales with the activation's 16-sums per block. */
CPU_SIMD_INLINE void cpu_tile_q6_K(const int MR, const void *w, const char *xq, size_t xs, size_t n,
                                   float *y, size_t ldy) {
    const block_q6_K *wb = w;
    const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
        acc[i] = _mm256_setzero_ps();
    for (size_t b = 0; b < n / QK_K; b++, wb++) {
        const cpu_qa256 *x[4];
        __m256i sumi[4];
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wb->scales));
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            x[i] = (const cpu_qa256 *)(xq + i * xs) + b;
            __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)x[i]->bsums));
            sumi[i] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5));
        }
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) {
            /* the eight scales of this 128, in both lanes */
            __m256i sc = _mm256_broadcastsi128_si256(c ? _mm256_extracti128_si256(sc16, 1)
                                                       : _mm256_castsi256_si128(sc16));
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(wb->ql + 64 * c));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(wb->ql + 64 * c + 32));
            __m256i h = _mm256_loadu_si256((const __m256i *)(wb->qh + 32 * c));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                   _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                   _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                   _mm256_and_si256(h, m30));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                __m256i s = _mm256_shuffle_epi8(sc, cpu_shuf_pair(g));
#pragma GCC unroll 4
                for (int i = 0; i < MR; i++) {
                    __m256i xv = _mm256_loadu_si256((const __m256i *)(x[i]->qs + 128 * c + 32 * g));
                    sumi[i] = _mm256_add_epi32(
                        sumi[i], _mm256_madd_epi16(s, _mm256_maddubs_epi16(q[g], xv)));
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
CPU_QTILE_DEFINE(q6_K, block_q6_K, QK_K)

#endif /* CPU_X86 */
