/* Shared by the CPU device's SIMD files: whether this is x86, the target
 * attribute that lets AVX2+FMA+F16C code live in files compiled without
 * -mavx2, and small inline helpers (horizontal sum, typed 8-wide loads). */
#ifndef CLEAVE_CPU_SIMD_H
#define CLEAVE_CPU_SIMD_H

#include <stdint.h>
#include <string.h>

#include "quant/quant.h"

#if defined(__x86_64__) || defined(__i386__)
#define CPU_X86 1
#include <immintrin.h>
#else
#define CPU_X86 0
#endif

#if CPU_X86

#define CPU_SIMD        __attribute__((target("avx2,fma,f16c")))
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
/* Inline, unlike quant.c's: a call in a kernel's tail would force every
 * live accumulator out of the ymm registers for the whole kernel. */
CPU_SIMD_INLINE float cpu_bf16_scalar(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif /* CPU_X86 */
#endif
