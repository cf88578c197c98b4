/* Tensor-core building blocks the attention kernels share: the m16n8k16
 * MMA on f16 or bf16 operands with f32 accumulation, packing two floats
 * into one operand register, an 8x8 transpose across the warp, and 2^x on
 * the special-function unit. */
#ifndef CLEAVE_CUDA_MMA_CUH
#define CLEAVE_CUDA_MMA_CUH

#include <stdint.h>

#include "cuda_common.cuh"

template <int KT> struct fa_elem;
template <> struct fa_elem<CLEAVE_TYPE_F16> {
    static __device__ __forceinline__ uint32_t pack(float a, float b) {
        __half2 h = __floats2half2_rn(a, b);
        return *(uint32_t *)&h;
    }
};
template <> struct fa_elem<CLEAVE_TYPE_BF16> {
    static __device__ __forceinline__ uint32_t pack(float a, float b) {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *(uint32_t *)&h;
    }
};

template <int KT>
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    if constexpr (KT == CLEAVE_TYPE_F16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 2^x on the special-function unit (arguments here are <= 0; results
 * below 2^-126 flush to zero, which the sums cannot notice) */
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* The online softmax's step for a lane's two rows of an m16n8 fragment:
 * mx, the lane's maxima of a tile's scores (log2 units), becomes the
 * row's (the quad of lanes that holds it); m moves to the new running
 * maxima, and corr gets the factor that rescales what was summed under
 * the old ones (1 while a row has seen no visible cell). */
__device__ __forceinline__ void fa_max_step(float mx[2], float m[2], float corr[2]) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        float m_new = fmaxf(m[r], mx[r]);
        corr[r] = m_new == -INFINITY ? 1.0f : fast_exp2(m[r] - m_new);
        m[r] = m_new;
    }
}

/* An 8x8 matrix of 16-bit elements held a register per lane (lane l: row
 * l / 4, columns 2 (l % 4) and + 1) transposed across the warp: lane l
 * gets row l / 4 of the transpose. */
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

#endif
