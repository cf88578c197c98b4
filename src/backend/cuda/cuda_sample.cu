/* Sampling a step's rows on the GPU (sample_rows.h defines the algorithm
 * and holds its C reference): a block of 1024 threads per row, so only
 * token ids cross to the host. The row's cleaned and penalized logits go
 * to scratch once; the best is a block reduction; an untruncated draw
 * walks the vocabulary in id order through a scan of per-thread chunk
 * sums; a truncated one finds the ranked set's boundary by a 4-pass radix
 * select on the logits' order-preserving keys, gathers the set (ties at
 * the boundary by lowest id) into shared memory, sorts it by rank
 * (bitonic), and cuts top-p, min-p and the draw with scans in rank order.
 * Sums are in double, as the host's are. */
#include <math.h>

#include "cuda_common.cuh"
#include "base/mem.h"
#include "sample/sample_math.h"
#include "sample/sample_rows.h"

#define SB 1024 /* threads per row: the sort's width is SAMPLE_ROW_CAP */
static_assert(SB == SAMPLE_ROW_CAP, "one thread per ranked candidate");

struct sample_dev_row {
    float temperature, top_p, min_p;
    int32_t top_k;
    float repeat_penalty, frequency_penalty, presence_penalty;
    uint32_t n_pen, pen_off; /* the row's penalized tokens in the pools */
    double u;
};

/* Block-wide sum and inclusive scan (every thread calls them). */
template <typename V> __device__ __forceinline__ V sb_scan(V v, V *total) {
    __shared__ V warp_tot[SB / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        V n = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += n;
    }
    if (lane == 31) warp_tot[warp] = v;
    __syncthreads();
    if (warp == 0) {
        V w = warp_tot[lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            V n = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += n;
        }
        warp_tot[lane] = w;
    }
    __syncthreads();
    V r = v + (warp ? warp_tot[warp - 1] : (V)0);
    *total = warp_tot[SB / 32 - 1];
    __syncthreads();
    return r;
}
template <typename V> __device__ __forceinline__ V sb_sum(V v) {
    V t;
    sb_scan<V>(v, &t);
    return t;
}

/* Sorts (key desc: rank order; a key here is (logit, id)) SB slots of
 * shared memory in place, bitonic. */
__device__ void sb_sort_rank(float *l, int32_t *id) {
    const int i = threadIdx.x;
    for (int k = 2; k <= SB; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            __syncthreads();
            int p = i ^ j;
            if (p > i) {
                bool up = (i & k) == 0; /* this half ranks best first */
                bool first_better = sample_ranks_before(l[i], id[i], l[p], id[p]);
                if (up != first_better) {
                    float tl = l[i];
                    l[i] = l[p], l[p] = tl;
                    int32_t ti = id[i];
                    id[i] = id[p], id[p] = ti;
                }
            }
        }
    __syncthreads();
}

__global__ void __launch_bounds__(SB) k_sample(const float *logits, size_t ld, uint32_t V,
                                               const sample_dev_row *rows, const int32_t *pen_tok,
                                               const uint32_t *pen_cnt, float *work, int32_t *out) {
    const size_t row = blockIdx.x;
    const sample_dev_row r = rows[row];
    const float *lg = logits + row * ld;
    float *l = work + row * (size_t)V;
    const int tid = threadIdx.x;
    __shared__ float cl[SB];
    __shared__ int32_t ci[SB];
    __shared__ unsigned hist[256];
    __shared__ unsigned s_sel, s_need, s_cnt[2];
    __shared__ int32_t s_pick;

    for (size_t i = tid; i < V; i += SB) l[i] = sample_clean(lg[i]);
    __syncthreads();
    for (uint32_t k = tid; k < r.n_pen; k += SB) {
        int32_t t = pen_tok[r.pen_off + k];
        if (t >= 0 && (uint32_t)t < V)
            l[t] = sample_penalize(l[t], pen_cnt[r.pen_off + k], r.repeat_penalty, r.frequency_penalty,
                                   r.presence_penalty);
    }
    __syncthreads();

    /* the best (lowest id on ties), the live count, the last live id */
    float bm = -INFINITY;
    int32_t bi = -1, last = -1;
    unsigned live = 0;
    for (size_t i = tid; i < V; i += SB) {
        float v = l[i];
        if (v == -INFINITY) continue;
        live++;
        last = (int32_t)i;
        if (bi < 0 || v > bm) bm = v, bi = (int32_t)i;
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, bm, o);
        int32_t i2 = __shfl_xor_sync(0xffffffffu, bi, o);
        if (i2 >= 0 && (bi < 0 || sample_ranks_before(m2, i2, bm, bi))) bm = m2, bi = i2;
        last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
    }
    __shared__ float wm[SB / 32];
    __shared__ int32_t wi[SB / 32], wl[SB / 32];
    if ((tid & 31) == 0) wm[tid >> 5] = bm, wi[tid >> 5] = bi, wl[tid >> 5] = last;
    live = sb_sum<unsigned>(live); /* holds the barrier the table needs */
    bm = -INFINITY, bi = -1, last = -1;
    for (int w = 0; w < SB / 32; w++) {
        if (wi[w] >= 0 && (bi < 0 || sample_ranks_before(wm[w], wi[w], bm, bi))) bm = wm[w], bi = wi[w];
        last = max(last, wl[w]);
    }
    if (!live) {
        if (tid == 0) out[2 * row] = -1, out[2 * row + 1] = SAMPLE_ROW_EMPTY;
        return;
    }
    if (r.temperature <= 0.0f) {
        if (tid == 0) out[2 * row] = bi, out[2 * row + 1] = SAMPLE_ROW_OK;
        return;
    }
    const float T = r.temperature;
    const bool topk = r.top_k > 0 && (unsigned)r.top_k < live;
    if (!topk && r.top_p >= 1.0f && r.min_p <= 0.0f) {
        /* id order: thread t's chunk of ids, chunk sums scanned */
        size_t C = (V + SB - 1) / SB, i0 = (size_t)tid * C, i1 = i0 + C < V ? i0 + C : V;
        double cs = 0.0;
        for (size_t i = i0; i < i1; i++) cs += sample_weight_exp((l[i] - bm) / T);
        double total, pre = sb_scan<double>(cs, &total) - cs;
        double target = r.u * total;
        if (tid == 0) s_pick = last;
        __syncthreads();
        if (cs > 0.0 && pre <= target && target < pre + cs) {
            double cum = pre;
            int32_t pick = -1, lastw = -1;
            for (size_t i = i0; i < i1 && pick < 0; i++) {
                double w = sample_weight_exp((l[i] - bm) / T);
                if (w > 0.0) lastw = (int32_t)i;
                cum += w;
                if (target < cum) pick = (int32_t)i;
            }
            s_pick = pick >= 0 ? pick : lastw; /* rounding: the chunk's last */
        }
        __syncthreads();
        if (tid == 0) out[2 * row] = s_pick, out[2 * row + 1] = SAMPLE_ROW_OK;
        return;
    }

    /* the ranked set's length M */
    const float thr = r.min_p > 0.0f ? bm + logf(r.min_p) : -INFINITY;
    unsigned M;
    if (topk) {
        M = (unsigned)r.top_k;
    } else if (r.top_p < 1.0f) {
        M = live < SB ? live : SB;
    } else {
        unsigned c = 0;
        for (size_t i = tid; i < V; i += SB) c += l[i] >= thr;
        M = sb_sum<unsigned>(c);
    }
    if (M > SB) {
        if (tid == 0) out[2 * row] = -1, out[2 * row + 1] = SAMPLE_ROW_HOST;
        return;
    }
    /* radix select: the key of the M-th ranked logit, 8 bits a pass */
    uint32_t prefix = 0, mask = 0;
    unsigned need = M;
    for (int shift = 24; shift >= 0; shift -= 8) {
        hist[tid & 255] = 0; /* SB >= 256: every bin cleared */
        __syncthreads();
        for (size_t i = tid; i < V; i += SB) {
            uint32_t key = sample_key(l[i]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            unsigned acc = 0;
            int b = 255;
            for (; b > 0 && acc + hist[b] < need; b--) acc += hist[b];
            s_sel = (unsigned)b;
            s_need = need - acc;
        }
        __syncthreads();
        prefix |= s_sel << shift;
        mask |= 255u << shift;
        need = s_need;
        __syncthreads();
    }
    /* gather: keys above the boundary, then the `need` lowest ids at it */
    if (tid < 2) s_cnt[tid] = 0;
    cl[tid] = -INFINITY, ci[tid] = INT32_MAX;
    __shared__ int32_t ties[SB];
    ties[tid] = INT32_MAX;
    __syncthreads();
    for (size_t i = tid; i < V; i += SB) {
        uint32_t key = sample_key(l[i]);
        if (key > prefix) {
            unsigned p = atomicAdd(&s_cnt[0], 1u);
            cl[p] = l[i], ci[p] = (int32_t)i;
        } else if (key == prefix) {
            unsigned p = atomicAdd(&s_cnt[1], 1u);
            if (p < SB) ties[p] = (int32_t)i;
        }
    }
    __syncthreads();
    const unsigned n_gt = s_cnt[0], n_tie = s_cnt[1];
    if (n_tie > SB) { /* more equal logits at the boundary than can be ranked here */
        if (tid == 0) out[2 * row] = -1, out[2 * row + 1] = SAMPLE_ROW_HOST;
        return;
    }
    {
        /* the ties by id: sorted as (equal logits, id) */
        __shared__ float tl[SB];
        tl[tid] = 0.0f;
        sb_sort_rank(tl, ties);
        if ((unsigned)tid < need) cl[n_gt + tid] = l[ties[tid]], ci[n_gt + tid] = ties[tid];
    }
    sb_sort_rank(cl, ci);

    unsigned n = M;
    if (r.top_p < 1.0f && n > 1) {
        double mass;
        if (topk) {
            mass = sb_sum<double>((unsigned)tid < M ? (double)sample_weight_exp(cl[tid] - bm) : 0.0);
        } else {
            double part = 0.0;
            for (size_t i = tid; i < V; i += SB) part += sample_weight_exp(l[i] - bm);
            mass = sb_sum<double>(part);
        }
        double target = (double)r.top_p * mass, tot;
        double cum = sb_scan<double>((unsigned)tid < M ? (double)sample_weight_exp(cl[tid] - bm) : 0.0, &tot);
        unsigned below = sb_sum<unsigned>((unsigned)tid < M && cum < target);
        if (below >= M) {
            if (!topk) { /* the cut lies past the ranked set */
                if (tid == 0) out[2 * row] = -1, out[2 * row + 1] = SAMPLE_ROW_HOST;
                return;
            }
            below = M - 1;
        }
        n = below + 1;
    }
    if (r.min_p > 0.0f && n > 1) n = sb_sum<unsigned>((unsigned)tid < n && cl[tid] >= thr);
    double tot;
    double w = (unsigned)tid < n ? (double)sample_weight_exp((cl[tid] - bm) / T) : 0.0;
    double cum = sb_scan<double>(w, &tot);
    double target = r.u * tot;
    unsigned idx = sb_sum<unsigned>((unsigned)tid < n && cum <= target);
    if (tid == 0) out[2 * row] = ci[idx < n ? idx : n - 1], out[2 * row + 1] = SAMPLE_ROW_OK;
}

cleave_status cuda_op_sample(be_device *dev, const float *logits, size_t ld, size_t n_rows, uint32_t n_vocab,
                             const sample_row *rows, int32_t *tokens, int *outcomes) {
    cuda_device *d = cuda_dev(dev);
    cleave_status st = sample_rows_check(logits, ld, n_rows, n_vocab, rows, tokens, outcomes);
    if (st || !n_rows) return st;
    size_t n_pen = 0;
    for (size_t i = 0; i < n_rows; i++) n_pen += rows[i].n_pen;
    /* one host block, one copy up: rows, then the penalty pools */
    size_t rb = n_rows * sizeof(sample_dev_row), pb = n_pen * 4;
    size_t up = rb + 2 * pb + 16, down = n_rows * 2 * sizeof(int32_t);
    char *h = (char *)mem_alloc(up + down, "sampling staging");
    if (!h) return err_set(CLEAVE_ERR_OOM, "sample: %zu bytes of host staging", up + down);
    sample_dev_row *dr = (sample_dev_row *)h;
    int32_t *pt = (int32_t *)(h + rb);
    uint32_t *pc = (uint32_t *)(h + rb + pb);
    size_t off = 0;
    for (size_t i = 0; i < n_rows; i++) {
        const sample_row *r = &rows[i];
        dr[i] = sample_dev_row{r->temperature, r->top_p, r->min_p, r->top_k, r->repeat_penalty,
                               r->frequency_penalty, r->presence_penalty, r->n_pen, (uint32_t)off, r->u};
        if (r->n_pen) {
            memcpy(pt + off, r->pen_tok, r->n_pen * 4);
            memcpy(pc + off, r->pen_cnt, r->n_pen * 4);
        }
        off += r->n_pen;
    }
    void *scratch;
    size_t work = n_rows * (size_t)n_vocab * sizeof(float);
    st = cuda_scratch(d, CUDA_SCRATCH_SAMPLE, work + up + down, &scratch);
    if (st) {
        free(h);
        return st;
    }
    char *ds = (char *)scratch;
    int32_t *dout = (int32_t *)(ds + work + up);
    cudaError_t e = cudaMemcpyAsync(ds + work, h, up, cudaMemcpyHostToDevice, d->stream);
    if (e == cudaSuccess) {
        k_sample<<<(unsigned)n_rows, SB, 0, d->stream>>>(
            logits, ld, n_vocab, (const sample_dev_row *)(ds + work), (const int32_t *)(ds + work + rb),
            (const uint32_t *)(ds + work + rb + pb), (float *)ds, dout);
        e = cudaGetLastError();
    }
    int32_t *ho = (int32_t *)(h + up);
    if (e == cudaSuccess) e = cudaMemcpyAsync(ho, dout, down, cudaMemcpyDeviceToHost, d->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->stream);
    if (e == cudaSuccess)
        for (size_t i = 0; i < n_rows; i++) tokens[i] = ho[2 * i], outcomes[i] = ho[2 * i + 1];
    free(h);
    return e == cudaSuccess ? CLEAVE_OK : cuda_fail(e, "k_sample", __FILE__, __LINE__);
}
