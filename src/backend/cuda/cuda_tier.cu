/* The tiered KV cache on a GPU, with the driver's virtual memory calls:
 * a K or V buffer reserves one address range and maps a device
 * allocation over its head and a pinned host allocation
 * (CU_MEM_LOCATION_TYPE_HOST) over the rest, so kernels and copies see
 * one array; a second range maps the same device allocation followed by
 * the device's staging buffer of the buffer's slot, which the copy engine
 * fills from the host part on a stream of its own, beside the kernels
 * (the engine starts layer l + 2's once layer l's attention is queued),
 * before attention reads that range. The host part is pinned on the GPU's
 * NUMA node where the driver can place it there. The driver calls are
 * reached through cudaGetDriverEntryPoint, so cleave links the runtime
 * alone. */
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"
#include "base/options.h"
#include "base/mem.h"

typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*free_va_fn)(CUdeviceptr, size_t);
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*unmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*access_fn)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*gran_fn)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);

static struct {
    bool tried, ok;
    create_fn create;
    release_fn release;
    reserve_fn reserve;
    free_va_fn free_va;
    map_fn map;
    unmap_fn unmap;
    access_fn access;
    gran_fn gran;
} vmm;
static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;

static bool entry(const char *name, void **fn) {
    cudaDriverEntryPointQueryResult q;
    /* the calls as of CUDA 12.0, whose signatures these types spell */
    return cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
           q == cudaDriverEntryPointSuccess && *fn;
}

/* The driver's virtual memory calls, looked up once. */
static bool vmm_ready(void) {
    pthread_mutex_lock(&vmm_lock);
    if (!vmm.tried) {
        vmm.tried = true;
        vmm.ok = entry("cuMemCreate", (void **)&vmm.create) && entry("cuMemRelease", (void **)&vmm.release) &&
                 entry("cuMemAddressReserve", (void **)&vmm.reserve) &&
                 entry("cuMemAddressFree", (void **)&vmm.free_va) && entry("cuMemMap", (void **)&vmm.map) &&
                 entry("cuMemUnmap", (void **)&vmm.unmap) && entry("cuMemSetAccess", (void **)&vmm.access) &&
                 entry("cuMemGetAllocationGranularity", (void **)&vmm.gran);
        cudaGetLastError();
    }
    pthread_mutex_unlock(&vmm_lock);
    return vmm.ok;
}

/* The host NUMA node closest to the GPU, where its host part belongs (on
 * a machine with several sockets the other node's memory is a link
 * further), or -1: none known, VMM cannot place on it, or
 * CLEAVE_TIER_NUMA=0. */
static int host_node(const cuda_device *d) {
    if (!options_get()->tier_numa) return -1;
    int node = -1, vmm_numa = 0;
    if (cudaDeviceGetAttribute(&node, cudaDevAttrHostNumaId, d->ordinal) != cudaSuccess ||
        cudaDeviceGetAttribute(&vmm_numa, (cudaDeviceAttr)141 /* HOST_NUMA with cuMemCreate */,
                               d->ordinal) != cudaSuccess || !vmm_numa)
        node = -1;
    cudaGetLastError();
    return node;
}

static CUmemAllocationProp prop_of(const cuda_device *d, bool host) {
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    int node = host ? host_node(d) : -1;
    p.location.type = !host ? CU_MEM_LOCATION_TYPE_DEVICE : node >= 0 ? CU_MEM_LOCATION_TYPE_HOST_NUMA
                                                                      : CU_MEM_LOCATION_TYPE_HOST;
    p.location.id = !host ? d->ordinal : node >= 0 ? node : 0;
    return p;
}

static cleave_status drv_fail(CUresult r, const char *call, const cuda_device *d) {
    return err_set(r == CUDA_ERROR_OUT_OF_MEMORY ? CLEAVE_ERR_OOM : CLEAVE_ERR_DEVICE,
                   "%s: tiered KV cache: %s failed (CUresult %d)", d->name, call, (int)r);
}

/* A staging buffer of the device: one per slot and size, shared. */
struct cuda_staging {
    int slot;
    size_t bytes;
    unsigned refs;
    CUmemGenericAllocationHandle h;
    cudaEvent_t filled; /* recorded after its latest fill */
    struct cuda_staging *next;
};

typedef struct {
    CUmemGenericAllocationHandle head_h, tail_h;
    bool head_made, tail_made;
    size_t span;
    struct cuda_staging *staging;
} cuda_tier;

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static size_t cuda_tier_granularity(be_device *dev) {
    cuda_device *d = cuda_dev(dev);
    if (!vmm_ready()) return 0;
    size_t g_dev = 0, g_host = 0;
    CUmemAllocationProp pd = prop_of(d, false), ph = prop_of(d, true);
    if (vmm.gran(&g_dev, &pd, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS) g_dev = 0;
    if (vmm.gran(&g_host, &ph, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS) g_host = 0;
    size_t g = g_dev > g_host ? g_dev : g_host;
    return g ? g : (size_t)2 << 20;
}

/* Gives this device, and every device with peer access to it (a
 * split-mode switch copies caches between GPUs), access to [p, p + n). */
static CUresult grant(const cuda_device *d, CUdeviceptr p, size_t n) {
    int count = 0;
    cudaGetDeviceCount(&count);
    CUmemAccessDesc acc[CUDA_MAX_ORDINALS];
    size_t k = 0;
    for (int o = 0; o < count && o < CUDA_MAX_ORDINALS; o++) {
        int can = o == d->ordinal;
        if (!can) cudaDeviceCanAccessPeer(&can, o, d->ordinal);
        if (!can) continue;
        acc[k].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc[k].location.id = o;
        acc[k].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        k++;
    }
    cudaGetLastError();
    return vmm.access(p, n, acc, k);
}

static cleave_status staging_get(cuda_device *d, int slot, size_t bytes, const char *what,
                                 struct cuda_staging **out) {
    pthread_mutex_lock(&d->lock);
    for (struct cuda_staging *s = d->tier_staging; s; s = s->next)
        if (s->slot == slot && s->bytes == bytes) {
            s->refs++;
            *out = s;
            pthread_mutex_unlock(&d->lock);
            return CLEAVE_OK;
        }
    pthread_mutex_unlock(&d->lock);
    struct cuda_staging *s = (struct cuda_staging *)mem_calloc(1, sizeof *s, "KV staging");
    if (!s) return CLEAVE_ERR_OOM;
    if (be_budget_reserve(&d->mem, bytes, what, d->name)) {
        free(s);
        return CLEAVE_ERR_OOM;
    }
    CUmemAllocationProp p = prop_of(d, false);
    CUresult r = bytes ? vmm.create(&s->h, bytes, &p, 0) : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS) {
        be_budget_release(&d->mem, bytes);
        free(s);
        return drv_fail(r, "cuMemCreate (staging)", d);
    }
    cudaError_t e = cudaEventCreateWithFlags(&s->filled, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        if (bytes) vmm.release(s->h);
        be_budget_release(&d->mem, bytes);
        free(s);
        return cuda_fail(e, "staging event", __FILE__, __LINE__);
    }
    s->slot = slot, s->bytes = bytes, s->refs = 1;
    pthread_mutex_lock(&d->lock);
    s->next = d->tier_staging, d->tier_staging = s;
    pthread_mutex_unlock(&d->lock);
    *out = s;
    return CLEAVE_OK;
}

static void staging_put(cuda_device *d, struct cuda_staging *s) {
    if (!s) return;
    pthread_mutex_lock(&d->lock);
    bool last = --s->refs == 0;
    if (last)
        for (struct cuda_staging **p = &d->tier_staging; *p; p = &(*p)->next)
            if (*p == s) {
                *p = s->next;
                break;
            }
    pthread_mutex_unlock(&d->lock);
    if (!last) return;
    if (s->bytes) vmm.release(s->h);
    cudaEventDestroy(s->filled);
    be_budget_release(&d->mem, s->bytes);
    free(s);
}

/* span bytes of address space: `head` bytes of head_h, then `rest` of
 * tail_h; 0 with the error set. */
static CUdeviceptr map_two(const cuda_device *d, size_t span, size_t gran, CUmemGenericAllocationHandle head_h,
                           size_t head, CUmemGenericAllocationHandle tail_h) {
    CUdeviceptr p = 0;
    CUresult r = vmm.reserve(&p, span, gran, 0, 0);
    if (r != CUDA_SUCCESS) {
        drv_fail(r, "cuMemAddressReserve", d);
        return 0;
    }
    bool head_mapped = false, tail_mapped = false;
    if (head && (r = vmm.map(p, head, 0, head_h, 0)) != CUDA_SUCCESS) goto fail;
    head_mapped = head > 0;
    if (span > head && (r = vmm.map(p + head, span - head, 0, tail_h, 0)) != CUDA_SUCCESS) goto fail;
    tail_mapped = span > head;
    if ((r = grant(d, p, span)) != CUDA_SUCCESS) goto fail;
    return p;
fail:
    drv_fail(r, head_mapped && tail_mapped ? "cuMemSetAccess" : "cuMemMap", d);
    if (head_mapped) vmm.unmap(p, head);
    if (tail_mapped) vmm.unmap(p + head, span - head);
    vmm.free_va(p, span);
    return 0;
}

static void cuda_tier_free(be_device *dev, be_tier *t);

/* The staging stream and its start event, made once per device. */
static cleave_status stream_ready(cuda_device *d) {
    pthread_mutex_lock(&d->lock);
    cudaError_t e = cudaSuccess;
    if (!d->tier_stream) e = cudaStreamCreateWithFlags(&d->tier_stream, cudaStreamNonBlocking);
    if (e == cudaSuccess && !d->tier_issued) e = cudaEventCreateWithFlags(&d->tier_issued, cudaEventDisableTiming);
    pthread_mutex_unlock(&d->lock);
    return e == cudaSuccess ? CLEAVE_OK : cuda_fail(e, "tiered KV cache: staging stream", __FILE__, __LINE__);
}

static cleave_status cuda_tier_alloc(be_device *dev, size_t bytes, size_t head, int slot,
                                     const char *what, be_tier *out) {
    cuda_device *d = cuda_dev(dev);
    memset(out, 0, sizeof *out);
    if (!what) what = "tiered KV cache";
    if (!vmm_ready())
        return err_set(CLEAVE_ERR_UNSUPPORTED, "%s: the driver offers no virtual memory calls: no tiered KV cache",
                       d->name);
    size_t gran = cuda_tier_granularity(dev);
    if (!bytes || head > bytes || head % gran)
        return err_set(CLEAVE_ERR_INVALID_ARG, "%s: %zu of %zu bytes in device memory (a multiple of %zu)", what,
                       head, bytes, gran);
    cudaSetDevice(d->ordinal);
    cleave_status sst = stream_ready(d);
    if (sst) return sst;
    size_t span = round_up(bytes, gran), tail = span - head;
    cuda_tier *t = (cuda_tier *)mem_calloc(1, sizeof *t, what);
    if (!t) return CLEAVE_ERR_OOM;
    t->span = span;
    out->impl = t;
    out->bytes = bytes, out->head = head;
    if (be_budget_reserve(&d->mem, head, what, d->name)) {
        free(t);
        memset(out, 0, sizeof *out);
        return CLEAVE_ERR_OOM;
    }
    cleave_status st = staging_get(d, slot, tail, what, &t->staging);
    CUmemAllocationProp pd = prop_of(d, false), ph = prop_of(d, true);
    CUresult r;
    if (!st && head) {
        if ((r = vmm.create(&t->head_h, head, &pd, 0)) != CUDA_SUCCESS) st = drv_fail(r, "cuMemCreate (device)", d);
        else t->head_made = true;
    }
    if (!st && tail) {
        r = vmm.create(&t->tail_h, tail, &ph, 0);
        if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY && ph.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA) {
            ph.location.type = CU_MEM_LOCATION_TYPE_HOST, ph.location.id = 0; /* any node, then */
            r = vmm.create(&t->tail_h, tail, &ph, 0);
        }
        if (r != CUDA_SUCCESS) st = drv_fail(r, "cuMemCreate (host)", d);
        else t->tail_made = true;
    }
    CUdeviceptr base = 0, alias = 0;
    if (!st && !(base = map_two(d, span, gran, t->head_h, head, t->tail_h))) st = CLEAVE_ERR_DEVICE;
    out->base = (void *)base;
    if (!st && !(alias = map_two(d, span, gran, t->head_h, head, t->staging->h))) st = CLEAVE_ERR_DEVICE;
    out->alias = (void *)alias;
    if (st) {
        cuda_tier_free(dev, out);
        return st;
    }
    be_budget_held(&d->mem);
    return CLEAVE_OK;
}

static cleave_status cuda_tier_stage(be_device *dev, const be_tier *t, size_t used) {
    cuda_device *d = cuda_dev(dev);
    if (used > t->bytes)
        return err_set(CLEAVE_ERR_INVALID_ARG, "tiered KV cache: %zu bytes staged of %zu", used, t->bytes);
    if (used <= t->head) return CLEAVE_OK;
    const cuda_tier *ct = (const cuda_tier *)t->impl;
    /* after everything queued so far (the layer that last read this
     * staging among it), beside everything queued later */
    CUDA_TRY(cudaEventRecord(d->tier_issued, d->stream));
    CUDA_TRY(cudaStreamWaitEvent(d->tier_stream, d->tier_issued, 0));
    CUDA_TRY(cudaMemcpyAsync((char *)t->alias + t->head, (const char *)t->base + t->head, used - t->head,
                             cudaMemcpyDefault, d->tier_stream));
    CUDA_TRY(cudaEventRecord(ct->staging->filled, d->tier_stream));
    return CLEAVE_OK;
}

static cleave_status cuda_tier_join(be_device *dev, const be_tier *t) {
    cuda_device *d = cuda_dev(dev);
    const cuda_tier *ct = (const cuda_tier *)t->impl;
    if (!ct) return err_set(CLEAVE_ERR_INVALID_ARG, "tiered KV cache: join of a freed buffer");
    CUDA_TRY(cudaStreamWaitEvent(d->stream, ct->staging->filled, 0));
    return CLEAVE_OK;
}

/* The buffers one persist launch covers: K and V of a layer. */
#define PERSIST_MAX 2
struct persist_set {
    const char *alias[PERSIST_MAX];
    char *base[PERSIST_MAX];
};

/* Block (i, j): the bytes of cell i's row past head in buffer j, alias to
 * base (W-byte words). */
template <typename W>
__global__ void k_tier_persist(persist_set set, size_t head, size_t row_bytes, const int32_t *cells) {
    cuda_pdl_wait();
    size_t lo = (size_t)cells[blockIdx.x] * row_bytes, hi = lo + row_bytes;
    if (hi <= head) return;
    if (lo < head) lo = head;
    const W *src = (const W *)(set.alias[blockIdx.y] + lo);
    W *dst = (W *)(set.base[blockIdx.y] + lo);
    for (size_t i = threadIdx.x; i < (hi - lo) / sizeof(W); i += blockDim.x) dst[i] = src[i];
}

static cleave_status cuda_tier_persist(be_device *dev, const be_tier *t, size_t n_t,
                                       size_t row_bytes, const int32_t *cells, size_t n) {
    cuda_device *d = cuda_dev(dev);
    if (!n || !n_t || t[0].head >= t[0].bytes) return CLEAVE_OK;
    if (!cells || !row_bytes || n > 0x7fffffffu)
        return err_set(CLEAVE_ERR_INVALID_ARG, "tiered KV cache: persisting %zu rows", n);
    for (size_t j0 = 0; j0 < n_t; j0 += PERSIST_MAX) {
        persist_set set = {};
        unsigned m = 0;
        for (; m < PERSIST_MAX && j0 + m < n_t; m++) {
            if (t[j0 + m].head != t[0].head || t[j0 + m].bytes != t[0].bytes)
                return err_set(CLEAVE_ERR_INVALID_ARG, "tiered KV cache: persisting buffers of unlike shapes");
            set.alias[m] = (const char *)t[j0 + m].alias, set.base[m] = (char *)t[j0 + m].base;
        }
        /* head is a multiple of the granularity, so row_bytes alone decides
         * which word every row's part past head is made of */
        dim3 grid((unsigned)n, m);
        if (row_bytes % 16 == 0)
            CUDA_LAUNCH(d, k_tier_persist<uint4>, grid, 128, 0, set, t[0].head, row_bytes, cells);
        else if (row_bytes % 4 == 0)
            CUDA_LAUNCH(d, k_tier_persist<uint32_t>, grid, 128, 0, set, t[0].head, row_bytes, cells);
        else
            CUDA_LAUNCH(d, k_tier_persist<unsigned char>, grid, 128, 0, set, t[0].head, row_bytes, cells);
    }
    return CLEAVE_OK;
}

static void cuda_tier_free(be_device *dev, be_tier *t) {
    cuda_tier *ct = t ? (cuda_tier *)t->impl : NULL;
    if (!ct) return;
    cuda_device *d = cuda_dev(dev);
    cudaSetDevice(d->ordinal);
    cudaStreamSynchronize(d->stream); /* copies and kernels may still use it */
    if (d->tier_stream) cudaStreamSynchronize(d->tier_stream);
    if (t->base) vmm.unmap((CUdeviceptr)t->base, ct->span), vmm.free_va((CUdeviceptr)t->base, ct->span);
    if (t->alias) vmm.unmap((CUdeviceptr)t->alias, ct->span), vmm.free_va((CUdeviceptr)t->alias, ct->span);
    if (ct->head_made) vmm.release(ct->head_h);
    if (ct->tail_made) vmm.release(ct->tail_h);
    staging_put(d, ct->staging);
    be_budget_release(&d->mem, t->head);
    cudaGetLastError();
    free(ct);
    memset(t, 0, sizeof *t);
}

const be_tier_ops cuda_tier_ops = {
    .granularity = cuda_tier_granularity,
    .alloc = cuda_tier_alloc,
    .stage = cuda_tier_stage,
    .join = cuda_tier_join,
    .persist = cuda_tier_persist,
    .free = cuda_tier_free,
};

void cuda_tier_destroy(cuda_device *d) {
    for (struct cuda_staging *s = d->tier_staging, *next; s; s = next) { /* of tiers never freed */
        next = s->next;
        if (s->bytes) vmm.release(s->h);
        cudaEventDestroy(s->filled);
        free(s);
    }
    d->tier_staging = NULL;
    if (d->tier_stream) cudaStreamSynchronize(d->tier_stream), cudaStreamDestroy(d->tier_stream);
    if (d->tier_issued) cudaEventDestroy(d->tier_issued);
    d->tier_stream = NULL, d->tier_issued = NULL;
}
