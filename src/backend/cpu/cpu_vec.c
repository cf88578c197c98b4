/* Vectorized elementwise kernels of the CPU device (norms, softmax,
 * activations, cache conversion), each in an AVX2 version and a plain C
 * version picked by the caller's simd flag. */
#include "cpu_vec.h"

#include <math.h>

#include "cpu_simd.h"

#if CPU_X86

CPU_SIMD static void cpu_f32_to_f16_avx2(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++)
        dst[i] = quant_f32_to_f16(src[i]);
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
    for (; i < n; i++)
        r += (double)x[i] * x[i];
    return r;
}

CPU_SIMD static void cpu_scale_mul_avx2(const float *x, float s, const float *w, float *y,
                                        size_t n) {
    __m256 sv = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv),
                                              _mm256_loadu_ps(w + i)));
    for (; i < n; i++)
        y[i] = x[i] * s * w[i];
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
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
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
    for (; i < n; i++)
        o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

CPU_SIMD static void cpu_add_avx2(float *y, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++)
        y[i] += x[i];
}

CPU_SIMD static void cpu_scale_avx2(float *y, float s, size_t n) {
    __m256 sv = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), sv));
    for (; i < n; i++)
        y[i] *= s;
}

#endif /* CPU_X86 */

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
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

void cpu_scale_mul(bool simd, const float *x, float s, const float *w, float *y, size_t n) {
#if CPU_X86
    if (simd) {
        cpu_scale_mul_avx2(x, s, w, y, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] * s * w[i];
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
    for (size_t i = 0; i < n; i++)
        out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

void cpu_add_row(bool simd, float *y, const float *x, size_t n) {
#if CPU_X86
    if (simd) {
        cpu_add_avx2(y, x, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

void cpu_scale_row(bool simd, float *y, float s, size_t n) {
#if CPU_X86
    if (simd) {
        cpu_scale_avx2(y, s, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        y[i] *= s;
}
