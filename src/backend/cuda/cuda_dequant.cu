/* The kernels that need the weights of the block types themselves
 * (cuda_quant.cuh): embedding lookups (get_rows), rows to f16 for the
 * cuBLAS path of batches, and the GEMV for layouts the fast kernel does not
 * take (rows off its alignment, x not 16-byte aligned). All three go
 * 32-weight group by group through the exact dequantization. */
#include "cuda_quant.cuh"

/* a thread per 32-group of the table row: get_rows moves a few rows per
 * token, so byte loads and strided stores cost nothing that shows */
template <int T>
__global__ void k_get_rows_q(const uint8_t *table, size_t nb1, size_t ne0, const int32_t *ids,
                             float *out) {
    int32_t id = ids[blockIdx.x];
    float *o = out + (size_t)blockIdx.x * ne0;
    for (size_t g = threadIdx.x; g < ne0 / 32; g += blockDim.x) {
        float y[32];
        if (id >= 0) {
            cq_dequant32<T>(table + (size_t)id * nb1, g, y);
        } else { /* a token outside this device's vocabulary slice */
#pragma unroll
            for (int k = 0; k < 32; k++)
                y[k] = 0.0f;
        }
#pragma unroll
        for (int k = 0; k < 32; k++)
            o[32 * g + k] = y[k];
    }
}

cleave_status cuda_get_rows_q(cuda_device *d, const be_mat *t, const int32_t *ids, size_t n,
                              float *out) {
    bool ok = cuda_dispatch_q(t->type, [&]<int T>() {
        k_get_rows_q<T><<<(unsigned)n, 128, 0, d->stream>>>((const uint8_t *)t->data, t->nb1,
                                                            t->ne0, ids, out);
    });
    if (!ok) return err_set(CLEAVE_ERR_UNSUPPORTED, "get_rows: type %d", (int)t->type);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}

/* rows x ne0 to f16, a thread per 32-group, 16-byte stores */
template <int T>
__global__ void k_dequant_half_q(const uint8_t *w, size_t nb1, size_t ne0, size_t rows, uint4 *o) {
    size_t ng = ne0 / 32, total = rows * ng;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / ng, g = i % ng;
        float y[32];
        cq_dequant32<T>(w + r * nb1, g, y);
        __half2 h[16];
#pragma unroll
        for (int k = 0; k < 16; k++)
            h[k] = __floats2half2_rn(y[2 * k], y[2 * k + 1]);
        uint4 *dst = o + i * 4; /* 32 halves = 4 x 16 bytes, rows of ne0 */
#pragma unroll
        for (int k = 0; k < 4; k++)
            dst[k] = *(const uint4 *)&h[4 * k];
    }
}

cleave_status cuda_dequant_half_q(cuda_device *d, const be_mat *w, size_t r0, size_t rows,
                                  __half *out) {
    size_t groups = rows * (w->ne0 / 32);
    bool ok = cuda_dispatch_q(w->type, [&]<int T>() {
        k_dequant_half_q<T><<<cuda_blocks(groups, 256), 256, 0, d->stream>>>(
            (const uint8_t *)w->data + r0 * w->nb1, w->nb1, w->ne0, rows, (uint4 *)out);
    });
    if (!ok) return err_set(CLEAVE_ERR_UNSUPPORTED, "matmul: weight type %d", (int)w->type);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}

#define ANY_WARPS 4

/* one warp a row, lanes over its 32-groups, every token in turn */
template <int T>
__global__ void __launch_bounds__(ANY_WARPS * 32)
    k_gemv_any_q(const uint8_t *w, size_t nb1, size_t ne0, size_t ne1, size_t n, const float *x,
                 const float *bias, float *y) {
    size_t row = (size_t)blockIdx.x * ANY_WARPS + (threadIdx.x >> 5);
    if (row >= ne1) return;
    int lane = threadIdx.x & 31;
    const uint8_t *r = w + row * nb1;
    for (size_t t = 0; t < n; t++) {
        float acc = 0.0f;
        for (size_t g = lane; g < ne0 / 32; g += 32) {
            float v[32];
            cq_dequant32<T>(r, g, v);
            const float *xg = x + t * ne0 + 32 * g;
#pragma unroll
            for (int k = 0; k < 32; k++)
                acc += v[k] * xg[k];
        }
        acc = cuda_warp_sum(acc);
        if (lane == 0) y[t * ne1 + row] = acc + (bias ? bias[row] : 0.0f);
    }
}

cleave_status cuda_gemv_any_q(cuda_device *d, const be_mat *w, const float *x, size_t n,
                              const float *bias, float *y) {
    unsigned blocks = (unsigned)((w->ne1 + ANY_WARPS - 1) / ANY_WARPS);
    bool ok = cuda_dispatch_q(w->type, [&]<int T>() {
        k_gemv_any_q<T><<<blocks, ANY_WARPS * 32, 0, d->stream>>>((const uint8_t *)w->data, w->nb1,
                                                                  w->ne0, w->ne1, n, x, bias, y);
    });
    if (!ok) return err_set(CLEAVE_ERR_UNSUPPORTED, "matmul: weight type %d", (int)w->type);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}
