/* Shared by the AVX2 integer-dot files: every type writes one inline body
 *   cpu_tile_<T>(MR, w, xq, xs, n, y, ldy)
 * that dots one weight row with MR (1..4) activation rows, y[i * ldy] for
 * i < MR. CPU_QTILE_DEFINE(T, block type, block width) instantiates it for
 * MR = 1..4, the one-pair dot (MR = 1) and the tile driver over many rows.
 * The dot and every tile run the same instructions per pair, so a token's
 * output is bit-identical whatever batch it is in. */
#ifndef CLEAVE_CPU_QTILE_H
#define CLEAVE_CPU_QTILE_H

#include "cpu_qdot.h"
#include "cpu_simd.h"

#if CPU_X86

typedef void (*cpu_qtile_mr_fn)(const void *w, const char *xq, size_t xs, size_t n, float *y,
                                size_t ldy);

/* How far ahead the decode loop asks the memory for weight rows: ~4.5 KB,
 * about 0.3 us of work, longer than a DRAM miss and short of crowding L1.
 * Measured on 2048-wide rows, 2 threads: 1, 2, 4 and 8 rows of Q4_K ahead
 * (1.1 KB each) read 13.8, 14.1, 15.6 and 14.5 GB/s. */
#ifndef CPU_QTILE_PREFETCH_BYTES /* 0 turns it off, for measuring */
#define CPU_QTILE_PREFETCH_BYTES 4608
#endif
/* Activation rows up to which they all stay in L1 (decode). */
#define CPU_QTILE_STREAM_MAX_NX 8

static inline void cpu_qtile_prefetch(const char *row, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch(row + o, _MM_HINT_T0);
}

/* Decode (nx <= 8): each weight row is read once, from memory, for all
 * activation rows (in L1), and prefetched ahead: with the hardware
 * prefetcher alone one core read at half its bandwidth, the unpacking and
 * the misses not overlapping. Prefill: the activation rows of a group of 4
 * stay in L1 while the task's weight rows (in L2) pass, each block
 * unpacked once for 4 rows. */
static inline void cpu_qtile_drive(const cpu_qtile_mr_fn fns[5], const void *w, size_t nb1,
                                   size_t nw, const void *xq, size_t xs, size_t nx, size_t n,
                                   float *y, size_t ldy, size_t row_bytes) {
    const char *wc = w, *xc = xq;
    if (nx <= CPU_QTILE_STREAM_MAX_NX) {
        size_t ahead = CPU_QTILE_PREFETCH_BYTES / nb1 ? CPU_QTILE_PREFETCH_BYTES / nb1 : 1;
        for (size_t j = 0; j < nw; j++) {
            if (CPU_QTILE_PREFETCH_BYTES && j + ahead < nw)
                cpu_qtile_prefetch(wc + (j + ahead) * nb1, row_bytes);
            for (size_t i = 0; i < nx; i += 4)
                fns[nx - i < 4 ? nx - i : 4](wc + j * nb1, xc + i * xs, xs, n, y + i * ldy + j,
                                             ldy);
        }
        return;
    }
    for (size_t i = 0; i < nx; i += 4)
        for (size_t j = 0; j < nw; j++)
            fns[nx - i < 4 ? nx - i : 4](wc + j * nb1, xc + i * xs, xs, n, y + i * ldy + j, ldy);
}

#define CPU_QTILE_MR(T, MR)                                                                        \
    CPU_SIMD static void cpu_tile_##T##_##MR(const void *w, const char *xq, size_t xs, size_t n,   \
                                             float *y, size_t ldy) {                               \
        cpu_tile_##T(MR, w, xq, xs, n, y, ldy);                                                    \
    }

#define CPU_QTILE_DEFINE(T, BT, QK)                                                                \
    CPU_QTILE_MR(T, 1)                                                                             \
    CPU_QTILE_MR(T, 2)                                                                             \
    CPU_QTILE_MR(T, 3)                                                                             \
    CPU_QTILE_MR(T, 4)                                                                             \
    CPU_SIMD float cpu_qdot_##T##_avx2(const void *w, const void *xq, size_t n) {                  \
        float y;                                                                                   \
        cpu_tile_##T(1, w, xq, 0, n, &y, 0);                                                       \
        return y;                                                                                  \
    }                                                                                              \
    void cpu_qtile_##T##_avx2(const void *w, size_t nb1, size_t nw, const void *xq, size_t xs,     \
                              size_t nx, size_t n, float *y, size_t ldy) {                         \
        static const cpu_qtile_mr_fn fns[5] = {NULL, cpu_tile_##T##_1, cpu_tile_##T##_2,           \
                                               cpu_tile_##T##_3, cpu_tile_##T##_4};                \
        cpu_qtile_drive(fns, w, nb1, nw, xq, xs, nx, n, y, ldy, n / (QK) * sizeof(BT));            \
    }

/* Sum of the four floats of v. */
CPU_SIMD_INLINE float cpu_hsum128(__m128 v) {
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
}

/* Bit `from` of every byte of v moved to bit `to` (all other bits 0):
 * shifts of 16-bit lanes move bits across the byte boundary only into
 * positions the mask clears (|from - to| <= 5 keeps that true). */
CPU_SIMD_INLINE __m256i cpu_bit_to(__m256i v, int from, int to) {
    __m256i s = from <= to ? _mm256_slli_epi16(v, to - from) : _mm256_srli_epi16(v, from - to);
    return _mm256_and_si256(s, _mm256_set1_epi8((char)(1 << to)));
}

/* 16 nibbles as 32 bytes: low nibbles in bytes 0..15, high in 16..31 (the
 * legacy 32-blocks' weight order). */
CPU_SIMD_INLINE __m256i cpu_nibbles32(const uint8_t *qs) {
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0xF));
}

/* Shuffle masks that broadcast one int16 of each 128-bit lane: k4 picks
 * element k in both lanes; pair picks element 2g in the low lane and 2g+1
 * in the high lane (sub-blocks of 16 weights: one 32-weight maddubs holds
 * two). */
CPU_SIMD_INLINE __m256i cpu_shuf_k4(int k) {
    return _mm256_set1_epi16((short)((2 * k + 1) << 8 | 2 * k));
}
CPU_SIMD_INLINE __m256i cpu_shuf_pair(int g) {
    __m128i lo = _mm_set1_epi16((short)((4 * g + 1) << 8 | 4 * g));
    __m128i hi = _mm_set1_epi16((short)((4 * g + 3) << 8 | (4 * g + 2)));
    return _mm256_set_m128i(hi, lo);
}

#endif /* CPU_X86 */

/* The AVX2 kernels, by type (x86 only). */
#define CPU_QDECL(T)                                                                               \
    float cpu_qdot_##T##_avx2(const void *w, const void *xq, size_t n);                            \
    void cpu_qtile_##T##_avx2(const void *w, size_t nb1, size_t nw, const void *xq, size_t xs,     \
                              size_t nx, size_t n, float *y, size_t ldy);
CPU_QDECL(q4_0)
CPU_QDECL(q4_1)
CPU_QDECL(q5_0)
CPU_QDECL(q5_1)
CPU_QDECL(q8_0)
CPU_QDECL(iq4_nl)
CPU_QDECL(mxfp4)
CPU_QDECL(q2_K)
CPU_QDECL(q3_K)
CPU_QDECL(q4_K)
CPU_QDECL(q5_K)
CPU_QDECL(q6_K)
CPU_QDECL(iq4_xs)
#undef CPU_QDECL

#endif
