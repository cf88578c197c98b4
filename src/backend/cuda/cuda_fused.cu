/* Fused ops for the decode path, where each kernel launch costs about as
 * much as the small kernels' work: residual add + RMSNorm in one pass, RoPE
 * on q and k + the KV-cache store in one launch, and the FFN gate and up
 * projections with SwiGLU in one GEMV (one read of x serves both rows). */
#include "cuda_common.cuh"
#include "cuda_gemv.cuh"

/* ---- residual add + RMSNorm ---------------------------------------------- */

__global__ void k_add_rms_norm(float *x, const float *r, const float *w, float *y, size_t width,
                               float eps) {
    float *xr = x + (size_t)blockIdx.x * width;
    const float *rr = r + (size_t)blockIdx.x * width;
    float *yr = y + (size_t)blockIdx.x * width;
    float ss = 0;
    for (size_t i = threadIdx.x; i < width; i += blockDim.x) {
        float v = xr[i] + rr[i];
        xr[i] = v;
        ss += v * v;
    }
    /* the block sum's barriers also order every read of r (fused op)
     * before any write of y, so y may be r */
    float inv = rsqrtf(cuda_block_sum(ss) / (float)width + eps);
    for (size_t i = threadIdx.x; i < width; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
}

cleave_status cuda_op_add_rms_norm(be_device *dev, float *x, const float *r, const float *w,
                                   float *y, size_t rows, size_t width, float eps) {
    if (!rows) return CLEAVE_OK;
    unsigned threads = width >= 1024 ? 1024 : width >= 256 ? 256 : 32;
    k_add_rms_norm<<<(unsigned)rows, threads, 0, cuda_dev(dev)->stream>>>(x, r, w, y, width, eps);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}

/* ---- RoPE + cache store -------------------------------------------------- */

/* Same angle math as k_rope (double), so fused and unfused agree. */
__device__ __forceinline__ void rope_pair(float x0, float x1, int32_t pos, size_t i, size_t n_rot,
                                          float base, const float *factors, float *o0, float *o1) {
    double theta = (double)pos * pow((double)base, -2.0 * (double)i / (double)n_rot);
    if (factors) theta /= factors[i];
    double s, c;
    sincos(theta, &s, &c);
    *o0 = (float)(x0 * c - x1 * s);
    *o1 = (float)(x0 * s + x1 * c);
}

template <typename C> __device__ __forceinline__ C to_cache(float v);
template <> __device__ __forceinline__ float to_cache<float>(float v) { return v; }
template <> __device__ __forceinline__ __half to_cache<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 to_cache<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

/* One block per token: q pairs rotated in place; k rotated on the way into
 * its cache row (k itself is left as it was); v copied into its cache row. */
template <typename C>
__global__ void k_rope_store(float *q, const float *k, const float *v, size_t n_head,
                             size_t n_head_kv, size_t hd, const int32_t *pos, size_t n_rot,
                             float base, bool neox, const float *factors, C *kc, C *vc,
                             const int32_t *cells) {
    size_t t = blockIdx.x, half = n_rot / 2, kw = n_head_kv * hd;
    int32_t p = pos[t];
    float *qt = q + t * n_head * hd;
    const float *kt = k + t * kw, *vt = v + t * kw;
    C *kd = kc + (size_t)cells[t] * kw, *vd = vc + (size_t)cells[t] * kw;
    for (size_t j = threadIdx.x; j < n_head * half; j += blockDim.x) {
        size_t h = j / half, i = j % half;
        size_t a = h * hd + (neox ? i : 2 * i), b = h * hd + (neox ? i + half : 2 * i + 1);
        rope_pair(qt[a], qt[b], p, i, n_rot, base, factors, &qt[a], &qt[b]);
    }
    for (size_t j = threadIdx.x; j < kw; j += blockDim.x) {
        size_t h = j / hd, d = j % hd;
        vd[j] = to_cache<C>(vt[j]);
        if (d >= n_rot) {
            kd[j] = to_cache<C>(kt[j]);
        } else if (neox ? d < half : d % 2 == 0) { /* the pair's first element writes both */
            size_t i = neox ? d : d / 2;
            size_t a = h * hd + (neox ? i : 2 * i), b = h * hd + (neox ? i + half : 2 * i + 1);
            float o0, o1;
            rope_pair(kt[a], kt[b], p, i, n_rot, base, factors, &o0, &o1);
            kd[a] = to_cache<C>(o0);
            kd[b] = to_cache<C>(o1);
        }
    }
}

cleave_status cuda_op_rope_store(be_device *dev, float *q, const float *k, const float *v, size_t n,
                                 size_t n_head, size_t n_head_kv, size_t hd, const int32_t *pos,
                                 const be_rope *p, void *k_cache, void *v_cache,
                                 cleave_type kv_type, const int32_t *cells) {
    if (!n) return CLEAVE_OK;
    cudaStream_t s = cuda_dev(dev)->stream;
    size_t kw = n_head_kv * hd;
#define LAUNCH(C)                                                                              \
    k_rope_store<C><<<(unsigned)n, 256, 0, s>>>(q, k, v, n_head, n_head_kv, hd, pos, p->n_rot, \
                                                p->freq_base, p->neox, p->freq_factors,        \
                                                (C *)k_cache, (C *)v_cache, cells)
    switch (kv_type) {
    case CLEAVE_TYPE_F32: LAUNCH(float); break;
    case CLEAVE_TYPE_F16: LAUNCH(__half); break;
    case CLEAVE_TYPE_BF16: LAUNCH(__nv_bfloat16); break;
    default: {
        /* q8_0 quantizes whole 32-blocks: rotate k in place (a copy the
         * engine no longer needs), then store with the block quantizer */
        cleave_status st = cuda_op_rope(dev, q, n, n_head * hd, n_head, hd, pos, p);
        if (!st) st = cuda_op_rope(dev, (float *)k, n, kw, n_head_kv, hd, pos, p);
        if (!st) st = cuda_op_kv_store(dev, k, n, kw, k_cache, kv_type, cells);
        if (!st) st = cuda_op_kv_store(dev, v, n, kw, v_cache, kv_type, cells);
        return st;
    }
    }
#undef LAUNCH
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}

/* ---- gate/up GEMV with SwiGLU -------------------------------------------- */

cleave_status cuda_op_matmul_swiglu(be_device *dev, const be_mat *gate, const be_mat *up,
                                    const float *x, size_t n, float *y) {
    cuda_device *d = cuda_dev(dev);
    if (cuda_gemv2_swiglu(d, gate, up, x, n, y)) {
        CUDA_LAUNCHED();
        return CLEAVE_OK;
    }
    /* batches and layouts the dual GEMV does not take: gate into y, up into
     * scratch, then SwiGLU */
    void *tmp;
    /* decode-sized batches may be recorded in a graph: their buffer has a
     * fixed size so it never moves */
    cleave_status st = n <= GEMV_MAX_N
                           ? cuda_scratch(d, CUDA_SCRATCH_FFN_SMALL,
                                          GEMV_MAX_N * up->ne1 * sizeof(float), &tmp)
                           : cuda_scratch(d, CUDA_SCRATCH_FFN, n * up->ne1 * sizeof(float), &tmp);
    if (!st) st = cuda_op_matmul(dev, gate, x, n, NULL, y);
    if (!st) st = cuda_op_matmul(dev, up, x, n, NULL, (float *)tmp);
    if (!st) st = cuda_op_swiglu(dev, y, (const float *)tmp, y, n * up->ne1);
    return st;
}
