/* The experts' small ops fused for decode steps, where each launch costs
 * about as much as its work: the router's matmul with the routing (the
 * last of the router's blocks routes), and the experts' weighted sum with
 * the residual add and the RMSNorm after it. A Qwen3-30B-A3B decode step
 * ran these as four launches a layer (router 4.3, routing 5.1, sum 3.9,
 * add+norm 2.9 us under ncu). Shapes the kernels do not take go through
 * the plain ops. */
#include "cuda_moe.cuh"

#define RR_THREADS 256
#define RR_V 4         /* float4s of a router row a thread holds: rows up to 4096 */
#define RR_MAX_N 8     /* tokens a launch takes */
#define CAN_THREADS 1024
#define CAN_V 4        /* float4s of a row a thread holds: rows up to 16384 */

/* A block per expert row e: its logit for each of the n tokens (the row
 * is read into registers before waiting on the kernel before, as it is no
 * output of it); the block that finishes last routes every token, a warp
 * a token, and sets the counter back to zero. */
__global__ void __launch_bounds__(RR_THREADS)
    k_router_route(const float4 *w, size_t ld4, const float *bias, const float4 *x, int ne0_4, int n, int ne, int k,
                   int weight_gating, int norm, float scale, float *logits, int32_t *ids, float *wts,
                   unsigned *done) {
    const int e = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float4 wv[RR_V];
#pragma unroll
    for (int v = 0; v < RR_V; v++) {
        int i = threadIdx.x + v * RR_THREADS;
        wv[v] = i < ne0_4 ? w[(size_t)e * ld4 + i] : make_float4(0, 0, 0, 0);
    }
    cuda_pdl_wait();
    cuda_pdl_trigger(); /* the experts' GEMV may start loading weights */
    float acc[RR_MAX_N];
#pragma unroll
    for (int t = 0; t < RR_MAX_N; t++) {
        acc[t] = 0.0f;
        if (t >= n) continue;
#pragma unroll
        for (int v = 0; v < RR_V; v++) {
            int i = threadIdx.x + v * RR_THREADS;
            if (i >= ne0_4) continue;
            float4 a = x[(size_t)t * ne0_4 + i];
            acc[t] += wv[v].x * a.x + wv[v].y * a.y + wv[v].z * a.z + wv[v].w * a.w;
        }
    }
    __shared__ float part[RR_MAX_N][RR_THREADS / 32];
    __shared__ bool last;
#pragma unroll
    for (int t = 0; t < RR_MAX_N; t++) {
        float s = cuda_warp_sum(acc[t]);
        if (lane == 0) part[t][warp] = s;
    }
    __syncthreads();
    if (threadIdx.x < n) {
        float s = bias ? bias[e] : 0.0f;
        for (int i = 0; i < RR_THREADS / 32; i++) s += part[threadIdx.x][i];
        logits[(size_t)threadIdx.x * ne + e] = s;
        __threadfence(); /* the logit is visible before the count says so */
    }
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int t = warp; t < n; t += RR_THREADS / 32)
        cuda_moe_route_token(logits + (size_t)t * ne, ne, k, weight_gating, norm, scale, ids + (size_t)t * k,
                             wts + (size_t)t * k);
    if (threadIdx.x == 0) *done = 0;
}

static cleave_status router_route(be_device *dev, const be_mat *r, const float *bias, const float *x, size_t n,
                                  size_t k, be_gating gating, bool norm, float scale, float *logits, int32_t *ids,
                                  float *weights) {
    cuda_device *d = cuda_dev(dev);
    if (!r || !r->data || !x || !logits || !ids || !weights || !n)
        return err_set(CLEAVE_ERR_INVALID_ARG, "router_route: NULL matrix or buffer, or no tokens");
    size_t ne = r->ne1;
    bool fits = r->type == CLEAVE_TYPE_F32 && !r->scales && r->ne0 % 4 == 0 && r->ne0 <= 4 * RR_V * RR_THREADS &&
                r->nb1 % 16 == 0 && (uintptr_t)r->data % 16 == 0 && (uintptr_t)x % 16 == 0 && n <= RR_MAX_N &&
                k >= 1 && k <= 32 && k <= ne && ne <= ROUTE_MAX_EXPERTS;
    if (!fits) {
        cleave_status st = cuda_op_matmul(dev, r, x, n, bias, logits);
        return st ? st : cuda_moe_route(dev, logits, n, ne, k, gating, norm, scale, ids, weights);
    }
    CUDA_LAUNCH(d, k_router_route, (unsigned)ne, RR_THREADS, 0, (const float4 *)r->data, r->nb1 / 16, bias,
                (const float4 *)x, (int)(r->ne0 / 4), (int)n, (int)ne, (int)k,
                (int)(gating == BE_GATING_SOFTMAX_WEIGHT), (int)norm, scale, logits, ids, weights,
                d->counters + CUDA_COUNTER_ROUTE);
    return CLEAVE_OK;
}

/* A block per token: s = sum_j w[j] * y[j] as k_moe_combine adds it, then
 * x += s and h = rms_norm(x) * nw as k_add_rms_norm4 computes them, the
 * row held in registers between the sum of squares and the scaling. */
__global__ void __launch_bounds__(CAN_THREADS)
    k_combine_add_norm(const float4 *y, const float *w, int k, size_t width4, float4 *x, const float4 *nw,
                       float4 *h, float eps) {
    const size_t t = blockIdx.x;
    x += t * width4, h += t * width4;
    cuda_pdl_wait();
    cuda_pdl_trigger(); /* the next layer's GEMV may start loading weights */
    float4 xv[CAN_V];
    float ss = 0.0f;
#pragma unroll
    for (int v = 0; v < CAN_V; v++) {
        size_t i = threadIdx.x + (size_t)v * blockDim.x;
        if (i >= width4) continue;
        float4 s = make_float4(0, 0, 0, 0);
        for (int j = 0; j < k; j++) {
            float wj = w[t * k + j];
            float4 a = y[(t * k + j) * width4 + i];
            s.x += wj * a.x, s.y += wj * a.y, s.z += wj * a.z, s.w += wj * a.w;
        }
        float4 b = x[i];
        xv[v] = make_float4(b.x + s.x, b.y + s.y, b.z + s.z, b.w + s.w);
        x[i] = xv[v];
        ss += xv[v].x * xv[v].x + xv[v].y * xv[v].y + xv[v].z * xv[v].z + xv[v].w * xv[v].w;
    }
    float inv = rsqrtf(cuda_block_sum(ss) / (float)(4 * width4) + eps);
#pragma unroll
    for (int v = 0; v < CAN_V; v++) {
        size_t i = threadIdx.x + (size_t)v * blockDim.x;
        if (i >= width4) continue;
        float4 g = nw[i];
        h[i] = make_float4(xv[v].x * inv * g.x, xv[v].y * inv * g.y, xv[v].z * inv * g.z, xv[v].w * inv * g.w);
    }
}

static cleave_status combine_add_norm(be_device *dev, const float *y, const float *weights, size_t n, size_t k,
                                      size_t width, float *x, const float *norm_w, float *h, float eps) {
    cuda_device *d = cuda_dev(dev);
    if (!y || !weights || !x || !norm_w || !h || !n || !k || !width)
        return err_set(CLEAVE_ERR_INVALID_ARG, "combine_add_norm: NULL buffer or a size of 0");
    bool fits = width % 4 == 0 && width <= 4 * CAN_V * CAN_THREADS && (uintptr_t)y % 16 == 0 &&
                (uintptr_t)x % 16 == 0 && (uintptr_t)norm_w % 16 == 0 && (uintptr_t)h % 16 == 0;
    if (!fits) { /* composed: the sum into h, then the fused add and norm */
        cleave_status st = cuda_moe_combine(dev, y, weights, n, k, width, h);
        return st ? st : cuda_op_add_rms_norm(dev, x, h, norm_w, h, n, width, eps);
    }
    size_t w4 = width / 4;
    /* a float4 a thread where the row allows (more loads in flight), else
     * up to CAN_V */
    unsigned threads = (unsigned)(w4 < CAN_THREADS ? (w4 + 31) / 32 * 32 : CAN_THREADS);
    CUDA_LAUNCH(d, k_combine_add_norm, (unsigned)n, threads, 0, (const float4 *)y, weights, (int)k, w4, (float4 *)x,
                (const float4 *)norm_w, (float4 *)h, eps);
    return CLEAVE_OK;
}

const be_moe_ops cuda_moe_ops = {
    .route = cuda_moe_route,
    .matmul_id = cuda_moe_matmul_id,
    .combine = cuda_moe_combine,
    .swiglu_oai = cuda_moe_swiglu_oai,
    .matmul_id_glu = cuda_moe_matmul_id_glu,
    .router_route = router_route,
    .combine_add_norm = combine_add_norm,
};
