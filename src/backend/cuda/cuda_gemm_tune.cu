/* Decode-sized GEMMs (2..CUDA_TUNE_MAX_N tokens) with the cublasLt
 * algorithm chosen by measurement, once per shape and device.
 *
 * Why: at a few tokens a GEMM is a weight read, and cuBLAS's default
 * choice for a 4096 x 4096 bf16 matrix at 32 tokens ran at 2.0 TB/s on an
 * H200 (too few tiles along the rows to occupy 132 SMs); its heuristic
 * list holds split-K and smaller-tile variants that read faster. Each new
 * shape (type, rows, tokens, row length, strides) is timed on a stream of
 * the tuner's own, over buffers of its own for the activations and the
 * output, so it can run while a decode step is being recorded (the
 * capture is relaxed; the weights are only read). The fastest candidate
 * is kept; a shape whose set-up fails, or past the table's size, goes to
 * cublasGemmEx as before. CLEAVE_GEMM_TUNE=0 turns the tuner off, for the
 * comparison. */
#include <cublasLt.h>
#include <stdlib.h>

#include "cuda_common.cuh"
#include "base/mem.h"
#include "base/options.h"

#define TUNE_ENTRIES 1024
#define TUNE_CANDIDATES 16
#define TUNE_REPS 5
#define TUNE_MAX_ROWS 65536u
#define TUNE_MAX_K 32768u
#define TUNE_WORKSPACE ((size_t)8 << 20)

typedef struct {
    cudaDataType wt;
    size_t rows, n, k, ldw, ldy;
    bool lt; /* false: cublasGemmEx takes this shape */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
} tune_entry;

struct cuda_gemm_tuner {
    bool off; /* set-up failed: cublasGemmEx for every shape */
    cublasLtHandle_t lt;
    cudaStream_t side;
    cudaEvent_t t0, t1;
    void *x, *y, *tws; /* timing operands and workspace (the side stream's alone) */
    void *ws;          /* the workspace the chosen algorithms run with on the device's stream */
    size_t bytes; /* of device memory, counted in the device's budget */
    tune_entry *e;
    size_t n_e;
};

static void entry_free(tune_entry *e) {
    if (e->a) cublasLtMatrixLayoutDestroy(e->a);
    if (e->b) cublasLtMatrixLayoutDestroy(e->b);
    if (e->c) cublasLtMatrixLayoutDestroy(e->c);
    if (e->desc) cublasLtMatmulDescDestroy(e->desc);
}

void cuda_gemm_tune_free(cuda_device *d) {
    cuda_gemm_tuner *t = d->tuner;
    if (!t) return;
    for (size_t i = 0; i < t->n_e; i++) entry_free(&t->e[i]);
    free(t->e);
    if (t->side) cudaStreamSynchronize(t->side), cudaStreamDestroy(t->side);
    if (t->t0) cudaEventDestroy(t->t0);
    if (t->t1) cudaEventDestroy(t->t1);
    if (t->x) cudaFree(t->x);
    if (t->y) cudaFree(t->y);
    if (t->ws) cudaFree(t->ws);
    if (t->tws) cudaFree(t->tws);
    if (t->lt) cublasLtDestroy(t->lt);
    be_budget_release(&d->mem, t->bytes);
    free(t);
    d->tuner = NULL;
}

/* The tuner, set up on first use; NULL where it is off. */
static cuda_gemm_tuner *tuner(cuda_device *d) {
    if (d->tuner) return d->tuner->off ? NULL : d->tuner;
    cuda_gemm_tuner *t = (cuda_gemm_tuner *)mem_calloc(1, sizeof *t, "GEMM tuner");
    if (!t) return NULL;
    d->tuner = t;
    size_t xb = (size_t)CUDA_TUNE_MAX_N * TUNE_MAX_K * 2, yb = (size_t)TUNE_MAX_ROWS * CUDA_TUNE_MAX_N * 4;
    t->e = (tune_entry *)mem_calloc(TUNE_ENTRIES, sizeof *t->e, "GEMM tuner shapes");
    t->off = !t->e || cublasLtCreate(&t->lt) != CUBLAS_STATUS_SUCCESS ||
             cudaStreamCreateWithFlags(&t->side, cudaStreamNonBlocking) != cudaSuccess ||
             cudaEventCreate(&t->t0) != cudaSuccess || cudaEventCreate(&t->t1) != cudaSuccess ||
             cudaMalloc(&t->x, xb) != cudaSuccess || cudaMalloc(&t->y, yb) != cudaSuccess ||
             cudaMalloc(&t->ws, TUNE_WORKSPACE) != cudaSuccess ||
             cudaMalloc(&t->tws, TUNE_WORKSPACE) != cudaSuccess ||
             cudaMemsetAsync(t->x, 0, xb, t->side) != cudaSuccess;
    if (t->off) {
        cudaGetLastError(); /* a failed set-up leaves GEMMs to cublasGemmEx */
        return NULL;
    }
    t->bytes = xb + yb + 2 * TUNE_WORKSPACE;
    be_budget_take(&d->mem, t->bytes); /* counted as scratch is: the plan's compute bytes cover it */
    return t;
}

static bool lt_ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }

/* The descriptors of one shape (y^T = W^T x^T in column-major terms, as
 * the GemmEx call: A is the row-major weights read transposed). */
static bool describe(tune_entry *e) {
    cublasOperation_t opt = CUBLAS_OP_T;
    return lt_ok(cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) &&
           lt_ok(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opt, sizeof opt)) &&
           lt_ok(cublasLtMatrixLayoutCreate(&e->a, e->wt, e->k, e->rows, e->ldw)) &&
           lt_ok(cublasLtMatrixLayoutCreate(&e->b, e->wt, e->k, e->n, e->k)) &&
           lt_ok(cublasLtMatrixLayoutCreate(&e->c, CUDA_R_32F, e->rows, e->n, e->ldy));
}

/* Milliseconds of TUNE_REPS runs of one candidate on the side stream, or
 * a negative number where it does not run. */
static float time_algo(cuda_gemm_tuner *t, const tune_entry *e, const void *w,
                       const cublasLtMatmulAlgo_t *algo, size_t ws) {
    const float one = 1.0f, zero = 0.0f;
    for (int r = -1; r < TUNE_REPS; r++) { /* one untimed run first */
        if (r == 0 && cudaEventRecord(t->t0, t->side) != cudaSuccess) return -1.0f;
        if (!lt_ok(cublasLtMatmul(t->lt, e->desc, &one, w, e->a, t->x, e->b, &zero, t->y, e->c, t->y,
                                  e->c, algo, t->tws, ws, t->side)))
            return -1.0f;
    }
    float ms = -1.0f;
    if (cudaEventRecord(t->t1, t->side) != cudaSuccess || cudaEventSynchronize(t->t1) != cudaSuccess ||
        cudaEventElapsedTime(&ms, t->t0, t->t1) != cudaSuccess)
        return -1.0f;
    return ms;
}

/* Times the heuristic's candidates for e's shape and keeps the fastest;
 * e->lt stays false where none runs. */
static void tune(cuda_gemm_tuner *t, tune_entry *e, const void *w) {
    if (!describe(e)) return;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t h[TUNE_CANDIDATES];
    int got = 0;
    size_t wsmax = TUNE_WORKSPACE;
    if (!lt_ok(cublasLtMatmulPreferenceCreate(&pref))) return;
    if (lt_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &wsmax, sizeof wsmax)) &&
        !lt_ok(cublasLtMatmulAlgoGetHeuristic(t->lt, e->desc, e->a, e->b, e->c, e->c, pref,
                                              TUNE_CANDIDATES, h, &got)))
        got = 0;
    cublasLtMatmulPreferenceDestroy(pref);
    float best = -1.0f;
    for (int i = 0; i < got; i++) {
        if (h[i].state != CUBLAS_STATUS_SUCCESS) continue;
        float ms = time_algo(t, e, w, &h[i].algo, h[i].workspaceSize);
        if (ms >= 0.0f && (best < 0.0f || ms < best)) {
            best = ms;
            e->algo = h[i].algo;
            e->ws = h[i].workspaceSize;
            e->lt = true;
        }
    }
    cudaGetLastError(); /* a candidate that failed to launch is only skipped */
}

bool cuda_gemm_tuned(cuda_device *d, const void *w, cudaDataType wt, size_t ldw, size_t rows,
                     const void *x, size_t n, size_t k, float *y, size_t ldy, cleave_status *st) {
    if (n < 2 || n > CUDA_TUNE_MAX_N || rows > TUNE_MAX_ROWS || k > TUNE_MAX_K ||
        (wt != CUDA_R_16F && wt != CUDA_R_16BF) || options_get()->no_gemm_tune)
        return false;
    cuda_gemm_tuner *t = tuner(d);
    if (!t) return false;
    tune_entry *e = NULL;
    for (size_t i = 0; i < t->n_e && !e; i++) {
        tune_entry *c = &t->e[i];
        if (c->wt == wt && c->rows == rows && c->n == n && c->k == k && c->ldw == ldw && c->ldy == ldy) e = c;
    }
    if (!e) {
        if (t->n_e == TUNE_ENTRIES) return false;
        e = &t->e[t->n_e++];
        *e = tune_entry{wt, rows, n, k, ldw, ldy};
        tune(t, e, w);
    }
    if (!e->lt) return false;
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s = cublasLtMatmul(t->lt, e->desc, &one, w, e->a, x, e->b, &zero, y, e->c, y, e->c,
                                      &e->algo, t->ws, e->ws, d->stream);
    *st = lt_ok(s) ? CLEAVE_OK : cublas_fail(s, "cublasLtMatmul", __FILE__, __LINE__);
    return true;
}
