/* Helpers every CUDA file calls: CUDA and cuBLAS failures turned into
 * statuses, and the device's grow-only scratch buffers. Kept apart from
 * cuda_device.cu (which names the ops of the other files) so no two files
 * call each other. */
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

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

cleave_status cuda_scratch(cuda_device *d, int slot, size_t bytes, void **out) {
    if (d->recording) slot += CUDA_SCRATCH_OPS;
    if (d->scratch_bytes[slot] < bytes) {
        if (d->scratch[slot] && d->recording) {
            /* no synchronizing inside a recording: set it aside, and tell
             * the engine that graphs holding it are stale */
            if (d->n_retired == CUDA_RETIRED_MAX)
                return err_set(CLEAVE_ERR_DEVICE, "%s: recorded steps outgrew their scratch %d times",
                               d->name, CUDA_RETIRED_MAX);
            d->retired[d->n_retired] = d->scratch[slot];
            d->retired_bytes[d->n_retired++] = d->scratch_bytes[slot];
            d->graph_epoch++;
        } else if (d->scratch[slot]) {
            CUDA_TRY(cudaStreamSynchronize(d->stream));
            CUDA_TRY(cudaFree(d->scratch[slot]));
            be_budget_release(&d->mem, d->scratch_bytes[slot]);
        }
        d->scratch[slot] = NULL;
        d->scratch_bytes[slot] = 0;
        size_t want = bytes + bytes / 4; /* headroom: fewer regrowths */
        /* (cudaMalloc is allowed in a relaxed-mode recording) */
        if (cudaMalloc(&d->scratch[slot], want) != cudaSuccess) {
            cudaGetLastError();
            d->scratch[slot] = NULL; /* not left to a failed call: destroy frees what is here */
            return err_set(CLEAVE_ERR_OOM, "out of memory on %s: %zu bytes of scratch", d->name,
                           want);
        }
        d->scratch_bytes[slot] = want;
        /* counted (the report's peak is what the process holds), not
         * refused: the plan's compute bytes already budget for it */
        be_budget_take(&d->mem, want);
    }
    *out = d->scratch[slot];
    return CLEAVE_OK;
}

cleave_status cuda_free_retired(cuda_device *d) {
    if (!d->n_retired) return CLEAVE_OK;
    CUDA_TRY(cudaStreamSynchronize(d->stream));
    for (int i = 0; i < d->n_retired; i++) {
        cudaFree(d->retired[i]);
        be_budget_release(&d->mem, d->retired_bytes[i]);
    }
    d->n_retired = 0;
    return CLEAVE_OK;
}
