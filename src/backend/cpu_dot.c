/* Row kernels of the CPU device, in a portable C version and an
 * AVX2+FMA+F16C version compiled with function-level target attributes, so
 * this file needs no -mavx2 and the binary still runs on any x86-64. Weight
 * conversions are exact (f16/bf16/q8_0 values are representable in f32), so
 * the kernels differ from quant.c's reference only in summation order. */
#include "cpu_dot.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"

#if defined(__x86_64__) || defined(__i386__)
#define CPU_X86 1
#include <immintrin.h>
#else
#define CPU_X86 0
#endif

bool cpu_simd_available(void) {
#if CPU_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#else
    return false;
#endif
}

/* ---- portable C ------------------------------------------------------- */

/* Four partial sums: shorter dependency chains, and the same shape of
 * rounding error as the SIMD lanes. */
#define CPU_DOT_C(NAME, T, CONV)                                       \
    static float NAME(const void *row, const float *x, size_t n) {     \
        const T *w = row;                                              \
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;                          \
        size_t i = 0;                                                  \
        for (; i + 4 <= n; i += 4) {                                   \
            s0 += CONV(w[i]) * x[i];                                   \
            s1 += CONV(w[i + 1]) * x[i + 1];                           \
            s2 += CONV(w[i + 2]) * x[i + 2];                           \
            s3 += CONV(w[i + 3]) * x[i + 3];                           \
        }                                                              \
        for (; i < n; i++) s0 += CONV(w[i]) * x[i];                    \
        return (s0 + s1) + (s2 + s3);                                  \
    }

#define CPU_CONV_F32(v) (v)
CPU_DOT_C(cpu_dot_f32_c, float, CPU_CONV_F32)
CPU_DOT_C(cpu_dot_f16_c, uint16_t, quant_f16_to_f32)
CPU_DOT_C(cpu_dot_bf16_c, uint16_t, quant_bf16_to_f32)

static float cpu_dot_q8_0_c(const void *row, const float *x, size_t n) {
    const block_q8_0 *b = row;
    float s = 0;
    for (size_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float sb = 0;
        for (int j = 0; j < QK8_0; j++) sb += (float)b[i].qs[j] * x[j];
        s += quant_f16_to_f32(b[i].d) * sb;
    }
    return s;
}

/* Up to four activation rows per pass: the C path just repeats the dot. */
#define CPU_MDOT_C(NAME, DOT)                                                          \
    static void NAME(const void *row, const float *x, size_t ldx, size_t m, size_t k,  \
                     float *acc) {                                                     \
        for (size_t r = 0; r < m; r++) acc[r] += DOT(row, x + r * ldx, k);             \
    }
CPU_MDOT_C(cpu_mdot_f32_c, cpu_dot_f32_c)
CPU_MDOT_C(cpu_mdot_f16_c, cpu_dot_f16_c)
CPU_MDOT_C(cpu_mdot_bf16_c, cpu_dot_bf16_c)
CPU_MDOT_C(cpu_mdot_q8_0_c, cpu_dot_q8_0_c)

static void cpu_dequant_f32_c(const void *r, float *d, size_t n) {
    quant_dequantize_row(CLEAVE_TYPE_F32, r, d, n);
}
static void cpu_dequant_f16_c(const void *r, float *d, size_t n) {
    quant_dequantize_row(CLEAVE_TYPE_F16, r, d, n);
}
static void cpu_dequant_bf16_c(const void *r, float *d, size_t n) {
    quant_dequantize_row(CLEAVE_TYPE_BF16, r, d, n);
}
static void cpu_dequant_q8_0_c(const void *r, float *d, size_t n) {
    quant_dequantize_row(CLEAVE_TYPE_Q8_0, r, d, n);
}

#define CPU_AXPY_C(NAME, T, CONV)                                           \
    static void NAME(const void *row, float a, float *y, size_t n) {        \
        const T *w = row;                                                   \
        for (size_t i = 0; i < n; i++) y[i] += a * CONV(w[i]);              \
    }
CPU_AXPY_C(cpu_axpy_f32_c, float, CPU_CONV_F32)
CPU_AXPY_C(cpu_axpy_f16_c, uint16_t, quant_f16_to_f32)
CPU_AXPY_C(cpu_axpy_bf16_c, uint16_t, quant_bf16_to_f32)

static void cpu_axpy_q8_0_c(const void *row, float a, float *y, size_t n) {
    const block_q8_0 *b = row;
    for (size_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
        float ad = a * quant_f16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++) y[j] += ad * (float)b[i].qs[j];
    }
}

static void cpu_gemm_c(const float *x, size_t ldx, size_t n, const float *w, size_t ldw, size_t m,
                       size_t k, float *y, size_t ldy) {
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < m; j++) y[i * ldy + j] = cpu_dot_f32_c(w + j * ldw, x + i * ldx, k);
}

/* ---- AVX2 + FMA + F16C ------------------------------------------------ */
#if CPU_X86

#define CPU_SIMD __attribute__((target("avx2,fma,f16c")))
#define CPU_SIMD_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) static inline

CPU_SIMD_INLINE float cpu_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

CPU_SIMD_INLINE __m256 cpu_load_f32(const void *p) { return _mm256_loadu_ps(p); }
CPU_SIMD_INLINE __m256 cpu_load_f16(const void *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
CPU_SIMD_INLINE __m256 cpu_load_bf16(const void *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
/* Eight int8 weights to f32. */
CPU_SIMD_INLINE __m256 cpu_load_q8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
CPU_SIMD_INLINE float cpu_f16_scalar(uint16_t h) { return _cvtsh_ss(h); }
CPU_SIMD_INLINE float cpu_f32_scalar(float f) { return f; }

/* Four independent accumulators keep two FMA pipes busy; the row is streamed
 * once, which is what decode (memory-bound) needs. */
#define CPU_DOT_SIMD(NAME, T, LOAD, CONV)                                         \
    CPU_SIMD static float NAME(const void *row, const float *x, size_t n) {       \
        const T *w = row;                                                         \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;               \
        size_t i = 0;                                                             \
        for (; i + 32 <= n; i += 32) {                                            \
            a0 = _mm256_fmadd_ps(LOAD(w + i), _mm256_loadu_ps(x + i), a0);        \
            a1 = _mm256_fmadd_ps(LOAD(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);  \
            a2 = _mm256_fmadd_ps(LOAD(w + i + 16), _mm256_loadu_ps(x + i + 16), a2); \
            a3 = _mm256_fmadd_ps(LOAD(w + i + 24), _mm256_loadu_ps(x + i + 24), a3); \
        }                                                                         \
        for (; i + 8 <= n; i += 8)                                                \
            a0 = _mm256_fmadd_ps(LOAD(w + i), _mm256_loadu_ps(x + i), a0);        \
        float s = cpu_hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))); \
        for (; i < n; i++) s += CONV(w[i]) * x[i];                                \
        return s;                                                                 \
    }

CPU_DOT_SIMD(cpu_dot_f32_avx2, float, cpu_load_f32, cpu_f32_scalar)
CPU_DOT_SIMD(cpu_dot_f16_avx2, uint16_t, cpu_load_f16, cpu_f16_scalar)
CPU_DOT_SIMD(cpu_dot_bf16_avx2, uint16_t, cpu_load_bf16, quant_bf16_to_f32)

/* Sum of one block's 32 products, in two chains for latency. */
CPU_SIMD_INLINE __m256 cpu_q8_block(const block_q8_0 *b, const float *x) {
    __m256 s0 = _mm256_mul_ps(cpu_load_q8(b->qs), _mm256_loadu_ps(x));
    __m256 s1 = _mm256_mul_ps(cpu_load_q8(b->qs + 8), _mm256_loadu_ps(x + 8));
    s0 = _mm256_fmadd_ps(cpu_load_q8(b->qs + 16), _mm256_loadu_ps(x + 16), s0);
    s1 = _mm256_fmadd_ps(cpu_load_q8(b->qs + 24), _mm256_loadu_ps(x + 24), s1);
    return _mm256_add_ps(s0, s1);
}

/* f32 activations against dequantized int8 weights: no activation
 * quantization, so the only error is f32 rounding. */
CPU_SIMD static float cpu_dot_q8_0_avx2(const void *row, const float *x, size_t n) {
    const block_q8_0 *b = row;
    size_t nb = n / QK8_0, i = 0;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (; i + 2 <= nb; i += 2) {
        a0 = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(b[i].d)), cpu_q8_block(b + i, x + i * QK8_0),
                             a0);
        a1 = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(b[i + 1].d)),
                             cpu_q8_block(b + i + 1, x + (i + 1) * QK8_0), a1);
    }
    if (i < nb)
        a0 = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(b[i].d)), cpu_q8_block(b + i, x + i * QK8_0),
                             a0);
    return cpu_hsum(_mm256_add_ps(a0, a1));
}

/* One weight row against M (1..4) activation rows: the row is loaded and
 * converted once and feeds M FMAs, so small batches cost little more than
 * one row. U vectors per step give each of the M chains enough independent
 * accumulators to cover FMA latency without running out of registers. */
#define CPU_MDOT_SIMD(NAME, T, LOAD, CONV)                                                   \
    CPU_SIMD_INLINE void NAME##_m(const int M, const void *row, const float *x, size_t ldx,   \
                                  size_t k, float *acc) {                                    \
        const T *w = row;                                                                    \
        const int U = M <= 2 ? 4 : 2;                                                        \
        __m256 a[4][4];                                                                      \
        _Pragma("GCC unroll 4") for (int r = 0; r < M; r++)                                  \
            _Pragma("GCC unroll 4") for (int u = 0; u < U; u++) a[r][u] = _mm256_setzero_ps(); \
        size_t i = 0;                                                                        \
        for (; i + 8 * (size_t)U <= k; i += 8 * (size_t)U) {                                 \
            __m256 wv[4];                                                                    \
            _Pragma("GCC unroll 4") for (int u = 0; u < U; u++) wv[u] = LOAD(w + i + 8 * u); \
            _Pragma("GCC unroll 4") for (int r = 0; r < M; r++)                              \
                _Pragma("GCC unroll 4") for (int u = 0; u < U; u++)                          \
                    a[r][u] = _mm256_fmadd_ps(wv[u], _mm256_loadu_ps(x + r * ldx + i + 8 * u), \
                                              a[r][u]);                                      \
        }                                                                                    \
        for (; i + 8 <= k; i += 8) {                                                         \
            __m256 w0 = LOAD(w + i);                                                         \
            _Pragma("GCC unroll 4") for (int r = 0; r < M; r++)                              \
                a[r][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + r * ldx + i), a[r][0]);    \
        }                                                                                    \
        _Pragma("GCC unroll 4") for (int r = 0; r < M; r++) {                               \
            __m256 v = a[r][0];                                                              \
            _Pragma("GCC unroll 4") for (int u = 1; u < U; u++) v = _mm256_add_ps(v, a[r][u]); \
            float s = cpu_hsum(v);                                                           \
            for (size_t t = i; t < k; t++) s += CONV(w[t]) * x[r * ldx + t];                 \
            acc[r] += s;                                                                     \
        }                                                                                    \
    }                                                                                        \
    CPU_SIMD static void NAME(const void *row, const float *x, size_t ldx, size_t m, size_t k, \
                              float *acc) {                                                  \
        switch (m) {                                                                         \
        case 1: NAME##_m(1, row, x, ldx, k, acc); break;                                     \
        case 2: NAME##_m(2, row, x, ldx, k, acc); break;                                     \
        case 3: NAME##_m(3, row, x, ldx, k, acc); break;                                     \
        default: NAME##_m(4, row, x, ldx, k, acc); break;                                    \
        }                                                                                    \
    }
CPU_MDOT_SIMD(cpu_mdot_f32_avx2, float, cpu_load_f32, cpu_f32_scalar)
CPU_MDOT_SIMD(cpu_mdot_f16_avx2, uint16_t, cpu_load_f16, cpu_f16_scalar)
CPU_MDOT_SIMD(cpu_mdot_bf16_avx2, uint16_t, cpu_load_bf16, quant_bf16_to_f32)

/* One q8_0 block against M activation rows into accumulator column u. */
CPU_SIMD_INLINE void cpu_q8_mblock(const int M, const block_q8_0 *b, const float *x, size_t ldx,
                                   __m256 a[4][2], int u) {
    __m256 q0 = cpu_load_q8(b->qs), q1 = cpu_load_q8(b->qs + 8);
    __m256 q2 = cpu_load_q8(b->qs + 16), q3 = cpu_load_q8(b->qs + 24);
    __m256 d = _mm256_set1_ps(_cvtsh_ss(b->d));
#pragma GCC unroll 4
    for (int r = 0; r < M; r++) {
        const float *xr = x + r * ldx;
        __m256 s0 = _mm256_mul_ps(q0, _mm256_loadu_ps(xr));
        __m256 s1 = _mm256_mul_ps(q1, _mm256_loadu_ps(xr + 8));
        s0 = _mm256_fmadd_ps(q2, _mm256_loadu_ps(xr + 16), s0);
        s1 = _mm256_fmadd_ps(q3, _mm256_loadu_ps(xr + 24), s1);
        a[r][u] = _mm256_fmadd_ps(d, _mm256_add_ps(s0, s1), a[r][u]);
    }
}

CPU_SIMD_INLINE void cpu_mdot_q8_0_m(const int M, const void *row, const float *x, size_t ldx,
                                     size_t k, float *acc) {
    const block_q8_0 *b = row;
    size_t nb = k / QK8_0, j = 0;
    __m256 a[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < M; r++) a[r][0] = a[r][1] = _mm256_setzero_ps();
    for (; j + 2 <= nb; j += 2) {
        cpu_q8_mblock(M, b + j, x + j * QK8_0, ldx, a, 0);
        cpu_q8_mblock(M, b + j + 1, x + (j + 1) * QK8_0, ldx, a, 1);
    }
    if (j < nb) cpu_q8_mblock(M, b + j, x + j * QK8_0, ldx, a, 0);
#pragma GCC unroll 4
    for (int r = 0; r < M; r++) acc[r] += cpu_hsum(_mm256_add_ps(a[r][0], a[r][1]));
}

CPU_SIMD static void cpu_mdot_q8_0_avx2(const void *row, const float *x, size_t ldx, size_t m,
                                        size_t k, float *acc) {
    switch (m) {
    case 1: cpu_mdot_q8_0_m(1, row, x, ldx, k, acc); break;
    case 2: cpu_mdot_q8_0_m(2, row, x, ldx, k, acc); break;
    case 3: cpu_mdot_q8_0_m(3, row, x, ldx, k, acc); break;
    default: cpu_mdot_q8_0_m(4, row, x, ldx, k, acc); break;
    }
}

#define CPU_DEQUANT_SIMD(NAME, T, LOAD, CONV)                                 \
    CPU_SIMD static void NAME(const void *row, float *d, size_t n) {          \
        const T *w = row;                                                     \
        size_t i = 0;                                                         \
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, LOAD(w + i));      \
        for (; i < n; i++) d[i] = CONV(w[i]);                                 \
    }
CPU_DEQUANT_SIMD(cpu_dequant_f16_avx2, uint16_t, cpu_load_f16, cpu_f16_scalar)
CPU_DEQUANT_SIMD(cpu_dequant_bf16_avx2, uint16_t, cpu_load_bf16, quant_bf16_to_f32)

/* d * q rounded once, as in quant.c: the values are bit-identical. */
CPU_SIMD static void cpu_dequant_q8_0_avx2(const void *row, float *d, size_t n) {
    const block_q8_0 *b = row;
    for (size_t i = 0; i < n / QK8_0; i++, d += QK8_0) {
        __m256 s = _mm256_set1_ps(_cvtsh_ss(b[i].d));
        for (int j = 0; j < QK8_0; j += 8)
            _mm256_storeu_ps(d + j, _mm256_mul_ps(s, cpu_load_q8(b[i].qs + j)));
    }
}

#define CPU_AXPY_SIMD(NAME, T, LOAD, CONV)                                          \
    CPU_SIMD static void NAME(const void *row, float a, float *y, size_t n) {       \
        const T *w = row;                                                           \
        __m256 av = _mm256_set1_ps(a);                                              \
        size_t i = 0;                                                               \
        for (; i + 8 <= n; i += 8)                                                  \
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, LOAD(w + i), _mm256_loadu_ps(y + i))); \
        for (; i < n; i++) y[i] += a * CONV(w[i]);                                  \
    }
CPU_AXPY_SIMD(cpu_axpy_f32_avx2, float, cpu_load_f32, cpu_f32_scalar)
CPU_AXPY_SIMD(cpu_axpy_f16_avx2, uint16_t, cpu_load_f16, cpu_f16_scalar)
CPU_AXPY_SIMD(cpu_axpy_bf16_avx2, uint16_t, cpu_load_bf16, quant_bf16_to_f32)

CPU_SIMD static void cpu_axpy_q8_0_avx2(const void *row, float a, float *y, size_t n) {
    const block_q8_0 *b = row;
    for (size_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
        __m256 ad = _mm256_set1_ps(a * _cvtsh_ss(b[i].d));
        for (int j = 0; j < QK8_0; j += 8)
            _mm256_storeu_ps(y + j,
                             _mm256_fmadd_ps(ad, cpu_load_q8(b[i].qs + j), _mm256_loadu_ps(y + j)));
    }
}

/* Register tile of MR activation rows x NR weight rows: per 8 columns it
 * loads MR + NR vectors for MR * NR FMAs. 4x3 uses 12 accumulators + 3 weight
 * registers, which fits the 16 ymm registers. */
CPU_SIMD_INLINE void cpu_tile(int MR, int NR, const float *x, size_t ldx, const float *w,
                              size_t ldw, size_t k, float *y, size_t ldy) {
    __m256 acc[4][3];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 3
        for (int j = 0; j < NR; j++) acc[i][j] = _mm256_setzero_ps();
    size_t kk = 0;
    for (; kk + 8 <= k; kk += 8) {
        __m256 wv[3];
#pragma GCC unroll 3
        for (int j = 0; j < NR; j++) wv[j] = _mm256_loadu_ps(w + j * ldw + kk);
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            __m256 xv = _mm256_loadu_ps(x + i * ldx + kk);
#pragma GCC unroll 3
            for (int j = 0; j < NR; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 3
        for (int j = 0; j < NR; j++) {
            float s = cpu_hsum(acc[i][j]);
            for (size_t t = kk; t < k; t++) s += x[i * ldx + t] * w[j * ldw + t];
            y[i * ldy + j] = s;
        }
}

#define CPU_TILE(MR, NR)                                                                  \
    CPU_SIMD static void cpu_tile_##MR##x##NR(const float *x, size_t ldx, const float *w,  \
                                              size_t ldw, size_t k, float *y, size_t ldy) { \
        cpu_tile(MR, NR, x, ldx, w, ldw, k, y, ldy);                                      \
    }
CPU_TILE(4, 3)
CPU_TILE(3, 3)
CPU_TILE(2, 3)
CPU_TILE(1, 3)
CPU_TILE(4, 1)
CPU_TILE(3, 1)
CPU_TILE(2, 1)
CPU_TILE(1, 1)

typedef void (*cpu_tile_fn)(const float *, size_t, const float *, size_t, size_t, float *, size_t);

CPU_SIMD static void cpu_gemm_avx2(const float *x, size_t ldx, size_t n, const float *w,
                                   size_t ldw, size_t m, size_t k, float *y, size_t ldy) {
    static const cpu_tile_fn by3[5] = {NULL, cpu_tile_1x3, cpu_tile_2x3, cpu_tile_3x3,
                                       cpu_tile_4x3};
    static const cpu_tile_fn by1[5] = {NULL, cpu_tile_1x1, cpu_tile_2x1, cpu_tile_3x1,
                                       cpu_tile_4x1};
    for (size_t i = 0; i < n; i += 4) {
        size_t mr = n - i < 4 ? n - i : 4;
        const float *xi = x + i * ldx;
        float *yi = y + i * ldy;
        size_t j = 0;
        for (; j + 3 <= m; j += 3) by3[mr](xi, ldx, w + j * ldw, ldw, k, yi + j, ldy);
        for (; j < m; j++) by1[mr](xi, ldx, w + j * ldw, ldw, k, yi + j, ldy);
    }
}

CPU_SIMD static void cpu_f32_to_f16_avx2(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = quant_f32_to_f16(src[i]);
}

/* Squares summed in double lanes: as exact as the C path's double sum. */
CPU_SIMD static double cpu_sum_sq_avx2(const float *x, size_t n) {
    __m256d a0 = _mm256_setzero_pd(), a1 = a0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
        __m256d hi = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
        a0 = _mm256_fmadd_pd(lo, lo, a0);
        a1 = _mm256_fmadd_pd(hi, hi, a1);
    }
    __m256d a = _mm256_add_pd(a0, a1);
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    double r = _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
    for (; i < n; i++) r += (double)x[i] * x[i];
    return r;
}

CPU_SIMD static void cpu_scale_mul_avx2(const float *x, float s, const float *w, float *y,
                                        size_t n) {
    __m256 sv = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv),
                                              _mm256_loadu_ps(w + i)));
    for (; i < n; i++) y[i] = x[i] * s * w[i];
}

/* exp(x) for 8 lanes, Cephes-style: x = n ln2 + r with |r| <= ln2/2, a
 * degree-6 polynomial for e^r, then 2^n through the exponent bits. About 1
 * ulp in [-87, 88]; below -87.3 it returns 0 (also for -inf), above 88 it
 * saturates at e^88 (the callers only need it finite). */
CPU_SIMD_INLINE __m256 cpu_exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3f), hi = _mm256_set1_ps(88.0f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)),
                                  23);
    p = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, p);
}

CPU_SIMD static float cpu_exp_sub_sum_avx2(float *s, size_t n, float max) {
    __m256 mv = _mm256_set1_ps(max), acc = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = cpu_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv));
        _mm256_storeu_ps(s + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    float sum = cpu_hsum(acc);
    for (; i < n; i++) {
        s[i] = expf(s[i] - max);
        sum += s[i];
    }
    return sum;
}

CPU_SIMD static void cpu_swiglu_avx2(const float *g, const float *u, float *o, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i);
        __m256 den = _mm256_add_ps(one, cpu_exp8(_mm256_sub_ps(zero, gv)));
        _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_div_ps(gv, den), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

CPU_SIMD static void cpu_add_avx2(float *y, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] += x[i];
}

CPU_SIMD static void cpu_scale_avx2(float *y, float s, size_t n) {
    __m256 sv = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), sv));
    for (; i < n; i++) y[i] *= s;
}

#endif /* CPU_X86 */

/* ---- dispatch ----------------------------------------------------------- */

cpu_dot_fn cpu_dot_for(cleave_type t, bool simd) {
#if CPU_X86
    if (simd) {
        switch (t) {
        case CLEAVE_TYPE_F32: return cpu_dot_f32_avx2;
        case CLEAVE_TYPE_F16: return cpu_dot_f16_avx2;
        case CLEAVE_TYPE_BF16: return cpu_dot_bf16_avx2;
        case CLEAVE_TYPE_Q8_0: return cpu_dot_q8_0_avx2;
        }
        return NULL;
    }
#endif
    switch (t) {
    case CLEAVE_TYPE_F32: return cpu_dot_f32_c;
    case CLEAVE_TYPE_F16: return cpu_dot_f16_c;
    case CLEAVE_TYPE_BF16: return cpu_dot_bf16_c;
    case CLEAVE_TYPE_Q8_0: return cpu_dot_q8_0_c;
    }
    return NULL;
}

cpu_mdot_fn cpu_mdot_for(cleave_type t, bool simd) {
#if CPU_X86
    if (simd) {
        switch (t) {
        case CLEAVE_TYPE_F32: return cpu_mdot_f32_avx2;
        case CLEAVE_TYPE_F16: return cpu_mdot_f16_avx2;
        case CLEAVE_TYPE_BF16: return cpu_mdot_bf16_avx2;
        case CLEAVE_TYPE_Q8_0: return cpu_mdot_q8_0_avx2;
        }
        return NULL;
    }
#endif
    switch (t) {
    case CLEAVE_TYPE_F32: return cpu_mdot_f32_c;
    case CLEAVE_TYPE_F16: return cpu_mdot_f16_c;
    case CLEAVE_TYPE_BF16: return cpu_mdot_bf16_c;
    case CLEAVE_TYPE_Q8_0: return cpu_mdot_q8_0_c;
    }
    return NULL;
}

cpu_dequant_fn cpu_dequant_for(cleave_type t, bool simd) {
#if CPU_X86
    if (simd) {
        switch (t) {
        case CLEAVE_TYPE_F32: return cpu_dequant_f32_c; /* memcpy is already optimal */
        case CLEAVE_TYPE_F16: return cpu_dequant_f16_avx2;
        case CLEAVE_TYPE_BF16: return cpu_dequant_bf16_avx2;
        case CLEAVE_TYPE_Q8_0: return cpu_dequant_q8_0_avx2;
        }
        return NULL;
    }
#endif
    switch (t) {
    case CLEAVE_TYPE_F32: return cpu_dequant_f32_c;
    case CLEAVE_TYPE_F16: return cpu_dequant_f16_c;
    case CLEAVE_TYPE_BF16: return cpu_dequant_bf16_c;
    case CLEAVE_TYPE_Q8_0: return cpu_dequant_q8_0_c;
    }
    return NULL;
}

cpu_axpy_fn cpu_axpy_for(cleave_type t, bool simd) {
#if CPU_X86
    if (simd) {
        switch (t) {
        case CLEAVE_TYPE_F32: return cpu_axpy_f32_avx2;
        case CLEAVE_TYPE_F16: return cpu_axpy_f16_avx2;
        case CLEAVE_TYPE_BF16: return cpu_axpy_bf16_avx2;
        case CLEAVE_TYPE_Q8_0: return cpu_axpy_q8_0_avx2;
        }
        return NULL;
    }
#endif
    switch (t) {
    case CLEAVE_TYPE_F32: return cpu_axpy_f32_c;
    case CLEAVE_TYPE_F16: return cpu_axpy_f16_c;
    case CLEAVE_TYPE_BF16: return cpu_axpy_bf16_c;
    case CLEAVE_TYPE_Q8_0: return cpu_axpy_q8_0_c;
    }
    return NULL;
}

void cpu_gemm_f32(bool simd, const float *x, size_t ldx, size_t n, const float *w, size_t ldw,
                  size_t m, size_t k, float *y, size_t ldy) {
#if CPU_X86
    if (simd) {
        cpu_gemm_avx2(x, ldx, n, w, ldw, m, k, y, ldy);
        return;
    }
#endif
    cpu_gemm_c(x, ldx, n, w, ldw, m, k, y, ldy);
}

void cpu_quantize_row(bool simd, cleave_type t, const float *src, void *dst, size_t n) {
#if CPU_X86
    if (simd && t == CLEAVE_TYPE_F16) {
        cpu_f32_to_f16_avx2(src, dst, n);
        return;
    }
#endif
    quant_quantize_row(t, src, dst, n);
}

double cpu_sum_sq(bool simd, const float *x, size_t n) {
#if CPU_X86
    if (simd) return cpu_sum_sq_avx2(x, n);
#endif
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

void cpu_scale_mul(bool simd, const float *x, float s, const float *w, float *y, size_t n) {
#if CPU_X86
    if (simd) {
        cpu_scale_mul_avx2(x, s, w, y, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) y[i] = x[i] * s * w[i];
}

float cpu_exp_sub_sum(bool simd, float *s, size_t n, float max) {
#if CPU_X86
    if (simd) return cpu_exp_sub_sum_avx2(s, n, max);
#endif
    float sum = 0;
    for (size_t i = 0; i < n; i++) {
        s[i] = expf(s[i] - max);
        sum += s[i];
    }
    return sum;
}

void cpu_swiglu_row(bool simd, const float *gate, const float *up, float *out, size_t n) {
#if CPU_X86
    if (simd) {
        cpu_swiglu_avx2(gate, up, out, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

void cpu_add_row(bool simd, float *y, const float *x, size_t n) {
#if CPU_X86
    if (simd) {
        cpu_add_avx2(y, x, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void cpu_scale_row(bool simd, float *y, float s, size_t n) {
#if CPU_X86
    if (simd) {
        cpu_scale_avx2(y, s, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) y[i] *= s;
}
