/* Which matrices the batched GEMM of the block types (cuda_mmq.cuh) takes,
 * x's int8 quantization for it, the K split and its fixed-order sum. */
#include "cuda_mmq.cuh"

static const mq_ops *mq_ops_of(cleave_type t) {
    switch (t) {
    case CLEAVE_TYPE_Q4_0: return &mq_ops_q4_0;
    case CLEAVE_TYPE_Q4_1: return &mq_ops_q4_1;
    case CLEAVE_TYPE_Q5_0: return &mq_ops_q5_0;
    case CLEAVE_TYPE_Q5_1: return &mq_ops_q5_1;
    case CLEAVE_TYPE_IQ4_NL: return &mq_ops_iq4_nl;
    case CLEAVE_TYPE_Q2_K: return &mq_ops_q2_k;
    case CLEAVE_TYPE_Q3_K: return &mq_ops_q3_k;
    case CLEAVE_TYPE_Q4_K: return &mq_ops_q4_k;
    case CLEAVE_TYPE_Q5_K: return &mq_ops_q5_k;
    case CLEAVE_TYPE_Q6_K: return &mq_ops_q6_k;
    case CLEAVE_TYPE_IQ4_XS: return &mq_ops_iq4_xs;
    default: return NULL;
    }
}

/* x to int8, one scale per 32 (a warp per 32 values of a token), with
 * {scale, scale x sum of the group's quants} per group of G (xm, float2
 * [groups][n_pad]); tokens n .. n_pad - 1 are zeros. */
template <int G>
__global__ void k_mmq_x(const float *x, size_t n, size_t n_pad, size_t ne0, int8_t *xq, float2 *xm) {
    const size_t warps = n_pad * (ne0 / 32);
    const int lane = threadIdx.x & 31;
    for (size_t wi = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; wi < warps;
         wi += (size_t)gridDim.x * (blockDim.x / 32)) {
        const size_t tok = wi / (ne0 / 32), k = wi % (ne0 / 32);
        float v = tok < n ? x[tok * ne0 + 32 * k + lane] : 0.0f, amax = fabsf(v);
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
        if (lane % G == 0) xm[(32 / G * k + (size_t)lane / G) * n_pad + tok] = make_float2(d, d * (float)s);
    }
}

/* y = the splits' partial sums, added in split order, + bias */
__global__ void k_mmq_sum(const float *part, int splits, size_t count, size_t rows,
                          const float *bias, float *y) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < splits; s++)
            v += part[(size_t)s * count + i];
        y[i] = v + (bias ? bias[i % rows] : 0.0f);
    }
}

bool cuda_mmq(cuda_device *d, const be_mat *w, const float *x, size_t n, const float *bias, float *y,
              cleave_status *st) {
    const mq_ops *ops = mq_ops_of(w->type);
    size_t ne0 = w->ne0, rows = w->ne1;
    if (!ops || !n || n > CUDA_MMQ_MAX_N || !rows || w->scales || !ne0 || ne0 % 256 ||
        (uintptr_t)w->data % (uintptr_t)ops->align || w->nb1 % (size_t)ops->align ||
        w->nb1 < quant_row_bytes(w->type, ne0))
        return false;
    size_t n_pad = (n + MQ_TILE_N - 1) / MQ_TILE_N * MQ_TILE_N;
    size_t xq_bytes = (n_pad * ne0 + 255) & ~(size_t)255;
    size_t xm_bytes = ne0 / (size_t)ops->group * n_pad * sizeof(float2);
    void *xs;
    if ((*st = cuda_scratch(d, CUDA_SCRATCH_X, xq_bytes + xm_bytes, &xs))) return true;

    mq_job j = {};
    j.w = (const uint8_t *)w->data;
    j.nb1 = w->nb1, j.rows = rows, j.ne0 = ne0;
    j.xq = (const int8_t *)xs;
    j.xm = (const float4 *)((char *)xs + xq_bytes);
    j.n = n, j.n_pad = n_pad;
    j.chunks = ne0 / 256;
    /* about 16 warps per multiprocessor: split a row's chunks when row
     * tiles alone are fewer, down to ranges of MQ_MIN_SPLIT chunks */
    size_t tiles = mq_row_tiles(rows), want = (size_t)d->n_sm * MQ_BLOCKS_PER_SM * MQ_WARPS;
    size_t max_splits = j.chunks / MQ_MIN_SPLIT ? j.chunks / MQ_MIN_SPLIT : 1;
    size_t splits = (want + tiles - 1) / tiles;
    if (splits > max_splits) splits = max_splits;
    if (splits < 1) splits = 1;
    j.per_split = (j.chunks + splits - 1) / splits;
    j.splits = (int)((j.chunks + j.per_split - 1) / j.per_split);
    j.y = y, j.bias = bias;
    if (j.splits > 1) {
        void *ps;
        if ((*st = cuda_scratch(d, CUDA_SCRATCH_W, (size_t)j.splits * n * rows * sizeof(float), &ps)))
            return true;
        j.part = (float *)ps;
    }

    size_t xwarps = n_pad * (ne0 / 32);
    unsigned xblocks = (unsigned)((xwarps + 7) / 8);
    if (ops->group == 16)
        k_mmq_x<16><<<xblocks, 256, 0, d->stream>>>(x, n, n_pad, ne0, (int8_t *)xs, (float2 *)j.xm);
    else
        k_mmq_x<32><<<xblocks, 256, 0, d->stream>>>(x, n, n_pad, ne0, (int8_t *)xs, (float2 *)j.xm);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = ops->launch(d, j);
    if (e == cudaSuccess && j.splits > 1) {
        k_mmq_sum<<<cuda_blocks(n * rows, 256), 256, 0, d->stream>>>(j.part, j.splits, n * rows,
                                                                     rows, bias, y);
        e = cudaGetLastError();
    }
    *st = e == cudaSuccess ? CLEAVE_OK : cuda_fail(e, "k_mmq", __FILE__, __LINE__);
    return true;
}
