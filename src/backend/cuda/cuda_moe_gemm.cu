/* A prompt's experts as one grouped GEMM per matrix: the rows of each
 * chosen expert (grouped on the host, cuda_moe.cu) are one problem of
 * cublasGemmGroupedBatchedEx, so a layer's experts take a handful of
 * launches instead of a dequantization and a GEMM per expert (on
 * Qwen3-30B-A3B's 128 experts, about a thousand launches a layer in a
 * long prompt). Block-type experts are dequantized to f16 a run of
 * experts at a time (at most MOE_GEMM_CHUNK bytes); f16 and bf16 experts
 * are read where they are. */
#include "base/mem.h"
#include "cuda_moe.cuh"

#define MOE_GEMM_CHUNK ((size_t)1 << 30)

/* cuBLAS builds without the grouped GEMM for these types: asked once per GPU */
static bool grouped_refused[CUDA_MAX_ORDINALS];

/* f16 and bf16 experts are the GEMM's operands as they are */
static bool read_direct(const be_mat *w) { return w->type == CLEAVE_TYPE_F16 || w->type == CLEAVE_TYPE_BF16; }

bool cuda_moe_gemm_takes(const cuda_device *d, const be_mat *w) {
    bool direct = read_direct(w);
    if (grouped_refused[d->ordinal] || w->scales || (!direct && !cuda_qk(w->type))) return false;
    return direct || w->nb2 == w->ne1 * w->nb1; /* consecutive experts dequantize as one run of rows */
}

cleave_status cuda_moe_gemm(cuda_device *d, const be_mat *w, const void *xs, const int32_t *off, void **ptrs,
                            float *y, bool *done) {
    *done = false;
    if (!cuda_moe_gemm_takes(d, w)) return CLEAVE_OK;
    const bool direct = read_direct(w);
    const cudaDataType wt = w->type == CLEAVE_TYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    const size_t ne = w->ne2, ne0 = w->ne0, ne1 = w->ne1, per = ne1 * ne0 * 2;
    size_t chunk = direct ? ne : MOE_GEMM_CHUNK / per;
    if (chunk < 1) chunk = 1;
    if (chunk > ne) chunk = ne;
    /* per group: m, n, k, lda, ldb, ldc, size; alpha, beta; ops; A, B, C */
    char *host = (char *)mem_alloc(ne * (7 * sizeof(int) + 2 * sizeof(float) + 2 * sizeof(cublasOperation_t) +
                                         3 * sizeof(void *)),
                                   "grouped GEMM");
    if (!host) return CLEAVE_ERR_OOM;
    const void **P = (const void **)host; /* A[ne], B[ne], C[ne] */
    int *I = (int *)(P + 3 * ne), *m = I, *n = I + ne, *k = I + 2 * ne, *lda = I + 3 * ne, *ldb = I + 4 * ne,
        *ldc = I + 5 * ne, *gs = I + 6 * ne;
    float *alpha = (float *)(I + 7 * ne), *beta = alpha + ne;
    cublasOperation_t *ta = (cublasOperation_t *)(beta + ne), *tb = ta + ne;
    cleave_status st = CLEAVE_OK;
    void *ws = NULL;
    if (!direct) st = cuda_scratch(d, CUDA_SCRATCH_W, chunk * per, &ws);
    for (size_t e0 = 0; !st && e0 < ne; e0 += chunk) {
        size_t e1 = e0 + chunk < ne ? e0 + chunk : ne, a = e1, b = e0;
        for (size_t e = e0; e < e1; e++)
            if (off[e + 1] > off[e]) a = a < e ? a : e, b = e + 1;
        if (a >= b) continue; /* no rows for these experts */
        if (!direct) {
            be_mat rows = *w; /* the run [a, b) of experts as rows of one matrix */
            rows.ne1 = ne * ne1, rows.ne2 = 1;
            if ((st = cuda_dequant_half_q(d, &rows, a * ne1, (b - a) * ne1, (__half *)ws))) break;
        }
        int g = 0;
        for (size_t e = a; e < b; e++) {
            size_t lo = (size_t)off[e], rows = (size_t)off[e + 1] - lo;
            if (!rows) continue;
            P[g] = direct ? (const void *)((const char *)w->data + e * w->nb2)
                          : (const void *)((const char *)ws + (e - a) * per);
            P[ne + g] = (const char *)xs + lo * ne0 * 2;
            P[2 * ne + g] = y + lo * ne1;
            m[g] = (int)ne1, n[g] = (int)rows, k[g] = (int)ne0;
            lda[g] = (int)(direct ? w->nb1 / 2 : ne0), ldb[g] = (int)ne0, ldc[g] = (int)ne1, gs[g] = 1;
            alpha[g] = 1.0f, beta[g] = 0.0f, ta[g] = CUBLAS_OP_T, tb[g] = CUBLAS_OP_N;
            g++;
        }
        /* the pointer arrays go to the device in stream order: the GEMM
         * before has read the last chunk's by then */
        if ((st = cuda_upload_sync(d, ptrs, P, 3 * ne * sizeof(void *)))) break;
        cublasStatus_t bs = cublasGemmGroupedBatchedEx(
            d->blas, ta, tb, m, n, k, alpha, (const void *const *)ptrs, wt, lda, (const void *const *)(ptrs + ne),
            wt, ldb, beta, (void *const *)(ptrs + 2 * ne), CUDA_R_32F, ldc, g, gs, CUBLAS_COMPUTE_32F);
        if (bs == CUBLAS_STATUS_NOT_SUPPORTED && e0 == 0) { /* nothing written yet: the caller's loop */
            grouped_refused[d->ordinal] = true;
            free(host);
            return CLEAVE_OK;
        }
        if (bs != CUBLAS_STATUS_SUCCESS) st = cublas_fail(bs, "cublasGemmGroupedBatchedEx", __FILE__, __LINE__);
    }
    free(host);
    *done = !st;
    return st;
}
