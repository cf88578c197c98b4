/* The CPU device: host memory with a byte budget (budget.c; so tests and
 * the planner can emulate a full device), zero-copy mapping of host
 * weights, a thread pool of its own, and the tables that route ops to
 * cpu_ops.c and cpu_tier.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_dot.h"
#include "cpu_impl.h"
#include "base/error.h"
#include "base/options.h"
#include "base/mem.h"

/* Each allocation carries this header in its first 64 bytes, which keeps the
 * user pointer 64-byte aligned and lets free() know the size without a
 * lookup. The list lets destroy() release what callers leaked. */
#define CPU_HDR   64
#define CPU_MAGIC 0x63707562756c6b31ull

struct cpu_block {
    size_t size;
    uint64_t magic;
    const cpu_device *owner;
    cpu_block *prev, *next;
};
_Static_assert(sizeof(cpu_block) <= CPU_HDR, "cpu_block must fit the header");

/* Far more threads than this is a caller bug, not a machine. */
#define CPU_MAX_THREADS 1024

static const char *cpu_name(be_device *d) { return cpu_dev(d)->name; }

static void cpu_mem_stats(be_device *d, be_mem_stats *out) {
    be_budget_stats(&cpu_dev(d)->budget, out); /* host memory: no device-wide count */
}

static void *cpu_alloc(be_device *d, size_t bytes, const char *what) {
    cpu_device *c = cpu_dev(d);
    if (!what) what = "?";
    if (bytes > SIZE_MAX - CPU_HDR) {
        err_set(CLEAVE_ERR_OOM, "device '%s': cannot allocate %zu bytes for %s", c->name, bytes,
                what);
        return NULL;
    }
    /* Reserve first so two threads cannot both squeeze under the budget. */
    if (be_budget_reserve(&c->budget, bytes, what, c->name)) return NULL;
    cpu_block *b = mem_alloc_aligned(CPU_HDR + bytes, what);
    if (!b) {
        be_budget_release(&c->budget, bytes);
        err_wrap(CLEAVE_ERR_OOM, "device '%s'", c->name);
        return NULL;
    }
    b->size = bytes;
    b->magic = CPU_MAGIC;
    b->owner = c;
    b->prev = NULL;
    /* Peak only after success: a failed request never held memory. */
    be_budget_held(&c->budget);
    pthread_mutex_lock(&c->mu);
    b->next = c->live;
    if (c->live) c->live->prev = b;
    c->live = b;
    pthread_mutex_unlock(&c->mu);
    return (char *)b + CPU_HDR;
}

static void cpu_free(be_device *d, void *p) {
    if (!p) return;
    cpu_device *c = cpu_dev(d);
    cpu_block *b = (cpu_block *)((char *)p - CPU_HDR);
    /* A double free or another device's block: leave it rather than corrupt
     * the accounting (free() cannot report an error). Pointers that alloc
     * did not return at all (e.g. from map_host) must not be passed. */
    if (b->magic != CPU_MAGIC || b->owner != c) return;
    pthread_mutex_lock(&c->mu);
    if (b->prev)
        b->prev->next = b->next;
    else
        c->live = b->next;
    if (b->next) b->next->prev = b->prev;
    pthread_mutex_unlock(&c->mu);
    be_budget_release(&c->budget, b->size);
    b->magic = 0;
    mem_free_aligned(b);
}

static const void *cpu_map_host(be_device *d, const void *host, size_t bytes) { return host; }

static cleave_status cpu_check_copy(be_device *d, const char *op, const void *dst, const void *src,
                                    size_t n) {
    if (n && (!dst || !src))
        return err_set(CLEAVE_ERR_INVALID_ARG, "device '%s': %s of %zu bytes with a NULL pointer",
                       cpu_dev(d)->name, op, n);
    return CLEAVE_OK;
}

static cleave_status cpu_write(be_device *d, void *dst, const void *src, size_t n) {
    cleave_status st = cpu_check_copy(d, "write", dst, src, n);
    if (st == CLEAVE_OK && n) memcpy(dst, src, n);
    return st;
}

static cleave_status cpu_read(be_device *d, void *dst, const void *src, size_t n) {
    cleave_status st = cpu_check_copy(d, "read", dst, src, n);
    if (st == CLEAVE_OK && n) memcpy(dst, src, n);
    return st;
}

static cleave_status cpu_copy(be_device *d, void *dst, const void *src, size_t n) {
    cleave_status st = cpu_check_copy(d, "copy", dst, src, n);
    if (st == CLEAVE_OK && n) memmove(dst, src, n);
    return st;
}

/* Ops run synchronously on the calling thread (helped by the pool). */
static cleave_status cpu_sync(be_device *d) { return CLEAVE_OK; }

/* Ops are synchronous, so an event marks nothing that is still running:
 * any non-NULL token will do. */
static cleave_status cpu_event_record(be_device *d, void **ev) {
    static char done;
    *ev = &done;
    return CLEAVE_OK;
}

static void cpu_event_free(be_device *d, void *ev) {}

/* Virtual CPU devices share the address space: a copy between two is a
 * memcpy, which is what lets CI run the peer-copy paths. */
static cleave_status cpu_copy_from(be_device *d, void *dst, be_device *from, const void *src,
                                   size_t n, void *ready) {
    cleave_status st = cpu_check_copy(d, "copy_from", dst, src, n);
    if (st == CLEAVE_OK && n) memcpy(dst, src, n);
    return st;
}

static cleave_status cpu_copy2d_from(be_device *d, void *dst, size_t dpitch, be_device *from,
                                     const void *src, size_t spitch, size_t width, size_t height,
                                     void *ready) {
    if (!width || !height) return CLEAVE_OK;
    if (height > 1 && (dpitch < width || spitch < width))
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "device '%s': 2-D copy of %zu-byte rows with pitches %zu and %zu",
                       cpu_dev(d)->name, width, spitch, dpitch);
    cleave_status st = cpu_check_copy(d, "copy2d_from", dst, src, width);
    for (size_t r = 0; st == CLEAVE_OK && r < height; r++)
        memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return st;
}

static void cpu_destroy(be_device *d) {
    if (!d) return;
    cpu_device *c = cpu_dev(d);
    threadpool_destroy(c->pool);
    cpu_tier_destroy(c);
    for (cpu_block *b = c->live, *next; b; b = next) {
        next = b->next;
        b->magic = 0;
        mem_free_aligned(b);
    }
    mem_free_aligned(c->scratch);
    mem_free_aligned(c->moe_buf);
    pthread_mutex_destroy(&c->mu);
    be_budget_destroy(&c->budget);
    free(c);
}

static const be_memory_ops cpu_memory_ops = {
    .mem_stats = cpu_mem_stats,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .write = cpu_write,
    .read = cpu_read,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .map_host = cpu_map_host,
    .upload_mat = NULL, /* weights are used as they are stored */
};

static const be_compute_ops cpu_compute_ops = {
    .get_rows = cpu_op_get_rows,
    .rms_norm = cpu_op_rms_norm,
    .matmul = cpu_op_matmul,
    .rope = cpu_op_rope,
    .kv_store = cpu_op_kv_store,
    .attention = cpu_op_attention,
    .swiglu = cpu_op_swiglu,
    .add = cpu_op_add,
};

static const be_peer_ops cpu_peer_ops = {
    .event_record = cpu_event_record,
    .event_free = cpu_event_free,
    .copy_from = cpu_copy_from,
    .copy2d_from = cpu_copy2d_from,
};

/* No fused ops (the engine composes them) and no graphs. */
static const be_ops cpu_ops = {
    .name = cpu_name,
    .destroy = cpu_destroy,
    .memory = &cpu_memory_ops,
    .compute = &cpu_compute_ops,
    .fused = NULL,
    .graph = NULL,
    .peer = &cpu_peer_ops,
    .tier = &cpu_tier_ops,
    .moe = &cpu_moe_ops,
    .sample = cpu_sample,
};

/* CLEAVE_NO_SIMD (options: no_simd) forces the C kernels. */
static bool cpu_simd_disabled(void) { return options_get()->no_simd; }

int be_cpu_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > CPU_MAX_THREADS ? CPU_MAX_THREADS : (int)n;
}

int be_cpu_threads(const be_device *d) {
    return d && d->ops == &cpu_ops ? ((const cpu_device *)d->impl)->n_threads : 0;
}

cleave_status be_cpu_create(const char *name, int n_threads, size_t budget_bytes, be_device **out) {
    if (!out) return err_set(CLEAVE_ERR_INVALID_ARG, "be_cpu_create: out is NULL");
    *out = NULL;
    if (!name || !name[0]) name = "cpu";
    if (n_threads < 0 || n_threads > CPU_MAX_THREADS)
        return err_set(CLEAVE_ERR_INVALID_ARG, "device '%s': %d threads (0..%d allowed)", name,
                       n_threads, CPU_MAX_THREADS);
    if (n_threads == 0) n_threads = be_cpu_cores();
    cpu_device *c = mem_calloc(1, sizeof *c, "CPU device");
    if (!c) return CLEAVE_ERR_OOM;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->n_threads = n_threads;
    c->simd = cpu_simd_available() && !cpu_simd_disabled();
    c->base.ops = &cpu_ops;
    c->base.impl = c;
    cleave_status st = be_budget_init(&c->budget, budget_bytes, name);
    if (st != CLEAVE_OK) {
        free(c);
        return st;
    }
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        be_budget_destroy(&c->budget);
        free(c);
        return err_set(CLEAVE_ERR_DEVICE, "device '%s': cannot create a mutex", name);
    }
    st = threadpool_create(n_threads, &c->pool);
    if (st != CLEAVE_OK) {
        cpu_destroy(&c->base);
        return err_wrap(st, "device '%s'", name);
    }
    *out = &c->base;
    return CLEAVE_OK;
}
