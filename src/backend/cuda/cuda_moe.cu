/* The mixture-of-experts ops on the GPU: routing (a warp per token), the
 * experts' matmul and the weighted sum of their outputs.
 *
 * matmul_id takes two paths. A decode step (a few tokens, and any step
 * being recorded as a graph) runs one kernel in which a warp takes one
 * row of the expert a (token, slot) pair chose, reading the ids on the
 * device: nothing waits for the host. A prompt's batch instead groups its
 * rows by expert: the ids come to the host, the rows are gathered in
 * expert order, each chosen expert runs once as an ordinary matmul over
 * all its rows (so its weights are read once per batch, and the GEMM
 * kernels of the dense layers serve), and the outputs are scattered back. */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "cuda_quant.cuh"

#define ROUTE_WARPS 4
#define ROUTE_MAX_EXPERTS 512 /* 16 logits a lane */
#define ID_WARPS 4
/* Batches up to this many (token, slot) pairs run the decode kernel; more
 * are grouped by expert (unless a graph is being recorded). */
#define ID_DECODE_PAIRS 64

/* One warp per token: the k largest logits in order (ties to the lower
 * index), then their weights as be_moe_ops.route defines them. */
__global__ void __launch_bounds__(ROUTE_WARPS * 32)
    k_moe_route(const float *logits, int n, int ne, int k, int weight_gating, int norm, float scale,
                int32_t *ids, float *w) {
    int t = blockIdx.x * ROUTE_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (t >= n) return;
    const float *l = logits + (size_t)t * ne;
    float v[ROUTE_MAX_EXPERTS / 32];
    unsigned taken = 0;
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < ROUTE_MAX_EXPERTS / 32; i++) {
        int e = lane + 32 * i;
        v[i] = e < ne ? l[e] : -INFINITY;
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
        ids[(size_t)t * k + lane] = my_id;
        w[(size_t)t * k + lane] = my_p / div * scale;
    }
}

/* out[t][c] = sum_j w[t][j] * y[t][j][c] */
__global__ void k_moe_combine(const float *y, const float *w, size_t n, int k, size_t width, float *out) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * width;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / width, c = i % width;
        float s = 0.0f;
        for (int j = 0; j < k; j++) s += w[t * k + j] * y[(t * k + j) * width + c];
        out[i] = s;
    }
}

/* Decode: a warp per row of the expert pair p chose; f32, f16, bf16 and
 * q8_0 element by element, the block types a 32-group a lane. */
template <int T, bool Q>
__global__ void __launch_bounds__(ID_WARPS * 32)
    k_matmul_id(const uint8_t *w, size_t nb1, size_t nb2, size_t ne0, size_t ne1, const float *bias,
                const float *x, int x_slots, int k, const int32_t *ids, float *y) {
    size_t row = (size_t)blockIdx.x * ID_WARPS + (threadIdx.x >> 5);
    size_t p = blockIdx.y;
    if (row >= ne1) return;
    int lane = threadIdx.x & 31;
    int e = ids[p];
    const uint8_t *r = w + (size_t)e * nb2 + row * nb1;
    const float *xr = x + (x_slots == 1 ? p / k : p) * ne0;
    float acc = 0.0f;
    if constexpr (Q) {
        for (size_t g = lane; g < ne0 / 32; g += 32) {
            float v[32];
            cq_dequant32<T>(r, g, v);
#pragma unroll
            for (int j = 0; j < 32; j++) acc += v[j] * xr[32 * g + j];
        }
    } else {
        for (size_t i = lane; i < ne0; i += 32) acc += cuda_load<T>(r, i) * xr[i];
    }
    acc = cuda_warp_sum(acc);
    if (lane == 0) y[p * ne1 + row] = acc + (bias ? bias[(size_t)e * ne1 + row] : 0.0f);
}

/* The grouped path's moves: xg[i] = x's row of pair perm[i]; y[perm[i]] = yg[i]. */
__global__ void k_gather_rows(const float *x, const int32_t *perm, size_t rows, size_t ne0, int x_slots,
                              int k, float *xg) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows * ne0;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / ne0, c = i % ne0, p = (size_t)perm[r];
        xg[i] = x[(x_slots == 1 ? p / k : p) * ne0 + c];
    }
}
__global__ void k_scatter_rows(const float *yg, const int32_t *perm, size_t rows, size_t ne1, float *y) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows * ne1;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / ne1, c = i % ne1;
        y[(size_t)perm[r] * ne1 + c] = yg[i];
    }
}

/* gpt-oss's clamped SwiGLU (be_moe_ops.swiglu_oai); expf as the CPU */
__global__ void k_swiglu_oai(const float *gate, const float *up, float *out, size_t n, float alpha, float limit) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = fminf(gate[i], limit), u = fminf(fmaxf(up[i], -limit), limit);
        out[i] = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
    }
}

static cleave_status swiglu_oai(be_device *dev, const float *gate, const float *up, float *out, size_t n,
                                float alpha, float limit) {
    cuda_device *d = cuda_dev(dev);
    if (!gate || !up || !out || !n) return err_set(CLEAVE_ERR_INVALID_ARG, "swiglu_oai: NULL buffer or n of 0");
    k_swiglu_oai<<<cuda_blocks(n, 256), 256, 0, d->stream>>>(gate, up, out, n, alpha, limit);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}

static cleave_status moe_route(be_device *dev, const float *logits, size_t n, size_t n_expert, size_t k,
                               be_gating gating, bool norm, float scale, int32_t *ids, float *weights) {
    cuda_device *d = cuda_dev(dev);
    if (!logits || !ids || !weights || !n)
        return err_set(CLEAVE_ERR_INVALID_ARG, "moe_route: NULL buffer or no tokens");
    if (!k || k > n_expert || k > 32 || n_expert > ROUTE_MAX_EXPERTS)
        return err_set(CLEAVE_ERR_INVALID_ARG, "moe_route: %zu of %zu experts (at most 32 of %d)", k,
                       n_expert, ROUTE_MAX_EXPERTS);
    unsigned blocks = (unsigned)((n + ROUTE_WARPS - 1) / ROUTE_WARPS);
    k_moe_route<<<blocks, ROUTE_WARPS * 32, 0, d->stream>>>(logits, (int)n, (int)n_expert, (int)k,
                                                            gating == BE_GATING_SOFTMAX_WEIGHT, norm, scale,
                                                            ids, weights);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}

static cleave_status moe_combine(be_device *dev, const float *y, const float *weights, size_t n, size_t k,
                                 size_t width, float *out) {
    cuda_device *d = cuda_dev(dev);
    if (!y || !weights || !out || !n || !k || !width)
        return err_set(CLEAVE_ERR_INVALID_ARG, "moe_combine: NULL buffer or a size of 0");
    k_moe_combine<<<cuda_blocks(n * width, 256), 256, 0, d->stream>>>(y, weights, n, (int)k, width, out);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}

static cleave_status matmul_id_decode(cuda_device *d, const be_mat *w, const float *bias, const float *x,
                                      size_t x_slots, size_t n, size_t k, const int32_t *ids, float *y) {
    dim3 grid((unsigned)((w->ne1 + ID_WARPS - 1) / ID_WARPS), (unsigned)(n * k));
    auto launch = [&]<int T, bool Q>() {
        k_matmul_id<T, Q><<<grid, ID_WARPS * 32, 0, d->stream>>>(
            (const uint8_t *)w->data, w->nb1, w->nb2, w->ne0, w->ne1, bias, x, (int)x_slots, (int)k, ids, y);
    };
    bool ok = cuda_dispatch_q(w->type, [&]<int T>() { launch.template operator()<T, true>(); }) ||
              cuda_dispatch(w->type, [&]<int T>() { launch.template operator()<T, false>(); });
    if (!ok) return err_set(CLEAVE_ERR_UNSUPPORTED, "matmul_id: weight type %d", (int)w->type);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}

static cleave_status matmul_id_grouped(be_device *dev, const be_mat *w, const float *bias, const float *x,
                                       size_t x_slots, size_t n, size_t k, const int32_t *ids, float *y) {
    cuda_device *d = cuda_dev(dev);
    size_t pairs = n * k, ne = w->ne2, ne0 = w->ne0, ne1 = w->ne1;
    int32_t *host = (int32_t *)mem_alloc((2 * pairs + ne + 1) * sizeof(int32_t), "expert ids");
    if (!host) return CLEAVE_ERR_OOM;
    int32_t *perm = host + pairs, *off = perm + pairs;
    cleave_status st = CLEAVE_OK;
    cudaError_t e = cudaMemcpyAsync(host, ids, pairs * sizeof(int32_t), cudaMemcpyDeviceToHost, d->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->stream);
    if (e != cudaSuccess) st = cuda_fail(e, "matmul_id ids", __FILE__, __LINE__);
    /* a counting sort of the pairs by expert */
    memset(off, 0, (ne + 1) * sizeof(int32_t));
    for (size_t p = 0; !st && p < pairs; p++) {
        if (host[p] < 0 || (size_t)host[p] >= ne)
            st = err_set(CLEAVE_ERR_INVALID_ARG, "matmul_id: expert %d of %zu", (int)host[p], ne);
        else
            off[host[p] + 1]++;
    }
    for (size_t x = 0; x < ne; x++) off[x + 1] += off[x];
    for (size_t p = 0; !st && p < pairs; p++) perm[off[host[p]]++] = (int32_t)p;
    for (size_t x = ne; x > 0; x--) off[x] = off[x - 1]; /* back to each expert's first row */
    off[0] = 0;
    /* one scratch: gathered inputs, their outputs, the permutation */
    size_t xg_b = (pairs * ne0 * sizeof(float) + 255) & ~(size_t)255, yg_b = (pairs * ne1 * sizeof(float) + 255) & ~(size_t)255;
    void *buf = NULL;
    if (!st) st = cuda_scratch(d, CUDA_SCRATCH_MOE, xg_b + yg_b + pairs * sizeof(int32_t), &buf);
    float *xg = (float *)buf, *yg = (float *)((char *)buf + xg_b);
    int32_t *perm_d = (int32_t *)((char *)buf + xg_b + yg_b);
    if (!st) st = cuda_upload_sync(d, perm_d, perm, pairs * sizeof(int32_t));
    if (!st) {
        k_gather_rows<<<cuda_blocks(pairs * ne0, 256), 256, 0, d->stream>>>(x, perm_d, pairs, ne0, (int)x_slots,
                                                                            (int)k, xg);
        e = cudaGetLastError();
        if (e != cudaSuccess) st = cuda_fail(e, "k_gather_rows", __FILE__, __LINE__);
    }
    for (size_t x = 0; !st && x < ne; x++) {
        size_t lo = (size_t)off[x], m = (size_t)off[x + 1] - lo;
        if (!m) continue;
        be_mat one = *w;
        one.data = (const char *)w->data + x * w->nb2;
        one.ne2 = 1;
        st = cuda_op_matmul(dev, &one, xg + lo * ne0, m, bias ? bias + x * ne1 : NULL, yg + lo * ne1);
    }
    if (!st) {
        k_scatter_rows<<<cuda_blocks(pairs * ne1, 256), 256, 0, d->stream>>>(yg, perm_d, pairs, ne1, y);
        e = cudaGetLastError();
        if (e != cudaSuccess) st = cuda_fail(e, "k_scatter_rows", __FILE__, __LINE__);
    }
    free(host);
    return st;
}

static cleave_status matmul_id(be_device *dev, const be_mat *w, const float *bias, const float *x, size_t x_slots,
                               size_t n, size_t k, const int32_t *ids, float *y) {
    cuda_device *d = cuda_dev(dev);
    if (!w || !w->data || !x || !ids || !y)
        return err_set(CLEAVE_ERR_INVALID_ARG, "matmul_id: NULL matrix or buffer");
    if (!n || !k || (x_slots != 1 && x_slots != k) || w->ne2 < 1 || w->scales)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "matmul_id: %zu tokens of %zu slots reading %zu rows each, %zu experts%s", n, k, x_slots,
                       w->ne2, w->scales ? " in a split layout" : "");
    if (!w->ne1) return CLEAVE_OK;
    if (cuda_qk(w->type) && w->ne0 % 32)
        return err_set(CLEAVE_ERR_INVALID_ARG, "matmul_id: rows of %zu", w->ne0);
    if (d->recording || n * k <= ID_DECODE_PAIRS) return matmul_id_decode(d, w, bias, x, x_slots, n, k, ids, y);
    return matmul_id_grouped(dev, w, bias, x, x_slots, n, k, ids, y);
}

const be_moe_ops cuda_moe_ops = {
    .route = moe_route,
    .matmul_id = matmul_id,
    .combine = moe_combine,
    .swiglu_oai = swiglu_oai,
};
