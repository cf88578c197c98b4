/* The all-reduce for CUDA devices: one kernel per device, launched on each
 * device's stream, that exchanges the contributions directly. Decode sends
 * one 16 KB row per all-reduce, where a collective library's latency is
 * most of the cost; this one-shot kernel is the approach vLLM and
 * TensorRT-LLM take for small messages, and it is recorded into the decode
 * graphs like any kernel.
 *
 * Each device has an inbox with a slot per sender and call parity. Block
 * b of the kernel on device r pushes its chunk of r's buffer into its slot
 * in every other device's inbox (posted stores: the data travels while
 * the block goes on), raises its flag there, waits until every other
 * device's block b has raised its flag on r (so their chunks are in r's
 * inbox), then sums the chunk of every contributor in device order, r's
 * own from its buffer, the others from its inbox: all reads are local.
 * Slots alternate by call parity because a device may start call k + 1
 * while a slower one still reads call k; it cannot reach call k + 2 before
 * every device has finished call k (call k + 1's flags wait for them).
 * The fused decode form (all-reduce + residual add + norm) exchanges
 * through its own slots instead, with the flag inside each 8-byte word
 * (see k_all_reduce_add_norm).
 * Transport: inboxes and flags in each GPU's memory, written by the others
 * over peer access (NVLink), or all in pinned host memory mapped into
 * every GPU where there is no peer access. A device that never arrives (a
 * failed launch elsewhere) stops the kernel with a trap after 20 s instead
 * of hanging the process. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"
#include "base/options.h"
#include "comm/comm.h"
#include "comm/nccl_loader.h"
#include "base/mem.h"

#define AR_MAX_BLOCKS 128
#define AR_THREADS    256
#define AR_BLOCK_FLOATS 1024 /* a block per this many floats, up to AR_MAX_BLOCKS */
#define AR_FUSED_THREADS 1024
#define AR_FUSED_MAX_ROWS 8 /* decode and small batches; more rows: all-reduce, then the norm */
/* The fused kernel's slots hold each float beside the call number in one
 * 8-byte word (see k_all_reduce_add_norm): room for this many floats per
 * sender and call parity. */
#define AR_LL_MAX_FLOATS COMM_FUSED_MAX_FLOATS
/* Sums from this size go through NCCL where it is loaded. Measured on 2x
 * H200 (NVLink): the kernel 21.8 us for 4 MB, 331 us for 64 MB; NCCL 33 us
 * and 247 us: they cross near 11 MB. */
#define NCCL_MIN_KB_DEFAULT 12288

struct comm {
    const comm_ops *ops; /* ops, n and cap first, as comm.c expects */
    size_t n, cap;       /* cap: floats per slot, a multiple of 4 */
    be_device *devs[CLEAVE_MAX_DEVICES];
    bool host;           /* transport through pinned host memory */
    float *inbox[CLEAVE_MAX_DEVICES];     /* [2][n][cap] per device: what each sent it */
    unsigned *flags[CLEAVE_MAX_DEVICES];  /* [AR_MAX_BLOCKS][CLEAVE_MAX_DEVICES] per device */
    uint4 *ll[CLEAVE_MAX_DEVICES];        /* [2][n][AR_LL_MAX_FLOATS / 2] per device: fused calls */
    unsigned *state[CLEAVE_MAX_DEVICES];  /* per device, its own memory: calls made, blocks done */
    void *host_mem;                     /* host transport: inboxes and flags of all */
    /* The host transport's inboxes hold host_cap floats per slot (what a
     * decode step sums); sums larger than that (a prefill's) go through
     * big_inbox, cap floats per slot, pinned at the first of them: pinning
     * hundreds of MB costs about a second, which a context that only
     * decodes under the tensor split (a switch to it after the prompt)
     * should not pay. Graphs record decode-sized sums only, so they never
     * hold a pointer into the big inboxes. */
    size_t host_cap;
    float *big_inbox[CLEAVE_MAX_DEVICES];
    void *host_big;
    /* NCCL for sums of at least nccl_min floats over every device (a
     * prefill's all-reduce), opened at the first such sum: its set-up
     * costs a few hundred ms that a context which only decodes under the
     * tensor split, or only switches to it, need not pay. NULL until then,
     * and for good where it is off, absent or refused (nccl_tried). */
    nccl_lib *nccl;
    size_t nccl_min;
    bool nccl_off, nccl_tried;
    char kind[64];
};

struct ar_args {
    float *inbox[CLEAVE_MAX_DEVICES];
    unsigned *flags[CLEAVE_MAX_DEVICES];
    uint4 *ll[CLEAVE_MAX_DEVICES];
    unsigned *state;
    float *buf;
    size_t n, cap;
    int n_dev, rank;
    unsigned members, contrib; /* bit d: device d takes part / adds its buffer */
};

__device__ static inline unsigned ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ static inline void st_release(unsigned *p, unsigned v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ static inline unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* The number of this call (1, 2, ...): the device's count of finished
 * calls plus one, the same in every block. The slots alternate by its
 * parity. A device starts call k + 1 only after all of its call k, and
 * every block of call k waited for every other device to arrive at call
 * k, whose kernels start only after their call k - 1 finished: so when a
 * device writes call k + 1's slots (the parity of call k - 1) nobody still
 * reads call k - 1. (A count per block would not do: calls with other
 * grids cut the rows into other chunks.) */
__device__ static unsigned call_number(const ar_args &a) {
    __shared__ unsigned e;
    if (threadIdx.x == 0) e = *(volatile unsigned *)a.state + 1;
    __syncthreads();
    return e;
}

/* The last block out counts the call as finished. */
__device__ static void call_done(const ar_args &a, unsigned e) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(a.state + 1, 1u) == gridDim.x - 1) {
            a.state[1] = 0;
            __threadfence();
            atomicExch(a.state, e);
        }
    }
}

/* Raises this block's flag on every other member, then waits for theirs
 * (a trap after 20 s: a device that never comes means a failed launch
 * elsewhere, and a hang would be worse than an error). */
__device__ static void arrive_and_wait(const ar_args &a, unsigned e) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence_system(); /* the block's slot writes before its flag */
        for (int p = 0; p < a.n_dev; p++)
            if (p != a.rank && (a.members >> p & 1))
                st_release(a.flags[p] + blockIdx.x * CLEAVE_MAX_DEVICES + a.rank, e);
        unsigned long long t0 = now_ns();
        for (int p = 0; p < a.n_dev; p++) {
            if (p == a.rank || !(a.members >> p & 1)) continue;
            const unsigned *f = a.flags[a.rank] + blockIdx.x * CLEAVE_MAX_DEVICES + p;
            while ((int)(ld_acquire(f) - e) < 0)
                if (now_ns() - t0 > 20000000000ull) __trap();
        }
    }
    __syncthreads();
}

/* Where device `src`'s contribution to call parity `set` lands in device
 * dst's inbox. */
__device__ static inline float *in_slot(const ar_args &a, int dst, int src, size_t set) {
    return a.inbox[dst] + (set * (size_t)a.n_dev + (size_t)src) * a.cap;
}

/* This device's elements [i0, i1) pushed into every other member's inbox
 * (if it contributes): stores to another GPU are posted, so the data
 * travels while this block goes on to raise its flags, and the receivers
 * read their own memory. */
__device__ static void publish(const ar_args &a, size_t set, size_t i0, size_t i1) {
    if (!(a.contrib >> a.rank & 1)) return;
    size_t v1 = i1 / 4;
    for (int p = 0; p < a.n_dev; p++) {
        if (p == a.rank || !(a.members >> p & 1)) continue;
        float *dst = in_slot(a, p, a.rank, set);
        for (size_t v = i0 / 4 + threadIdx.x; v < v1; v += blockDim.x)
            ((float4 *)dst)[v] = ((const float4 *)a.buf)[v];
        for (size_t i = v1 * 4 + threadIdx.x; i < i1; i += blockDim.x) dst[i] = a.buf[i];
    }
}

#define AR_UNROLL 4 /* float4s in flight per thread and source */

__device__ static inline float4 add4(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

/* Contributor p's float4 k: from this device's inbox, or its own buffer. */
__device__ static inline float4 load4(const ar_args &a, int p, size_t set, size_t k) {
    if (p == a.rank) return ((const float4 *)a.buf)[k];
    return __ldcv((const float4 *)in_slot(a, a.rank, p, set) + k); /* another GPU wrote it */
}

/* The sum over contributors, in device order, of float4 k. */
__device__ static inline float4 sum4(const ar_args &a, size_t set, size_t k) {
    float4 s = make_float4(0, 0, 0, 0);
    bool first = true;
    for (int p = 0; p < a.n_dev; p++) {
        if (!(a.contrib >> p & 1)) continue;
        float4 x = load4(a, p, set, k);
        s = first ? x : add4(s, x);
        first = false;
    }
    return s;
}

/* Sums elements [i0, i1) of every contributor into buf; i0 is a multiple
 * of 4 and the buffers 16-byte aligned. */
__device__ static void sum_chunk(const ar_args &a, size_t set, size_t i0, size_t i1) {
    size_t v0 = i0 / 4, v1 = i1 / 4; /* whole float4s */
    for (size_t v = v0 + threadIdx.x; v < v1; v += (size_t)AR_THREADS * AR_UNROLL) {
        float4 acc[AR_UNROLL];
        bool first = true;
        for (int p = 0; p < a.n_dev; p++) {
            if (!(a.contrib >> p & 1)) continue;
#pragma unroll
            for (int u = 0; u < AR_UNROLL; u++) {
                size_t k = v + (size_t)u * AR_THREADS;
                if (k >= v1) break;
                float4 x = load4(a, p, set, k);
                acc[u] = first ? x : add4(acc[u], x);
            }
            first = false;
        }
#pragma unroll
        for (int u = 0; u < AR_UNROLL; u++) {
            size_t k = v + (size_t)u * AR_THREADS;
            if (k < v1) ((float4 *)a.buf)[k] = first ? make_float4(0, 0, 0, 0) : acc[u];
        }
    }
    for (size_t i = v1 * 4 + threadIdx.x; i < i1; i += AR_THREADS) { /* a ragged end */
        float s = 0.0f;
        bool first = true;
        for (int p = 0; p < a.n_dev; p++) {
            if (!(a.contrib >> p & 1)) continue;
            float x = p == a.rank ? a.buf[i] : __ldcv(in_slot(a, a.rank, p, set) + i);
            s = first ? x : s + x;
            first = false;
        }
        a.buf[i] = s;
    }
}

__global__ void __launch_bounds__(AR_THREADS) k_all_reduce(ar_args a) {
    cuda_pdl_wait(); /* launched as a dependent: the contributions must be final */
    /* chunks start on 16-byte boundaries: whole float4s but the last */
    size_t chunk = ((a.n + gridDim.x - 1) / gridDim.x + 3) & ~(size_t)3;
    size_t i0 = (size_t)blockIdx.x * chunk, i1 = i0 + chunk < a.n ? i0 + chunk : a.n;
    if (i0 > i1) i0 = i1;
    unsigned e = call_number(a);
    size_t set = (e & 1);
    publish(a, set, i0, i1);
    arrive_and_wait(a, e);
    sum_chunk(a, set, i0, i1);
    call_done(a, e);
}

/* The fused kernel's slot for contributions from `src` to `dst` in call
 * parity `set`: two 16-byte words per float4 of data. */
__device__ static inline uint4 *ll_slot(const ar_args &a, int dst, int src, size_t set) {
    return a.ll[dst] + (set * (size_t)a.n_dev + (size_t)src) * (AR_LL_MAX_FLOATS / 2);
}

__device__ static inline void st_ll(uint4 *p, uint4 v) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
}

__device__ static inline uint4 ld_ll(const uint4 *p) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

/* Waits until both halves of float4 k from `src` carry call number e (a
 * trap after 20 s, as in arrive_and_wait) and returns the data. */
__device__ static float4 ll_wait(const ar_args &a, int src, size_t set, size_t k, unsigned e) {
    const uint4 *p = ll_slot(a, a.rank, src, set) + 2 * k;
    uint4 lo = ld_ll(p), hi = ld_ll(p + 1);
    if (lo.y != e || lo.w != e || hi.y != e || hi.w != e) {
        unsigned long long t0 = now_ns();
        do {
            if (now_ns() - t0 > 20000000000ull) __trap();
            lo = ld_ll(p), hi = ld_ll(p + 1);
        } while (lo.y != e || lo.w != e || hi.y != e || hi.w != e);
    }
    return make_float4(__uint_as_float(lo.x), __uint_as_float(lo.z), __uint_as_float(hi.x),
                       __uint_as_float(hi.z));
}

/* h = x * rsqrt(mean square + eps) * w over the block's row [i0, i1) of
 * x; ss: this thread's share of the row's sum of squares. */
__device__ static void write_norm(const float *x, const float *w, float *h, size_t i0, size_t i1,
                                  size_t width, float eps, float ss) {
    float inv = rsqrtf(cuda_block_sum(ss) / (float)width + eps);
    for (size_t v = i0 / 4 + threadIdx.x; v < i1 / 4; v += AR_FUSED_THREADS) {
        float4 xv = ((const float4 *)x)[v], wv = ((const float4 *)w)[v - i0 / 4];
        ((float4 *)h)[v] = make_float4(xv.x * inv * wv.x, xv.y * inv * wv.y, xv.z * inv * wv.z,
                                       xv.w * inv * wv.w);
    }
}

/* Decode-sized batches: the all-reduce, the residual add and the norm
 * that follows it in one kernel, a block per row, so a tensor-split step
 * pays one launch per all-reduce. The exchange is a "low-latency" one
 * (NCCL's LL protocol has the idea): every float travels beside the call
 * number in one 8-byte word, which a store writes whole, so a receiver
 * that reads the call number in a word has its value. A thread pushes its
 * float4s to the other devices and then waits for exactly the float4s it
 * sums: no fence, no flag, one crossing of the link. Stale words of call
 * k - 2 (same parity) carry another number. */
__global__ void __launch_bounds__(AR_FUSED_THREADS)
    k_all_reduce_add_norm(ar_args a, float *x, const float *w, float *h, size_t width, float eps) {
    cuda_pdl_wait();
    size_t i0 = (size_t)blockIdx.x * width, i1 = i0 + width;
    unsigned e = call_number(a);
    size_t set = (e & 1);
    if (a.contrib >> a.rank & 1) {
        for (size_t v = i0 / 4 + threadIdx.x; v < i1 / 4; v += AR_FUSED_THREADS) {
            float4 r = ((const float4 *)a.buf)[v];
            uint4 lo = make_uint4(__float_as_uint(r.x), e, __float_as_uint(r.y), e);
            uint4 hi = make_uint4(__float_as_uint(r.z), e, __float_as_uint(r.w), e);
            for (int p = 0; p < a.n_dev; p++) {
                if (p == a.rank || !(a.members >> p & 1)) continue;
                uint4 *dst = ll_slot(a, p, a.rank, set) + 2 * v;
                st_ll(dst, lo);
                st_ll(dst + 1, hi);
            }
        }
    }
    float ss = 0.0f;
    for (size_t v = i0 / 4 + threadIdx.x; v < i1 / 4; v += AR_FUSED_THREADS) {
        /* the sum over contributors in device order: the same bits everywhere */
        float4 r = make_float4(0, 0, 0, 0);
        bool first = true;
        for (int p = 0; p < a.n_dev; p++) {
            if (!(a.contrib >> p & 1)) continue;
            float4 c = p == a.rank ? ((const float4 *)a.buf)[v] : ll_wait(a, p, set, v, e);
            r = first ? c : add4(r, c);
            first = false;
        }
        float4 xv = add4(((float4 *)x)[v], r);
        ((float4 *)x)[v] = xv;
        ss += xv.x * xv.x + xv.y * xv.y + xv.z * xv.z + xv.w * xv.w;
    }
    /* the GEMV after this may start streaming its weights (it reads h
     * only once this grid has finished) */
    cuda_pdl_trigger();
    write_norm(x, w, h, i0, i1, width, eps, ss);
    call_done(a, e);
}

/* The same through the flag handshake, for the host-memory transport:
 * there every poll of a word is a read across PCIe, and waiting on each
 * float4 measured 24 us per call against 10 us for one flag per block. */
__global__ void __launch_bounds__(AR_FUSED_THREADS)
    k_all_reduce_add_norm_flags(ar_args a, float *x, const float *w, float *h, size_t width, float eps) {
    cuda_pdl_wait();
    size_t i0 = (size_t)blockIdx.x * width, i1 = i0 + width;
    unsigned e = call_number(a);
    size_t set = (e & 1);
    publish(a, set, i0, i1);
    arrive_and_wait(a, e);
    cuda_pdl_trigger(); /* as in k_all_reduce_add_norm */
    float ss = 0.0f;
    for (size_t v = i0 / 4 + threadIdx.x; v < i1 / 4; v += AR_FUSED_THREADS) {
        float4 r = sum4(a, set, v), xv = ((float4 *)x)[v];
        xv = add4(xv, r);
        ((float4 *)x)[v] = xv;
        ss += xv.x * xv.x + xv.y * xv.y + xv.z * xv.z + xv.w * xv.w;
    }
    write_norm(x, w, h, i0, i1, width, eps, ss);
    call_done(a, e);
}

static void cuda_comm_free(comm *c) {
    for (size_t d = 0; d < c->n; d++) {
        be_device *dev = c->devs[d];
        cudaSetDevice(((cuda_device *)dev->impl)->ordinal);
        be_sync(dev);
        if (!c->host) {
            be_free(dev, c->inbox[d]);
            be_free(dev, c->flags[d]);
            be_free(dev, c->ll[d]);
        }
        be_free(dev, c->state[d]);
    }
    if (c->host_mem) cudaFreeHost(c->host_mem);
    if (c->host_big) cudaFreeHost(c->host_big);
    nccl_close(c->nccl);
    free(c);
}

static cleave_status zero(be_device *dev, void *p, size_t bytes) {
    cuda_device *d = (cuda_device *)dev->impl;
    cudaSetDevice(d->ordinal);
    CUDA_TRY(cudaMemsetAsync(p, 0, bytes, d->stream));
    CUDA_TRY(cudaStreamSynchronize(d->stream));
    return CLEAVE_OK;
}

/* The arguments every device's launch shares; false (error set) on a
 * request the communicator cannot serve. */
static bool prepare(comm *c, float *const *bufs, const bool *contributes, size_t n_floats,
                    ar_args *a) {
    if (n_floats > c->cap) {
        err_set(CLEAVE_ERR_INVALID_ARG, "all-reduce of %zu floats (room for %zu)", n_floats, c->cap);
        return false;
    }
    bool big = c->host && n_floats > c->host_cap;
    if (big && !c->host_big) {
        size_t per = 2 * c->n * c->cap * sizeof(float);
        if (cudaHostAlloc(&c->host_big, c->n * per, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
            cudaGetLastError();
            c->host_big = NULL;
            err_set(CLEAVE_ERR_OOM, "all-reduce: no %zu bytes of pinned host memory", c->n * per);
            return false;
        }
        for (size_t d = 0; d < c->n; d++) c->big_inbox[d] = (float *)((char *)c->host_big + d * per);
    }
    memset(a, 0, sizeof *a);
    a->n = n_floats, a->cap = c->host && !big ? c->host_cap : c->cap, a->n_dev = (int)c->n;
    for (size_t d = 0; d < c->n; d++) {
        if ((uintptr_t)bufs[d] % 16) {
            err_set(CLEAVE_ERR_INVALID_ARG, "all-reduce: buffer of device %zu not 16-byte aligned", d);
            return false;
        }
        a->inbox[d] = big ? c->big_inbox[d] : c->inbox[d];
        a->flags[d] = c->flags[d];
        a->ll[d] = c->ll[d];
        if (bufs[d]) a->members |= 1u << d;
        if (bufs[d] && contributes[d]) a->contrib |= 1u << d;
    }
    return true;
}

/* Through NCCL: devices that do not contribute take part with zeros. */
static cleave_status nccl_sum(comm *c, float *const *bufs, const bool *contributes,
                              size_t n_floats) {
    void *streams[CLEAVE_MAX_DEVICES];
    for (size_t d = 0; d < c->n; d++) {
        cuda_device *dev = cuda_dev(c->devs[d]);
        streams[d] = dev->stream;
        if (!contributes[d]) CUDA_TRY(cudaMemsetAsync(bufs[d], 0, n_floats * sizeof(float), dev->stream));
    }
    return nccl_all_reduce(c->nccl, bufs, streams, n_floats);
}

/* NCCL, opened on first use (true: it serves the call). Off with
 * CLEAVE_NCCL=0; where it is absent or refuses, the kernel serves every
 * size. */
static bool open_nccl(comm *c) {
    if (c->nccl || c->nccl_off || c->nccl_tried) return c->nccl != NULL;
    c->nccl_tried = true;
    int ord[CLEAVE_MAX_DEVICES];
    for (size_t d = 0; d < c->n; d++) ord[d] = ((cuda_device *)c->devs[d]->impl)->ordinal;
    if (nccl_open(ord, c->n, &c->nccl)) {
        err_clear(); /* optional */
        c->nccl = NULL;
        return false;
    }
    snprintf(c->kind, sizeof c->kind, "%s + %s", c->host ? "cuda-host" : "cuda-p2p", nccl_version(c->nccl));
    return true;
}

static cleave_status cuda_all_reduce_sum(comm *c, float *const *bufs, const bool *contributes,
                                         size_t n_floats) {
    ar_args a;
    if (!prepare(c, bufs, contributes, n_floats, &a)) return CLEAVE_ERR_INVALID_ARG;
    if (!n_floats) return CLEAVE_OK;
    bool everyone = true;
    for (size_t d = 0; d < c->n; d++) everyone &= bufs[d] != NULL;
    if (everyone && n_floats >= c->nccl_min && open_nccl(c)) return nccl_sum(c, bufs, contributes, n_floats);
    size_t blocks = (n_floats + AR_BLOCK_FLOATS - 1) / AR_BLOCK_FLOATS;
    if (blocks > AR_MAX_BLOCKS) blocks = AR_MAX_BLOCKS;
    for (size_t d = 0; d < c->n; d++) {
        if (!bufs[d]) continue;
        cuda_device *dev = cuda_dev(c->devs[d]);
        a.rank = (int)d, a.buf = bufs[d], a.state = c->state[d];
        CUDA_LAUNCH(dev, k_all_reduce, (unsigned)blocks, AR_THREADS, 0, a);
    }
    return CLEAVE_OK;
}

static bool cuda_can_fuse(const comm *c, size_t rows, size_t width) {
    return rows >= 1 && rows <= AR_FUSED_MAX_ROWS && width % 4 == 0 && width >= 4 &&
           rows * width <= c->cap && rows * width <= AR_LL_MAX_FLOATS;
}

static cleave_status cuda_all_reduce_add_norm(comm *c, float *const *bufs, const bool *contributes,
                                              float *const *x, const float *const *w,
                                              float *const *h, size_t rows, size_t width,
                                              float eps) {
    ar_args a;
    if (!cuda_can_fuse(c, rows, width))
        return err_set(CLEAVE_ERR_INVALID_ARG, "fused all-reduce of %zu rows of %zu", rows, width);
    if (!prepare(c, bufs, contributes, rows * width, &a)) return CLEAVE_ERR_INVALID_ARG;
    for (size_t d = 0; d < c->n; d++) {
        if (!bufs[d]) continue;
        if ((uintptr_t)x[d] % 16 || (uintptr_t)h[d] % 16 || (uintptr_t)w[d] % 16)
            return err_set(CLEAVE_ERR_INVALID_ARG, "fused all-reduce: rows not 16-byte aligned");
    }
    for (size_t d = 0; d < c->n; d++) {
        if (!bufs[d]) continue;
        cuda_device *dev = cuda_dev(c->devs[d]);
        a.rank = (int)d, a.buf = bufs[d], a.state = c->state[d];
        if (c->host)
            CUDA_LAUNCH(dev, k_all_reduce_add_norm_flags, (unsigned)rows, AR_FUSED_THREADS, 0, a,
                        x[d], w[d], h[d], width, eps);
        else
            CUDA_LAUNCH(dev, k_all_reduce_add_norm, (unsigned)rows, AR_FUSED_THREADS, 0, a, x[d],
                        w[d], h[d], width, eps);
    }
    return CLEAVE_OK;
}

static const char *cuda_comm_kind(const comm *c) { return c->kind; }

/* NCCL's calls are not recorded: the sizes it takes are not graph-safe. */
static bool cuda_graph_safe(const comm *c, size_t n_floats) {
    return c->nccl_off || n_floats < c->nccl_min;
}

static const comm_ops cuda_comm_ops = {cuda_all_reduce_sum, cuda_comm_free, cuda_graph_safe,
                                       cuda_comm_kind, cuda_can_fuse, cuda_all_reduce_add_norm};

cleave_status comm_cuda_create(be_device *const *devs, size_t n, size_t max_floats, comm **out) {
    *out = NULL;
    comm *c = (comm *)mem_calloc(1, sizeof *c, "CUDA communicator");
    if (!c) return CLEAVE_ERR_OOM;
    c->ops = &cuda_comm_ops;
    c->n = n;
    c->cap = (max_floats + 3) & ~(size_t)3;
    memcpy(c->devs, devs, n * sizeof *devs);
    for (size_t a = 0; a < n; a++)
        for (size_t b = a + 1; b < n; b++)
            if (!cuda_peer_access((cuda_device *)devs[a]->impl, (cuda_device *)devs[b]->impl))
                c->host = true;
    c->host_cap = c->cap < AR_LL_MAX_FLOATS ? c->cap : AR_LL_MAX_FLOATS;
    size_t slot_bytes = 2 * n * (c->host ? c->host_cap : c->cap) * sizeof(float); /* an inbox */
    size_t flag_bytes = AR_MAX_BLOCKS * CLEAVE_MAX_DEVICES * sizeof(unsigned);
    /* the fused kernel's own slots: peer transport only (the host
     * transport's fused kernel uses the flags) */
    size_t ll_bytes = c->host ? 0 : 2 * n * (size_t)AR_LL_MAX_FLOATS * 2 * sizeof(float);
    cleave_status st = CLEAVE_OK;
    if (c->host) {
        size_t per = slot_bytes + flag_bytes + ll_bytes;
        if (cudaHostAlloc(&c->host_mem, n * per, cudaHostAllocPortable | cudaHostAllocMapped) !=
            cudaSuccess) {
            cudaGetLastError();
            c->host_mem = NULL;
            st = err_set(CLEAVE_ERR_OOM, "all-reduce: no %zu bytes of pinned host memory", n * per);
        } else {
            memset(c->host_mem, 0, n * per);
            for (size_t d = 0; d < n; d++) {
                char *base = (char *)c->host_mem + d * per;
                c->inbox[d] = (float *)base;
                c->flags[d] = (unsigned *)(base + slot_bytes);
            }
        }
    }
    for (size_t d = 0; !st && d < n; d++) {
        be_device *dev = devs[d];
        if (!c->host) {
            c->inbox[d] = (float *)be_alloc(dev, slot_bytes, "all-reduce inbox");
            c->flags[d] = (unsigned *)be_alloc(dev, flag_bytes, "all-reduce flags");
            c->ll[d] = (uint4 *)be_alloc(dev, ll_bytes, "all-reduce slots (fused)");
            if (!c->inbox[d] || !c->flags[d] || !c->ll[d]) st = CLEAVE_ERR_OOM;
            else if (!(st = zero(dev, c->flags[d], flag_bytes))) st = zero(dev, c->ll[d], ll_bytes);
        }
        if (!st) {
            c->state[d] = (unsigned *)be_alloc(dev, 2 * sizeof(unsigned), "all-reduce state");
            st = c->state[d] ? zero(dev, c->state[d], 2 * sizeof(unsigned)) : CLEAVE_ERR_OOM;
        }
    }
    if (st) {
        cuda_comm_free(c);
        return st;
    }
    const cleave_env_options *opt = options_get();
    c->nccl_off = n < 2 || opt->nccl_off;
    c->nccl_min = (size_t)(opt->nccl_min_kb >= 0 ? opt->nccl_min_kb : NCCL_MIN_KB_DEFAULT) * 1024 / sizeof(float);
    snprintf(c->kind, sizeof c->kind, "%s%s", c->host ? "cuda-host" : "cuda-p2p",
             c->nccl_off ? "" : " + NCCL (from the first large sum)");
    *out = c;
    return CLEAVE_OK;
}
