/* The tiered KV cache on the CPU: what a GPU does with virtual memory
 * (one address range over device and host memory, a second range over the
 * same device memory followed by a staging buffer), done with shared
 * memory mapped twice. Each part is a memfd: the head, the tail and every
 * staging buffer; base maps head then tail, alias maps head then the
 * staging of its slot. Both tiers are host memory here, but they are
 * distinct memory, so a kernel that read alias without the tail staged
 * first would read stale rows: CI runs the same logic as a GPU and its
 * tests catch what a GPU would get wrong. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu_impl.h"
#include "base/error.h"
#include "base/mem.h"

/* A staging buffer, shared by every tier of its slot and size. */
typedef struct cpu_staging {
    int slot, fd;
    size_t bytes;
    unsigned refs;
    struct cpu_staging *next;
} cpu_staging;

typedef struct cpu_tier {
    int head_fd, tail_fd;
    size_t span; /* bytes of each mapped range, whole pages */
    cpu_staging *staging;
} cpu_tier;

static size_t page_size(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static size_t cpu_tier_granularity(be_device *d) {
    (void)d;
    return page_size();
}

/* An anonymous shared file of `bytes` (whole pages), or -1 (error set). */
static int new_fd(const char *name, size_t bytes) {
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) {
        err_set(CLEAVE_ERR_OOM, "tiered KV cache: memfd_create: %s", strerror(errno));
        return -1;
    }
    if (ftruncate(fd, (off_t)bytes) != 0) {
        err_set(CLEAVE_ERR_OOM, "tiered KV cache: %zu bytes: %s", bytes, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* The staging buffer of slot and size, shared (a reference taken), made
 * if it is the first; NULL with the error set. Under c->mu (the staging
 * list's lock), as is staging_put. */
static cpu_staging *staging_get(cpu_device *c, int slot, size_t bytes, const char *what) {
    for (cpu_staging *s = c->staging; s; s = s->next)
        if (s->slot == slot && s->bytes == bytes) {
            s->refs++;
            return s;
        }
    cpu_staging *s = mem_calloc(1, sizeof *s, "KV staging");
    if (!s) return NULL;
    if (be_budget_reserve(&c->budget, bytes, what, c->name)) {
        free(s);
        return NULL;
    }
    s->fd = bytes ? new_fd("cleave-kv-staging", bytes) : -1;
    if (bytes && s->fd < 0) {
        be_budget_release(&c->budget, bytes);
        free(s);
        return NULL;
    }
    s->slot = slot, s->bytes = bytes, s->refs = 1;
    s->next = c->staging, c->staging = s;
    return s;
}

static void staging_put(cpu_device *c, cpu_staging *s) {
    if (!s || --s->refs) return;
    for (cpu_staging **p = &c->staging; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    if (s->fd >= 0) close(s->fd);
    be_budget_release(&c->budget, s->bytes);
    free(s);
}

static void cpu_tier_free(be_device *d, be_tier *t);

/* A range of span bytes: `head` bytes of head_fd, then tail_fd from its
 * start; NULL with the error set. */
static void *map_two(size_t span, int head_fd, size_t head, int tail_fd) {
    void *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) goto fail;
    if (head && mmap(p, head, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, head_fd, 0) == MAP_FAILED)
        goto unmap;
    if (span > head && mmap((char *)p + head, span - head, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                            tail_fd, 0) == MAP_FAILED)
        goto unmap;
    return p;
unmap:
    err_set(CLEAVE_ERR_OOM, "tiered KV cache: mapping %zu bytes: %s", span, strerror(errno));
    munmap(p, span);
    return NULL;
fail:
    err_set(CLEAVE_ERR_OOM, "tiered KV cache: reserving %zu bytes: %s", span, strerror(errno));
    return NULL;
}

static cleave_status cpu_tier_alloc(be_device *d, size_t bytes, size_t head, int slot,
                                    const char *what, be_tier *out) {
    cpu_device *c = cpu_dev(d);
    memset(out, 0, sizeof *out);
    size_t page = page_size();
    if (!what) what = "tiered KV cache";
    if (!bytes || head > bytes || head % page)
        return err_set(CLEAVE_ERR_INVALID_ARG, "%s: %zu of %zu bytes in device memory (a multiple of %zu)",
                       what, head, bytes, page);
    size_t span = round_up(bytes, page), tail = span - head;
    cpu_tier *t = mem_calloc(1, sizeof *t, what);
    if (!t) return CLEAVE_ERR_OOM;
    t->head_fd = t->tail_fd = -1;
    t->span = span;
    cleave_status st = be_budget_reserve(&c->budget, head, what, c->name);
    if (st) {
        free(t);
        return st;
    }
    pthread_mutex_lock(&c->mu);
    t->staging = staging_get(c, slot, tail, what);
    pthread_mutex_unlock(&c->mu);
    if (!t->staging) {
        be_budget_release(&c->budget, head);
        free(t);
        return CLEAVE_ERR_OOM;
    }
    out->impl = t;
    out->bytes = bytes, out->head = head;
    if ((head && (t->head_fd = new_fd("cleave-kv-head", head)) < 0) ||
        (tail && (t->tail_fd = new_fd("cleave-kv-tail", tail)) < 0) ||
        !(out->base = map_two(span, t->head_fd, head, t->tail_fd)) ||
        !(out->alias = map_two(span, t->head_fd, head, t->staging->fd))) {
        cpu_tier_free(d, out);
        return CLEAVE_ERR_OOM;
    }
    be_budget_held(&c->budget);
    return CLEAVE_OK;
}

static cleave_status cpu_tier_stage(be_device *d, const be_tier *t, size_t used) {
    (void)d;
    if (used > t->bytes)
        return err_set(CLEAVE_ERR_INVALID_ARG, "tiered KV cache: %zu bytes staged of %zu", used, t->bytes);
    if (used > t->head) memcpy((char *)t->alias + t->head, (const char *)t->base + t->head, used - t->head);
    return CLEAVE_OK;
}

/* Ops run as they are called here, so the copy is done when this returns. */
static cleave_status cpu_tier_join(be_device *d, const be_tier *t) {
    (void)d, (void)t;
    return CLEAVE_OK;
}

static cleave_status cpu_tier_persist(be_device *d, const be_tier *t, size_t n_t, size_t row_bytes,
                                      const int32_t *cells, size_t n) {
    (void)d;
    if (n && (!cells || !row_bytes)) return err_set(CLEAVE_ERR_INVALID_ARG, "tiered KV cache: persisting rows");
    for (size_t j = 0; j < n_t; j++)
        for (size_t i = 0; i < n; i++) {
            size_t lo = (size_t)cells[i] * row_bytes, hi = lo + row_bytes;
            if (cells[i] < 0 || hi > t[j].bytes)
                return err_set(CLEAVE_ERR_INVALID_ARG, "tiered KV cache: cell %d of %zu bytes", (int)cells[i],
                               t[j].bytes);
            if (hi <= t[j].head) continue;
            if (lo < t[j].head) lo = t[j].head;
            memcpy((char *)t[j].base + lo, (const char *)t[j].alias + lo, hi - lo);
        }
    return CLEAVE_OK;
}

static void cpu_tier_free(be_device *d, be_tier *t) {
    cpu_tier *ct = t ? t->impl : NULL;
    if (!ct) return;
    cpu_device *c = cpu_dev(d);
    if (t->base) munmap(t->base, ct->span);
    if (t->alias) munmap(t->alias, ct->span);
    if (ct->head_fd >= 0) close(ct->head_fd);
    if (ct->tail_fd >= 0) close(ct->tail_fd);
    pthread_mutex_lock(&c->mu);
    staging_put(c, ct->staging);
    pthread_mutex_unlock(&c->mu);
    be_budget_release(&c->budget, t->head);
    free(ct);
    memset(t, 0, sizeof *t);
}

const be_tier_ops cpu_tier_ops = {
    .granularity = cpu_tier_granularity,
    .alloc = cpu_tier_alloc,
    .stage = cpu_tier_stage,
    .join = cpu_tier_join,
    .persist = cpu_tier_persist,
    .free = cpu_tier_free,
};

void cpu_tier_destroy(cpu_device *c) {
    for (cpu_staging *s = c->staging, *next; s; s = next) { /* left by tiers never freed */
        next = s->next;
        if (s->fd >= 0) close(s->fd);
        free(s);
    }
    c->staging = NULL;
}
