/* Activations moving between two GPUs without host syncs: a peer copy
 * where the devices have peer access, else a copy staged through pinned
 * host memory (device to host on the source's copy stream, host to device
 * on the destination's stream). Order comes from events, so a pipeline
 * stage hands a micro-batch on while both devices keep computing. */
#include <stdlib.h>

#include "cuda_common.cuh"
#include "base/options.h"

#define XFER_SLOTS 4

static bool p2p_disabled(void) { return options_get()->no_p2p; }

bool cuda_peer_access(cuda_device *a, cuda_device *b) {
    /* CLEAVE_NO_P2P holds for two handles of one GPU too, so a one-GPU
     * machine tests the staged paths */
    if (p2p_disabled()) return false;
    if (a->ordinal == b->ordinal) return true;
    if (!a->peer[b->ordinal]) {
        int ab = 0, ba = 0;
        cudaDeviceCanAccessPeer(&ab, a->ordinal, b->ordinal);
        cudaDeviceCanAccessPeer(&ba, b->ordinal, a->ordinal);
        bool ok = ab && ba;
        if (ok) {
            cudaSetDevice(a->ordinal);
            cudaError_t e = cudaDeviceEnablePeerAccess(b->ordinal, 0);
            if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) ok = false;
            cudaSetDevice(b->ordinal);
            e = cudaDeviceEnablePeerAccess(a->ordinal, 0);
            if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) ok = false;
            cudaGetLastError(); /* "already enabled" is not an error here */
        }
        a->peer[b->ordinal] = ok ? 1 : 2;
        b->peer[a->ordinal] = ok ? 1 : 2;
    }
    return a->peer[b->ordinal] == 1;
}

static cleave_status new_event(cuda_device *d, cudaEvent_t *ev) {
    if (*ev) return CLEAVE_OK;
    cudaSetDevice(d->ordinal);
    CUDA_TRY(cudaEventCreateWithFlags(ev, cudaEventDisableTiming));
    return CLEAVE_OK;
}

cleave_status cuda_event_record(be_device *dev, void **ev) {
    cuda_device *d = cuda_dev(dev);
    cudaEvent_t e = (cudaEvent_t)*ev;
    if (!e) {
        cleave_status st = new_event(d, &e);
        if (st) return st;
        *ev = e;
    }
    CUDA_TRY(cudaEventRecord(e, d->stream));
    return CLEAVE_OK;
}

void cuda_event_free(be_device *dev, void *ev) {
    if (!ev) return;
    cuda_dev(dev);
    cudaEventDestroy((cudaEvent_t)ev);
}

/* The event the copy waits for on the source: the caller's, or one
 * recorded now. */
static cleave_status source_ready(cuda_device *f, void *ready, cudaEvent_t *out) {
    if (ready) {
        *out = (cudaEvent_t)ready;
        return CLEAVE_OK;
    }
    cleave_status st = new_event(f, &f->mark);
    if (st) return st;
    cudaSetDevice(f->ordinal);
    CUDA_TRY(cudaEventRecord(f->mark, f->stream));
    *out = f->mark;
    return CLEAVE_OK;
}

/* Pinned slots of the destination, XFER_SLOT_BYTES each, made on the
 * first staged copy; a copy larger than a slot goes through them in turn,
 * so the pinned memory stays small (a split-mode switch stages gigabytes:
 * slots the size of the largest tensor took seconds to pin) and the copy
 * from the source of one chunk overlaps the copy to the destination of
 * the one before. */
#define XFER_SLOT_BYTES ((size_t)32 << 20)

static cleave_status host_slots(cuda_device *d) {
    if (d->xfer_cap) return CLEAVE_OK;
    cudaSetDevice(d->ordinal);
    for (int i = 0; i < XFER_SLOTS; i++) {
        if (cudaMallocHost((void **)&d->xfer_host[i], XFER_SLOT_BYTES) != cudaSuccess) {
            cudaGetLastError();
            for (int k = 0; k < i; k++) cudaFreeHost(d->xfer_host[k]), d->xfer_host[k] = NULL;
            d->xfer_host[i] = NULL;
            return err_set(CLEAVE_ERR_OOM, "%s: no %zu bytes of pinned host memory for copies between GPUs",
                           d->name, XFER_SLOTS * XFER_SLOT_BYTES);
        }
        cleave_status st = new_event(d, &d->xfer_free[i]);
        if (st) return st;
    }
    d->xfer_cap = XFER_SLOT_BYTES;
    return CLEAVE_OK;
}

/* height rows of width bytes (width * height <= a slot) through the next
 * pinned slot of the destination (rows packed there): device to host on
 * the source's copy stream, host to device on the destination's stream. */
static cleave_status staged_chunk(cuda_device *d, void *dst, size_t dpitch, cuda_device *f,
                                  const void *src, size_t spitch, size_t width, size_t height,
                                  cudaEvent_t ready) {
    unsigned i = d->xfer_next++ % XFER_SLOTS;
    unsigned k = f->done_next++ % XFER_SLOTS;
    cleave_status st = new_event(f, &f->xfer_done[k]);
    if (st) return st;
    cudaSetDevice(f->ordinal);
    /* the slot is free once its last upload ran (an event never recorded
     * counts as done) */
    CUDA_TRY(cudaStreamWaitEvent(f->copy_stream, d->xfer_free[i], 0));
    CUDA_TRY(cudaStreamWaitEvent(f->copy_stream, ready, 0));
    CUDA_TRY(cudaMemcpy2DAsync(d->xfer_host[i], width, src, spitch, width, height,
                               cudaMemcpyDeviceToHost, f->copy_stream));
    CUDA_TRY(cudaEventRecord(f->xfer_done[k], f->copy_stream));
    cudaSetDevice(d->ordinal);
    CUDA_TRY(cudaStreamWaitEvent(d->stream, f->xfer_done[k], 0));
    CUDA_TRY(cudaMemcpy2DAsync(dst, dpitch, d->xfer_host[i], width, width, height,
                               cudaMemcpyHostToDevice, d->stream));
    CUDA_TRY(cudaEventRecord(d->xfer_free[i], d->stream));
    return CLEAVE_OK;
}

/* A copy between GPUs without peer access, staged through pinned host
 * memory a slot at a time: packed rows when a slot holds whole rows, else
 * each row in slot-sized pieces (a contiguous copy is one long row). */
static cleave_status staged_copy(cuda_device *d, void *dst, size_t dpitch, cuda_device *f,
                                 const void *src, size_t spitch, size_t width, size_t height,
                                 cudaEvent_t ready) {
    cleave_status st = host_slots(d);
    if (st) return st;
    if (!f->copy_stream) {
        cudaSetDevice(f->ordinal);
        CUDA_TRY(cudaStreamCreateWithFlags(&f->copy_stream, cudaStreamNonBlocking));
    }
    if (height > 1 && spitch == width && dpitch == width) width *= height, height = 1; /* contiguous */
    if (height == 1) spitch = dpitch = width; /* one row: its pitch is its width */
    const char *s = (const char *)src;
    char *t = (char *)dst;
    if (width <= XFER_SLOT_BYTES) {
        size_t rows = XFER_SLOT_BYTES / width;
        for (size_t r = 0; !st && r < height; r += rows)
            st = staged_chunk(d, t + r * dpitch, dpitch, f, s + r * spitch, spitch, width,
                              height - r < rows ? height - r : rows, ready);
        return st;
    }
    for (size_t r = 0; !st && r < height; r++)
        for (size_t o = 0; !st && o < width; o += XFER_SLOT_BYTES) {
            size_t w = width - o < XFER_SLOT_BYTES ? width - o : XFER_SLOT_BYTES;
            st = staged_chunk(d, t + r * dpitch + o, w, f, s + r * spitch + o, w, w, 1, ready);
        }
    return st;
}

/* A peer copy on the destination's stream: one call for one row, a 3-D
 * peer copy of one layer for several. */
static cudaError_t peer_copy(cuda_device *d, void *dst, size_t dpitch, cuda_device *f,
                             const void *src, size_t spitch, size_t width, size_t height) {
    if (height == 1) return cudaMemcpyPeerAsync(dst, d->ordinal, src, f->ordinal, width, d->stream);
    if (d->ordinal == f->ordinal)
        return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice,
                                 d->stream);
    cudaMemcpy3DPeerParms p = {};
    p.srcPtr = make_cudaPitchedPtr((void *)src, spitch, width, height);
    p.srcDevice = f->ordinal;
    p.dstPtr = make_cudaPitchedPtr(dst, dpitch, width, height);
    p.dstDevice = d->ordinal;
    p.extent = make_cudaExtent(width, height, 1);
    return cudaMemcpy3DPeerAsync(&p, d->stream);
}

cleave_status cuda_copy2d_from(be_device *dev, void *dst, size_t dpitch, be_device *from_dev,
                               const void *src, size_t spitch, size_t width, size_t height,
                               void *ready) {
    if (!width || !height) return CLEAVE_OK;
    if (!be_is_cuda(from_dev))
        return err_set(CLEAVE_ERR_INVALID_ARG, "copy_from: the source is not a CUDA device");
    if (!dst || !src || (height > 1 && (dpitch < width || spitch < width)))
        return err_set(CLEAVE_ERR_INVALID_ARG, "copy_from: %zu rows of %zu bytes, pitches %zu and %zu",
                       height, width, spitch, dpitch);
    cuda_device *d = cuda_dev(dev), *f = (cuda_device *)from_dev->impl;
    /* one source may feed several destinations from several threads */
    pthread_mutex_lock(&f->xfer_lock);
    cudaEvent_t r = NULL;
    cleave_status st = source_ready(f, ready, &r);
    if (!st && cuda_peer_access(d, f)) {
        cudaSetDevice(d->ordinal);
        cudaError_t e = cudaStreamWaitEvent(d->stream, r, 0);
        if (e == cudaSuccess) e = peer_copy(d, dst, dpitch, f, src, spitch, width, height);
        if (e != cudaSuccess) st = cuda_fail(e, "peer copy", __FILE__, __LINE__);
    } else if (!st) {
        st = staged_copy(d, dst, dpitch, f, src, spitch, width, height, r);
    }
    pthread_mutex_unlock(&f->xfer_lock);
    cudaSetDevice(d->ordinal);
    return st;
}

cleave_status cuda_copy_from(be_device *dev, void *dst, be_device *from_dev, const void *src,
                             size_t n, void *ready) {
    return cuda_copy2d_from(dev, dst, n, from_dev, src, n, n, 1, ready);
}

void cuda_peer_free(cuda_device *d) {
    cudaSetDevice(d->ordinal);
    if (d->copy_stream) cudaStreamSynchronize(d->copy_stream);
    for (int i = 0; i < XFER_SLOTS; i++) {
        if (d->xfer_host[i]) cudaFreeHost(d->xfer_host[i]);
        if (d->xfer_free[i]) cudaEventDestroy(d->xfer_free[i]);
        if (d->xfer_done[i]) cudaEventDestroy(d->xfer_done[i]);
    }
    if (d->mark) cudaEventDestroy(d->mark);
    if (d->copy_stream) cudaStreamDestroy(d->copy_stream);
}
