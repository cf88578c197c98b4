/* Which matrices the batched GEMM of the block types (cuda_mmq.cuh) takes,
 * x's int8 quantization for it, the K split and its fixed-order sum. */
#include "cuda_mmq.cuh"

#define MQ_TASKS_PER_SLOT 4
#define MQ_MIN_SPLIT 2 /* chunks of 256 weights per K-split range, at least */

const mq_ops *mq_ops_of(cleave_type t) {
    switch (t) {
    case CLEAVE_TYPE_Q4_0: return &mq_ops_q4_0;
    case CLEAVE_TYPE_Q4_1: return &mq_ops_q4_1;
    case CLEAVE_TYPE_Q5_0: return &mq_ops_q5_0;
    case CLEAVE_TYPE_Q5_1: return &mq_ops_q5_1;
    case CLEAVE_TYPE_IQ4_NL: return &mq_ops_iq4_nl;
    case CLEAVE_TYPE_MXFP4: return &mq_ops_mxfp4;
    case CLEAVE_TYPE_Q2_K: return &mq_ops_q2_k;
    case CLEAVE_TYPE_Q3_K: return &mq_ops_q3_k;
    case CLEAVE_TYPE_Q4_K: return &mq_ops_q4_k;
    case CLEAVE_TYPE_Q5_K: return &mq_ops_q5_k;
    case CLEAVE_TYPE_Q6_K: return &mq_ops_q6_k;
    case CLEAVE_TYPE_IQ4_XS: return &mq_ops_iq4_xs;
    default: return NULL;
    }
}

bool cuda_mmq_has_type(cleave_type t) { return mq_ops_of(t) != NULL; }

/* x to int8, one scale per 32 (a warp per 32 values of a row), with
 * {scale, scale x sum of the group's quants} per group of G (xm, float2
 * [groups][rows]). Row i is x's row i (pair NULL; zeros from n on) or
 * x's row pair[i] / x_div (zeros where pair[i] < 0): an expert's rows
 * grouped. */
template <int G>
__global__ void k_mmq_x(const float *x, size_t n, size_t rows, size_t ne0, const int32_t *pair, int x_div,
                        int8_t *xq, float2 *xm) {
    cuda_pdl_trigger();
    cuda_pdl_wait(); /* x (and the grouping) are earlier kernels' output */
    const size_t warps = rows * (ne0 / 32);
    const int lane = threadIdx.x & 31;
    for (size_t wi = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; wi < warps;
         wi += (size_t)gridDim.x * (blockDim.x / 32)) {
        const size_t tok = wi / (ne0 / 32), k = wi % (ne0 / 32);
        const long src = pair ? (pair[tok] < 0 ? -1 : (long)(pair[tok] / x_div)) : tok < n ? (long)tok : -1;
        float v = src >= 0 ? x[(size_t)src * ne0 + 32 * k + lane] : 0.0f, amax = fabsf(v);
#pragma unroll
        for (int o = 16; o; o >>= 1)
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float d = amax / 127.0f;
        const int q = amax > 0.0f ? __float2int_rn(v * (127.0f / amax)) : 0;
        xq[tok * ne0 + 32 * k + lane] = (int8_t)q;
        int s = q;
#pragma unroll
        for (int o = 1; o < G; o <<= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane % G == 0) xm[(32 / G * k + (size_t)lane / G) * rows + tok] = make_float2(d, d * (float)s);
    }
}

/* y = the splits' partial sums, added in split order, + bias; the
 * partials of all segments' rows side by side ([splits][n][all rows]) */
__global__ void k_mmq_sum(mq_job j) {
    cuda_pdl_trigger();
    cuda_pdl_wait(); /* the partials are the previous kernel's output */
    const size_t all = j.row0[j.n_seg], count = j.n * all;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < j.splits; s++)
            v += j.part[(size_t)s * count + i];
        const size_t tok = i / all, r = i - tok * all;
        int s = 0;
#pragma unroll
        for (int k = 1; k < MQ_MAX_SEG; k++)
            if (k < j.n_seg && r >= j.row0[k]) s = k;
        const size_t row = r - j.row0[s];
        j.y[s][tok * j.rows[s] + row] = v + (j.bias[s] ? j.bias[s][row] : 0.0f);
    }
}

/* y = silu(gate) * up of the K split's partial sums (segments 0 and 1,
 * of equal rows), added in split order as k_mmq_sum does: the FFN's
 * intermediate is written once. */
__global__ void k_mmq_sum_swiglu(mq_job j, float *y) {
    cuda_pdl_trigger();
    cuda_pdl_wait();
    const size_t all = j.row0[j.n_seg], ff = j.rows[0], count = j.n * ff;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t tok = i / ff, r = i - tok * ff;
        float g = 0.0f, u = 0.0f;
        for (int s = 0; s < j.splits; s++) {
            const float *p = j.part + ((size_t)s * j.n + tok) * all + r;
            g += p[0];
            u += p[ff];
        }
        y[i] = cuda_swiglu(g, u);
    }
}

bool mq_layout(const be_mat *const *w, const float *const *bias, float *const *y, int count, mq_job &j,
               const mq_ops *&ops) {
    if (count < 1 || count > MQ_MAX_SEG) return false;
    ops = mq_ops_of(w[0]->type);
    size_t ne0 = w[0]->ne0, nb1 = w[0]->nb1;
    if (!ops || !ne0 || ne0 % (size_t)ops->qk || nb1 % (size_t)ops->align ||
        nb1 < quant_row_bytes(w[0]->type, ne0))
        return false;
    j = mq_job{};
    j.n_seg = count;
    for (int s = 0; s < count; s++) {
        if (w[s]->type != w[0]->type || w[s]->ne0 != ne0 || w[s]->nb1 != nb1 || w[s]->scales ||
            !w[s]->ne1 || (uintptr_t)w[s]->data % (uintptr_t)ops->align)
            return false;
        j.w[s] = (const uint8_t *)w[s]->data;
        j.rows[s] = w[s]->ne1;
        j.y[s] = y[s];
        j.bias[s] = bias ? bias[s] : NULL;
        j.tile0[s + 1] = j.tile0[s] + mq_row_tiles(w[s]->ne1);
        j.row0[s + 1] = j.row0[s] + w[s]->ne1;
    }
    j.nb1 = nb1, j.ne0 = ne0;
    /* rows of 256s, or of whole blocks ending in a short chunk (MXFP4's
     * 2880) */
    j.chunks = (ne0 + 255) / 256;
    j.tail = (int)(ne0 % 256 / (size_t)ops->qk);
    return true;
}

cleave_status mq_x_scratch(cuda_device *d, const mq_ops *ops, size_t rows, mq_job &j) {
    /* slack: a short last chunk reads x and its groups' factors as far as
     * a whole chunk's */
    const size_t ne0 = j.ne0, groups = j.chunks * 256 / (size_t)ops->group;
    const size_t xq_bytes = (rows * ne0 + 256 + 255) & ~(size_t)255;
    const size_t xm_bytes = (groups * rows + 2) * sizeof(float2);
    void *xs;
    cleave_status st = cuda_scratch(d, CUDA_SCRATCH_X, xq_bytes + xm_bytes, &xs);
    if (st) return st;
    j.xq = (const int8_t *)xs;
    j.xm = (const float2 *)((char *)xs + xq_bytes);
    j.xm_ld = rows;
    return CLEAVE_OK;
}

/* The job for `count` matrices (layouts checked, scratch taken, K split
 * chosen): false where cuda_mmq does not take them. */
static bool mq_plan(cuda_device *d, const be_mat *const *w, const float *const *bias, float *const *y,
                    int count, size_t n, mq_job &j, const mq_ops *&ops, cleave_status *st) {
    if (!n || n > CUDA_MMQ_MAX_N || !mq_layout(w, bias, y, count, j, ops)) return false;
    size_t n_pad = (n + MQ_TILE_N - 1) / MQ_TILE_N * MQ_TILE_N;
    if ((*st = mq_x_scratch(d, ops, n_pad, j))) return true;
    j.n = n, j.n_pad = n_pad;
    /* about MQ_TASKS_PER_SLOT tasks for each block that runs at once:
     * split a row's chunks when row tiles alone are fewer, down to ranges
     * of MQ_MIN_SPLIT chunks. On an H200 (8B Q4_K_M, 14336 x 4096 at 32
     * tokens) the GEMM alone took 44.8 us in 896 tasks of 2 chunks and
     * 50.3 us in one wave of 336 tasks of 6 (two builds, the second also
     * launching as a programmatic dependent); but each split writes and
     * re-reads a partial result, and in batched decode of 32 sequences the
     * one-wave build ran 1.175x the previous build (2045 tok/s) where this
     * rule runs 1.077x (1924), in separate runs. Side by side in one run
     * later (a build that also ran gate and up in one launch), 32
     * sequences: this rule 1881 and 1886, one wave 1908 and 1904, one wave
     * rounded up 1917 and 1917, no split 916 tok/s: within 2%, so the rule
     * the published figures ran with stays. */
    size_t tiles = j.tile0[count], want = (size_t)d->n_sm * MQ_BLOCKS_PER_SM * MQ_TASKS_PER_SLOT;
    size_t max_splits = j.chunks / MQ_MIN_SPLIT ? j.chunks / MQ_MIN_SPLIT : 1;
    size_t splits = (want + tiles - 1) / tiles;
    if (splits > max_splits) splits = max_splits;
    if (splits < 1) splits = 1;
    j.per_split = (j.chunks + splits - 1) / splits;
    j.splits = (int)((j.chunks + j.per_split - 1) / j.per_split);
    if (j.splits > 1) {
        void *ps;
        if ((*st = cuda_scratch(d, CUDA_SCRATCH_W, (size_t)j.splits * n * j.row0[count] * sizeof(float), &ps)))
            return true;
        j.part = (float *)ps;
    }
    return true;
}

cudaError_t mq_run_job(cuda_device *d, const mq_ops *ops, const mq_job &j, const float *x, const int32_t *pair,
                       int x_div) {
    const size_t rows = j.xm_ld, xwarps = rows * (j.ne0 / 32);
    unsigned xblocks = (unsigned)((xwarps + 7) / 8);
    int8_t *xq = (int8_t *)j.xq;
    float2 *xm = (float2 *)j.xm;
    cudaError_t e = ops->group == 16 ? cuda_launch(d, k_mmq_x<16>, dim3(xblocks), dim3(256), 0, x, j.n, rows, j.ne0,
                                                   pair, x_div, xq, xm)
                                     : cuda_launch(d, k_mmq_x<32>, dim3(xblocks), dim3(256), 0, x, j.n, rows, j.ne0,
                                                   pair, x_div, xq, xm);
    return e == cudaSuccess ? ops->launch(d, j) : e;
}

bool cuda_mmq(cuda_device *d, const be_mat *const *w, const float *const *bias, float *const *y,
              int count, const float *x, size_t n, cleave_status *st) {
    mq_job j;
    const mq_ops *ops;
    if (!mq_plan(d, w, bias, y, count, n, j, ops, st)) return false;
    if (*st) return true;
    cudaError_t e = mq_run_job(d, ops, j, x, NULL, 1);
    if (e == cudaSuccess && j.splits > 1)
        e = cuda_launch(d, k_mmq_sum, dim3(cuda_blocks(n * j.row0[count], 256)), dim3(256), 0, j);
    *st = e == cudaSuccess ? CLEAVE_OK : cuda_fail(e, "k_mmq", __FILE__, __LINE__);
    return true;
}

bool cuda_mmq_swiglu(cuda_device *d, const be_mat *gate, const be_mat *up, const float *x, size_t n,
                     float *y, cleave_status *st) {
    if (gate->ne1 != up->ne1 || !n || n > CUDA_MMQ_MAX_N) return false;
    void *us; /* up's rows where the K split is not taken */
    const size_t ff = gate->ne1;
    if ((*st = cuda_scratch(d, CUDA_SCRATCH_FFN, n * ff * sizeof(float), &us))) return true;
    const be_mat *w[2] = {gate, up};
    float *ys[2] = {y, (float *)us};
    mq_job j;
    const mq_ops *ops;
    if (!mq_plan(d, w, NULL, ys, 2, n, j, ops, st)) return false;
    if (*st) return true;
    cudaError_t e = mq_run_job(d, ops, j, x, NULL, 1);
    if (e == cudaSuccess && j.splits > 1)
        e = cuda_launch(d, k_mmq_sum_swiglu, dim3(cuda_blocks(n * ff, 256)), dim3(256), 0, j, y);
    *st = e == cudaSuccess ? CLEAVE_OK : cuda_fail(e, "k_mmq", __FILE__, __LINE__);
    if (!*st && j.splits == 1) *st = cuda_op_swiglu(&d->base, y, (const float *)us, y, n * ff);
    return true;
}
