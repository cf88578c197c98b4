/* The mixture-of-experts ops on the GPU: routing (a warp per token), the
 * experts' matmul and the weighted sum of their outputs (the table, with
 * the fused decode ops, is in cuda_moe_fused.cu).
 *
 * matmul_id takes the first of these paths that fits:
 * - a batch of a few tokens: the block types' GEMV a (token, slot) pair
 *   at a time (cuda_gemvq_id, moe_by_pairs);
 * - a few more: the same GEMV with the pairs grouped by expert, each
 *   chosen expert's rows read once for up to 4 of its pairs
 *   (moe_by_group; after the next path where that is asked for);
 * - MXFP4 batches up to CLEAVE_MOE_MMA_MAX_N tokens (none unless set):
 *   the tensor-core decode kernel that groups the pairs by expert itself
 *   (cuda_moe_mma.cu);
 * - block types: the int8 tensor-core GEMM over the pairs grouped by
 *   expert on the device (cuda_mmq_id, moe_by_mmq);
 * - a decode step (up to ID_DEVICE_PAIRS (token, slot) pairs, and any
 *   step being recorded as a graph) of other types: bf16 through that
 *   tensor-core kernel, the rest grouped by expert on the device
 *   (k_moe_group) and one kernel whose blocks each take rows of one
 *   chosen expert for every pair that chose it; either way each chosen
 *   expert's rows are read once and nothing waits for the host;
 * - a prompt of other types: its rows grouped on the host (the ids come
 *   back), gathered in expert order, each matrix one grouped GEMM over
 *   the chosen experts (or each expert an ordinary matmul), the outputs
 *   scattered back.
 * matmul_id_glu fuses gate, up and the activation where it can. */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/options.h"
#include "cuda_moe.cuh"

#define ROUTE_WARPS 4
/* Batches up to this many (token, slot) pairs (32 sequences of 8 experts)
 * are grouped on the device; more on the host (unless a graph is being
 * recorded). */
#define ID_DEVICE_PAIRS 256
#define MG_WARPS 8          /* a block of the grouped kernel: 8 warps */
#define MG_ROWS 32          /* rows of the expert a block takes */
#define MG_MT 8             /* pairs' inputs a block holds in shared memory at once */
#define MG_SMEM (96u << 10) /* at most this much for them */
/* 16-bit rows: 16-byte loads a lane has in flight per matrix (one at a
 * time before: Qwen3-30B-A3B bf16 decode on an H200, one sequence 208 ->
 * 254 tok/s, 32 sequences 1106 -> 1292; bench/moe-gpu-2026-12-03.md,
 * call AJ) */
#define MG_VU 4

/* One warp per token (cuda_moe_route_token). */
__global__ void __launch_bounds__(ROUTE_WARPS * 32)
    k_moe_route(const float *logits, int n, int ne, int k, int weight_gating, int norm, float scale,
                int32_t *ids, float *w) {
    int t = blockIdx.x * ROUTE_WARPS + (threadIdx.x >> 5);
    cuda_pdl_wait();
    cuda_pdl_trigger();
    if (t >= n) return;
    cuda_moe_route_token(logits + (size_t)t * ne, ne, k, weight_gating, norm, scale, ids + (size_t)t * k,
                         w + (size_t)t * k);
}

/* out[t][c] = sum_j w[t][j] * y[t][j][c] */
__global__ void k_moe_combine(const float *y, const float *w, size_t n, int k, size_t width, float *out) {
    cuda_pdl_wait();
    cuda_pdl_trigger();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * width;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / width, c = i % width;
        float s = 0.0f;
        for (int j = 0; j < k; j++) s += w[t * k + j] * y[(t * k + j) * width + c];
        out[i] = s;
    }
}

/* ---- decode: grouped on the device ------------------------------------------ */

/* The pairs by expert, in one block: counts, offsets (grp[0..ne]), the
 * pairs of each expert in turn (perm, grp[ne + 1 ..]), the experts chosen
 * at all (active) and their count (n_active). Within an expert the order
 * of its pairs is whatever the atomics give: every pair's output is its
 * own, so it does not change any result. */
struct moe_groups {
    int32_t *off, *perm, *active, *n_active;
};
__global__ void k_moe_group(const int32_t *ids, int P, int ne, moe_groups g) {
    __shared__ int32_t cnt[ROUTE_MAX_EXPERTS], cur[ROUTE_MAX_EXPERTS];
    for (int e = threadIdx.x; e < ne; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    /* an id out of range (never from moe_route) is left out: its pair's
     * output is not written, and nothing outside cnt is */
    for (int i = threadIdx.x; i < P; i += blockDim.x)
        if (ids[i] >= 0 && ids[i] < ne) atomicAdd(&cnt[ids[i]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int at = 0, na = 0;
        for (int e = 0; e < ne; e++) {
            g.off[e] = cur[e] = at;
            if (cnt[e]) g.active[na++] = e;
            at += cnt[e];
        }
        g.off[ne] = at;
        *g.n_active = na;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < P; i += blockDim.x)
        if (ids[i] >= 0 && ids[i] < ne) g.perm[atomicAdd(&cur[ids[i]], 1)] = i;
}

/* x's value i of a staged row, one float of padding every 32 so lanes
 * reading 32-groups of their own hit distinct banks */
static __device__ __forceinline__ int mg_at(int i) { return i + (i >> 5); }

/* Block (x, y): rows [MG_ROWS x, +MG_ROWS) of the y-th chosen expert, for
 * each pair that chose it, MG_MT pairs' inputs staged in shared memory
 * at a time; a warp a row, lanes over its 32-groups (block types) or
 * elements. DUAL: gate (w) and up (wu) rows together, y = the
 * activation of the two. */
template <int T, bool Q, bool DUAL>
__global__ void __launch_bounds__(MG_WARPS * 32)
    k_moe_gemv(const uint8_t *w, const uint8_t *wu, size_t nb1, size_t nb2, size_t ne0, size_t ne1, const float *bias,
               const float *bias_u, const float *x, int x_slots, int k, moe_groups g, int mt_cap, int vec,
               int act, float alpha, float limit, float *y) {
    extern __shared__ float xs[];
    if ((int)blockIdx.y >= *g.n_active) return;
    const int e = g.active[blockIdx.y], lo = g.off[e], m = g.off[e + 1] - lo;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, ld = mg_at((int)ne0);
    const size_t row0 = (size_t)blockIdx.x * MG_ROWS;
    constexpr int M = DUAL ? 2 : 1;
    for (int c0 = 0; c0 < m; c0 += mt_cap) {
        const int mt = m - c0 < mt_cap ? m - c0 : mt_cap;
        __syncthreads();
        for (int i = threadIdx.x; i < mt * (int)ne0; i += blockDim.x) {
            int j = i / (int)ne0, c = i % (int)ne0, p = g.perm[lo + c0 + j];
            xs[j * ld + mg_at(c)] = x[(size_t)(x_slots == 1 ? p / k : p) * ne0 + c];
        }
        __syncthreads();
        for (size_t row = row0 + warp; row < row0 + MG_ROWS && row < ne1; row += MG_WARPS) {
            const uint8_t *r[2] = {w + (size_t)e * nb2 + row * nb1, DUAL ? wu + (size_t)e * nb2 + row * nb1 : NULL};
            float acc[M][MG_MT];
#pragma unroll
            for (int u = 0; u < M; u++)
#pragma unroll
                for (int j = 0; j < MG_MT; j++) acc[u][j] = 0.0f;
            if constexpr (Q) {
                for (size_t gi = lane; gi < ne0 / 32; gi += 32) {
#pragma unroll
                    for (int u = 0; u < M; u++) {
                        float v[32];
                        cq_dequant32<T>(r[u], gi, v);
#pragma unroll
                        for (int j = 0; j < MG_MT; j++) {
                            if (j >= mt) break;
                            const float *xr = xs + j * ld + mg_at(32 * (int)gi);
                            float s = 0.0f;
#pragma unroll
                            for (int t = 0; t < 32; t++) s += v[t] * xr[t];
                            acc[u][j] += s;
                        }
                    }
                }
            } else if (vec && (T == CLEAVE_TYPE_F16 || T == CLEAVE_TYPE_BF16)) {
                /* 8 weights (16 bytes) a lane at a time: rows of whole
                 * 256s, 16-byte aligned; MG_VU such loads of each matrix
                 * issued before any is used, so a warp has a row's worth
                 * in flight rather than one load's latency after another */
                for (size_t i0 = 8 * (size_t)lane; i0 < ne0; i0 += 256 * MG_VU) {
                    uint4 raw[MG_VU][M];
#pragma unroll
                    for (int q = 0; q < MG_VU; q++)
#pragma unroll
                        for (int u = 0; u < M; u++)
                            raw[q][u] = i0 + 256 * q < ne0 ? *(const uint4 *)(r[u] + 2 * (i0 + 256 * q))
                                                            : make_uint4(0, 0, 0, 0);
#pragma unroll
                    for (int q = 0; q < MG_VU; q++) {
                        const size_t i = i0 + 256 * q;
                        if (i >= ne0) break;
#pragma unroll
                        for (int u = 0; u < M; u++) {
                            const uint16_t *h = (const uint16_t *)&raw[q][u];
                            float wv[8];
#pragma unroll
                            for (int t = 0; t < 8; t++)
                                wv[t] = T == CLEAVE_TYPE_BF16 ? __bfloat162float(__ushort_as_bfloat16(h[t]))
                                                              : __half2float(__ushort_as_half(h[t]));
#pragma unroll
                            for (int j = 0; j < MG_MT; j++) {
                                if (j >= mt) break;
                                const float *xr = xs + j * ld + mg_at((int)i);
                                float s = 0.0f;
#pragma unroll
                                for (int t = 0; t < 8; t++) s += wv[t] * xr[t];
                                acc[u][j] += s;
                            }
                        }
                    }
                }
            } else {
                for (size_t i = lane; i < ne0; i += 32) {
#pragma unroll
                    for (int u = 0; u < M; u++) {
                        float wv = cuda_load<T>(r[u], i);
#pragma unroll
                        for (int j = 0; j < MG_MT; j++) {
                            if (j >= mt) break;
                            acc[u][j] += wv * xs[j * ld + mg_at((int)i)];
                        }
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < MG_MT; j++) {
                if (j >= mt) break;
                float a = cuda_warp_sum(acc[0][j]), b = DUAL ? cuda_warp_sum(acc[M - 1][j]) : 0.0f;
                if (lane) continue;
                const int p = g.perm[lo + c0 + j];
                a += bias ? bias[(size_t)e * ne1 + row] : 0.0f;
                if (DUAL) {
                    b += bias_u ? bias_u[(size_t)e * ne1 + row] : 0.0f;
                    a = cuda_moe_act(a, b, act, alpha, limit);
                }
                y[(size_t)p * ne1 + row] = a;
            }
        }
    }
}

/* The pairs grouped by expert into the MOE scratch, then one launch of
 * k_moe_gemv: y = x . w (DUAL: the activation of x . w and x . wu). */
template <bool DUAL>
static cleave_status moe_gemv(cuda_device *d, const be_mat *w, const be_mat *wu, const float *bias,
                              const float *bias_u, const float *x, size_t x_slots, size_t n, size_t k,
                              const int32_t *ids, int act, float alpha, float limit, float *y) {
    size_t P = n * k, ne = w->ne2;
    cleave_status st;
    if (cuda_moe_mma(d, w, wu, bias, bias_u, x, x_slots, n, k, ids, act, alpha, limit, y, &st)) return st;
    void *buf;
    st = cuda_scratch(d, CUDA_SCRATCH_MOE, (2 * ne + 2 + P) * sizeof(int32_t), &buf);
    if (st) return st;
    moe_groups g;
    g.off = (int32_t *)buf, g.active = g.off + ne + 1, g.n_active = g.active + ne, g.perm = g.n_active + 1;
    k_moe_group<<<1, 512, 0, d->stream>>>(ids, (int)P, (int)ne, g);
    CUDA_LAUNCHED();
    size_t ld = ((w->ne0 + 31) / 32) * 33, per = ld * sizeof(float);
    int mt = (int)(MG_SMEM / per);
    if (mt < 1) return err_set(CLEAVE_ERR_UNSUPPORTED, "matmul_id: rows of %zu elements", w->ne0);
    if (mt > MG_MT) mt = MG_MT;
    size_t smem = (size_t)mt * per, slots = P < ne ? P : ne;
    /* MG_ROWS rows a block for every grid: a warp a row where the grid
     * would be small (a decode step of one token) measured slower on an
     * H200: Qwen3-30B-A3B Q4_K_M tg128 220 -> 209 tok/s, gpt-oss-20b 238 -> 222 */
    dim3 grid((unsigned)((w->ne1 + MG_ROWS - 1) / MG_ROWS), (unsigned)slots);
    int vec = w->ne0 % 256 == 0 && (uintptr_t)w->data % 16 == 0 && w->nb1 % 16 == 0 && w->nb2 % 16 == 0 &&
                  (!DUAL || (uintptr_t)wu->data % 16 == 0); /* 16-bit rows: 16-byte loads */
    cudaError_t e = cudaSuccess;
    auto launch = [&]<int T, bool Q>() {
        static size_t raised[CUDA_MAX_ORDINALS];
        e = cuda_allow_smem(d, (const void *)k_moe_gemv<T, Q, DUAL>, smem, raised);
        if (e == cudaSuccess)
            k_moe_gemv<T, Q, DUAL><<<grid, MG_WARPS * 32, smem, d->stream>>>(
                (const uint8_t *)w->data, DUAL ? (const uint8_t *)wu->data : NULL, w->nb1, w->nb2, w->ne0, w->ne1,
                bias, bias_u, x, (int)x_slots, (int)k, g, mt, vec, act, alpha, limit, y);
    };
    bool ok = cuda_dispatch_q(w->type, [&]<int T>() { launch.template operator()<T, true>(); }) ||
              cuda_dispatch(w->type, [&]<int T>() { launch.template operator()<T, false>(); });
    if (!ok) return err_set(CLEAVE_ERR_UNSUPPORTED, "matmul_id: weight type %d", (int)w->type);
    if (e != cudaSuccess) return cuda_fail(e, "k_moe_gemv", __FILE__, __LINE__);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
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
/* a grouped GEMM's rows plus their experts' biases: yg[r] += bias[ids[perm[r]]] */
__global__ void k_add_expert_bias(float *yg, const float *bias, const int32_t *ids, const int32_t *perm, size_t rows,
                                  size_t ne1) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows * ne1;
         i += (size_t)gridDim.x * blockDim.x)
        yg[i] += bias[(size_t)ids[perm[i / ne1]] * ne1 + i % ne1];
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
    cuda_pdl_wait();
    cuda_pdl_trigger();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = cuda_swiglu_oai(gate[i], up[i], alpha, limit);
}

cleave_status cuda_moe_swiglu_oai(be_device *dev, const float *gate, const float *up, float *out, size_t n,
                                  float alpha, float limit) {
    cuda_device *d = cuda_dev(dev);
    if (!gate || !up || !out || !n) return err_set(CLEAVE_ERR_INVALID_ARG, "swiglu_oai: NULL buffer or n of 0");
    CUDA_LAUNCH(d, k_swiglu_oai, cuda_blocks(n, 256), 256, 0, gate, up, out, n, alpha, limit);
    return CLEAVE_OK;
}

cleave_status cuda_moe_route(be_device *dev, const float *logits, size_t n, size_t n_expert, size_t k,
                             be_gating gating, bool norm, float scale, int32_t *ids, float *weights) {
    cuda_device *d = cuda_dev(dev);
    if (!logits || !ids || !weights || !n)
        return err_set(CLEAVE_ERR_INVALID_ARG, "moe_route: NULL buffer or no tokens");
    if (!k || k > n_expert || k > 32 || n_expert > ROUTE_MAX_EXPERTS)
        return err_set(CLEAVE_ERR_INVALID_ARG, "moe_route: %zu of %zu experts (at most 32 of %d)", k,
                       n_expert, ROUTE_MAX_EXPERTS);
    unsigned blocks = (unsigned)((n + ROUTE_WARPS - 1) / ROUTE_WARPS);
    CUDA_LAUNCH(d, k_moe_route, blocks, ROUTE_WARPS * 32, 0, logits, (int)n, (int)n_expert, (int)k,
                (int)(gating == BE_GATING_SOFTMAX_WEIGHT), (int)norm, scale, ids, weights);
    return CLEAVE_OK;
}

cleave_status cuda_moe_combine(be_device *dev, const float *y, const float *weights, size_t n, size_t k,
                               size_t width, float *out) {
    cuda_device *d = cuda_dev(dev);
    if (!y || !weights || !out || !n || !k || !width)
        return err_set(CLEAVE_ERR_INVALID_ARG, "moe_combine: NULL buffer or a size of 0");
    CUDA_LAUNCH(d, k_moe_combine, cuda_blocks(n * width, 256), 256, 0, y, weights, n, (int)k, width, out);
    return CLEAVE_OK;
}

/* The prompt path for count (1, or 2: gate and up) matrices of one shape
 * that share x and the grouping: the ids to the host, a counting sort of
 * the pairs by expert, x's rows gathered in that order, each chosen
 * expert's rows through the matmul (one multi-matrix call: x converted
 * once for both), the outputs scattered back; with an activation (count
 * 2), act(gate, up) into y[0] only. */
static cleave_status matmul_id_grouped(be_device *dev, const be_mat *const *w, const float *const *bias, int count,
                                       const float *x, size_t x_slots, size_t n, size_t k, const int32_t *ids,
                                       int act, float alpha, float limit, float *const *y) {
    cuda_device *d = cuda_dev(dev);
    size_t pairs = n * k, ne = w[0]->ne2, ne0 = w[0]->ne0, ne1 = w[0]->ne1;
    int32_t *host = (int32_t *)mem_alloc((2 * pairs + ne + 1) * sizeof(int32_t), "expert ids");
    if (!host) return CLEAVE_ERR_OOM;
    int32_t *perm = host + pairs, *off = perm + pairs;
    cleave_status st = be_read(dev, host, ids, pairs * sizeof(int32_t)); /* waits for the routing */
    cudaError_t e;
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
    /* one scratch: gathered inputs, each matrix's outputs, the grouped
     * GEMM's pointers, the permutation */
    size_t xg_b = (pairs * ne0 * sizeof(float) + 255) & ~(size_t)255, yg_b = (pairs * ne1 * sizeof(float) + 255) & ~(size_t)255;
    size_t ptr_b = 3 * ne * sizeof(void *);
    void *buf = NULL;
    if (!st) st = cuda_scratch(d, CUDA_SCRATCH_MOE, xg_b + count * yg_b + ptr_b + pairs * sizeof(int32_t), &buf);
    float *xg = (float *)buf, *yg[2] = {(float *)((char *)buf + xg_b), (float *)((char *)buf + xg_b + yg_b)};
    void **ptrs = (void **)((char *)buf + xg_b + count * yg_b);
    int32_t *perm_d = (int32_t *)((char *)buf + xg_b + count * yg_b + ptr_b);
    if (!st) st = cuda_upload_sync(d, perm_d, perm, pairs * sizeof(int32_t));
    if (!st) {
        k_gather_rows<<<cuda_blocks(pairs * ne0, 256), 256, 0, d->stream>>>(x, perm_d, pairs, ne0, (int)x_slots,
                                                                            (int)k, xg);
        e = cudaGetLastError();
        if (e != cudaSuccess) st = cuda_fail(e, "k_gather_rows", __FILE__, __LINE__);
    }
    /* experts of more rows than the int8 GEMM takes (a long prompt): one
     * grouped GEMM per matrix on x converted once */
    size_t active = 0;
    for (size_t x = 0; x < ne; x++) active += off[x + 1] > off[x];
    bool grouped = false;
    if (!st && active && pairs / active > CUDA_MMQ_MAX_N && cuda_moe_gemm_takes(d, w[0])) {
        void *xs;
        st = cuda_gemm_input(d, w[0]->type, xg, pairs, ne0, CUDA_SCRATCH_X, &xs);
        for (int i = 0; !st && i < count; i++) {
            st = cuda_moe_gemm(d, w[i], xs, off, ptrs, yg[i], &grouped);
            if (!st && !grouped && i) st = err_set(CLEAVE_ERR_INTERNAL, "matmul_id: a grouped GEMM refused midway");
            if (!st && !grouped) break;
            if (!st && bias[i]) {
                k_add_expert_bias<<<cuda_blocks(pairs * ne1, 256), 256, 0, d->stream>>>(yg[i], bias[i], ids, perm_d,
                                                                                       pairs, ne1);
                e = cudaGetLastError();
                if (e != cudaSuccess) st = cuda_fail(e, "k_add_expert_bias", __FILE__, __LINE__);
            }
        }
    }
    for (size_t x = 0; !st && !grouped && x < ne; x++) {
        size_t lo = (size_t)off[x], m = (size_t)off[x + 1] - lo;
        if (!m) continue;
        be_mat one[2];
        const be_mat *op[2];
        const float *ob[2];
        float *oy[2];
        for (int i = 0; i < count; i++) {
            one[i] = *w[i];
            one[i].data = (const char *)w[i]->data + x * w[i]->nb2;
            one[i].ne2 = 1;
            op[i] = &one[i];
            ob[i] = bias[i] ? bias[i] + x * ne1 : NULL;
            oy[i] = yg[i] + lo * ne1;
        }
        st = count == 1 ? cuda_op_matmul(dev, op[0], xg + lo * ne0, m, ob[0], oy[0])
                        : cuda_op_matmul_multi(dev, op, ob, oy, (size_t)count, xg + lo * ne0, m);
    }
    if (!st && act == MG_ACT_OAI) st = cuda_moe_swiglu_oai(dev, yg[0], yg[1], yg[0], pairs * ne1, alpha, limit);
    if (!st && act == MG_ACT_SWIGLU) st = cuda_op_swiglu(dev, yg[0], yg[1], yg[0], pairs * ne1);
    for (int i = 0; !st && i < (act == MG_ACT_NONE ? count : 1); i++) {
        k_scatter_rows<<<cuda_blocks(pairs * ne1, 256), 256, 0, d->stream>>>(yg[i], perm_d, pairs, ne1, y[i]);
        e = cudaGetLastError();
        if (e != cudaSuccess) st = cuda_fail(e, "k_scatter_rows", __FILE__, __LINE__);
    }
    free(host);
    return st;
}

/* A decode step of a few tokens takes the block types' GEMV a (token,
 * slot) pair at a time (cuda_gemvq_id): x as int16 and integer dots, each
 * row streamed as the dense layers' rows are. A pair reads its expert's
 * rows on its own, so with more tokens (experts chosen twice) the int8
 * GEMM grouped by expert (cuda_mmq_id), which reads each chosen expert
 * once per unit, takes over. Where, measured on an H200 (batched-bench
 * -npp 512 -ntg 128, tokens/s of generation, per pair / int8 GEMM; per
 * pair in one call, the GEMM in a later one, bench/moe-gpu-2026-12-03.md
 * calls M and Q): Qwen3-30B-A3B Q4_K_M 2 tokens 412 / 337, 4: 530 / 580,
 * so Q4_K and the other block types per pair up to 2 tokens; gpt-oss-20b
 * MXFP4 2: 528 / 269, 4: 494 / 375, 8: 680 / 701 (one call). Then the
 * grouped form below took 3 and 4 tokens from it, Q4_K's 2 too (call AP:
 * -npp 128 -ntg 32, two rounds each): so one token per pair, MXFP4 up to
 * 2. CLEAVE_MOE_GEMVQ_MAX_N overrides both. */
static bool moe_by_pairs(size_t n, cleave_type t) {
    long max = options_get()->moe_gemvq_max_n;
    if (max < 0) max = t == CLEAVE_TYPE_MXFP4 ? 2 : 1;
    return max > 0 && n <= (size_t)max;
}

/* Past that, the same GEMV with each expert's pairs grouped (up to 4 a
 * unit), so a chosen expert's rows are read once for the pairs that
 * chose it: batches of up to CLEAVE_MOE_GROUP_MAX_N tokens, 4 unless set.
 * Measured on an H200 (call AP, tokens/s of generation, grouped / per
 * pair or int8 GEMM): Qwen3-30B-A3B Q4_K_M 2 tokens 512 / 461-497 (per
 * pair), 4: 722 / 506-522 (GEMM), 8: 951-977 / 1110-1126 (GEMM), 16:
 * 1248-1292 / 1766-1803; gpt-oss-20b MXFP4 4: 660-668 / 623-631 (per
 * pair), 8: 802-822 / 843-856 (GEMM), 16: 1041-1080 / 1156-1288. Past 4
 * tokens the GEMM wins: these GEMVs are bound by their per-pair work
 * (decoding and dotting each block), not by the bytes grouping saves. */
static bool moe_by_group(size_t n) {
    long max = options_get()->moe_group_max_n;
    if (max < 0) max = 4;
    return max > 0 && n <= (size_t)max;
}

/* Past the per-pair GEMV, the block types' experts take the int8 GEMM
 * grouped on the device (cuda_mmq_id.cu) in batches of up to
 * CLEAVE_MOE_MMQ_MAX_N tokens (every batch unless set); larger ones the
 * paths below. */
static bool moe_by_mmq(size_t n) {
    long max = options_get()->moe_mmq_max_n;
    return max < 0 || n <= (size_t)max;
}

cleave_status cuda_moe_matmul_id(be_device *dev, const be_mat *w, const float *bias, const float *x,
                                 size_t x_slots, size_t n, size_t k, const int32_t *ids, float *y) {
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
    cleave_status st;
    if (moe_by_pairs(n, w->type) &&
        cuda_gemvq_id(d, w, NULL, bias, NULL, x, x_slots, n, k, ids, false, false, 0.0f, 0.0f, y, &st))
        return st;
    if (w->type == CLEAVE_TYPE_MXFP4 &&
        cuda_moe_mma(d, w, NULL, bias, NULL, x, x_slots, n, k, ids, MG_ACT_NONE, 0.0f, 0.0f, y, &st))
        return st;
    if (moe_by_group(n) &&
        cuda_gemvq_id(d, w, NULL, bias, NULL, x, x_slots, n, k, ids, true, false, 0.0f, 0.0f, y, &st))
        return st;
    if (moe_by_mmq(n) && cuda_mmq_id(d, &w, &bias, &y, 1, x, x_slots, n, k, ids, &st)) return st;
    if (d->recording || n * k <= ID_DEVICE_PAIRS)
        return moe_gemv<false>(d, w, NULL, bias, NULL, x, x_slots, n, k, ids, MG_ACT_NONE, 0.0f, 0.0f, y);
    return matmul_id_grouped(dev, &w, &bias, 1, x, x_slots, n, k, ids, MG_ACT_NONE, 0.0f, 0.0f, &y);
}

cleave_status cuda_moe_matmul_id_glu(be_device *dev, const be_mat *gate, const be_mat *up, const float *bias_g,
                                     const float *bias_u, const float *x, size_t n, size_t k, const int32_t *ids,
                                     bool oai, float alpha, float limit, float *y) {
    cuda_device *d = cuda_dev(dev);
    if (!gate || !up || !gate->data || !up->data || !x || !ids || !y || !n || !k)
        return err_set(CLEAVE_ERR_INVALID_ARG, "matmul_id_glu: NULL matrix or buffer, or no tokens");
    if (up->type != gate->type || up->ne0 != gate->ne0 || up->ne1 != gate->ne1 || up->ne2 != gate->ne2 ||
        up->nb1 != gate->nb1 || up->nb2 != gate->nb2 || gate->scales || up->scales)
        return err_set(CLEAVE_ERR_INVALID_ARG, "matmul_id_glu: gate and up differ in type or shape");
    if (!gate->ne1) return CLEAVE_OK;
    cleave_status st;
    if (moe_by_pairs(n, gate->type) &&
        cuda_gemvq_id(d, gate, up, bias_g, bias_u, x, 1, n, k, ids, false, oai, alpha, limit, y, &st))
        return st;
    if (gate->type == CLEAVE_TYPE_MXFP4 && cuda_moe_mma(d, gate, up, bias_g, bias_u, x, 1, n, k, ids,
                                                        oai ? MG_ACT_OAI : MG_ACT_SWIGLU, alpha, limit, y, &st))
        return st;
    if (moe_by_group(n) &&
        cuda_gemvq_id(d, gate, up, bias_g, bias_u, x, 1, n, k, ids, true, oai, alpha, limit, y, &st))
        return st;
    const be_mat *w[2] = {gate, up};
    const float *b[2] = {bias_g, bias_u};
    const size_t values = n * k * gate->ne1;
    void *up_y;
    /* gate and up in one launch, then the activation; the type asked
     * first, so no scratch is taken for a type the GEMM never reads */
    if (moe_by_mmq(n) && cuda_mmq_has_type(gate->type)) {
        if ((st = cuda_scratch(d, CUDA_SCRATCH_FFN, values * sizeof(float), &up_y))) return st;
        float *o[2] = {y, (float *)up_y};
        if (cuda_mmq_id(d, w, b, o, 2, x, 1, n, k, ids, &st)) {
            if (st) return st;
            return oai ? cuda_moe_swiglu_oai(dev, y, o[1], y, values, alpha, limit)
                       : cuda_op_swiglu(dev, y, o[1], y, values);
        }
    }
    if (!d->recording && n * k > ID_DEVICE_PAIRS) { /* a prompt: the grouped path's GEMMs, then the activation */
        float *o[2] = {y, NULL};
        return matmul_id_grouped(dev, w, b, 2, x, 1, n, k, ids, oai ? MG_ACT_OAI : MG_ACT_SWIGLU, alpha, limit, o);
    }
    return moe_gemv<true>(d, gate, up, bias_g, bias_u, x, 1, n, k, ids, oai ? MG_ACT_OAI : MG_ACT_SWIGLU, alpha,
                          limit, y);
}
