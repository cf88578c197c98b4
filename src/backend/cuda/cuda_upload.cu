/* Large host-to-device writes (weights, mostly) at the speed of the link.
 * A copy straight from pageable memory, such as the mapped model file, is
 * staged by the driver through its own small pinned buffers, from one
 * thread and in turn with the DMA: placing 16 GB of bf16 weights on two
 * H200s ran at ~3.3 GB/s. Here the source goes through CUDA_UP_SLOTS
 * pinned chunks of the device instead: several threads copy chunk k into
 * its pinned buffer (reading page-cached file pages, first-touch faults
 * included, scales with threads: one reaches ~5-8 GB/s) while the copy
 * engine moves the chunks before it to the card (~55 GB/s from pinned
 * memory), so a write runs at the slower of the two rates rather than at
 * one after the other. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/threadpool.h"
#include "base/options.h"
#include "cuda_common.cuh"

/* 4 x 16 MiB of pinned memory per device: a chunk's fixed costs (a pool
 * dispatch, an event wait, a copy call: tens of microseconds) are a few
 * percent of its ~0.5 ms fill, and four chunks keep the copy engine fed. */
#define UP_CHUNK       ((size_t)16 << 20)
#define UP_PIECE       ((size_t)1 << 20) /* a fill task: 16 a chunk balance 8 threads */
#define UP_MAX_THREADS 8                 /* more add little: the memory system is the limit */

/* Threads that fill the chunks: CLEAVE_UPLOAD_THREADS=n to measure (0 turns
 * the pipeline off: every write is a cuda_upload_sync), else the online
 * CPUs, at most UP_MAX_THREADS. */
static long upload_threads(void) {
    if (options_get()->upload_threads >= 0) { /* set, 0 included */
        long v = options_get()->upload_threads;
        return v < 0 ? 0 : v > 64 ? 64 : v;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n < UP_MAX_THREADS ? n : UP_MAX_THREADS;
}

/* The pinned chunks, their events and the fill threads, made on the first
 * large write. Whatever cannot be had turns the pipeline off for good (the
 * synchronous path serves: slower, still correct); no pool only means the
 * calling thread fills alone. */
static bool upload_ready(cuda_device *d) {
    if (d->up_state) return d->up_state == 1;
    d->up_state = 2;
    long threads = upload_threads();
    if (!threads) return false;
    cudaSetDevice(d->ordinal);
    for (int i = 0; i < CUDA_UP_SLOTS; i++) {
        if (cudaMallocHost((void **)&d->up_host[i], UP_CHUNK) != cudaSuccess)
            d->up_host[i] = NULL;
        else if (cudaEventCreateWithFlags(&d->up_done[i], cudaEventDisableTiming) != cudaSuccess)
            d->up_done[i] = NULL;
        if (!d->up_host[i] || !d->up_done[i]) {
            cudaGetLastError();
            cuda_upload_free(d);
            return false;
        }
    }
    if (threads > 1 && threadpool_create((int)threads, &d->up_pool) != CLEAVE_OK) d->up_pool = NULL;
    d->up_state = 1;
    return true;
}

void cuda_upload_free(cuda_device *d) {
    cudaSetDevice(d->ordinal);
    for (int i = 0; i < CUDA_UP_SLOTS; i++) {
        /* no copy may still read a chunk when it is freed */
        if (d->up_done[i]) cudaEventSynchronize(d->up_done[i]);
        if (d->up_host[i]) cudaFreeHost(d->up_host[i]);
        if (d->up_done[i]) cudaEventDestroy(d->up_done[i]);
        d->up_host[i] = NULL;
        d->up_done[i] = NULL;
    }
    cudaGetLastError();
    threadpool_destroy(d->up_pool);
    d->up_pool = NULL;
}

typedef struct {
    char *to;
    const char *from;
    size_t n;
} fill_job;

static void fill_piece(void *ctx, size_t task, int thread) {
    (void)thread;
    const fill_job *j = (const fill_job *)ctx;
    size_t lo = task * UP_PIECE, len = j->n - lo < UP_PIECE ? j->n - lo : UP_PIECE;
    memcpy(j->to + lo, j->from + lo, len);
}

/* n <= UP_CHUNK bytes through the next slot: wait until the slot's previous
 * copy has read it (an event never recorded counts as done), fill it from
 * src on the pool, queue its copy, and mark the slot busy until that copy
 * has run. */
static cleave_status upload_chunk(cuda_device *d, char *dst, const char *src, size_t n) {
    unsigned i = d->up_next++ % CUDA_UP_SLOTS;
    CUDA_TRY(cudaEventSynchronize(d->up_done[i]));
    fill_job j = {d->up_host[i], src, n};
    threadpool_run(d->up_pool, (n + UP_PIECE - 1) / UP_PIECE, fill_piece, &j);
    CUDA_TRY(cudaMemcpyAsync(dst, d->up_host[i], n, cudaMemcpyHostToDevice, d->stream));
    CUDA_TRY(cudaEventRecord(d->up_done[i], d->stream));
    return CLEAVE_OK;
}

/* No stream sync at the end, on purpose. When this returns, every byte of
 * src has been copied into a pinned chunk by the host, so src is the
 * caller's again (to reuse, free or unmap) although the last chunks' DMA
 * may still run. What must not be touched before its DMA has run is the
 * pinned chunk, and that is ours: the next fill of a slot waits for the
 * slot's event, and cuda_upload_free waits for every event before freeing.
 * dst is written in stream order, so kernels, reads (which sync), other
 * devices' copies (which wait for an event recorded on this stream) and
 * frees (cuda_free syncs the stream first) all see it complete. Meanwhile
 * the host fills the next tensor's chunks: across a model's ~300 tensors
 * the pipeline never drains. A DMA failure, like any asynchronous error,
 * is reported by the next call that synchronizes.
 *
 * On a failure midway, earlier chunks' copies may be in flight, and a
 * failed event record would leave a slot marked free while its copy is
 * queued: drain the stream before returning, so the slots are idle
 * whatever the caller does next (typically free dst). */
cleave_status cuda_upload(cuda_device *d, void *dst, const void *src, size_t n) {
    if (!upload_ready(d)) return cuda_upload_sync(d, dst, src, n);
    cleave_status st = CLEAVE_OK;
    for (size_t off = 0; !st && off < n; off += UP_CHUNK)
        st = upload_chunk(d, (char *)dst + off, (const char *)src + off,
                          n - off < UP_CHUNK ? n - off : UP_CHUNK);
    if (!st) return CLEAVE_OK;
    if (cudaStreamSynchronize(d->stream) == cudaSuccess) d->staging_used = 0;
    cudaGetLastError();
    return err_wrap(st, "%s: writing %zu bytes to the device", d->name, n);
}

cleave_status cuda_upload_sync(cuda_device *d, void *dst, const void *src, size_t n) {
    CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, d->stream));
    /* the driver may still read a pageable src after the call returns */
    CUDA_TRY(cudaStreamSynchronize(d->stream));
    d->staging_used = 0; /* everything staged before has been consumed */
    return CLEAVE_OK;
}
