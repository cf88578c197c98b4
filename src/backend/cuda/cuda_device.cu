/* The CUDA device behind the backend vtable: one stream per device, memory
 * through cudaMalloc with accounting and an optional budget (so a test can
 * emulate a smaller card), copies, and the op table. Errors become statuses;
 * allocation failure returns NULL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"
#include "base/mem.h"

cleave_status cuda_fail(cudaError_t e, const char *call, const char *file, int line) {
    cudaGetLastError(); /* clear a sticky launch error so the device stays usable */
    const char *base = strrchr(file, '/');
    return err_set(CLEAVE_ERR_DEVICE, "CUDA error %s (%s) in %s at %s:%d", cudaGetErrorName(e),
                   cudaGetErrorString(e), call, base ? base + 1 : file, line);
}

cleave_status cublas_fail(cublasStatus_t s, const char *call, const char *file, int line) {
    const char *base = strrchr(file, '/');
    return err_set(CLEAVE_ERR_DEVICE, "cuBLAS error %d in %s at %s:%d", (int)s, call,
                   base ? base + 1 : file, line);
}

/* Each allocation carries its size in a 256-byte header so free() can
 * account for it; 256 keeps the user pointer aligned for 16-byte loads. */
#define CUDA_HDR 256

static void *cuda_alloc(be_device *dev, size_t bytes, const char *what) {
    cuda_device *d = cuda_dev(dev);
    pthread_mutex_lock(&d->lock);
    bool over = d->budget && d->used + bytes > d->budget;
    if (!over) d->used += bytes;
    pthread_mutex_unlock(&d->lock);
    if (over) {
        err_set(CLEAVE_ERR_OOM,
                "out of memory on %s: %zu bytes for %s; %zu of %zu budget bytes in use", d->name,
                bytes, what ? what : "?", d->used, d->budget);
        return NULL;
    }
    void *p = NULL;
    cudaSetDevice(d->ordinal);
    cudaError_t e = cudaMalloc(&p, bytes + CUDA_HDR);
    if (e != cudaSuccess) {
        cudaGetLastError();
        pthread_mutex_lock(&d->lock);
        d->used -= bytes;
        pthread_mutex_unlock(&d->lock);
        size_t free_b = 0, total = 0;
        cudaMemGetInfo(&free_b, &total);
        err_set(CLEAVE_ERR_OOM, "out of memory on %s: %zu bytes for %s (%zu MiB free of %zu MiB)",
                d->name, bytes, what ? what : "?", free_b >> 20, total >> 20);
        return NULL;
    }
    /* the header lives on the device: write its size with a tiny copy */
    size_t hdr = bytes;
    if (cudaMemcpy(p, &hdr, sizeof hdr, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(p);
        pthread_mutex_lock(&d->lock);
        d->used -= bytes;
        pthread_mutex_unlock(&d->lock);
        err_set(CLEAVE_ERR_DEVICE, "%s: cannot initialise an allocation", d->name);
        return NULL;
    }
    pthread_mutex_lock(&d->lock);
    if (d->used > d->peak) d->peak = d->used;
    pthread_mutex_unlock(&d->lock);
    return (char *)p + CUDA_HDR;
}

static void cuda_free(be_device *dev, void *p) {
    if (!p) return;
    cuda_device *d = cuda_dev(dev);
    char *base = (char *)p - CUDA_HDR;
    size_t bytes = 0;
    cudaStreamSynchronize(d->stream); /* kernels in flight may still use it */
    cudaMemcpy(&bytes, base, sizeof bytes, cudaMemcpyDeviceToHost);
    cudaFree(base);
    pthread_mutex_lock(&d->lock);
    d->used -= bytes <= d->used ? bytes : d->used;
    pthread_mutex_unlock(&d->lock);
}

static const char *cuda_name(be_device *dev) { return cuda_dev(dev)->name; }

static void cuda_mem_stats(be_device *dev, be_mem_stats *out) {
    cuda_device *d = cuda_dev(dev);
    pthread_mutex_lock(&d->lock);
    out->used = d->used;
    out->peak = d->peak;
    out->budget = d->budget;
    pthread_mutex_unlock(&d->lock);
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

cleave_status cuda_scratch(cuda_device *d, int slot, size_t bytes, void **out) {
    if (d->scratch_bytes[slot] < bytes) {
        if (d->scratch[slot]) {
            CUDA_TRY(cudaStreamSynchronize(d->stream));
            CUDA_TRY(cudaFree(d->scratch[slot]));
            pthread_mutex_lock(&d->lock);
            d->used -= d->scratch_bytes[slot];
            pthread_mutex_unlock(&d->lock);
            d->scratch[slot] = NULL;
            d->scratch_bytes[slot] = 0;
        }
        size_t want = bytes + bytes / 4; /* headroom: fewer regrowths */
        if (cudaMalloc(&d->scratch[slot], want) != cudaSuccess) {
            cudaGetLastError();
            return err_set(CLEAVE_ERR_OOM, "out of memory on %s: %zu bytes of scratch", d->name,
                           want);
        }
        d->scratch_bytes[slot] = want;
        /* counted (the report's peak is what the process holds), not
         * refused: the plan's compute bytes already budget for it */
        pthread_mutex_lock(&d->lock);
        d->used += want;
        if (d->used > d->peak) d->peak = d->used;
        pthread_mutex_unlock(&d->lock);
    }
    *out = d->scratch[slot];
    return CLEAVE_OK;
}

static void cuda_destroy(be_device *dev) {
    if (!dev) return;
    cuda_device *d = cuda_dev(dev);
    cudaSetDevice(d->ordinal);
    if (d->stream) cudaStreamSynchronize(d->stream);
    for (int i = 0; i < CUDA_SCRATCH_COUNT; i++)
        if (d->scratch[i]) cudaFree(d->scratch[i]);
    if (d->blas) cublasDestroy(d->blas);
    if (d->staging) cudaFreeHost(d->staging);
    cuda_upload_free(d);
    cuda_tier_destroy(d);
    cuda_peer_free(d);
    cudaSetDevice(d->ordinal);
    if (d->stream) cudaStreamDestroy(d->stream);
    pthread_mutex_destroy(&d->lock);
    pthread_mutex_destroy(&d->xfer_lock);
    free(d);
}

static cleave_status cuda_graph_begin(be_device *dev) {
    /* relaxed: the first recording may allocate its attention scratch */
    CUDA_TRY(cudaStreamBeginCapture(cuda_dev(dev)->stream, cudaStreamCaptureModeRelaxed));
    return CLEAVE_OK;
}

static cleave_status cuda_graph_end(be_device *dev, void **out) {
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    *out = NULL;
    CUDA_TRY(cudaStreamEndCapture(cuda_dev(dev)->stream, &g));
    cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) return cuda_fail(e, "cudaGraphInstantiate", __FILE__, __LINE__);
    *out = exec;
    return CLEAVE_OK;
}

static cleave_status cuda_graph_launch(be_device *dev, void *graph) {
    CUDA_TRY(cudaGraphLaunch((cudaGraphExec_t)graph, cuda_dev(dev)->stream));
    return CLEAVE_OK;
}

static void cuda_graph_free(be_device *dev, void *graph) {
    if (graph) cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

static const be_ops cuda_ops = {
    cuda_name,        cuda_destroy,     cuda_mem_stats,   cuda_alloc,          cuda_free,
    NULL, /* map_host: weights are copied to the card */
    cuda_upload_mat,
    cuda_write,       cuda_read,        cuda_copy,        cuda_sync,           cuda_op_get_rows,
    cuda_op_rms_norm, cuda_op_matmul,   cuda_op_rope,     cuda_op_kv_store,    cuda_op_attention,
    cuda_op_swiglu,   cuda_op_add,      cuda_op_add_rms_norm, cuda_op_rope_store,
    NULL, /* matmul_swiglu: ffn covers it */
    cuda_graph_begin, cuda_graph_end, cuda_graph_launch, cuda_graph_free,
    cuda_op_matmul_multi, cuda_op_ffn,
    cuda_event_record, cuda_event_free, cuda_copy_from, cuda_copy2d_from,
    cuda_tier_granularity, cuda_tier_alloc, cuda_tier_stage, cuda_tier_join, cuda_tier_persist,
    cuda_tier_free,
};

bool be_is_cuda(const be_device *d) { return d && d->ops == &cuda_ops; }

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
    d->budget = budget_bytes;
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
    if (!d->budget && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) d->budget = free_b;
    cudaGetLastError();
    snprintf(d->name, sizeof d->name, "cuda:%d (%.200s)", ordinal, prop.name);
    d->n_sm = prop.multiProcessorCount;
    *out = &d->base;
    return CLEAVE_OK;
}
