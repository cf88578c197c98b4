/* f32-activation kernels (dot, dequant, axpy) of the block types other
 * than Q8_0: what attention runs over Q4_0/Q5_0 caches and get_rows over
 * quantized embeddings (matmuls take cpu_qdot.h's integer dots). Blocks
 * are dequantized exactly (quant_dequantize_row's values), so against f32
 * activations only f32 rounding is left. The generic versions dequantize
 * one block into a stack buffer; the 32-wide types have AVX2 versions that
 * do it in registers. */
#include <string.h>

#include "cpu_dot.h"
#include "cpu_simd.h"
#include "quant/quant.h"

/* Generic, one block at a time. Four partial sums as cpu_dot.c's C dots. */
#define CPU_BLOCK_C(L, U, QK)                                                                      \
    static float cpu_dot_##L##_c(const void *row, const float *x, size_t n) {                      \
        const char *r = row;                                                                       \
        const size_t bb = quant_row_bytes(CLEAVE_TYPE_##U, QK);                                    \
        float w[QK], s[4] = {0, 0, 0, 0};                                                          \
        for (size_t i = 0; i < n; i += QK, r += bb) {                                              \
            quant_dequantize_row(CLEAVE_TYPE_##U, r, w, QK);                                       \
            for (int j = 0; j < QK; j++)                                                           \
                s[j % 4] += w[j] * x[i + j];                                                       \
        }                                                                                          \
        return (s[0] + s[1]) + (s[2] + s[3]);                                                      \
    }                                                                                              \
    static void cpu_dequant_##L##_c(const void *row, float *d, size_t n) {                         \
        quant_dequantize_row(CLEAVE_TYPE_##U, row, d, n);                                          \
    }                                                                                              \
    static void cpu_axpy_##L##_c(const void *row, float a, float *y, size_t n) {                   \
        const char *r = row;                                                                       \
        const size_t bb = quant_row_bytes(CLEAVE_TYPE_##U, QK);                                    \
        float w[QK];                                                                               \
        for (size_t i = 0; i < n; i += QK, r += bb) {                                              \
            quant_dequantize_row(CLEAVE_TYPE_##U, r, w, QK);                                       \
            for (int j = 0; j < QK; j++)                                                           \
                y[i + j] += a * w[j];                                                              \
        }                                                                                          \
    }

CPU_BLOCK_C(q4_0, Q4_0, 32)
CPU_BLOCK_C(q4_1, Q4_1, 32)
CPU_BLOCK_C(q5_0, Q5_0, 32)
CPU_BLOCK_C(q5_1, Q5_1, 32)
CPU_BLOCK_C(iq4_nl, IQ4_NL, 32)
CPU_BLOCK_C(q2_K, Q2_K, 256)
CPU_BLOCK_C(q3_K, Q3_K, 256)
CPU_BLOCK_C(q4_K, Q4_K, 256)
CPU_BLOCK_C(q5_K, Q5_K, 256)
CPU_BLOCK_C(q6_K, Q6_K, 256)
CPU_BLOCK_C(iq4_xs, IQ4_XS, 256)
CPU_BLOCK_C(mxfp4, MXFP4, 32)

#if CPU_X86

enum { CPU_OFF8, CPU_OFF16, CPU_MIN, CPU_NL }; /* how a 32-block's quants become weights */

/* The 32 weights of a Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL block (qh: the fifth
 * bits, or NULL) as four vectors, with the reference's roundings:
 * (q - 8) * d, (q - 16) * d, q * d + m, or d * kvalues_iq4nl[q]. */
CPU_SIMD_INLINE void cpu_legacy_block(int mode, const uint8_t *qs, const uint8_t *qh, uint16_t dh,
                                      uint16_t mh, __m256 w[4]) {
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    __m128i q[2] = {_mm_and_si128(t, _mm_set1_epi8(0xF)),
                    _mm_and_si128(_mm_srli_epi16(t, 4), _mm_set1_epi8(0xF))};
    if (qh) {
        uint32_t h;
        memcpy(&h, qh, 4);
        /* bit j of h is the fifth bit of weight j */
        const __m128i bits =
            _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
        const __m128i spread = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        for (int k = 0; k < 2; k++) {
            __m128i hk = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)((h >> 16 * k) & 0xFFFF)), spread);
            hk = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(hk, bits), bits), _mm_set1_epi8(16));
            q[k] = _mm_or_si128(q[k], hk);
        }
    }
    __m256 d = _mm256_set1_ps(_cvtsh_ss(dh));
    for (int k = 0; k < 4; k++) {
        __m128i qk = k % 2 ? _mm_srli_si128(q[k / 2], 8) : q[k / 2];
        __m256 v;
        if (mode == CPU_NL)
            v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)kvalues_iq4nl), qk)));
        else
            v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(qk));
        if (mode == CPU_OFF8 || mode == CPU_OFF16)
            w[k] =
                _mm256_mul_ps(_mm256_sub_ps(v, _mm256_set1_ps(mode == CPU_OFF8 ? 8.0f : 16.0f)), d);
        else if (mode == CPU_MIN)
            w[k] = _mm256_add_ps(_mm256_mul_ps(v, d), _mm256_set1_ps(_cvtsh_ss(mh)));
        else
            w[k] = _mm256_mul_ps(d, v);
    }
}

/* MH: the block's min (f16 bits) where it has one. */
#define CPU_LEGACY_SIMD(L, BT, MODE, QH, MH)                                                       \
    CPU_SIMD static float cpu_dot_##L##_avx2(const void *row, const float *x, size_t n) {          \
        const BT *b = row;                                                                         \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;                                                  \
        for (size_t i = 0; i < n / 32; i++, x += 32) {                                             \
            __m256 w[4];                                                                           \
            cpu_legacy_block(MODE, b[i].qs, QH, b[i].d, MH, w);                                    \
            a0 = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(x), a0);                                    \
            a1 = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(x + 8), a1);                                \
            a0 = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(x + 16), a0);                               \
            a1 = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(x + 24), a1);                               \
        }                                                                                          \
        return cpu_hsum(_mm256_add_ps(a0, a1));                                                    \
    }                                                                                              \
    CPU_SIMD static void cpu_dequant_##L##_avx2(const void *row, float *d, size_t n) {             \
        const BT *b = row;                                                                         \
        for (size_t i = 0; i < n / 32; i++, d += 32) {                                             \
            __m256 w[4];                                                                           \
            cpu_legacy_block(MODE, b[i].qs, QH, b[i].d, MH, w);                                    \
            for (int k = 0; k < 4; k++)                                                            \
                _mm256_storeu_ps(d + 8 * k, w[k]);                                                 \
        }                                                                                          \
    }                                                                                              \
    CPU_SIMD static void cpu_axpy_##L##_avx2(const void *row, float a, float *y, size_t n) {       \
        const BT *b = row;                                                                         \
        __m256 av = _mm256_set1_ps(a);                                                             \
        for (size_t i = 0; i < n / 32; i++, y += 32) {                                             \
            __m256 w[4];                                                                           \
            cpu_legacy_block(MODE, b[i].qs, QH, b[i].d, MH, w);                                    \
            for (int k = 0; k < 4; k++)                                                            \
                _mm256_storeu_ps(y + 8 * k,                                                        \
                                 _mm256_fmadd_ps(av, w[k], _mm256_loadu_ps(y + 8 * k)));           \
        }                                                                                          \
    }
CPU_LEGACY_SIMD(q4_0, block_q4_0, CPU_OFF8, NULL, 0)
CPU_LEGACY_SIMD(q5_0, block_q5_0, CPU_OFF16, b[i].qh, 0)
CPU_LEGACY_SIMD(q4_1, block_q4_1, CPU_MIN, NULL, b[i].m)
CPU_LEGACY_SIMD(q5_1, block_q5_1, CPU_MIN, b[i].qh, b[i].m)
CPU_LEGACY_SIMD(iq4_nl, block_iq4_nl, CPU_NL, NULL, 0)

#endif /* CPU_X86 */

/* The C kernels by type; Q4_0 and Q5_0 swap in their AVX2 versions. */
typedef struct {
    cleave_type t;
    cpu_dot_fn dot;
    cpu_dequant_fn dequant;
    cpu_axpy_fn axpy;
} cpu_block_fns;

#define CPU_BLOCK_ROW(U, L)                                                                        \
    { CLEAVE_TYPE_##U, cpu_dot_##L##_c, cpu_dequant_##L##_c, cpu_axpy_##L##_c }
static const cpu_block_fns cpu_block_table[] = {
    CPU_BLOCK_ROW(Q4_0, q4_0), CPU_BLOCK_ROW(Q4_1, q4_1),     CPU_BLOCK_ROW(Q5_0, q5_0),
    CPU_BLOCK_ROW(Q5_1, q5_1), CPU_BLOCK_ROW(IQ4_NL, iq4_nl), CPU_BLOCK_ROW(Q2_K, q2_K),
    CPU_BLOCK_ROW(Q3_K, q3_K), CPU_BLOCK_ROW(Q4_K, q4_K),     CPU_BLOCK_ROW(Q5_K, q5_K),
    CPU_BLOCK_ROW(Q6_K, q6_K), CPU_BLOCK_ROW(IQ4_XS, iq4_xs), CPU_BLOCK_ROW(MXFP4, mxfp4),
};

static cpu_block_fns cpu_block_lookup(cleave_type t, bool simd) {
    cpu_block_fns f = {t, NULL, NULL, NULL};
    for (size_t i = 0; i < sizeof cpu_block_table / sizeof cpu_block_table[0]; i++)
        if (cpu_block_table[i].t == t) f = cpu_block_table[i];
#if CPU_X86
#define CPU_LEGACY_PICK(U, L)                                                                      \
    if (simd && t == CLEAVE_TYPE_##U)                                                              \
        f = (cpu_block_fns){t, cpu_dot_##L##_avx2, cpu_dequant_##L##_avx2, cpu_axpy_##L##_avx2};
    CPU_LEGACY_PICK(Q4_0, q4_0)
    CPU_LEGACY_PICK(Q4_1, q4_1)
    CPU_LEGACY_PICK(Q5_0, q5_0)
    CPU_LEGACY_PICK(Q5_1, q5_1)
    CPU_LEGACY_PICK(IQ4_NL, iq4_nl)
#undef CPU_LEGACY_PICK
#endif
    (void)simd;
    return f;
}

cpu_dot_fn cpu_dot_blocks_for(cleave_type t, bool simd) { return cpu_block_lookup(t, simd).dot; }
cpu_dequant_fn cpu_dequant_blocks_for(cleave_type t, bool simd) {
    return cpu_block_lookup(t, simd).dequant;
}
cpu_axpy_fn cpu_axpy_blocks_for(cleave_type t, bool simd) { return cpu_block_lookup(t, simd).axpy; }
