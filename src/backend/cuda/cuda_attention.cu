/* Causal attention over the KV cache, flash-decoding style: each block owns
 * one (token, query head) and a range of cells; its 4 warps walk cells with
 * an online softmax (running max, running sum, rescaled accumulator), one
 * cell per warp at a time, lanes across the head dimension. When there are
 * too few (token, head) pairs to fill the GPU (decode), the cells are split
 * across blocks and a second kernel merges the partial results. GQA: query
 * head h reads kv head h / (n_head / n_head_kv). */
#include <math.h>

#include "cuda_attention.cuh"
#include "base/options.h"

/* Calls run(cs, k) for the cells of [c0, c1) that a token at position tp
 * of sequence ts sees, those of warp `warp` (c = c0 + warp + k * ATT_WARPS)
 * in increasing order, up to N at a time: cs[0..k) are the next k visible
 * cells (k == N unless fewer remain in the warp's 32-cell window). The
 * lanes read 32 cells' positions and sequences at once and the warp walks
 * only the visible ones: in a batch of several sequences most cells belong
 * to others, and testing them one dependent load at a time made a step of
 * 8 sequences ~6x slower than one. */
template <int N, typename F>
__device__ __forceinline__ void att_visible_runs(const att_args &a, size_t c0, size_t c1, int warp,
                                                 int lane, int32_t tp, int32_t ts, F &&run) {
    for (size_t base = c0 + warp; base < c1; base += (size_t)ATT_WARPS * 32) {
        size_t c = base + (size_t)lane * ATT_WARPS;
        bool vis = false;
        if (c < c1) {
            int32_t cp = a.cell_pos[c];
            vis = a.cell_seq[c] == ts && att_sees(cp, tp, a.window);
        }
        unsigned mask = __ballot_sync(0xffffffffu, vis);
        while (mask) {
            size_t cs[N];
            int k = 0;
#pragma unroll
            for (int i = 0; i < N; i++) { /* cs[i], not cs[k]: registers, not a local array */
                cs[i] = base + (size_t)(__ffs(mask) - 1) * ATT_WARPS;
                if (mask) k = i + 1;
                mask &= mask - 1;
            }
            run(cs, k);
        }
    }
}

/* The same, one cell at a time: body(c). */
template <typename F>
__device__ __forceinline__ void att_visible_cells(const att_args &a, size_t c0, size_t c1, int warp,
                                                  int lane, int32_t tp, int32_t ts, F &&body) {
    att_visible_runs<1>(a, c0, c1, warp, lane, tp, ts,
                        [&](const size_t (&cs)[1], int) { body(cs[0]); });
}

template <int KT, int VT> __global__ void __launch_bounds__(ATT_WARPS * 32) k_attn(att_args a) {
    size_t pair = blockIdx.x, split = blockIdx.y;
    size_t t = pair / a.n_head, h = pair % a.n_head, kvh = h / (a.n_head / a.n_head_kv);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    cuda_pdl_wait();
    cuda_pdl_trigger(); /* the o projection's GEMV may start loading weights */
    float qv[ATT_J], acc[ATT_J];
#pragma unroll
    for (int j = 0; j < ATT_J; j++) {
        size_t dim = lane + 32 * j;
        qv[j] = dim < a.hd ? a.q[t * a.qw + h * a.hd + dim] * a.scale : 0.0f;
        acc[j] = 0.0f;
    }
    int32_t tp = a.tok_pos[t], ts = a.tok_seq[t];
    size_t c0, c1;
    att_cells(a, split, t, &c0, &c1);
    float m = -INFINITY, l = 0.0f;
    size_t base = kvh * a.hd;
    att_visible_cells(a, c0, c1, warp, lane, tp, ts, [&](size_t c) {
        const char *kr = a.k + c * a.row_bytes, *vr = a.v + c * a.v_row_bytes;
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < ATT_J; j++) {
            size_t dim = lane + 32 * j;
            if (dim < a.hd) s += qv[j] * cuda_load<KT>(kr, base + dim);
        }
        s = cuda_warp_sum(s);
        float m_new = fmaxf(m, s), corr = __expf(m - m_new), p = __expf(s - m_new);
        l = l * corr + p;
#pragma unroll
        for (int j = 0; j < ATT_J; j++) {
            size_t dim = lane + 32 * j;
            if (dim < a.hd) acc[j] = acc[j] * corr + p * cuda_load_v<VT>(a.v_type, vr, base + dim);
        }
        m = m_new;
    });
    /* merge the warps */
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS], sacc[ATT_WARPS][ATT_MAX_HD];
    if (lane == 0) sm[warp] = m, sl[warp] = l;
#pragma unroll
    for (int j = 0; j < ATT_J; j++)
        if (lane + 32 * j < a.hd) sacc[warp][lane + 32 * j] = acc[j];
    __syncthreads();
    att_merge_warps(a, sm, sl, &sacc[0][0], ATT_MAX_HD, t, h, split);
}

/* Decode-shaped batches, head size 32 * E: a block owns one (token, kv
 * head, split) and serves all G query heads of the group, so each K and V
 * row is read once per group instead of once per query head; a lane holds
 * E contiguous dimensions, so a row is one coalesced read by the warp.
 * Partial results land in the same [pair][split] layout k_attn uses. */
#define GQA_MAX_G 8
#define ATT_MULTI_CHUNK 256

/* Folds N cells' K and V rows (kv[n][0] and kv[n][1], a lane's E
 * dimensions) into the online softmax of each of the G query heads; the
 * N scores' warp sums are interleaved, so their shuffles overlap. */
template <int E, int N>
__device__ __forceinline__ void gqa_fold(int G, const float (&qv)[GQA_MAX_G][E],
                                         const float (&kv)[N][2][E], float (&acc)[GQA_MAX_G][E],
                                         float (&m)[GQA_MAX_G], float (&l)[GQA_MAX_G]) {
#pragma unroll
    for (int g = 0; g < GQA_MAX_G; g++) {
        if (g >= G) break;
        float s[N];
#pragma unroll
        for (int n = 0; n < N; n++) {
            s[n] = 0.0f;
#pragma unroll
            for (int e = 0; e < E; e++) s[n] += qv[g][e] * kv[n][0][e];
        }
#pragma unroll
        for (int o = 16; o; o >>= 1)
#pragma unroll
            for (int n = 0; n < N; n++) s[n] += __shfl_xor_sync(0xffffffffu, s[n], o);
        float m_new = m[g];
#pragma unroll
        for (int n = 0; n < N; n++) m_new = fmaxf(m_new, s[n]);
        float corr = __expf(m[g] - m_new), p[N];
        l[g] *= corr;
#pragma unroll
        for (int n = 0; n < N; n++) p[n] = __expf(s[n] - m_new), l[g] += p[n];
#pragma unroll
        for (int e = 0; e < E; e++) {
            float v = acc[g][e] * corr;
#pragma unroll
            for (int n = 0; n < N; n++) v += p[n] * kv[n][1][e];
            acc[g][e] = v;
        }
        m[g] = m_new;
    }
}

template <int KT, int VT, int E>
__global__ void __launch_bounds__(ATT_WARPS * 32) k_attn_gqa(att_args a, int G) {
    size_t t = blockIdx.x / a.n_head_kv, kvh = blockIdx.x % a.n_head_kv, split = blockIdx.y;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    cuda_pdl_wait();
    cuda_pdl_trigger(); /* the o projection's GEMV may start loading weights */
    const size_t hd = 32 * E, d0 = (size_t)lane * E;
    float qv[GQA_MAX_G][E], acc[GQA_MAX_G][E], m[GQA_MAX_G], l[GQA_MAX_G];
#pragma unroll
    for (int g = 0; g < GQA_MAX_G; g++) {
        size_t h = kvh * G + g;
#pragma unroll
        for (int e = 0; e < E; e++) {
            qv[g][e] = g < G ? a.q[t * a.qw + h * hd + d0 + e] * a.scale : 0.0f;
            acc[g][e] = 0.0f;
        }
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    int32_t tp = a.tok_pos[t], ts = a.tok_seq[t];
    size_t c0, c1;
    att_cells(a, split, t, &c0, &c1);
    size_t base = kvh * hd + d0;
    /* a lane's E dimensions lie in one 32-block: its scale read once
     * (H200, 8B Q4_K_M tg128 at depth 8192: q8_0 cache 194 -> 244 tok/s).
     * A V of another type than K keeps element loads: reading K this way
     * there and V element by element ran 152 against 199. */
    auto load = [&](size_t c, float (&kk)[E], float (&vv)[E]) {
        const char *kr = a.k + c * a.row_bytes, *vr = a.v + c * a.v_row_bytes;
        if constexpr (VT == CUDA_KV_ANY) {
#pragma unroll
            for (int e = 0; e < E; e++) {
                kk[e] = cuda_load<KT>(kr, base + e);
                vv[e] = cuda_load_kv(a.v_type, vr, base + e);
            }
        } else {
            cuda_loadn<KT, E>(kr, base, kk);
            cuda_loadn<VT, E>(vr, base, vv);
        }
    };
    /* Two cells at a time where there are two: their rows are loaded
     * before either is used, so a warp has twice the bytes in flight. H200, 8B
     * Q4_K_M, batched decode of 32 sequences at ~600 cells: one cell
     * 2471-2488 tok/s, two 2723-2743 (8 sequences 1275-1285 -> 1364-1365),
     * one run. Four, in a later run against two: 32 sequences 2932-2934
     * against 2870-2876, but 8 sequences 1425-1428 against 1435-1440 and one
     * sequence at depth 8192 274 against 317 tok/s (its registers, 154
     * against 127, leave fewer blocks a multiprocessor): two. With element
     * loads (VT == CUDA_KV_ANY) two spilled registers, so those take one
     * cell at a time. */
    auto one = [&](size_t c) {
        float kv[1][2][E];
        load(c, kv[0][0], kv[0][1]);
        gqa_fold<E, 1>(G, qv, kv, acc, m, l);
    };
    constexpr int W = VT == CUDA_KV_ANY ? 1 : 2;
    att_visible_runs<W>(a, c0, c1, warp, lane, tp, ts, [&](const size_t (&cs)[W], int k) {
        if (k == W) {
            float kv[W][2][E];
#pragma unroll
            for (int i = 0; i < W; i++) load(cs[i], kv[i][0], kv[i][1]);
            gqa_fold<E, W>(G, qv, kv, acc, m, l);
        } else {
            for (int i = 0; i < k; i++) one(cs[i]);
        }
    });
    /* merge the warps, one query head at a time */
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS], sacc[ATT_WARPS][32 * E];
#pragma unroll
    for (int g = 0; g < GQA_MAX_G; g++) {
        if (g >= G) break;
        __syncthreads();
        if (lane == 0) sm[warp] = m[g], sl[warp] = l[g];
#pragma unroll
        for (int e = 0; e < E; e++) sacc[warp][d0 + e] = acc[g][e];
        __syncthreads();
        att_merge_warps(a, sm, sl, &sacc[0][0], 32 * E, t, kvh * G + g, split);
    }
}

/* Merges the splits of each (token, head) pair (with a live count, only
 * the splits that held cells), a block per pair: each warp takes every
 * ATT_WARPS-th split and its lanes pairs of dimensions, so the loads of
 * many splits are in flight at once (a thread per dimension walking all
 * splits in turn was one long chain of dependent loads: at 4k cells, 132
 * splits, most of a tensor-split step's attention time); the warps' rows
 * then meet in shared memory. Rows are hd + 2 floats apart: 8-byte
 * aligned, so float2 loads. */
__global__ void __launch_bounds__(ATT_WARPS * 32)
    k_attn_merge(const float *part, size_t n_split, size_t hd, size_t n_head, size_t qw, float *out,
                 const int32_t *n_kv_live, const float *sinks) {
    __shared__ float sacc[ATT_WARPS][ATT_MAX_HD], sl[ATT_WARPS], s_max[ATT_WARPS];
    size_t pair = blockIdx.x, t = pair / n_head, h = pair % n_head;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    cuda_pdl_wait();
    cuda_pdl_trigger(); /* the o projection's GEMV may start loading weights */
    const float *p = part + pair * n_split * (hd + 2);
    if (n_kv_live) {
        size_t live = (size_t)*n_kv_live, chunk = att_live_chunk(live, n_split);
        size_t used = (live + chunk - 1) / chunk;
        n_split = used < n_split ? used : n_split;
    }
    float M = -INFINITY;
    for (size_t s = threadIdx.x; s < n_split; s += blockDim.x) M = fmaxf(M, p[s * (hd + 2) + hd]);
    M = cuda_warp_max(M);
    if (lane == 0) s_max[warp] = M;
    __syncthreads();
    for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, s_max[w]);
    constexpr int J = ATT_MAX_HD / 64; /* float2s per lane */
    float2 acc[J];
#pragma unroll
    for (int j = 0; j < J; j++) acc[j] = make_float2(0.0f, 0.0f);
    float l = 0.0f;
#pragma unroll 4
    for (size_t s = warp; s < n_split; s += ATT_WARPS) {
        const float *r = p + s * (hd + 2);
        float ms = r[hd];
        float wgt = ms == -INFINITY ? 0.0f : __expf(ms - M);
        l += wgt * r[hd + 1];
#pragma unroll
        for (int j = 0; j < J; j++) {
            size_t dim = 2 * (size_t)lane + 64 * j;
            if (dim < hd) {
                float2 v = *(const float2 *)(r + dim);
                acc[j].x += wgt * v.x, acc[j].y += wgt * v.y;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < J; j++) {
        size_t dim = 2 * (size_t)lane + 64 * j;
        if (dim < hd) sacc[warp][dim] = acc[j].x, sacc[warp][dim + 1] = acc[j].y;
    }
    if (lane == 0) sl[warp] = l;
    __syncthreads();
    float L = 0.0f;
    for (int w = 0; w < ATT_WARPS; w++) L += sl[w];
    for (size_t dim = threadIdx.x; dim < hd; dim += blockDim.x) {
        float v = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) v += sacc[w][dim];
        out[t * qw + h * hd + dim] = L > 0.0f ? v / att_denom(sinks, h, M, L) : 0.0f;
    }
}


/* ---- prefill: tiles of queries against tiles of cells ------------------ */

/* A block takes 32 query rows that share one kv head: (token, head) pairs
 * of TILE_Q / group tokens by the group's query heads, so each K/V tile
 * loaded into shared memory serves every head of the group. Cells come in
 * tiles of 32, one per lane: a lane scores its cell against a row, the warp
 * updates that row's online softmax, then lanes switch to owning output
 * dimensions for the P.V step. Tiles whose cells all lie after every query
 * position of the block (the causal upper triangle) are skipped. */
#define TILE_Q 32
#define TILE_K 32
#define TILE_MAX_HD 128
#define ROWS_PER_WARP (TILE_Q / ATT_WARPS)

template <int KT, int VT>
__global__ void __launch_bounds__(ATT_WARPS * 32, 2) k_attn_tiled(att_args a, size_t group, size_t n_tokens) {
    extern __shared__ float smem[];
    /* rows padded by 4 floats: 16-byte aligned for float4 reads, and lane k's
     * row starts 4 banks after lane k-1's, so a quarter-warp's float4 reads
     * of one column never share a bank */
    const size_t hd = a.hd, ld = hd + 4;
    float *qs = smem;                      /* [TILE_Q][hd] */
    float *ks = qs + TILE_Q * hd;          /* [TILE_K][ld] */
    float *vs = ks + TILE_K * ld;          /* [TILE_K][ld] */
    __shared__ int32_t cpos[TILE_K], cseq[TILE_K];
    __shared__ int32_t max_pos;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    size_t kvh = blockIdx.y, tok_per_block = TILE_Q / group, t0 = blockIdx.x * tok_per_block;

    /* queries of this block, pre-scaled */
    if (threadIdx.x == 0) max_pos = -1;
    __syncthreads();
    for (size_t i = threadIdx.x; i < TILE_Q * hd; i += blockDim.x) {
        size_t r = i / hd, dim = i % hd, t = t0 + r / group, h = kvh * group + r % group;
        qs[i] = t < n_tokens && r / group < tok_per_block ? a.q[t * a.qw + h * hd + dim] * a.scale : 0.0f;
    }
    for (size_t r = threadIdx.x; r < tok_per_block; r += blockDim.x)
        if (t0 + r < n_tokens) atomicMax(&max_pos, a.tok_pos[t0 + r]);

    float m[ROWS_PER_WARP], l[ROWS_PER_WARP], acc[ROWS_PER_WARP][TILE_MAX_HD / 32];
    int32_t rpos[ROWS_PER_WARP], rseq[ROWS_PER_WARP];
#pragma unroll
    for (int i = 0; i < ROWS_PER_WARP; i++) {
        size_t r = warp * ROWS_PER_WARP + i, t = t0 + r / group;
        bool valid = t < n_tokens && r / group < tok_per_block;
        rpos[i] = valid ? a.tok_pos[t] : -1;
        rseq[i] = valid ? a.tok_seq[t] : -1;
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < TILE_MAX_HD / 32; j++) acc[i][j] = 0.0f;
    }
    size_t base = kvh * hd;
    for (size_t c0 = 0; c0 < a.n_kv; c0 += TILE_K) {
        __syncthreads(); /* previous tile fully consumed */
        if (threadIdx.x < TILE_K) {
            size_t c = c0 + threadIdx.x;
            cpos[threadIdx.x] = c < a.n_kv ? a.cell_pos[c] : -1;
            cseq[threadIdx.x] = c < a.n_kv ? a.cell_seq[c] : -1;
        }
        __syncthreads();
        /* skip a tile no query of the block can see */
        bool any = false;
        for (int k = 0; k < TILE_K; k++) any |= cpos[k] >= 0 && cpos[k] <= max_pos;
        if (!any) continue;
        for (size_t i = threadIdx.x; i < TILE_K * hd; i += blockDim.x) {
            size_t k = i / hd, dim = i % hd, c = c0 + k;
            bool in = c < a.n_kv;
            ks[k * ld + dim] = in ? cuda_load<KT>(a.k + c * a.row_bytes, base + dim) : 0.0f;
            vs[k * ld + dim] = in ? cuda_load_v<VT>(a.v_type, a.v + c * a.v_row_bytes, base + dim) : 0.0f;
        }
        __syncthreads();
        int32_t my_pos = cpos[lane], my_seq = cseq[lane];
#pragma unroll
        for (int i = 0; i < ROWS_PER_WARP; i++) {
            const float *q = qs + (warp * ROWS_PER_WARP + i) * hd;
            bool vis = my_pos >= 0 && my_seq == rseq[i] && my_pos <= rpos[i];
            float s = -INFINITY;
            if (vis) {
                /* four independent chains: a single one is latency-bound */
                const float4 *q4 = (const float4 *)q, *k4 = (const float4 *)(ks + lane * ld);
                float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
#pragma unroll 8
                for (size_t i4 = 0; i4 < hd / 4; i4++) {
                    float4 qa = q4[i4], ka = k4[i4];
                    d0 += qa.x * ka.x;
                    d1 += qa.y * ka.y;
                    d2 += qa.z * ka.z;
                    d3 += qa.w * ka.w;
                }
                s = (d0 + d1) + (d2 + d3);
            }
            float tile_max = cuda_warp_max(s);
            /* a row that sees nothing in this tile keeps its state (m_new = m) */
            float m_new = fmaxf(m[i], tile_max);
            float corr = m_new == -INFINITY ? 1.0f : __expf(m[i] - m_new);
            float p = vis ? __expf(s - m_new) : 0.0f;
            l[i] = l[i] * corr + cuda_warp_sum(p);
#pragma unroll
            for (int j = 0; j < TILE_MAX_HD / 32; j++) acc[i][j] *= corr;
#pragma unroll 8
            for (int k = 0; k < TILE_K; k++) {
                float pk = __shfl_sync(0xffffffffu, p, k);
#pragma unroll
                for (int j = 0; j < TILE_MAX_HD / 32; j++) {
                    size_t dim = lane + 32 * j;
                    if (dim < hd) acc[i][j] += pk * vs[k * ld + dim];
                }
            }
            m[i] = m_new;
        }
    }
#pragma unroll
    for (int i = 0; i < ROWS_PER_WARP; i++) {
        size_t r = warp * ROWS_PER_WARP + i, t = t0 + r / group, h = kvh * group + r % group;
        if (t >= n_tokens || r / group >= tok_per_block) continue;
#pragma unroll
        for (int j = 0; j < TILE_MAX_HD / 32; j++) {
            size_t dim = lane + 32 * j;
            if (dim < hd) a.out[t * a.qw + h * hd + dim] = l[i] > 0.0f ? acc[i][j] / l[i] : 0.0f;
        }
    }
}

template <int KT, int VT> static cleave_status launch_tiled(cuda_device *d, const att_args &a, size_t group,
                                                    size_t n_tokens) {
    size_t smem = (TILE_Q * a.hd + 2 * TILE_K * (a.hd + 4)) * sizeof(float);
    static size_t raised[CUDA_MAX_ORDINALS]; /* per instantiation and GPU */
    CUDA_TRY(cuda_allow_smem(d, (const void *)k_attn_tiled<KT, VT>,
                             (TILE_Q * TILE_MAX_HD + 2 * TILE_K * (TILE_MAX_HD + 4)) * sizeof(float),
                             raised));
    size_t tok_per_block = TILE_Q / group;
    dim3 grid((unsigned)((n_tokens + tok_per_block - 1) / tok_per_block), (unsigned)a.n_head_kv);
    k_attn_tiled<KT, VT><<<grid, ATT_WARPS * 32, smem, d->stream>>>(a, group, n_tokens);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}

/* The decode kernel for a batch k_attn_gqa could take: CLEAVE_DECODE_ATTN
 * picks one where it applies; else the tensor-core kernel where it
 * applies (8B bf16 on an H200, tensor cores / 16-byte / 8-byte: one token
 * over 4k cells 18.2 / 26.8 / 24.2 us, over 32k 44.0 / 82.8 / 95.9, 32
 * sequences of ~576 cells in regions 27.7 / 54.6 / 59.6), then the
 * 16-byte one where it measured faster than the 8-byte one (long caches,
 * many sequences). */
enum dec_kernel { DEC_GQA, DEC_VEC, DEC_MMA };
static dec_kernel decode_kernel(const be_attn *x) {
    bool mma = cuda_attn_decmma_eligible(x), vec = cuda_attn_vec_eligible(x);
    switch (options_get()->decode_attn) {
    case OPTIONS_ATTN_MMA:
        if (mma) return DEC_MMA;
        break;
    case OPTIONS_ATTN_VEC:
        if (vec) return DEC_VEC;
        break;
    case OPTIONS_ATTN_GQA: return DEC_GQA;
    default: break;
    }
    if (mma) return DEC_MMA;
    if (vec && (x->tok_win ? x->n_tokens >= 16 : x->n_kv >= 8192)) return DEC_VEC;
    return DEC_GQA;
}

cleave_status cuda_op_attention(be_device *dev, const be_attn *x) {
    cuda_device *d = cuda_dev(dev);
    size_t pairs = x->n_tokens * x->n_head;
    if (!pairs) return CLEAVE_OK;
    if (x->head_dim > ATT_MAX_HD || x->n_head % x->n_head_kv)
        return err_set(CLEAVE_ERR_UNSUPPORTED, "attention: head size %zu (at most %d), heads %zu/%zu",
                       x->head_dim, ATT_MAX_HD, x->n_head, x->n_head_kv);
    size_t width = x->n_head_kv * x->head_dim;
    if (!cuda_kv_type(x->kv_type) || !cuda_kv_type(x->v_type))
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "attention: a %s K / %s V cache; the CUDA kernels read f32, f16, bf16, q8_0, "
                       "q5_0 and q4_0 caches",
                       cleave_type_name(x->kv_type), cleave_type_name(x->v_type));
    size_t row_bytes = quant_row_bytes(x->kv_type, width), v_row_bytes = quant_row_bytes(x->v_type, width);
    if (!row_bytes || !v_row_bytes)
        return err_set(CLEAVE_ERR_INVALID_ARG, "attention: %zu kv heads of %zu are no whole %s/%s blocks",
                       x->n_head_kv, x->head_dim, cleave_type_name(x->kv_type), cleave_type_name(x->v_type));
    att_args a = {x->q, (const char *)x->k, (const char *)x->v, row_bytes, x->n_kv, x->n_head,
                  x->n_head_kv, x->head_dim, x->n_head * x->head_dim, x->tok_pos, x->tok_seq,
                  x->cell_pos, x->cell_seq, x->scale, 1, x->n_kv ? x->n_kv : 1, x->n_kv_live,
                  x->out, NULL, x->tok_win, v_row_bytes, (int)x->kv_type, (int)x->v_type,
                  (int32_t)x->window, x->sinks};
    if (x->window > INT32_MAX) return err_set(CLEAVE_ERR_INVALID_ARG, "attention: window of %u", x->window);
    /* sliding windows and sinks (gpt-oss): the kernels below that take
     * them (mma.sync prefill, the decode kernels); not the Hopper wgmma
     * prefill nor the scalar tiles */
    bool plain = !x->window && !x->sinks;
    /* Prefill-sized batches: query tiles share each K/V tile; on Hopper's
     * warpgroup MMAs where cuda_attn_wg_eligible says so (f16 and bf16,
     * head size 128), else on mma.sync where cuda_attn_mma_eligible does
     * (f16, bf16 and the 32-block caches). Not a decode step of many sequences (16 runs of
     * one token): a tile of tokens of different
     * sequences scans every cell, one block per kv head, where the split
     * kernel below spreads the cells over the GPU (8B bf16 on an H200,
     * 16 sequences of 512 + 128 tokens: decode 914 -> 1590 tok/s) */
    bool tiles_pay = !x->n_seq_runs || x->n_tokens >= 16 * x->n_seq_runs;
    if (plain && tiles_pay && cuda_attn_wg_eligible(d, x)) return cuda_attn_wg(d, a, x->n_tokens, x->kv_type);
    if (tiles_pay && cuda_attn_mma_eligible(x)) return cuda_attn_mma(d, a, x->n_tokens, x->kv_type, x->v_type);
    size_t group = x->n_head / x->n_head_kv;
    if (plain && tiles_pay && x->n_tokens >= 16 && !x->n_kv_live && x->head_dim <= TILE_MAX_HD &&
        x->head_dim % 4 == 0 && group <= TILE_Q && TILE_Q % group == 0) {
        cleave_status st = CLEAVE_OK;
        cuda_dispatch_kv(x->kv_type, x->v_type,
                         [&]<int KT, int VT>() { st = launch_tiled<KT, VT>(d, a, group, x->n_tokens); });
        return st;
    }
    size_t hd = x->head_dim;
    bool gqa = group <= GQA_MAX_G && hd % 32 == 0 && (hd == 32 || hd == 64 || hd == 128 || hd == 256);
    /* Enough blocks for ~4 per multiprocessor; each split keeps >= 32
     * cells (a decode step over 128 cells in 8 unsplit blocks was one
     * dependent chain of 32 cells per warp, ~5 us a layer). */
    size_t want = (size_t)d->n_sm * 4, blocks = gqa ? x->n_tokens * x->n_head_kv : pairs;
    /* several tokens in one pool of cells: also at most ATT_MULTI_CHUNK
     * cells a block, since their sequences' cells are often a fraction of
     * the cache, crowded into a few splits (8 sequences of 2k tokens
     * each: one split in 9 did all of a token's work). Not with cell
     * windows: there the splits share out each token's own window
     * (att_cells), and splitting by the whole cache gave a window of a
     * few hundred cells 84 splits of 32 cells or none (8B Q4_K_M on an
     * H200, 32 sequences of ~540 cells, a region each in 21504: 178 us a
     * layer and 19 us of merging its 84 partials; by window, a decode
     * step 16.6 -> 13.3 ms, 1913 -> 2341 tok/s) */
    size_t min_split =
        x->n_tokens > 1 && !x->tok_win ? (x->n_kv + ATT_MULTI_CHUNK - 1) / ATT_MULTI_CHUNK : 1;
    if ((blocks < want || min_split > 1) && x->n_kv > 64) {
        /* splits of equal work: rounding the count up starts a second,
         * mostly idle wave (32 sequences: 768 blocks on 528 slots), so
         * round down unless that leaves a quarter of the slots empty */
        size_t split = want / blocks, max_split = (x->n_kv + 31) / 32;
        if (!split || blocks * split * 4 < want * 3) split = (want + blocks - 1) / blocks;
        if (split < min_split) split = min_split;
        a.n_split = split < max_split ? split : max_split;
        a.chunk = (x->n_kv + a.n_split - 1) / a.n_split;
        /* recorded steps: room for the most splits any cache size takes,
         * so graphs recorded for longer caches seldom regrow (and move,
         * making stale) the partials that earlier graphs point at */
        size_t room = x->n_kv_live && split > a.n_split ? split : a.n_split;
        void *part;
        cleave_status st = cuda_scratch(d, CUDA_SCRATCH_ATTN, pairs * room * (x->head_dim + 2) * 4, &part);
        if (st) return st;
        a.part = (float *)part;
    }
    dim3 grid(gqa ? (unsigned)(x->n_tokens * x->n_head_kv) : (unsigned)pairs, (unsigned)a.n_split);
    cudaError_t e = cudaSuccess;
    unsigned threads = ATT_WARPS * 32;
    dec_kernel k = gqa ? decode_kernel(x) : DEC_GQA;
    if (k == DEC_MMA) e = cuda_attn_decmma(d, a, grid, (int)group);
    else if (k == DEC_VEC) e = cuda_attn_vec(d, a, grid, (int)group);
    else cuda_dispatch_kv(x->kv_type, x->v_type, [&]<int KT, int VT>() {
        if (!gqa)
            e = cuda_launch(d, k_attn<KT, VT>, grid, dim3(threads), 0, a);
        else if (hd == 32)
            e = cuda_launch(d, k_attn_gqa<KT, VT, 1>, grid, dim3(threads), 0, a, (int)group);
        else if (hd == 64)
            e = cuda_launch(d, k_attn_gqa<KT, VT, 2>, grid, dim3(threads), 0, a, (int)group);
        else if (hd == 128)
            e = cuda_launch(d, k_attn_gqa<KT, VT, 4>, grid, dim3(threads), 0, a, (int)group);
        else
            e = cuda_launch(d, k_attn_gqa<KT, VT, 8>, grid, dim3(threads), 0, a, (int)group);
    });
    if (e != cudaSuccess) return cuda_fail(e, "attention kernel", __FILE__, __LINE__);
    if (a.n_split > 1)
        CUDA_LAUNCH(d, k_attn_merge, (unsigned)pairs, 128, 0, (const float *)a.part, a.n_split,
                    x->head_dim, x->n_head, a.qw, x->out, x->n_kv_live, x->sinks);
    return CLEAVE_OK;
}
