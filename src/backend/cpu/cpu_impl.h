/* Internals shared by the CPU device's files: the device struct (cpu.c owns
 * its memory accounting and lifetime) and the ops cpu_ops.c implements. Ops
 * on one device run one at a time (like one stream); alloc/free/mem_stats
 * may be called from any thread. */
#ifndef CLEAVE_CPU_IMPL_H
#define CLEAVE_CPU_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"
#include "threadpool.h"

typedef struct cpu_block cpu_block;

typedef struct cpu_device {
    be_device base;
    char name[64];
    int n_threads;
    bool simd; /* AVX2 kernels: the CPU has them and CLEAVE_NO_SIMD is not set */
    threadpool *pool;

    pthread_mutex_t mu; /* guards used, peak and the live list */
    size_t used, peak, budget;
    cpu_block *live; /* every allocation still held, so destroy can free it */
    struct cpu_staging *staging; /* tiered KV cache: staging buffers by slot and size (cpu_tier.c) */

    /* Op scratch (dequantized weight panels, attention scores): grown on
     * demand, never shrunk, not counted against the budget. */
    void *scratch;
    size_t scratch_bytes;
    size_t *thread_tag; /* [n_threads]: which weight panel a thread holds */
} cpu_device;

static inline cpu_device *cpu_dev(be_device *d) { return (cpu_device *)d->impl; }

/* Counts bytes against the device's budget (CLEAVE_ERR_OOM naming `what`
 * when they do not fit), and gives them back. */
cleave_status cpu_reserve(cpu_device *c, size_t bytes, const char *what);
cleave_status cpu_reserve_locked(cpu_device *c, size_t bytes, const char *what); /* under mu */
void cpu_unreserve(cpu_device *c, size_t bytes);

/* The tiered KV cache's buffers (cpu_tier.c): the same two tiers and
 * staging as a GPU's, made of shared memory mapped twice, so CI runs the
 * logic a GPU runs. */
size_t cpu_tier_granularity(be_device *d);
cleave_status cpu_tier_alloc(be_device *d, size_t bytes, size_t head, int slot, const char *what,
                             be_tier *out);
cleave_status cpu_tier_stage(be_device *d, const be_tier *t, size_t used);
cleave_status cpu_tier_join(be_device *d, const be_tier *t);
cleave_status cpu_tier_persist(be_device *d, const be_tier *t, size_t n_t, size_t row_bytes,
                               const int32_t *cells, size_t n);
void cpu_tier_free(be_device *d, be_tier *t);
void cpu_tier_destroy(cpu_device *c); /* at the device's end */

/* Scratch of at least bytes, 64-byte aligned; CLEAVE_ERR_OOM if it cannot
 * grow. Contents are not kept across growth. */
cleave_status cpu_scratch(cpu_device *d, size_t bytes, void **out);

cleave_status cpu_op_get_rows(be_device *d, const be_mat *table, const int32_t *ids, size_t n,
                              float *out);
cleave_status cpu_op_rms_norm(be_device *d, const float *x, const float *w, float *y, size_t rows,
                              size_t width, float eps);
cleave_status cpu_op_matmul(be_device *d, const be_mat *w, const float *x, size_t n,
                            const float *bias, float *y);
cleave_status cpu_op_rope(be_device *d, float *x, size_t n, size_t row_width, size_t n_head,
                          size_t head_dim, const int32_t *pos, const be_rope *p);
cleave_status cpu_op_kv_store(be_device *d, const float *src, size_t n, size_t width, void *cache,
                              cleave_type kv_type, const int32_t *cells);
cleave_status cpu_op_attention(be_device *d, const be_attn *a);
cleave_status cpu_op_swiglu(be_device *d, const float *gate, const float *up, float *out, size_t n);
cleave_status cpu_op_add(be_device *d, float *y, const float *x, size_t n);

#endif
