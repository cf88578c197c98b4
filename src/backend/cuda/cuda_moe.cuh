/* What the experts' ops share: the plain ops (cuda_moe.cu), which the
 * fused ones (cuda_moe_fused.cu, with the table) fall back on; one
 * token's routing; the grouped GEMM of a prompt's experts
 * (cuda_moe_gemm.cu). */
#ifndef CLEAVE_CUDA_MOE_CUH
#define CLEAVE_CUDA_MOE_CUH

#include "cuda_quant.cuh"

/* be_moe_ops's plain members (cuda_moe.cu). */
cleave_status cuda_moe_route(be_device *d, const float *logits, size_t n, size_t n_expert, size_t k,
                             be_gating gating, bool norm, float scale, int32_t *ids, float *weights);
cleave_status cuda_moe_matmul_id(be_device *d, const be_mat *w, const float *bias, const float *x, size_t x_slots,
                                 size_t n, size_t k, const int32_t *ids, float *y);
cleave_status cuda_moe_combine(be_device *d, const float *y, const float *weights, size_t n, size_t k,
                               size_t width, float *out);
cleave_status cuda_moe_swiglu_oai(be_device *d, const float *gate, const float *up, float *out, size_t n,
                                  float alpha, float limit);
cleave_status cuda_moe_matmul_id_glu(be_device *d, const be_mat *gate, const be_mat *up, const float *bias_g,
                                     const float *bias_u, const float *x, size_t n, size_t k, const int32_t *ids,
                                     bool oai, float alpha, float limit, float *y);

#define ROUTE_MAX_EXPERTS 512 /* 16 logits a lane */

/* What the grouped decode kernels apply to their output: nothing (one
 * matrix), or gate and up's SwiGLU or gpt-oss's clamped form of it. */
enum { MG_ACT_NONE, MG_ACT_SWIGLU, MG_ACT_OAI };
/* act (SwiGLU or the clamped form) of one gate and up value */
__device__ __forceinline__ float cuda_moe_act(float g, float u, int act, float alpha, float limit) {
    return act == MG_ACT_OAI ? cuda_swiglu_oai(g, u, alpha, limit) : cuda_swiglu(g, u);
}

/* bf16 and MXFP4 experts' decode on tensor cores (cuda_moe_mma.cu),
 * grouping the n x k pairs of ids itself: y = x . w for every pair (wu:
 * gate and up, y their activation act). *st set and true where it takes
 * w (bf16 with rows of whole 32s and 16-byte aligned rows; MXFP4 in
 * batches up to CLEAVE_MOE_MMA_MAX_N tokens, none unless set; x 16-byte
 * aligned, up to 1024 pairs); false, nothing launched, where it does
 * not. */
bool cuda_moe_mma(cuda_device *d, const be_mat *w, const be_mat *wu, const float *bias, const float *bias_u,
                  const float *x, size_t x_slots, size_t n, size_t k, const int32_t *ids, int act, float alpha,
                  float limit, float *y, cleave_status *st);

/* A token's routing by one warp (every lane calls it): the k largest of
 * its ne logits in order (ties to the lower index), then their weights as
 * be_moe_ops.route defines them, into ids[k] and w[k]. The logits are
 * read through L2 (__ldcg): other blocks of the same kernel may have
 * written them (cuda_moe_fused.cu). */
__device__ __forceinline__ void cuda_moe_route_token(const float *l, int ne, int k, int weight_gating, int norm,
                                                     float scale, int32_t *ids, float *w) {
    const int lane = threadIdx.x & 31;
    float v[ROUTE_MAX_EXPERTS / 32];
    unsigned taken = 0;
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < ROUTE_MAX_EXPERTS / 32; i++) {
        int e = lane + 32 * i;
        v[i] = e < ne ? __ldcg(l + e) : -INFINITY;
        mx = fmaxf(mx, v[i]);
    }
    mx = cuda_warp_max(mx);
    float sum = 0.0f;
    if (!weight_gating) {
#pragma unroll
        for (int i = 0; i < ROUTE_MAX_EXPERTS / 32; i++)
            if (lane + 32 * i < ne) sum += __expf(v[i] - mx);
        sum = cuda_warp_sum(sum);
    }
    float my_p = 0.0f, chosen = 0.0f;
    int my_id = 0;
    for (int j = 0; j < k; j++) {
        float best = -INFINITY;
        int bi = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < ROUTE_MAX_EXPERTS / 32; i++) {
            int e = lane + 32 * i;
            if (e < ne && !(taken >> i & 1) && (v[i] > best || bi == 0x7fffffff)) best = v[i], bi = e;
        }
        for (int o = 16; o; o >>= 1) { /* the largest, ties to the lower index */
            float ob = __shfl_xor_sync(0xffffffffu, best, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ob > best || (ob == best && oi < bi)) best = ob, bi = oi;
        }
        if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
        float p = __expf(best - mx);
        chosen += p;
        if (lane == j) my_p = p, my_id = bi;
    }
    if (lane < k) {
        float div = weight_gating ? chosen : norm ? fmaxf(chosen / sum, 6.103515625e-5f) * sum : sum;
        ids[lane] = my_id;
        w[lane] = my_p / div * scale;
    }
}

/* Whether cuda_moe_gemm takes experts shaped as w (f16, bf16 or a block
 * type in GGUF's layout, and a cuBLAS that has the grouped GEMM). */
bool cuda_moe_gemm_takes(const cuda_device *d, const be_mat *w);
/* y[off[e] ..] = rows off[e] .. off[e + 1] of xs (f16, or bf16 for bf16
 * experts; [rows][ne0], grouped by expert) times expert e of w, for every
 * expert with rows: one grouped GEMM per run of experts. ptrs: device
 * memory for 3 x ne2 pointers. *done false (nothing written) where it
 * does not take w. */
cleave_status cuda_moe_gemm(cuda_device *d, const be_mat *w, const void *xs, const int32_t *off, void **ptrs,
                            float *y, bool *done);

#endif
