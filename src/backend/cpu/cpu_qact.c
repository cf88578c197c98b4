/* Activation quantization for the integer dots (C and AVX2, byte-identical
 * output) and the table of which kernels serve which weight type. */
#include <math.h>
#include <string.h>

#include "cpu_qdot.h"
#include "cpu_qtile.h"
#include "quant/quant.h"

cpu_act_kind cpu_act_for(cleave_type t) {
    switch (t) {
    case CLEAVE_TYPE_Q4_0:
    case CLEAVE_TYPE_Q4_1:
    case CLEAVE_TYPE_Q5_0:
    case CLEAVE_TYPE_Q5_1:
    case CLEAVE_TYPE_Q8_0:
    case CLEAVE_TYPE_IQ4_NL:
    case CLEAVE_TYPE_MXFP4: return CPU_ACT_Q32;
    case CLEAVE_TYPE_Q2_K:
    case CLEAVE_TYPE_Q3_K:
    case CLEAVE_TYPE_Q4_K:
    case CLEAVE_TYPE_Q5_K:
    case CLEAVE_TYPE_Q6_K:
    case CLEAVE_TYPE_IQ4_XS: return CPU_ACT_Q256;
    default: return CPU_ACT_NONE;
    }
}

size_t cpu_act_row_bytes(cpu_act_kind k, size_t n) {
    switch (k) {
    case CPU_ACT_Q32: return n / 32 * sizeof(cpu_qa32);
    case CPU_ACT_Q256: return n / 256 * sizeof(cpu_qa256);
    default: return 0;
    }
}

/* ---- C ------------------------------------------------------------------ */

/* Quantizes m floats with one scale: d = amax / 127, q = rint(x * 127 /
 * amax), so |q| <= 127 (never -128: the sign trick of the q8_0 and IQ4
 * kernels negates activations). Returns d. */
static float cpu_q8_span_c(const float *x, int8_t *q, int m) {
    float amax = 0;
    for (int j = 0; j < m; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float id = amax > 0 ? 127.0f / amax : 0.0f;
    for (int j = 0; j < m; j++)
        q[j] = (int8_t)nearbyintf(x[j] * id);
    return amax / 127.0f;
}

static void cpu_quantize_q32_c(const float *x, cpu_qa32 *b, size_t n) {
    for (size_t i = 0; i < n / 32; i++, x += 32) {
        b[i].d = cpu_q8_span_c(x, b[i].qs, 32);
        int32_t s = 0;
        for (int j = 0; j < 32; j++)
            s += b[i].qs[j];
        b[i].sum = s;
    }
}

static void cpu_quantize_q256_c(const float *x, cpu_qa256 *b, size_t n) {
    for (size_t i = 0; i < n / 256; i++, x += 256) {
        b[i].d = cpu_q8_span_c(x, b[i].qs, 256);
        for (int k = 0; k < 16; k++) {
            int s = 0;
            for (int j = 0; j < 16; j++)
                s += b[i].qs[16 * k + j];
            b[i].bsums[k] = (int16_t)s;
        }
    }
}

/* ---- AVX2 --------------------------------------------------------------- */
#if CPU_X86

CPU_SIMD_INLINE float cpu_hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* 32 floats scaled and rounded (cvtps rounds to nearest even, like
 * nearbyintf) into 32 int8 in order; *sum16 gets the 16-bit pair sums. */
CPU_SIMD_INLINE __m256i cpu_q8_32(const float *x, __m256 id) {
    __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), id));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), id));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), id));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), id));
    /* packs work within 128-bit lanes: undo the interleave at the end */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

CPU_SIMD_INLINE __m256 cpu_absmax(const float *x, int m) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 a = _mm256_setzero_ps();
    for (int j = 0; j < m; j += 8)
        a = _mm256_max_ps(a, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    return a;
}

CPU_SIMD static void cpu_quantize_q32_avx2(const float *x, cpu_qa32 *b, size_t n) {
    const __m256i ones = _mm256_set1_epi8(1);
    for (size_t i = 0; i < n / 32; i++, x += 32) {
        float amax = cpu_hmax(cpu_absmax(x, 32));
        __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
        __m256i q = cpu_q8_32(x, id);
        _mm256_storeu_si256((__m256i *)b[i].qs, q);
        b[i].d = amax / 127.0f;
        /* sum of the quants: maddubs by ones gives 16 pair sums */
        __m256i s16 = _mm256_maddubs_epi16(ones, q);
        __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
        b[i].sum = _mm_cvtsi128_si32(s);
    }
}

CPU_SIMD static void cpu_quantize_q256_avx2(const float *x, cpu_qa256 *b, size_t n) {
    const __m256i ones = _mm256_set1_epi8(1);
    for (size_t i = 0; i < n / 256; i++, x += 256) {
        float amax = cpu_hmax(cpu_absmax(x, 256));
        __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
        for (int j = 0; j < 256; j += 64) {
            __m256i q0 = cpu_q8_32(x + j, id), q1 = cpu_q8_32(x + j + 32, id);
            _mm256_storeu_si256((__m256i *)(b[i].qs + j), q0);
            _mm256_storeu_si256((__m256i *)(b[i].qs + j + 32), q1);
            /* pair sums, then sums of 8 pairs = 16 quants: hadd twice
             * within lanes leaves [q0 lo, q0 hi, q1 lo, q1 hi] order after
             * the 64-bit permute */
            __m256i s0 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, q0), _mm256_set1_epi16(1));
            __m256i s1 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, q1), _mm256_set1_epi16(1));
            __m256i h = _mm256_hadd_epi32(s0, s1); /* lane: s0 pairs, s1 pairs */
            h = _mm256_hadd_epi32(h, h);           /* lane: [s0 sum, s1 sum, same] */
            int32_t t[8];
            _mm256_storeu_si256((__m256i *)t, h);
            b[i].bsums[j / 16 + 0] = (int16_t)t[0];
            b[i].bsums[j / 16 + 1] = (int16_t)t[4];
            b[i].bsums[j / 16 + 2] = (int16_t)t[1];
            b[i].bsums[j / 16 + 3] = (int16_t)t[5];
        }
        b[i].d = amax / 127.0f;
    }
}

#endif /* CPU_X86 */

void cpu_quantize_act(bool simd, cpu_act_kind k, const float *x, void *dst, size_t n) {
#if CPU_X86
    if (simd) {
        if (k == CPU_ACT_Q32) cpu_quantize_q32_avx2(x, dst, n);
        if (k == CPU_ACT_Q256) cpu_quantize_q256_avx2(x, dst, n);
        return;
    }
#endif
    if (k == CPU_ACT_Q32) cpu_quantize_q32_c(x, dst, n);
    if (k == CPU_ACT_Q256) cpu_quantize_q256_c(x, dst, n);
}

#if CPU_X86
typedef struct {
    cleave_type t;
    cpu_qdot_fn dot;
    cpu_qtile_fn tile;
} cpu_qavx2_row;

#define CPU_QROW(U, L)                                                                             \
    { CLEAVE_TYPE_##U, cpu_qdot_##L##_avx2, cpu_qtile_##L##_avx2 }
static const cpu_qavx2_row cpu_qavx2_table[] = {
    CPU_QROW(Q4_0, q4_0), CPU_QROW(Q4_1, q4_1),     CPU_QROW(Q5_0, q5_0), CPU_QROW(Q5_1, q5_1),
    CPU_QROW(Q8_0, q8_0), CPU_QROW(IQ4_NL, iq4_nl), CPU_QROW(Q2_K, q2_K), CPU_QROW(Q3_K, q3_K),
    CPU_QROW(Q4_K, q4_K), CPU_QROW(Q5_K, q5_K),     CPU_QROW(Q6_K, q6_K), CPU_QROW(IQ4_XS, iq4_xs),
    CPU_QROW(MXFP4, mxfp4),
};

static const cpu_qavx2_row *cpu_qavx2(cleave_type t) {
    for (size_t i = 0; i < sizeof cpu_qavx2_table / sizeof cpu_qavx2_table[0]; i++)
        if (cpu_qavx2_table[i].t == t) return &cpu_qavx2_table[i];
    return NULL;
}
#endif

cpu_qdot_fn cpu_qdot_avx2_for(cleave_type t) {
#if CPU_X86
    if (cpu_qavx2(t)) return cpu_qavx2(t)->dot;
#endif
    (void)t;
    return NULL;
}

cpu_qtile_fn cpu_qtile_avx2_for(cleave_type t) {
#if CPU_X86
    if (cpu_qavx2(t)) return cpu_qavx2(t)->tile;
#endif
    (void)t;
    return NULL;
}

cpu_qkernel cpu_qkernel_for(cleave_type t, bool simd) {
    cpu_qkernel k = {cpu_act_for(t), NULL, NULL};
    if (k.act == CPU_ACT_NONE) return k;
#if CPU_X86
    if (simd) {
        k.dot = cpu_qdot_avx2_for(t);
        k.tile = cpu_qtile_avx2_for(t);
    }
#endif
    if (!k.dot) k.dot = cpu_qdot_c_for(t);
    return k;
}
