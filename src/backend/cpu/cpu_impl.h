/* Internals shared by the CPU device's files: the device struct (cpu.c owns
 * its lifetime, budget.c counts its memory), the ops cpu_ops.c and
 * cpu_matmul.c implement
 * and the tiered KV cache's table cpu_tier.c fills. Ops on one device run
 * one at a time (like one stream); alloc/free/mem_stats may be called from
 * any thread. */
#ifndef CLEAVE_CPU_IMPL_H
#define CLEAVE_CPU_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"
#include "backend/budget.h"
#include "threadpool.h"

typedef struct cpu_block cpu_block;

typedef struct cpu_device {
    be_device base;
    char name[64];
    int n_threads;
    bool simd; /* AVX2 kernels: the CPU has them and CLEAVE_NO_SIMD is not set */
    threadpool *pool;

    be_budget budget;   /* bytes held by allocations, tiers and staging */
    pthread_mutex_t mu; /* guards the live list and the staging list */
    cpu_block *live; /* every allocation still held, so destroy can free it */
    struct cpu_staging *staging; /* tiered KV cache: staging buffers by slot and size (cpu_tier.c) */

    /* Op scratch (quantized activations, attention scores): grown on
     * demand, never shrunk, not counted against the budget. */
    void *scratch;
    size_t scratch_bytes;
    void *moe_buf; /* the same for the expert ops (cpu_moe.c), which call matmul */
    size_t moe_bytes;
} cpu_device;

static inline cpu_device *cpu_dev(be_device *d) { return (cpu_device *)d->impl; }

/* The tiered KV cache's buffers (cpu_tier.c): the same two tiers and
 * staging as a GPU's, made of shared memory mapped twice, so CI runs the
 * logic a GPU runs. */
extern const be_tier_ops cpu_tier_ops;
/* Routing, expert matmuls and their weighted sum (cpu_moe.c). */
extern const be_moe_ops cpu_moe_ops;
/* The batched sampler's rows by its reference (cpu_sample.c). */
cleave_status cpu_sample(be_device *d, const float *logits, size_t ld, size_t n_rows, uint32_t n_vocab,
                         const sample_row *rows, int32_t *tokens, int *outcomes);
void cpu_tier_destroy(cpu_device *c); /* at the device's end */

/* Scratch of at least bytes, 64-byte aligned (cpu_ops.c); CLEAVE_ERR_OOM
 * if it cannot grow. Contents are not kept across growth. cpu_grow: the
 * same for any grow-only buffer *buf of *cap bytes. */
cleave_status cpu_scratch(cpu_device *d, size_t bytes, void **out);
cleave_status cpu_grow(cpu_device *d, void **buf, size_t *cap, size_t bytes, const char *what, void **out);

/* Argument errors shared by the op files (cpu_ops.c): "device 'x': op:
 * what is NULL / 0", and a weight matrix the kernels can read (known type,
 * rows of whole blocks, aligned, stride at least a row). */
cleave_status cpu_null(cpu_device *d, const char *op, const char *what);
cleave_status cpu_zero(cpu_device *d, const char *op, const char *what);
cleave_status cpu_check_mat(cpu_device *d, const char *op, const be_mat *m);

static inline size_t cpu_min(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t cpu_ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

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
