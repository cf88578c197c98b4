/* Fused ops for the decode path, where each kernel launch costs about as
 * much as the small kernels' work: residual add + RMSNorm in one pass, RoPE
 * on q and k + the KV-cache store in one launch, and the FFN gate and up
 * projections with SwiGLU in one GEMV (one read of x serves both rows). */
#include "cuda_common.cuh"
#include "cuda_gemv.cuh"
#include "cuda_quant.cuh"

/* ---- residual add + RMSNorm ---------------------------------------------- */

__global__ void k_add_rms_norm(float *x, const float *r, const float *w, float *y, size_t width,
                               float eps) {
    float *xr = x + (size_t)blockIdx.x * width;
    const float *rr = r + (size_t)blockIdx.x * width;
    float *yr = y + (size_t)blockIdx.x * width;
    cuda_pdl_wait();
    cuda_pdl_trigger(); /* a GEMV follows: let it start loading weights */
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

/* The same for rows of width4 float4s, at most V a thread, held in
 * registers between the sum and the scaling; the norm's weights are
 * loaded before waiting on the kernel before (they are not its output).
 * Two of these run per layer of a one-token step, where each was 5.9 us
 * (ncu) of a 2.94 ms step: H200, 8B Q4_K_M tg128 384 -> 404 tok/s, one run,
 * two rounds each. */
template <int V>
__global__ void k_add_rms_norm4(float4 *x, const float4 *r, const float4 *w, float4 *y, size_t width4,
                                float eps) {
    x += (size_t)blockIdx.x * width4, r += (size_t)blockIdx.x * width4, y += (size_t)blockIdx.x * width4;
    float4 wv[V], xv[V];
#pragma unroll
    for (int k = 0; k < V; k++) {
        size_t i = threadIdx.x + (size_t)k * blockDim.x;
        if (i < width4) wv[k] = w[i];
    }
    cuda_pdl_wait();
    cuda_pdl_trigger(); /* a GEMV follows: let it start loading weights */
    float ss = 0;
#pragma unroll
    for (int k = 0; k < V; k++) {
        size_t i = threadIdx.x + (size_t)k * blockDim.x;
        if (i >= width4) continue;
        float4 a = x[i], b = r[i];
        float4 v = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
        x[i] = v;
        xv[k] = v;
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    /* the barriers order every read of r before any write of y (y may be r) */
    float inv = rsqrtf(cuda_block_sum(ss) / (float)(4 * width4) + eps);
#pragma unroll
    for (int k = 0; k < V; k++) {
        size_t i = threadIdx.x + (size_t)k * blockDim.x;
        if (i < width4)
            y[i] = make_float4(xv[k].x * inv * wv[k].x, xv[k].y * inv * wv[k].y, xv[k].z * inv * wv[k].z,
                               xv[k].w * inv * wv[k].w);
    }
}

cleave_status cuda_op_add_rms_norm(be_device *dev, float *x, const float *r, const float *w,
                                   float *y, size_t rows, size_t width, float eps) {
    if (!rows) return CLEAVE_OK;
    cuda_device *d = cuda_dev(dev);
    const size_t w4 = width / 4;
    bool vec = width % 4 == 0 && w4 <= 4 * 1024 && (uintptr_t)x % 16 == 0 && (uintptr_t)r % 16 == 0 &&
               (uintptr_t)w % 16 == 0 && (uintptr_t)y % 16 == 0;
    if (vec) {
        unsigned t = (unsigned)(w4 < 1024 ? (w4 + 31) / 32 * 32 : 1024);
        size_t v = (w4 + t - 1) / t;
        float4 *x4 = (float4 *)x, *y4 = (float4 *)y;
        const float4 *r4 = (const float4 *)r, *wv = (const float4 *)w;
        if (v == 1) CUDA_LAUNCH(d, k_add_rms_norm4<1>, (unsigned)rows, t, 0, x4, r4, wv, y4, w4, eps);
        else if (v == 2) CUDA_LAUNCH(d, k_add_rms_norm4<2>, (unsigned)rows, t, 0, x4, r4, wv, y4, w4, eps);
        else CUDA_LAUNCH(d, k_add_rms_norm4<4>, (unsigned)rows, t, 0, x4, r4, wv, y4, w4, eps);
        return CLEAVE_OK;
    }
    unsigned threads = width >= 1024 ? 1024 : width >= 256 ? 256 : 32;
    CUDA_LAUNCH(d, k_add_rms_norm, (unsigned)rows, threads, 0, x, r, w, y, width, eps);
    return CLEAVE_OK;
}

/* ---- RoPE + cache store -------------------------------------------------- */

template <typename C> __device__ __forceinline__ C to_cache(float v);
template <> __device__ __forceinline__ float to_cache<float>(float v) { return v; }
template <> __device__ __forceinline__ __half to_cache<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 to_cache<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

/* The block's frequency table (computed while the kernel before still
 * runs: it is no output of it), then the wait for that kernel; every
 * thread calls it. */
__device__ __forceinline__ void rope_freq_table(double *freq, size_t n_rot, float base, const float *factors,
                                                const be_rope_prep &rp) {
    for (size_t i = threadIdx.x; i < n_rot / 2; i += blockDim.x)
        freq[i] = cuda_rope_freq(i, n_rot, base, factors, rp);
    cuda_pdl_wait();
    cuda_pdl_trigger();
    __syncthreads();
}

/* The two dims of a head's pair j (j < head_dim / 2): rotated pairs
 * (j < half = n_rot / 2) neox (j, j + half) or adjacent, the unrotated
 * ones adjacent past n_rot. */
__device__ __forceinline__ void rope_pair_dims(size_t j, size_t half, size_t n_rot, bool neox, size_t *a,
                                               size_t *b) {
    *a = j < half ? (neox ? j : 2 * j) : n_rot + 2 * (j - half);
    *b = j < half ? (neox ? j + half : 2 * j + 1) : *a + 1;
}

/* One thread per (token, head, pair of dims), all heads of all tokens in
 * one flat grid: q heads rotate in place; k heads rotate on the way into
 * their cache rows (k itself is left as it was) and v is copied beside
 * them. Pairs past n_rot / 2 carry the unrotated dims. */
template <typename C>
__global__ void k_rope_store(float *q, const float *k, const float *v, size_t n, size_t n_head,
                             size_t n_head_kv, size_t hd, const int32_t *pos, size_t n_rot,
                             float base, bool neox, const float *factors, be_rope_prep rp, C *kc,
                             C *vc, const int32_t *cells) {
    __shared__ double freq[ROPE_MAX_HALF];
    size_t half = n_rot / 2, hh = hd / 2, heads = n_head + n_head_kv, kw = n_head_kv * hd;
    rope_freq_table(freq, n_rot, base, factors, rp);
    size_t total = n * heads * hh;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        size_t j = idx % hh, h = (idx / hh) % heads, t = idx / (hh * heads);
        size_t a, b;
        rope_pair_dims(j, half, n_rot, neox, &a, &b);
        float sn = 0.0f, cs = 1.0f;
        if (j < half) cuda_rope_sincos(pos[t], freq[j], rp.mscale, &sn, &cs);
        if (h < n_head) {
            float *qh = q + (t * n_head + h) * hd, x0 = qh[a], x1 = qh[b];
            qh[a] = x0 * cs - x1 * sn;
            qh[b] = x0 * sn + x1 * cs;
            continue;
        }
        h -= n_head;
        const float *kh = k + t * kw + h * hd, *vh = v + t * kw + h * hd;
        C *kd = kc + (size_t)cells[t] * kw + h * hd, *vd = vc + (size_t)cells[t] * kw + h * hd;
        float x0 = kh[a], x1 = kh[b];
        kd[a] = to_cache<C>(x0 * cs - x1 * sn);
        kd[b] = to_cache<C>(x0 * sn + x1 * cs);
        vd[a] = to_cache<C>(vh[a]);
        vd[b] = to_cache<C>(vh[b]);
    }
}

/* With per-head norms (Qwen3's q_norm and k_norm): a warp per (token,
 * head), which sums the head's squares, scales each value as rms_norm
 * does, then rotates and writes it as k_rope_store would; the head's
 * values stay in registers between the sum and the rotation. Three
 * launches (two norms and the rotation, about 15 us a layer of a
 * Qwen3-30B-A3B decode step under ncu) become one. */
#define NRS_WARPS 8
#define NRS_PAIRS (ROPE_MAX_HALF / 32) /* a lane's pairs, at most */
template <typename C>
__global__ void __launch_bounds__(NRS_WARPS * 32)
    k_norm_rope_store(float *q, const float *k, const float *v, size_t n, size_t n_head, size_t n_head_kv,
                      size_t hd, const int32_t *pos, size_t n_rot, float base, bool neox, const float *factors,
                      be_rope_prep rp, be_head_norm hn, C *kc, C *vc, const int32_t *cells) {
    __shared__ double freq[ROPE_MAX_HALF];
    size_t half = n_rot / 2, hh = hd / 2, heads = n_head + n_head_kv, kw = n_head_kv * hd;
    rope_freq_table(freq, n_rot, base, factors, rp);
    const int lane = threadIdx.x & 31;
    for (size_t g = blockIdx.x * (size_t)NRS_WARPS + (threadIdx.x >> 5); g < n * heads;
         g += (size_t)gridDim.x * NRS_WARPS) {
        size_t h = g % heads, t = g / heads;
        const bool is_q = h < n_head;
        const float *src = is_q ? q + (t * n_head + h) * hd : k + t * kw + (h - n_head) * hd;
        const float *nw = is_q ? hn.q : hn.k;
        float x0[NRS_PAIRS], x1[NRS_PAIRS], ss = 0.0f;
#pragma unroll
        for (int i = 0; i < NRS_PAIRS; i++) {
            size_t j = lane + 32 * (size_t)i;
            x0[i] = x1[i] = 0.0f;
            if (j >= hh) continue;
            size_t a, b;
            rope_pair_dims(j, half, n_rot, neox, &a, &b);
            x0[i] = src[a], x1[i] = src[b];
            ss += x0[i] * x0[i] + x1[i] * x1[i];
        }
        const float inv = nw ? rsqrtf(cuda_warp_sum(ss) / (float)hd + hn.eps) : 1.0f;
#pragma unroll
        for (int i = 0; i < NRS_PAIRS; i++) {
            size_t j = lane + 32 * (size_t)i;
            if (j >= hh) continue;
            size_t a, b;
            rope_pair_dims(j, half, n_rot, neox, &a, &b);
            float y0 = nw ? x0[i] * inv * nw[a] : x0[i], y1 = nw ? x1[i] * inv * nw[b] : x1[i];
            float sn = 0.0f, cs = 1.0f;
            if (j < half) cuda_rope_sincos(pos[t], freq[j], rp.mscale, &sn, &cs);
            float r0 = j < half ? y0 * cs - y1 * sn : y0, r1 = j < half ? y0 * sn + y1 * cs : y1;
            if (is_q) {
                float *qh = q + (t * n_head + h) * hd;
                qh[a] = r0, qh[b] = r1;
                continue;
            }
            size_t o = (size_t)cells[t] * kw + (h - n_head) * hd;
            const float *vh = v + t * kw + (h - n_head) * hd;
            kc[o + a] = to_cache<C>(r0), kc[o + b] = to_cache<C>(r1);
            vc[o + a] = to_cache<C>(vh[a]), vc[o + b] = to_cache<C>(vh[b]);
        }
    }
}

cleave_status cuda_op_rope_store(be_device *dev, float *q, const float *k, const float *v, size_t n,
                                 size_t n_head, size_t n_head_kv, size_t hd, const be_head_norm *hn,
                                 const int32_t *pos, const be_rope *p, void *k_cache, void *v_cache,
                                 cleave_type kv_type, const int32_t *cells) {
    if (!n) return CLEAVE_OK;
    const bool normed = hn && (hn->q || hn->k);
    size_t kw = n_head_kv * hd;
    cuda_device *d = cuda_dev(dev);
    /* a bounded grid: each block fills its frequency table once */
    unsigned blocks = cuda_blocks(n * (n_head + n_head_kv) * (hd / 2), 256);
    if (blocks > (unsigned)d->n_sm * 8) blocks = (unsigned)d->n_sm * 8;
    if (hd / 2 > ROPE_MAX_HALF)
        return err_set(CLEAVE_ERR_UNSUPPORTED, "rope: head size %zu (at most %d)", hd,
                       2 * ROPE_MAX_HALF);
    be_rope_prep rp;
    cleave_status pst = be_rope_prepare(p, &rp);
    if (pst) return pst;
    /* normed: a warp a head, the grid bounded as above */
    unsigned nblocks = cuda_blocks(n * (n_head + n_head_kv), NRS_WARPS);
    if (nblocks > (unsigned)d->n_sm * 8) nblocks = (unsigned)d->n_sm * 8;
#define LAUNCH(C)                                                                                          \
    do {                                                                                                   \
        if (normed)                                                                                        \
            CUDA_LAUNCH(d, k_norm_rope_store<C>, nblocks, NRS_WARPS * 32, 0, q, k, v, n, n_head, n_head_kv, \
                        hd, pos, p->n_rot, p->freq_base, p->neox, p->freq_factors, rp, *hn, (C *)k_cache,   \
                        (C *)v_cache, cells);                                                              \
        else                                                                                               \
            CUDA_LAUNCH(d, k_rope_store<C>, blocks, 256, 0, q, k, v, n, n_head, n_head_kv, hd, pos,        \
                        p->n_rot, p->freq_base, p->neox, p->freq_factors, rp, (C *)k_cache, (C *)v_cache,  \
                        cells);                                                                            \
    } while (0)
    switch (kv_type) {
    case CLEAVE_TYPE_F32: LAUNCH(float); break;
    case CLEAVE_TYPE_F16: LAUNCH(__half); break;
    case CLEAVE_TYPE_BF16: LAUNCH(__nv_bfloat16); break;
    default: {
        /* q8_0, q5_0 and q4_0 quantize whole 32-blocks: rotate k in place
         * (a copy the engine no longer needs), then store with the block
         * quantizer; the norms first, in place, the same way */
        cleave_status st = CLEAVE_OK;
        if (normed && hn->q) st = cuda_op_rms_norm(dev, q, hn->q, q, n * n_head, hd, hn->eps);
        if (!st && normed && hn->k) st = cuda_op_rms_norm(dev, k, hn->k, (float *)k, n * n_head_kv, hd, hn->eps);
        if (!st) st = cuda_op_rope(dev, q, n, n_head * hd, n_head, hd, pos, p);
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

/* ---- the whole FFN: down(silu(gate x) * up x) ---------------------------- */

template <typename O> __device__ __forceinline__ O to_operand(float v);
template <> __device__ __forceinline__ __half to_operand<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 to_operand<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

/* silu(g) * u into the GEMM operand type, four elements per thread */
template <typename O> __global__ void k_swiglu_to(const float4 *g, const float4 *u, O *o, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 a = g[i], b = u[i];
        float r[4] = {cuda_swiglu(a.x, b.x), cuda_swiglu(a.y, b.y), cuda_swiglu(a.z, b.z),
                      cuda_swiglu(a.w, b.w)};
#pragma unroll
        for (int k = 0; k < 4; k++) o[4 * i + k] = to_operand<O>(r[k]);
    }
}

/* The same from one joined GEMM's output gu[n][2 ff] (gate's rows, then
 * up's); ff4 = ff / 4. */
template <typename O>
__global__ void k_swiglu_joined_to(const float4 *gu, size_t ff4, size_t n, O *o) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * ff4;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / ff4, j = i % ff4;
        float4 a = gu[2 * t * ff4 + j], b = gu[(2 * t + 1) * ff4 + j];
        float r[4] = {cuda_swiglu(a.x, b.x), cuda_swiglu(a.y, b.y), cuda_swiglu(a.z, b.z),
                      cuda_swiglu(a.w, b.w)};
#pragma unroll
        for (int k = 0; k < 4; k++) o[4 * i + k] = to_operand<O>(r[k]);
    }
}

/* Decode-sized batches: gate/up GEMV with SwiGLU, then the down GEMV.
 * Batches: x converted once for both input GEMMs, and SwiGLU writes the
 * down GEMM's operand type directly, so the n x n_ff intermediate is never
 * written in f32 and converted again. tmp: [n][n_ff] f32. */
cleave_status cuda_op_ffn(be_device *dev, const be_mat *gate, const be_mat *up, const be_mat *down,
                          const float *x, size_t n, float *tmp, float *y) {
    cuda_device *d = cuda_dev(dev);
    if (!n) return CLEAVE_OK;
    cleave_status st;
    size_t ff = up->ne1;
    bool batch = n > cuda_gemv_limit(gate->type) && gate->type != CLEAVE_TYPE_F32 &&
                 gate->type == up->type && gate->ne0 == up->ne0 && gate->ne1 == up->ne1 &&
                 down->type != CLEAVE_TYPE_F32 &&
                 down->ne0 == ff && (n * ff) % 4 == 0 && (uintptr_t)tmp % 16 == 0;
    if (batch) {
        void *xs, *us, *hs;
        const be_mat *gu[2] = {gate, up};
        bool joined = n <= CUDA_JOIN_MAX_N && ff % 4 == 0 && cuda_joined_rows(gu, 2);
        if ((st = cuda_gemm_input(d, gate->type, x, n, gate->ne0, CUDA_SCRATCH_X, &xs))) return st;
        if (joined) { /* [gate | up] rows of each token into scratch */
            if ((st = cuda_scratch(d, CUDA_SCRATCH_FFN, n * 2 * ff * sizeof(float), &us))) return st;
            if ((st = cuda_gemm_joined(d, gate, 2 * ff, xs, n, (float *)us))) return st;
        } else {
            if ((st = cuda_gemm_converted(d, gate, xs, n, NULL, tmp))) return st;
            if ((st = cuda_scratch(d, CUDA_SCRATCH_FFN, n * ff * sizeof(float), &us))) return st;
            if ((st = cuda_gemm_converted(d, up, xs, n, NULL, (float *)us))) return st;
        }
        /* x's converted copy is spent: its slot takes the SwiGLU output */
        if ((st = cuda_scratch(d, CUDA_SCRATCH_X, n * ff * 2, &hs))) return st;
        size_t n4 = n * ff / 4;
        const float4 *g4 = (const float4 *)tmp, *u4 = (const float4 *)us;
        unsigned blocks = cuda_blocks(n4, 256);
        if (joined && down->type == CLEAVE_TYPE_BF16)
            k_swiglu_joined_to<<<blocks, 256, 0, d->stream>>>(u4, ff / 4, n, (__nv_bfloat16 *)hs);
        else if (joined)
            k_swiglu_joined_to<<<blocks, 256, 0, d->stream>>>(u4, ff / 4, n, (__half *)hs);
        else if (down->type == CLEAVE_TYPE_BF16)
            k_swiglu_to<<<blocks, 256, 0, d->stream>>>(g4, u4, (__nv_bfloat16 *)hs, n4);
        else
            k_swiglu_to<<<blocks, 256, 0, d->stream>>>(g4, u4, (__half *)hs, n4);
        CUDA_LAUNCHED();
        return cuda_gemm_converted(d, down, hs, n, NULL, y);
    }
    /* batched decode: gate and up in one int8 GEMM, SwiGLU in its K-split
     * sum (H200, 8B Q4_K_M, against separate GEMMs, sums and SwiGLU in one
     * run: 8 sequences 1427-1438 -> 1512, 16 2182-2201 -> 2276, 32
     * 2840-2857 -> 2919 tok/s) */
    if (!cuda_gemv2_swiglu(d, gate, up, x, n, tmp, &st) &&
        !cuda_gemvq_swiglu(d, gate, up, x, n, tmp, &st) &&
        !(n > cuda_gemvq_max_n() && cuda_mmq_swiglu(d, gate, up, x, n, tmp, &st))) {
        /* layouts the dual GEMV does not take: gate into tmp, up into
         * scratch, then SwiGLU */
        void *us;
        st = cuda_scratch(d, CUDA_SCRATCH_FFN, n * ff * sizeof(float), &us);
        if (!st) st = cuda_op_matmul(dev, gate, x, n, NULL, tmp);
        if (!st) st = cuda_op_matmul(dev, up, x, n, NULL, (float *)us);
        if (!st) st = cuda_op_swiglu(dev, tmp, (const float *)us, tmp, n * ff);
    }
    return st ? st : cuda_op_matmul(dev, down, tmp, n, NULL, y);
}
