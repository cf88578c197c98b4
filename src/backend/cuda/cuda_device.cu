/* The CUDA device behind the backend tables: one stream per device, memory
 * through cudaMalloc counted against a budget (budget.c; so a test can
 * emulate a smaller card), copies, and the tables naming the ops of the
 * other files. Errors become statuses; allocation failure returns NULL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"
#include "cuda_quant.cuh"
#include "base/mem.h"

/* cudaMalloc aligns to 256 bytes, which keeps every pointer aligned for
 * 16-byte loads; its size lives in d->sizes, on the host, so a free costs
 * no copy from the device. */
static void *cuda_alloc(be_device *dev, size_t bytes, const char *what) {
    cuda_device *d = cuda_dev(dev);
    if (!what) what = "?";
    if (be_budget_reserve(&d->mem, bytes, what, d->name)) return NULL;
    void *p = NULL;
    cudaSetDevice(d->ordinal);
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1); /* a distinct pointer for 0 bytes too */
    if (e != cudaSuccess) {
        cudaGetLastError();
        be_budget_release(&d->mem, bytes);
        size_t free_b = 0, total = 0;
        cudaMemGetInfo(&free_b, &total);
        err_set(CLEAVE_ERR_OOM, "out of memory on %s: %zu bytes for %s (%zu MiB free of %zu MiB)",
                d->name, bytes, what, free_b >> 20, total >> 20);
        return NULL;
    }
    pthread_mutex_lock(&d->lock);
    cleave_status st = be_size_table_put(&d->sizes, p, bytes);
    pthread_mutex_unlock(&d->lock);
    if (st != CLEAVE_OK) {
        cudaFree(p);
        cudaGetLastError();
        be_budget_release(&d->mem, bytes);
        err_wrap(CLEAVE_ERR_OOM, "%s: %zu bytes for %s", d->name, bytes, what);
        return NULL;
    }
    be_budget_held(&d->mem);
    return p;
}

static void cuda_free(be_device *dev, void *p) {
    if (!p) return;
    cuda_device *d = cuda_dev(dev);
    size_t bytes = 0;
    pthread_mutex_lock(&d->lock);
    bool ours = be_size_table_take(&d->sizes, p, &bytes);
    pthread_mutex_unlock(&d->lock);
    /* a double free or another device's pointer: leave it rather than
     * corrupt the accounting (free cannot report an error) */
    if (!ours) return;
    cudaStreamSynchronize(d->stream); /* kernels in flight may still use it */
    cudaFree(p);
    cudaGetLastError();
    be_budget_release(&d->mem, bytes);
}

static const char *cuda_name(be_device *dev) { return cuda_dev(dev)->name; }

/* Programmatic dependent launch for passes whose matmuls take the GEMVs
 * (one-token steps, the smallest batches) and for passes of over 512
 * tokens, not for those between. Measured on an H200 (CLEAVE_NO_PDL=1
 * against the default, one run each): batched decode of 8B Q4_K_M 2539
 * against 2340 tok/s at 32 sequences and 1301 against 1265 at 8, while a
 * one-token step took 3.16 against 2.96 ms; prompts in 512-token passes
 * (pp4096, bench/moe-gpu-2026-12-03.md calls AE and AF) 11080 against
 * 10452 for gpt-oss-20b, 13542 against 13216 for Qwen3-30B-A3B, level
 * (21005 / 21019) for the dense 8B; in 2048-token passes within 1% either
 * way. Why is not established; those passes' kernels have several waves
 * of blocks, where dependents launched early can hold multiprocessors
 * that later blocks need. */
#define CUDA_PDL_OFF_MAX_N 512
static void cuda_pass_begin(be_device *dev, size_t n_tokens) {
    cuda_dev(dev)->pdl_off = n_tokens > cuda_gemvq_max_n() && n_tokens <= CUDA_PDL_OFF_MAX_N;
}

static void cuda_mem_stats(be_device *dev, be_mem_stats *out) {
    cuda_device *d = cuda_dev(dev);
    be_budget_stats(&d->mem, out);
    /* the whole GPU as nvidia-smi sees it: every process, contexts included */
    size_t free_b = 0, total_b = 0;
    cudaSetDevice(d->ordinal);
    out->device_used = cudaMemGetInfo(&free_b, &total_b) == cudaSuccess ? total_b - free_b : 0;
    cudaGetLastError();
}

static cleave_status cuda_write(be_device *dev, void *dst, const void *src, size_t n) {
    cuda_device *d = cuda_dev(dev);
    if (d->staging && n <= d->staging_cap - d->staging_used) {
        /* small write (token ids, positions, cell tables): stage and go on */
        char *stage = d->staging + d->staging_used;
        memcpy(stage, src, n);
        d->staging_used += (n + 255) & ~(size_t)255;
        if (d->staging_used > d->staging_cap) d->staging_used = d->staging_cap;
        CUDA_TRY(cudaMemcpyAsync(dst, stage, n, cudaMemcpyHostToDevice, d->stream));
        return CLEAVE_OK;
    }
    /* Large (weights): pipelined through pinned chunks on several threads.
     * Small with the staging full: synchronous, which frees the staging.
     * Either way the source may be reused as soon as we return. */
    if (n >= CUDA_UPLOAD_MIN) return cuda_upload(d, dst, src, n);
    return cuda_upload_sync(d, dst, src, n);
}

static cleave_status cuda_read(be_device *dev, void *dst, const void *src, size_t n) {
    cuda_device *d = cuda_dev(dev);
    CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, d->stream));
    CUDA_TRY(cudaStreamSynchronize(d->stream));
    d->staging_used = 0;
    return CLEAVE_OK;
}

/* Portable: page-locked for every GPU of the process, whichever reads. */
static cleave_status cuda_host_register(be_device *dev, void *p, size_t bytes) {
    cudaSetDevice(cuda_dev(dev)->ordinal);
    CUDA_TRY(cudaHostRegister(p, bytes, cudaHostRegisterPortable));
    return CLEAVE_OK;
}

static void cuda_host_unregister(be_device *dev, void *p) {
    cudaSetDevice(cuda_dev(dev)->ordinal);
    if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

static cleave_status cuda_copy(be_device *dev, void *dst, const void *src, size_t n) {
    CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, cuda_dev(dev)->stream));
    return CLEAVE_OK;
}

static cleave_status cuda_sync(be_device *dev) {
    cuda_device *d = cuda_dev(dev);
    CUDA_TRY(cudaStreamSynchronize(d->stream));
    d->staging_used = 0;
    return CLEAVE_OK;
}

static void cuda_destroy(be_device *dev) {
    if (!dev) return;
    cuda_device *d = cuda_dev(dev);
    cudaSetDevice(d->ordinal);
    if (d->stream) cudaStreamSynchronize(d->stream);
    for (int i = 0; i < CUDA_SCRATCH_COUNT; i++)
        if (d->scratch[i]) cudaFree(d->scratch[i]);
    for (int i = 0; i < d->n_retired; i++) cudaFree(d->retired[i]);
    if (d->counters) cudaFree(d->counters);
    if (d->blas) cublasDestroy(d->blas);
    if (d->staging) cudaFreeHost(d->staging);
    cuda_upload_free(d);
    cuda_tier_destroy(d);
    cuda_peer_free(d);
    cudaSetDevice(d->ordinal);
    if (d->stream) cudaStreamDestroy(d->stream);
    be_size_table_free(&d->sizes); /* what callers leaked stays on the card until exit */
    pthread_mutex_destroy(&d->lock);
    pthread_mutex_destroy(&d->xfer_lock);
    be_budget_destroy(&d->mem);
    free(d);
}

static cleave_status cuda_graph_begin(be_device *dev) {
    cuda_device *d = cuda_dev(dev);
    /* the graphs that pointed at retired twins are gone by now */
    cleave_status st = cuda_free_retired(d);
    if (st) return st;
    /* relaxed: a recording may allocate (grow) its scratch twins */
    CUDA_TRY(cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeRelaxed));
    d->recording = true;
    return CLEAVE_OK;
}

static cleave_status cuda_graph_end(be_device *dev, void **out) {
    cuda_device *d = cuda_dev(dev);
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    *out = NULL;
    d->recording = false;
    CUDA_TRY(cudaStreamEndCapture(d->stream, &g));
    cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) return cuda_fail(e, "cudaGraphInstantiate", __FILE__, __LINE__);
    *out = exec;
    return CLEAVE_OK;
}

static uint64_t cuda_graph_epoch(be_device *dev) { return cuda_dev(dev)->graph_epoch; }

static cleave_status cuda_graph_launch(be_device *dev, void *graph) {
    CUDA_TRY(cudaGraphLaunch((cudaGraphExec_t)graph, cuda_dev(dev)->stream));
    return CLEAVE_OK;
}

static void cuda_graph_free(be_device *dev, void *graph) {
    if (graph) cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

static const be_memory_ops cuda_memory_ops = {
    .mem_stats = cuda_mem_stats,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .write = cuda_write,
    .read = cuda_read,
    .copy = cuda_copy,
    .sync = cuda_sync,
    .map_host = NULL, /* weights are copied to the card */
    .upload_mat = cuda_upload_mat,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
};

static const be_compute_ops cuda_compute_ops = {
    .get_rows = cuda_op_get_rows,
    .rms_norm = cuda_op_rms_norm,
    .matmul = cuda_op_matmul,
    .rope = cuda_op_rope,
    .kv_store = cuda_op_kv_store,
    .attention = cuda_op_attention,
    .swiglu = cuda_op_swiglu,
    .add = cuda_op_add,
};

static const be_fused_ops cuda_fused_ops = {
    .add_rms_norm = cuda_op_add_rms_norm,
    .rope_store = cuda_op_rope_store,
    .matmul_swiglu = NULL, /* ffn covers it */
    .matmul_multi = cuda_op_matmul_multi,
    .ffn = cuda_op_ffn,
};

static const be_graph_ops cuda_graph_ops = {
    .begin = cuda_graph_begin,
    .end = cuda_graph_end,
    .launch = cuda_graph_launch,
    .free = cuda_graph_free,
    .epoch = cuda_graph_epoch,
};

static const be_peer_ops cuda_peer_ops = {
    .event_record = cuda_event_record,
    .event_free = cuda_event_free,
    .copy_from = cuda_copy_from,
    .copy2d_from = cuda_copy2d_from,
};

static const be_ops cuda_ops = {
    .name = cuda_name,
    .destroy = cuda_destroy,
    .pass_begin = cuda_pass_begin,
    .memory = &cuda_memory_ops,
    .compute = &cuda_compute_ops,
    .fused = &cuda_fused_ops,
    .graph = &cuda_graph_ops,
    .peer = &cuda_peer_ops,
    .tier = &cuda_tier_ops,
    .moe = &cuda_moe_ops,
    .sample = cuda_op_sample,
};

bool be_is_cuda(const be_device *d) { return d && d->ops == &cuda_ops; }

extern "C" int be_cuda_count(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError(); /* no driver or no device: not an error of a later call */
        return 0;
    }
    return count;
}

extern "C" cleave_status be_cuda_create(int ordinal, size_t budget_bytes, be_device **out) {
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        return err_set(CLEAVE_ERR_DEVICE, "no CUDA device available (%s)",
                       e != cudaSuccess ? cudaGetErrorString(e) : "count is 0");
    }
    if (ordinal < 0 || ordinal >= count || ordinal >= CUDA_MAX_ORDINALS)
        return err_set(CLEAVE_ERR_INVALID_ARG, "cuda:%d does not exist (%d device%s)", ordinal,
                       count, count == 1 ? "" : "s");
    cuda_device *d = (cuda_device *)mem_calloc(1, sizeof *d, "CUDA device");
    if (!d) return CLEAVE_ERR_OOM;
    d->ordinal = ordinal;
    snprintf(d->name, sizeof d->name, "cuda:%d", ordinal); /* the GPU's name once it is asked */
    if (be_budget_init(&d->mem, budget_bytes, d->name) != CLEAVE_OK) {
        free(d);
        return CLEAVE_ERR_DEVICE;
    }
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->xfer_lock, NULL);
    d->base.ops = &cuda_ops;
    d->base.impl = d;
    cudaDeviceProp prop;
    cleave_status st = CLEAVE_OK;
    if ((e = cudaSetDevice(ordinal)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, ordinal)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        st = cuda_fail(e, "device setup", __FILE__, __LINE__);
    } else if (cublasCreate(&d->blas) != CUBLAS_STATUS_SUCCESS ||
               cublasSetStream(d->blas, d->stream) != CUBLAS_STATUS_SUCCESS) {
        st = err_set(CLEAVE_ERR_DEVICE, "cuda:%d: cannot initialise cuBLAS", ordinal);
    } else if ((e = cudaMalloc((void **)&d->counters, CUDA_COUNTERS * sizeof(unsigned))) != cudaSuccess ||
               (e = cudaMemset(d->counters, 0, CUDA_COUNTERS * sizeof(unsigned))) != cudaSuccess) {
        st = cuda_fail(e, "device counters", __FILE__, __LINE__);
    }
    if (st) {
        cuda_destroy(&d->base);
        return st;
    }
    d->staging_cap = (size_t)4 << 20;
    if (cudaMallocHost((void **)&d->staging, d->staging_cap) != cudaSuccess) {
        cudaGetLastError();
        d->staging = NULL; /* writes stay synchronous: slower, still correct */
        d->staging_cap = 0;
    }
    /* no budget given: the memory free now is the budget, so a plan that
     * cannot fit is refused up front, naming the device, instead of failing
     * halfway through the upload */
    size_t free_b = 0, total_b = 0;
    if (!d->mem.limit && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) d->mem.limit = free_b;
    cudaGetLastError();
    snprintf(d->name, sizeof d->name, "cuda:%d (%.200s)", ordinal, prop.name);
    d->n_sm = prop.multiProcessorCount;
    d->cc = prop.major * 10 + prop.minor;
    *out = &d->base;
    return CLEAVE_OK;
}
