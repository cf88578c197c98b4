/* Row kernels and GEMM tiles of the CPU device, in a portable C version and
 * an AVX2+FMA+F16C version compiled with function-level target attributes,
 * so this file needs no -mavx2 and the binary still runs on any x86-64.
 * Weight conversions are exact (f16/bf16/q8_0 values are representable in
 * f32), so with f32 activations the kernels differ from quant.c's reference
 * only in summation order. */
#include "cpu_dot.h"

#include <math.h>
#include <stdint.h>

#include "quant/quant.h"

#include "cpu_simd.h"

#if CPU_X86
#include <cpuid.h>
#endif

bool cpu_simd_available(void) {
#if CPU_X86
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
    /* F16C straight from CPUID (leaf 1, ECX bit 29): not every compiler
     * knows it as a __builtin_cpu_supports name. The AVX2 check above has
     * already confirmed the OS saves ymm state. */
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
#else
    return false;
#endif
}

/* ---- portable C ------------------------------------------------------- */

/* Four partial sums: shorter dependency chains, and the same shape of
 * rounding error as the SIMD lanes. */
#define CPU_DOT_C(NAME, T, CONV)                                                                   \
    static float NAME(const void *row, const float *x, size_t n) {                                 \
        const T *w = row;                                                                          \
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                                      \
        size_t i = 0;                                                                              \
        for (; i + 4 <= n; i += 4) {                                                               \
            s0 += CONV(w[i]) * x[i];                                                               \
            s1 += CONV(w[i + 1]) * x[i + 1];                                                       \
            s2 += CONV(w[i + 2]) * x[i + 2];                                                       \
            s3 += CONV(w[i + 3]) * x[i + 3];                                                       \
        }                                                                                          \
        for (; i < n; i++)                                                                         \
            s0 += CONV(w[i]) * x[i];                                                               \
        return (s0 + s1) + (s2 + s3);                                                              \
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
        for (int j = 0; j < QK8_0; j++)
            sb += (float)b[i].qs[j] * x[j];
        s += quant_f16_to_f32(b[i].d) * sb;
    }
    return s;
}

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

#define CPU_AXPY_C(NAME, T, CONV)                                                                  \
    static void NAME(const void *row, float a, float *y, size_t n) {                               \
        const T *w = row;                                                                          \
        for (size_t i = 0; i < n; i++)                                                             \
            y[i] += a * CONV(w[i]);                                                                \
    }
CPU_AXPY_C(cpu_axpy_f32_c, float, CPU_CONV_F32)
CPU_AXPY_C(cpu_axpy_f16_c, uint16_t, quant_f16_to_f32)
CPU_AXPY_C(cpu_axpy_bf16_c, uint16_t, quant_bf16_to_f32)

static void cpu_axpy_q8_0_c(const void *row, float a, float *y, size_t n) {
    const block_q8_0 *b = row;
    for (size_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
        float ad = a * quant_f16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++)
            y[j] += ad * (float)b[i].qs[j];
    }
}

static void cpu_gemm_c(cpu_dot_fn dot, const float *x, size_t ldx, size_t n, const char *w,
                       size_t nb1, size_t m, size_t k, float *y, size_t ldy) {
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < m; j++)
            y[i * ldy + j] = dot(w + j * nb1, x + i * ldx, k);
}

/* ---- AVX2 + FMA + F16C ------------------------------------------------ */
#if CPU_X86

/* Four independent accumulators keep two FMA pipes busy; the row is streamed
 * once, which is what decode (memory-bound) needs. */
#define CPU_DOT_SIMD(NAME, T, LOAD, CONV)                                                          \
    CPU_SIMD static float NAME(const void *row, const float *x, size_t n) {                        \
        const T *w = row;                                                                          \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                \
        size_t i = 0;                                                                              \
        for (; i + 32 <= n; i += 32) {                                                             \
            a0 = _mm256_fmadd_ps(LOAD(w + i), _mm256_loadu_ps(x + i), a0);                         \
            a1 = _mm256_fmadd_ps(LOAD(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);                 \
            a2 = _mm256_fmadd_ps(LOAD(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);               \
            a3 = _mm256_fmadd_ps(LOAD(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);               \
        }                                                                                          \
        for (; i + 8 <= n; i += 8)                                                                 \
            a0 = _mm256_fmadd_ps(LOAD(w + i), _mm256_loadu_ps(x + i), a0);                         \
        float s = cpu_hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));           \
        for (; i < n; i++)                                                                         \
            s += CONV(w[i]) * x[i];                                                                \
        return s;                                                                                  \
    }

CPU_DOT_SIMD(cpu_dot_f32_avx2, float, cpu_load_f32, cpu_f32_scalar)
CPU_DOT_SIMD(cpu_dot_f16_avx2, uint16_t, cpu_load_f16, cpu_f16_scalar)
CPU_DOT_SIMD(cpu_dot_bf16_avx2, uint16_t, cpu_load_bf16, cpu_bf16_scalar)

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

#define CPU_DEQUANT_SIMD(NAME, T, LOAD, CONV)                                                      \
    CPU_SIMD static void NAME(const void *row, float *d, size_t n) {                               \
        const T *w = row;                                                                          \
        size_t i = 0;                                                                              \
        for (; i + 8 <= n; i += 8)                                                                 \
            _mm256_storeu_ps(d + i, LOAD(w + i));                                                  \
        for (; i < n; i++)                                                                         \
            d[i] = CONV(w[i]);                                                                     \
    }
CPU_DEQUANT_SIMD(cpu_dequant_f16_avx2, uint16_t, cpu_load_f16, cpu_f16_scalar)
CPU_DEQUANT_SIMD(cpu_dequant_bf16_avx2, uint16_t, cpu_load_bf16, cpu_bf16_scalar)

/* d * q rounded once, as in quant.c: the values are bit-identical. */
CPU_SIMD static void cpu_dequant_q8_0_avx2(const void *row, float *d, size_t n) {
    const block_q8_0 *b = row;
    for (size_t i = 0; i < n / QK8_0; i++, d += QK8_0) {
        __m256 s = _mm256_set1_ps(_cvtsh_ss(b[i].d));
        for (int j = 0; j < QK8_0; j += 8)
            _mm256_storeu_ps(d + j, _mm256_mul_ps(s, cpu_load_q8(b[i].qs + j)));
    }
}

#define CPU_AXPY_SIMD(NAME, T, LOAD, CONV)                                                         \
    CPU_SIMD static void NAME(const void *row, float a, float *y, size_t n) {                      \
        const T *w = row;                                                                          \
        __m256 av = _mm256_set1_ps(a);                                                             \
        size_t i = 0;                                                                              \
        for (; i + 8 <= n; i += 8)                                                                 \
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, LOAD(w + i), _mm256_loadu_ps(y + i)));     \
        for (; i < n; i++)                                                                         \
            y[i] += a * CONV(w[i]);                                                                \
    }
CPU_AXPY_SIMD(cpu_axpy_f32_avx2, float, cpu_load_f32, cpu_f32_scalar)
CPU_AXPY_SIMD(cpu_axpy_f16_avx2, uint16_t, cpu_load_f16, cpu_f16_scalar)
CPU_AXPY_SIMD(cpu_axpy_bf16_avx2, uint16_t, cpu_load_bf16, cpu_bf16_scalar)

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
 * registers, which fits the 16 ymm registers. Weights are converted on the
 * fly, once per tile for all MR rows, so a small batch streams the weights
 * from memory once and in order; rows are nb1 bytes apart. */
#define CPU_TILE_TYPED(TNAME, T, LOAD, CONV)                                                       \
    CPU_SIMD_INLINE void cpu_tile_##TNAME(const int MR, const int NR, const float *x, size_t ldx,  \
                                          const char *w, size_t nb1, size_t k, float *y,           \
                                          size_t ldy) {                                            \
        __m256 acc[4][3];                                                                          \
        _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {                                     \
            _Pragma("GCC unroll 3") for (int j = 0; j < NR; j++) {                                 \
                acc[i][j] = _mm256_setzero_ps();                                                   \
            }                                                                                      \
        }                                                                                          \
        size_t kk = 0;                                                                             \
        for (; kk + 8 <= k; kk += 8) {                                                             \
            __m256 wv[3];                                                                          \
            _Pragma("GCC unroll 3") for (int j = 0; j < NR; j++) {                                 \
                wv[j] = LOAD((const T *)(w + j * nb1) + kk);                                       \
            }                                                                                      \
            _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {                                 \
                __m256 xv = _mm256_loadu_ps(x + i * ldx + kk);                                     \
                _Pragma("GCC unroll 3") for (int j = 0; j < NR; j++) {                             \
                    acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);                             \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {                                     \
            _Pragma("GCC unroll 3") for (int j = 0; j < NR; j++) {                                 \
                float s = cpu_hsum(acc[i][j]);                                                     \
                const T *wr = (const T *)(w + j * nb1);                                            \
                for (size_t t = kk; t < k; t++)                                                    \
                    s += x[i * ldx + t] * CONV(wr[t]);                                             \
                y[i * ldy + j] = s;                                                                \
            }                                                                                      \
        }                                                                                          \
    }
CPU_TILE_TYPED(f32, float, cpu_load_f32, cpu_f32_scalar)
CPU_TILE_TYPED(f16, uint16_t, cpu_load_f16, cpu_f16_scalar)
CPU_TILE_TYPED(bf16, uint16_t, cpu_load_bf16, cpu_bf16_scalar)

typedef void (*cpu_tile_fn)(const float *, size_t, const char *, size_t, size_t, float *, size_t);

#define CPU_TILE(TNAME, MR, NR)                                                                    \
    CPU_SIMD static void cpu_tile_##TNAME##_##MR##x##NR(                                           \
        const float *x, size_t ldx, const char *w, size_t nb1, size_t k, float *y, size_t ldy) {   \
        cpu_tile_##TNAME(MR, NR, x, ldx, w, nb1, k, y, ldy);                                       \
    }
#define CPU_TILES(TNAME)                                                                           \
    CPU_TILE(TNAME, 1, 3)                                                                          \
    CPU_TILE(TNAME, 2, 3)                                                                          \
    CPU_TILE(TNAME, 3, 3)                                                                          \
    CPU_TILE(TNAME, 4, 3)                                                                          \
    CPU_TILE(TNAME, 1, 1)                                                                          \
    CPU_TILE(TNAME, 2, 1)                                                                          \
    CPU_TILE(TNAME, 3, 1)                                                                          \
    CPU_TILE(TNAME, 4, 1)                                                                          \
    static const cpu_tile_fn cpu_tiles_##TNAME[2][5] = {                                           \
        {NULL, cpu_tile_##TNAME##_1x1, cpu_tile_##TNAME##_2x1, cpu_tile_##TNAME##_3x1,             \
         cpu_tile_##TNAME##_4x1},                                                                  \
        {NULL, cpu_tile_##TNAME##_1x3, cpu_tile_##TNAME##_2x3, cpu_tile_##TNAME##_3x3,             \
         cpu_tile_##TNAME##_4x3}};
CPU_TILES(f32)
CPU_TILES(f16)
CPU_TILES(bf16)

static void cpu_gemm_avx2(const cpu_tile_fn tiles[2][5], const float *x, size_t ldx, size_t n,
                          const char *w, size_t nb1, size_t m, size_t k, float *y, size_t ldy) {
    for (size_t i = 0; i < n; i += 4) {
        size_t mr = n - i < 4 ? n - i : 4;
        const float *xi = x + i * ldx;
        float *yi = y + i * ldy;
        size_t j = 0;
        for (; j + 3 <= m; j += 3)
            tiles[1][mr](xi, ldx, w + j * nb1, nb1, k, yi + j, ldy);
        for (; j < m; j++)
            tiles[0][mr](xi, ldx, w + j * nb1, nb1, k, yi + j, ldy);
    }
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
        default: break;
        }
        return cpu_dot_blocks_for(t, true);
    }
#endif
    switch (t) {
    case CLEAVE_TYPE_F32: return cpu_dot_f32_c;
    case CLEAVE_TYPE_F16: return cpu_dot_f16_c;
    case CLEAVE_TYPE_BF16: return cpu_dot_bf16_c;
    case CLEAVE_TYPE_Q8_0: return cpu_dot_q8_0_c;
    default: break;
    }
    return cpu_dot_blocks_for(t, false);
}

cpu_dequant_fn cpu_dequant_for(cleave_type t, bool simd) {
#if CPU_X86
    if (simd) {
        switch (t) {
        case CLEAVE_TYPE_F32: return cpu_dequant_f32_c; /* memcpy is already optimal */
        case CLEAVE_TYPE_F16: return cpu_dequant_f16_avx2;
        case CLEAVE_TYPE_BF16: return cpu_dequant_bf16_avx2;
        case CLEAVE_TYPE_Q8_0: return cpu_dequant_q8_0_avx2;
        default: break;
        }
        return cpu_dequant_blocks_for(t, true);
    }
#endif
    switch (t) {
    case CLEAVE_TYPE_F32: return cpu_dequant_f32_c;
    case CLEAVE_TYPE_F16: return cpu_dequant_f16_c;
    case CLEAVE_TYPE_BF16: return cpu_dequant_bf16_c;
    case CLEAVE_TYPE_Q8_0: return cpu_dequant_q8_0_c;
    default: break;
    }
    return cpu_dequant_blocks_for(t, false);
}

cpu_axpy_fn cpu_axpy_for(cleave_type t, bool simd) {
#if CPU_X86
    if (simd) {
        switch (t) {
        case CLEAVE_TYPE_F32: return cpu_axpy_f32_avx2;
        case CLEAVE_TYPE_F16: return cpu_axpy_f16_avx2;
        case CLEAVE_TYPE_BF16: return cpu_axpy_bf16_avx2;
        case CLEAVE_TYPE_Q8_0: return cpu_axpy_q8_0_avx2;
        default: break;
        }
        return cpu_axpy_blocks_for(t, true);
    }
#endif
    switch (t) {
    case CLEAVE_TYPE_F32: return cpu_axpy_f32_c;
    case CLEAVE_TYPE_F16: return cpu_axpy_f16_c;
    case CLEAVE_TYPE_BF16: return cpu_axpy_bf16_c;
    case CLEAVE_TYPE_Q8_0: return cpu_axpy_q8_0_c;
    default: break;
    }
    return cpu_axpy_blocks_for(t, false);
}

void cpu_gemm(bool simd, cleave_type t, const float *x, size_t ldx, size_t n, const void *w,
              size_t nb1, size_t m, size_t k, float *y, size_t ldy) {
#if CPU_X86
    if (simd) {
        switch (t) {
        case CLEAVE_TYPE_F32: cpu_gemm_avx2(cpu_tiles_f32, x, ldx, n, w, nb1, m, k, y, ldy); return;
        case CLEAVE_TYPE_F16: cpu_gemm_avx2(cpu_tiles_f16, x, ldx, n, w, nb1, m, k, y, ldy); return;
        case CLEAVE_TYPE_BF16:
            cpu_gemm_avx2(cpu_tiles_bf16, x, ldx, n, w, nb1, m, k, y, ldy);
            return;
        default: break; /* block types: one f32 dot per pair (cpu_qdot.h is the fast way) */
        }
    }
#endif
    cpu_gemm_c(cpu_dot_for(t, simd), x, ldx, n, w, nb1, m, k, y, ldy);
}
