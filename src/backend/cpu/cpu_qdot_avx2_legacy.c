/* AVX2 integer dots of the 32-wide types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * IQ4_NL, MXFP4) with q8 activations of 32: per block one maddubs and one madd
 * (by ones) to int32, then one float multiply-add. Unsigned quants (4 or
 * 5 bits) go straight into maddubs and their zero point is taken off with
 * the activation block's sum; signed ones (Q8_0, IQ4_NL, MXFP4) use the sign
 * trick (|w| times x with w's sign). The unpacking of a weight block is
 * shared by the MR activation rows of a tile. */
#include <string.h>

#include "cpu_qtile.h"
#include "quant/quant.h"

#if CPU_X86

/* 32 bits as 32 bytes of 0x10 (bit set) or 0 (the fifth bit of Q5). */
CPU_SIMD_INLINE __m256i cpu_bits32_x16(const uint8_t qh[4]) {
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i shuf =
        _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), shuf);
    /* byte j keeps bit j % 8 of its source byte: all ones where it is set */
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    bytes = _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
    return _mm256_and_si256(bytes, _mm256_set1_epi8(0x10));
}

/* int32 sums of the 32 products of unsigned q and signed x, 8 lanes. */
CPU_SIMD_INLINE __m256i cpu_dot_u8s8(__m256i q, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), _mm256_set1_epi16(1));
}

/* A zero point off the first lane: lanes hold sums the float conversion
 * keeps apart, and the correction must land in exactly one of them. */
CPU_SIMD_INLINE __m256i cpu_sub_lane0(__m256i v, int32_t c) {
    return _mm256_sub_epi32(v, _mm256_zextsi128_si256(_mm_cvtsi32_si128(c)));
}

/* Body of the unsigned types: Q(w) gives the block's 32 unsigned quants,
 * OFF the zero point (8, 16), or 0 and MINV(w) the block's min
 * (Q4_1/Q5_1: w = d q + m; the min's term is m times the activation sum). */
#define CPU_TILE_UNSIGNED(T, BT, Q, OFF, MINV)                                                     \
    CPU_SIMD_INLINE void cpu_tile_##T(const int MR, const void *w, const char *xq, size_t xs,      \
                                      size_t n, float *y, size_t ldy) {                            \
        const BT *wb = w;                                                                          \
        __m256 acc[4];                                                                             \
        float accm[4];                                                                             \
        _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) acc[i] = _mm256_setzero_ps(),         \
                                                             accm[i] = 0;                          \
        for (size_t b = 0; b < n / 32; b++, wb++) {                                                \
            __m256i q = Q(wb);                                                                     \
            float d = _cvtsh_ss(wb->d);                                                            \
            _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {                                 \
                const cpu_qa32 *x = (const cpu_qa32 *)(xq + i * xs) + b;                           \
                __m256i p = cpu_dot_u8s8(q, _mm256_loadu_si256((const __m256i *)x->qs));           \
                if (OFF) p = cpu_sub_lane0(p, (OFF)*x->sum);                                       \
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * x->d), _mm256_cvtepi32_ps(p), acc[i]); \
                if (!(OFF)) accm[i] += MINV(wb) * x->d * (float)x->sum;                            \
            }                                                                                      \
        }                                                                                          \
        _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) y[i * ldy] =                          \
            cpu_hsum(acc[i]) + accm[i];                                                            \
    }

#define CPU_Q4(wb)    cpu_nibbles32((wb)->qs)
#define CPU_Q5(wb)    _mm256_or_si256(cpu_nibbles32((wb)->qs), cpu_bits32_x16((wb)->qh))
#define CPU_MIN(wb)   _cvtsh_ss((wb)->m)
#define CPU_NOMIN(wb) 0.0f

CPU_TILE_UNSIGNED(q4_0, block_q4_0, CPU_Q4, 8, CPU_NOMIN)
CPU_QTILE_DEFINE(q4_0, block_q4_0, 32)
CPU_TILE_UNSIGNED(q4_1, block_q4_1, CPU_Q4, 0, CPU_MIN)
CPU_QTILE_DEFINE(q4_1, block_q4_1, 32)
CPU_TILE_UNSIGNED(q5_0, block_q5_0, CPU_Q5, 16, CPU_NOMIN)
CPU_QTILE_DEFINE(q5_0, block_q5_0, 32)
CPU_TILE_UNSIGNED(q5_1, block_q5_1, CPU_Q5, 0, CPU_MIN)
CPU_QTILE_DEFINE(q5_1, block_q5_1, 32)

/* Body of the signed types: Q(w) gives the 32 signed quants, D(w) the
 * block's scale. */
#define CPU_TILE_SIGNED(T, BT, Q, D)                                                                  \
    CPU_SIMD_INLINE void cpu_tile_##T(const int MR, const void *w, const char *xq, size_t xs,      \
                                      size_t n, float *y, size_t ldy) {                            \
        const BT *wb = w;                                                                          \
        __m256 acc[4];                                                                             \
        _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) acc[i] = _mm256_setzero_ps();         \
        for (size_t b = 0; b < n / 32; b++, wb++) {                                                \
            __m256i q = Q(wb);                                                                     \
            __m256i aq = _mm256_sign_epi8(q, q);                                                   \
            float d = D(wb);                                                                       \
            _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {                                 \
                const cpu_qa32 *x = (const cpu_qa32 *)(xq + i * xs) + b;                           \
                __m256i sx = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)x->qs), q);      \
                __m256i p = cpu_dot_u8s8(aq, sx);                                                  \
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * x->d), _mm256_cvtepi32_ps(p), acc[i]); \
            }                                                                                      \
        }                                                                                          \
        _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) y[i * ldy] = cpu_hsum(acc[i]);        \
    }

#define CPU_Q8(wb) _mm256_loadu_si256((const __m256i *)(wb)->qs)
#define CPU_QNL(wb)                                                                                \
    _mm256_shuffle_epi8(                                                                           \
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_iq4nl)),              \
        cpu_nibbles32((wb)->qs))

#define CPU_QMX(wb)                                                                                \
    _mm256_shuffle_epi8(                                                                           \
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_mxfp4)),              \
        cpu_nibbles32((wb)->qs))
#define CPU_D16(wb) _cvtsh_ss((wb)->d)
#define CPU_DE8(wb) quant_e8m0_half((wb)->e)

CPU_TILE_SIGNED(q8_0, block_q8_0, CPU_Q8, CPU_D16)
CPU_QTILE_DEFINE(q8_0, block_q8_0, 32)
CPU_TILE_SIGNED(iq4_nl, block_iq4_nl, CPU_QNL, CPU_D16)
CPU_QTILE_DEFINE(iq4_nl, block_iq4_nl, 32)
/* MXFP4: the doubled E2M1 levels (|v| <= 12) through the same sign trick */
CPU_TILE_SIGNED(mxfp4, block_mxfp4, CPU_QMX, CPU_DE8)
CPU_QTILE_DEFINE(mxfp4, block_mxfp4, 32)

#endif /* CPU_X86 */
