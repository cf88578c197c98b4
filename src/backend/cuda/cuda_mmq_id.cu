/* Experts through the batched GEMM of the block types (cuda_mmq.cuh): a
 * batch's (token, slot) pairs grouped by expert on the device, x's rows
 * quantized to int8 in that order, then one launch of k_mmq whose tasks
 * are (unit, row tile), a unit being up to NP pairs of one expert. Each
 * chosen expert is read once per unit, with int8 tensor-core products,
 * where the grouped GEMV (cuda_moe.cu) dequantizes every weight to f32
 * for each token that chose it. Nothing waits for the host, so a decode
 * step can be recorded as a graph, and a prompt needs no copy of its ids
 * to the host. */
#include "cuda_mmq.cuh"

#define MQ_GROUP_THREADS 1024
#define MQ_MAX_EXPERTS 512

/* The pairs by expert: expert e's rows start at an even row (x's factors
 * are copied two rows at a time), are followed by padding to it (pair
 * -1: zeros), and are cut into units of up to np rows; every row of the
 * capacity past the last is padding too. Within an expert the pairs'
 * order is whatever the atomics give: each pair's output is computed
 * from its own x row alone, so the results do not depend on it. Ids out
 * of range are left out (their outputs are not written). */
__global__ void __launch_bounds__(MQ_GROUP_THREADS)
    k_mq_group(const int32_t *ids, int P, int ne, int np, int rows_cap, int32_t *pair, int32_t *unit,
               int32_t *n_units) {
    __shared__ int32_t cnt[MQ_MAX_EXPERTS], at[MQ_MAX_EXPERTS], first_unit[MQ_MAX_EXPERTS];
    for (int e = threadIdx.x; e < ne; e += blockDim.x) cnt[e] = 0;
    cuda_pdl_wait(); /* pair and unit may still be read by the kernels before */
    cuda_pdl_trigger();
    for (int i = threadIdx.x; i < rows_cap; i += blockDim.x) pair[i] = -1;
    __syncthreads();
    for (int i = threadIdx.x; i < P; i += blockDim.x)
        if (ids[i] >= 0 && ids[i] < ne) atomicAdd(&cnt[ids[i]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int row = 0, units = 0;
        for (int e = 0; e < ne; e++) {
            at[e] = row, first_unit[e] = units;
            units += (cnt[e] + np - 1) / np;
            row += (cnt[e] + 1) & ~1;
        }
        *n_units = units;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < ne; e += blockDim.x)
        for (int u = 0; u * np < cnt[e]; u++) {
            int32_t *o = unit + 3 * (first_unit[e] + u);
            o[0] = e, o[1] = at[e] + u * np, o[2] = min(np, cnt[e] - u * np);
        }
    __syncthreads(); /* the units have read at[]; now it is each expert's next row */
    for (int i = threadIdx.x; i < P; i += blockDim.x)
        if (ids[i] >= 0 && ids[i] < ne) pair[atomicAdd(&at[ids[i]], 1)] = i;
}

bool cuda_mmq_id(cuda_device *d, const be_mat *const *w, const float *const *bias, float *const *y, int count,
                 const float *x, size_t x_slots, size_t n, size_t k, const int32_t *ids, cleave_status *st) {
    mq_job j;
    const mq_ops *ops;
    const size_t ne = w[0]->ne2, P = n * k;
    if (!P || ne < 1 || ne > MQ_MAX_EXPERTS || P > INT32_MAX / 2 || !mq_layout(w, bias, y, count, j, ops))
        return false;
    for (int s = 1; s < count; s++)
        if (w[s]->ne2 != ne || w[s]->nb2 != w[0]->nb2) return false;
    /* tokens a unit: the pairs an expert is expected to have, in tiles of
     * 8, at most 32 (a decode step's experts have a few each, a prompt's
     * hundreds); 64 where the type takes such units (mq_wide) and experts
     * average over 96 pairs (gpt-oss-20b's 512-token passes, 64 pairs an
     * expert, ran 0.7% slower with them, its 2048-token passes 11% faster) */
    const size_t active = P < ne ? P : ne, per = (P + active - 1) / active;
    const size_t wide = ops->max_nt > 4 && per > 96 ? (size_t)ops->max_nt : 4;
    const size_t nt = per > 24 ? wide : (per + 7) / 8, np = MQ_TILE_N * nt;
    const size_t rows_cap = (P + active + np + 1) & ~(size_t)1, units_cap = P / np + active + 1;
    void *buf;
    if ((*st = cuda_scratch(d, CUDA_SCRATCH_MOE, (rows_cap + 3 * units_cap + 1) * sizeof(int32_t), &buf))) return true;
    int32_t *pair = (int32_t *)buf, *unit = pair + rows_cap, *n_units = unit + 3 * units_cap;
    if ((*st = mq_x_scratch(d, ops, rows_cap, j))) return true;
    j.n = units_cap, j.n_pad = np;
    j.per_split = j.chunks, j.splits = 1;
    j.unit = unit, j.n_units = n_units, j.pair = pair, j.nb2 = w[0]->nb2;
    cudaError_t e = cuda_launch(d, k_mq_group, dim3(1), dim3(MQ_GROUP_THREADS), 0, ids, (int)P, (int)ne, (int)np,
                                (int)rows_cap, pair, unit, n_units);
    if (e == cudaSuccess) e = mq_run_job(d, ops, j, x, pair, x_slots == 1 ? (int)k : 1);
    *st = e == cudaSuccess ? CLEAVE_OK : cuda_fail(e, "k_mmq (experts)", __FILE__, __LINE__);
    return true;
}
