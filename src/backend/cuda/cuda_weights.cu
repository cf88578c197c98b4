/* Weight upload in the layout the kernels read fastest. Q8_0 blocks are 34
 * bytes (an f16 scale, then 32 int8), so rows of blocks only allow 2-byte
 * loads; split into an int8 plane ([rows][ne0]) and a scale plane
 * ([rows][ne0/32]), every lane reads 16 weights with one 16-byte load.
 * The split is done on the GPU, chunk by chunk, from the raw bytes. */
#include "cuda_common.cuh"

__global__ void k_q8_split(const char *raw, size_t nb1, size_t nb, size_t rows, int8_t *qs,
                           __half *scales) {
    size_t total = rows * nb;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / nb, b = i % nb;
        const block_q8_0 *blk = (const block_q8_0 *)(raw + r * nb1) + b;
        scales[i] = __ushort_as_half(blk->d);
        /* 2-byte reads (all a block's alignment allows), 16-byte writes:
         * byte by byte, loading an 8B model spent 17 s here */
        const uint16_t *src = (const uint16_t *)blk->qs;
        uint32_t w[8];
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] = (uint32_t)src[2 * k] | (uint32_t)src[2 * k + 1] << 16;
        uint4 *dst = (uint4 *)(qs + r * nb * QK8_0 + b * QK8_0);
        dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
        dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
    }
}

cleave_status cuda_upload_mat(be_device *dev, const be_mat *host, be_mat *out, const char *what) {
    cuda_device *d = cuda_dev(dev);
    *out = *host;
    out->scales = NULL;
    out->data = NULL;
    size_t bytes = host->ne1 * host->nb1;
    if (host->type != CLEAVE_TYPE_Q8_0) {
        void *p = be_alloc(dev, bytes, what);
        if (!p) return CLEAVE_ERR_OOM;
        cleave_status st = be_write(dev, p, host->data, bytes);
        if (st) {
            be_free(dev, p);
            return st;
        }
        out->data = p;
        return CLEAVE_OK;
    }
    size_t nb = host->ne0 / QK8_0;
    int8_t *qs = (int8_t *)be_alloc(dev, host->ne1 * host->ne0, what);
    __half *sc = qs ? (__half *)be_alloc(dev, host->ne1 * nb * sizeof(__half), what) : NULL;
    if (!qs || !sc) {
        if (qs) be_free(dev, qs);
        return CLEAVE_ERR_OOM;
    }
    size_t chunk = ((size_t)64 << 20) / host->nb1;
    if (chunk < 1) chunk = 1;
    if (chunk > host->ne1) chunk = host->ne1;
    void *tmp;
    cleave_status st = cuda_scratch(d, CUDA_SCRATCH_W, chunk * host->nb1, &tmp);
    for (size_t r0 = 0; !st && r0 < host->ne1; r0 += chunk) {
        size_t rows = host->ne1 - r0 < chunk ? host->ne1 - r0 : chunk;
        /* the raw rows through the pinned chunks: ordered before the split
         * that reads them, and the next chunk's upload into tmp after it */
        st = cuda_upload(d, tmp, (const char *)host->data + r0 * host->nb1, rows * host->nb1);
        if (st) break;
        k_q8_split<<<cuda_blocks(rows * nb, 256), 256, 0, d->stream>>>(
            (const char *)tmp, host->nb1, nb, rows, qs + r0 * host->ne0, sc + r0 * nb);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) st = cuda_fail(e, "k_q8_split", __FILE__, __LINE__);
    }
    if (!st) {
        cudaError_t e = cudaStreamSynchronize(d->stream);
        if (e != cudaSuccess) st = cuda_fail(e, "weight upload", __FILE__, __LINE__);
    }
    if (st) {
        be_free(dev, qs);
        be_free(dev, sc);
        return st;
    }
    out->data = qs;
    out->scales = sc;
    out->nb1 = host->ne0;
    return CLEAVE_OK;
}
