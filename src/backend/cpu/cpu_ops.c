/* The CPU device's ops other than matmul (cpu_matmul.c): argument checks,
 * splitting work into pool tasks, and the loops around the kernels of
 * cpu_dot.c and cpu_vec.c. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_dot.h"
#include "cpu_impl.h"
#include "cpu_vec.h"
#include "backend/rope.h"
#include "base/error.h"
#include "base/mem.h"
#include "quant/quant.h"

/* Elementwise ops split into tasks of this many elements above twice it. */
#define CPU_EW_CHUNK 16384

cleave_status cpu_grow(cpu_device *d, void **buf, size_t *cap, size_t bytes, const char *what, void **out) {
    *out = NULL;
    if (bytes > *cap) {
        /* Grow by half again so a slowly rising size does not reallocate
         * on every call. */
        size_t want = bytes + bytes / 2;
        if (want < bytes) want = bytes;
        void *p = mem_alloc_aligned(want, what);
        if (!p) return err_wrap(CLEAVE_ERR_OOM, "device '%s'", d->name);
        mem_free_aligned(*buf);
        *buf = p;
        *cap = want;
    }
    *out = *buf;
    return CLEAVE_OK;
}

cleave_status cpu_scratch(cpu_device *d, size_t bytes, void **out) {
    return cpu_grow(d, &d->scratch, &d->scratch_bytes, bytes, "CPU op scratch", out);
}

cleave_status cpu_null(cpu_device *d, const char *op, const char *what) {
    return err_set(CLEAVE_ERR_INVALID_ARG, "device '%s': %s: %s is NULL", d->name, op, what);
}

cleave_status cpu_zero(cpu_device *d, const char *op, const char *what) {
    return err_set(CLEAVE_ERR_INVALID_ARG, "device '%s': %s: %s is 0", d->name, op, what);
}

cleave_status cpu_check_mat(cpu_device *d, const char *op, const be_mat *m) {
    if (!m) return cpu_null(d, op, "matrix");
    if (!m->data) return cpu_null(d, op, "matrix data");
    if (m->scales) /* another device's split layout */
        return err_set(CLEAVE_ERR_UNSUPPORTED, "device '%s': %s: split-layout matrix", d->name, op);
    if (!quant_type_supported((uint32_t)m->type))
        return err_set(CLEAVE_ERR_UNSUPPORTED, "device '%s': %s: weight type %s (%d) unsupported",
                       d->name, op, cleave_type_name(m->type), (int)m->type);
    if (m->ne0 == 0 || m->ne1 == 0)
        return err_set(CLEAVE_ERR_INVALID_ARG, "device '%s': %s: empty %zu x %zu matrix", d->name,
                       op, m->ne1, m->ne0);
    size_t rb = quant_row_bytes((uint32_t)m->type, m->ne0);
    if (rb == 0)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "device '%s': %s: row of %zu elements is not whole %s blocks", d->name, op,
                       m->ne0, cleave_type_name(m->type));
    /* Kernels load whole elements (f32, f16, and the f16 scales of every
     * block type: all their block sizes are even); MXFP4 blocks (17 bytes,
     * an exponent byte) are read byte by byte. */
    size_t align = m->type == CLEAVE_TYPE_F32 ? 4 : m->type == CLEAVE_TYPE_MXFP4 ? 1 : 2;
    if ((uintptr_t)m->data % align || m->nb1 % align)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "device '%s': %s: %s data or row stride %zu not %zu-byte aligned", d->name,
                       op, cleave_type_name(m->type), m->nb1, align);
    if (m->nb1 < rb)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "device '%s': %s: row stride %zu below the row size %zu", d->name, op,
                       m->nb1, rb);
    return CLEAVE_OK;
}

/* ---- get_rows ---------------------------------------------------------- */

cleave_status cpu_op_get_rows(be_device *dev, const be_mat *table, const int32_t *ids, size_t n,
                              float *out) {
    cpu_device *d = cpu_dev(dev);
    cleave_status st = cpu_check_mat(d, "get_rows", table);
    if (st != CLEAVE_OK) return st;
    if (!ids) return cpu_null(d, "get_rows", "ids");
    if (!out) return cpu_null(d, "get_rows", "out");
    if (n == 0) return cpu_zero(d, "get_rows", "n");
    /* Check every id before writing anything so a bad batch changes nothing. */
    for (size_t i = 0; i < n; i++)
        if (ids[i] < -1 || (ids[i] >= 0 && (size_t)ids[i] >= table->ne1))
            return err_set(CLEAVE_ERR_INVALID_ARG,
                           "device '%s': get_rows: id %d (index %zu) outside [-1, %zu)", d->name,
                           (int)ids[i], i, table->ne1);
    cpu_dequant_fn deq = cpu_dequant_for(table->type, d->simd);
    const char *base = table->data;
    for (size_t i = 0; i < n; i++) {
        float *o = out + i * table->ne0;
        if (ids[i] < 0)
            memset(o, 0, table->ne0 * sizeof *o); /* a token outside this device's slice */
        else
            deq(base + (size_t)ids[i] * table->nb1, o, table->ne0);
    }
    return CLEAVE_OK;
}

/* ---- rms_norm ---------------------------------------------------------- */

typedef struct {
    const float *x, *w;
    float *y;
    size_t rows, width, rows_per_task;
    float eps;
    bool simd;
} cpu_norm_ctx;

static void cpu_norm_task(void *vc, size_t task, int thread) {
    const cpu_norm_ctx *c = vc;
    size_t r0 = task * c->rows_per_task, r1 = cpu_min(c->rows, r0 + c->rows_per_task);
    for (size_t r = r0; r < r1; r++) {
        const float *x = c->x + r * c->width;
        /* The sum of squares is accumulated in double: exact enough that
         * the SIMD and C paths agree to f32 rounding at any width. */
        double ss = cpu_sum_sq(c->simd, x, c->width);
        float s = (float)(1.0 / sqrt(ss / (double)c->width + (double)c->eps));
        cpu_scale_mul(c->simd, x, s, c->w, c->y + r * c->width, c->width);
    }
}

cleave_status cpu_op_rms_norm(be_device *dev, const float *x, const float *w, float *y, size_t rows,
                              size_t width, float eps) {
    cpu_device *d = cpu_dev(dev);
    if (!x) return cpu_null(d, "rms_norm", "x");
    if (!w) return cpu_null(d, "rms_norm", "w");
    if (!y) return cpu_null(d, "rms_norm", "y");
    if (rows == 0) return cpu_zero(d, "rms_norm", "rows");
    if (width == 0) return cpu_zero(d, "rms_norm", "width");
    if (!(eps >= 0))
        return err_set(CLEAVE_ERR_INVALID_ARG, "device '%s': rms_norm: eps %g", d->name, eps);
    cpu_norm_ctx c = {x, w, y, rows, width, 0, eps, d->simd};
    c.rows_per_task = width >= CPU_EW_CHUNK ? 1 : cpu_ceil_div(CPU_EW_CHUNK, width);
    threadpool_run(d->pool, cpu_ceil_div(rows, c.rows_per_task), cpu_norm_task, &c);
    return CLEAVE_OK;
}

/* ---- rope -------------------------------------------------------------- */

typedef struct {
    float *x;
    size_t n, row_width, n_head, head_dim, half, rows_per_task;
    const int32_t *pos;
    const double *inv_freq;
    bool neox;
    float mscale; /* cos and sin multiplier (1 unless scaled) */
} cpu_rope_ctx;

static void cpu_rope_task(void *vc, size_t task, int thread) {
    const cpu_rope_ctx *c = vc;
    size_t r0 = task * c->rows_per_task, r1 = cpu_min(c->n, r0 + c->rows_per_task);
    /* neox pairs (i, i + half); normal pairs (2i, 2i + 1). */
    size_t stride = c->neox ? 1 : 2, other = c->neox ? c->half : 1;
    for (size_t r = r0; r < r1; r++) {
        float *row = c->x + r * c->row_width;
        for (size_t i = 0; i < c->half; i++) {
            /* theta in double: at positions in the thousands an f32 angle
             * would already be off by ~1e-4 rad. */
            double theta = (double)c->pos[r] * c->inv_freq[i];
            float cs = (float)cos(theta) * c->mscale, sn = (float)sin(theta) * c->mscale;
            for (size_t h = 0; h < c->n_head; h++) {
                float *v = row + h * c->head_dim + i * stride;
                float a = v[0], b = v[other];
                v[0] = a * cs - b * sn;
                v[other] = a * sn + b * cs;
            }
        }
    }
}

cleave_status cpu_op_rope(be_device *dev, float *x, size_t n, size_t row_width, size_t n_head,
                          size_t head_dim, const int32_t *pos, const be_rope *p) {
    cpu_device *d = cpu_dev(dev);
    if (!x) return cpu_null(d, "rope", "x");
    if (!pos) return cpu_null(d, "rope", "pos");
    if (!p) return cpu_null(d, "rope", "params");
    if (n == 0) return cpu_zero(d, "rope", "n");
    if (n_head == 0) return cpu_zero(d, "rope", "n_head");
    if (head_dim == 0) return cpu_zero(d, "rope", "head_dim");
    if (n_head > row_width / head_dim)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "device '%s': rope: %zu heads of %zu do not fit a row of %zu", d->name,
                       n_head, head_dim, row_width);
    if (p->n_rot == 0 || p->n_rot % 2 || p->n_rot > head_dim)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "device '%s': rope: n_rot %zu must be even and in (0, head_dim %zu]",
                       d->name, p->n_rot, head_dim);
    if (!(p->freq_base > 0))
        return err_set(CLEAVE_ERR_INVALID_ARG, "device '%s': rope: freq_base %g", d->name,
                       p->freq_base);
    size_t half = p->n_rot / 2;
    be_rope_prep rp;
    cleave_status st = be_rope_prepare(p, &rp);
    if (st != CLEAVE_OK) return err_wrap(st, "device '%s'", d->name);
    void *scratch;
    st = cpu_scratch(d, half * sizeof(double), &scratch);
    if (st != CLEAVE_OK) return err_wrap(st, "rope");
    /* The per-pair frequencies, scaling included, once per call, not per row. */
    double *inv_freq = scratch;
    for (size_t i = 0; i < half; i++) {
        inv_freq[i] = pow((double)p->freq_base, -2.0 * (double)i / (double)p->n_rot);
        if (p->freq_factors) inv_freq[i] /= (double)p->freq_factors[i];
        inv_freq[i] *= be_rope_pair_scale(&rp, i);
    }
    cpu_rope_ctx c = {x, n, row_width, n_head, head_dim, half, 0, pos, inv_freq, p->neox, rp.mscale};
    size_t per_row = n_head * p->n_rot;
    c.rows_per_task = per_row >= CPU_EW_CHUNK / 4 ? 1 : cpu_ceil_div(CPU_EW_CHUNK / 4, per_row);
    threadpool_run(d->pool, cpu_ceil_div(n, c.rows_per_task), cpu_rope_task, &c);
    return CLEAVE_OK;
}

/* ---- kv_store ---------------------------------------------------------- */

static cleave_status cpu_check_kv_type(cpu_device *d, const char *op, cleave_type t, size_t width,
                                       size_t *row_bytes) {
    if (!quant_type_supported((uint32_t)t))
        return err_set(CLEAVE_ERR_UNSUPPORTED, "device '%s': %s: KV type %s (%d) unsupported",
                       d->name, op, cleave_type_name(t), (int)t);
    *row_bytes = quant_row_bytes((uint32_t)t, width);
    if (*row_bytes == 0)
        return err_set(CLEAVE_ERR_INVALID_ARG, "device '%s': %s: width %zu is not whole %s blocks",
                       d->name, op, width, cleave_type_name(t));
    return CLEAVE_OK;
}

cleave_status cpu_op_kv_store(be_device *dev, const float *src, size_t n, size_t width, void *cache,
                              cleave_type kv_type, const int32_t *cells) {
    cpu_device *d = cpu_dev(dev);
    if (!src) return cpu_null(d, "kv_store", "src");
    if (!cache) return cpu_null(d, "kv_store", "cache");
    if (!cells) return cpu_null(d, "kv_store", "cells");
    if (n == 0) return cpu_zero(d, "kv_store", "n");
    if (width == 0) return cpu_zero(d, "kv_store", "width");
    size_t rb;
    cleave_status st = cpu_check_kv_type(d, "kv_store", kv_type, width, &rb);
    if (st != CLEAVE_OK) return st;
    for (size_t i = 0; i < n; i++)
        if (cells[i] < 0)
            return err_set(CLEAVE_ERR_INVALID_ARG, "device '%s': kv_store: cell %d (index %zu)",
                           d->name, (int)cells[i], i);
    for (size_t i = 0; i < n; i++)
        cpu_quantize_row(d->simd, kv_type, src + i * width, (char *)cache + (size_t)cells[i] * rb,
                         width);
    return CLEAVE_OK;
}

/* ---- attention --------------------------------------------------------- */

typedef struct {
    const be_attn *a;
    size_t row_bytes, head_bytes, group;
    size_t v_row_bytes, v_head_bytes; /* V may have its own type */
    cpu_dot_fn dot;
    cpu_axpy_fn axpy;
    float *scores; /* [n_threads][n_kv] */
    bool simd;
} cpu_attn_ctx;

static void cpu_attn_task(void *vc, size_t task, int thread) {
    const cpu_attn_ctx *c = vc;
    const be_attn *a = c->a;
    size_t t = task / a->n_head, h = task % a->n_head, hd = a->head_dim;
    size_t kv_off = (h / c->group) * c->head_bytes, v_off = (h / c->group) * c->v_head_bytes;
    const float *q = a->q + (t * a->n_head + h) * hd;
    float *out = a->out + (t * a->n_head + h) * hd;
    float *sc = c->scores + (size_t)thread * a->n_kv;
    const char *k = a->k, *v = a->v;
    int32_t pos = a->tok_pos[t], seq = a->tok_seq[t];

    /* Pass 1: scores of visible cells; masked cells get -inf, which the
     * exponential turns into an exact 0. */
    float mx = -INFINITY;
    size_t first = a->n_kv, last = 0, lo = 0, hi = a->n_kv;
    if (a->tok_win) { /* the token's sequence lies in [lo, hi): nothing else to test */
        size_t wl = (size_t)a->tok_win[2 * t], wh = (size_t)a->tok_win[2 * t + 1];
        lo = wl, hi = wh < hi ? wh : hi;
    }
    int32_t oldest = a->window ? pos - (int32_t)a->window + 1 : 0; /* the sliding window's first position */
    if (oldest < 0) oldest = 0;
    for (size_t i = lo; i < hi; i++) {
        if (a->cell_seq[i] == seq && a->cell_pos[i] >= oldest && a->cell_pos[i] <= pos) {
            float s = c->dot(k + i * c->row_bytes + kv_off, q, hd) * a->scale;
            sc[i] = s;
            if (s > mx) mx = s;
            if (first == a->n_kv) first = i;
            last = i;
        } else {
            sc[i] = -INFINITY;
        }
    }
    memset(out, 0, hd * sizeof(float));
    if (first == a->n_kv) return; /* sees nothing (or only a sink): zeros, not NaN */

    /* Pass 2: softmax with the max subtracted, then the weighted V sum,
     * normalized once at the end; a sink adds its share to the sum only. */
    float sink = a->sinks ? a->sinks[h] : -INFINITY;
    if (sink > mx) mx = sink;
    size_t span = last + 1 - first;
    float sum = cpu_exp_sub_sum(c->simd, sc + first, span, mx);
    if (a->sinks) sum += expf(sink - mx);
    for (size_t i = first; i <= last; i++)
        if (sc[i] != 0.0f) c->axpy(v + i * c->v_row_bytes + v_off, sc[i], out, hd);
    cpu_scale_row(c->simd, out, 1.0f / sum, hd);
}

cleave_status cpu_op_attention(be_device *dev, const be_attn *a) {
    cpu_device *d = cpu_dev(dev);
    if (!a) return cpu_null(d, "attention", "params");
    if (!a->q) return cpu_null(d, "attention", "q");
    if (!a->out) return cpu_null(d, "attention", "out");
    if (!a->tok_pos || !a->tok_seq) return cpu_null(d, "attention", "token positions/sequences");
    if (a->n_kv && (!a->k || !a->v)) return cpu_null(d, "attention", "K/V cache");
    if (a->n_kv && (!a->cell_pos || !a->cell_seq))
        return cpu_null(d, "attention", "cell positions/sequences");
    if (a->n_tokens == 0) return cpu_zero(d, "attention", "n_tokens");
    if (a->n_head == 0) return cpu_zero(d, "attention", "n_head");
    if (a->n_head_kv == 0) return cpu_zero(d, "attention", "n_head_kv");
    if (a->head_dim == 0) return cpu_zero(d, "attention", "head_dim");
    if (a->n_head % a->n_head_kv)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "device '%s': attention: n_head %zu is not a multiple of n_head_kv %zu",
                       d->name, a->n_head, a->n_head_kv);
    cpu_attn_ctx c = {.a = a, .group = a->n_head / a->n_head_kv, .simd = d->simd};
    cleave_status st =
        cpu_check_kv_type(d, "attention", a->kv_type, a->n_head_kv * a->head_dim, &c.row_bytes);
    if (st != CLEAVE_OK) return st;
    c.head_bytes = quant_row_bytes((uint32_t)a->kv_type, a->head_dim);
    if (c.head_bytes == 0)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "device '%s': attention: head_dim %zu is not whole %s blocks", d->name,
                       a->head_dim, cleave_type_name(a->kv_type));
    st = cpu_check_kv_type(d, "attention", a->v_type, a->n_head_kv * a->head_dim, &c.v_row_bytes);
    if (st != CLEAVE_OK) return st;
    c.v_head_bytes = quant_row_bytes((uint32_t)a->v_type, a->head_dim);
    if (c.v_head_bytes == 0)
        return err_set(CLEAVE_ERR_INVALID_ARG, "device '%s': attention: head_dim %zu is not whole %s blocks",
                       d->name, a->head_dim, cleave_type_name(a->v_type));
    c.dot = cpu_dot_for(a->kv_type, d->simd);
    c.axpy = cpu_axpy_for(a->v_type, d->simd);
    if (a->n_kv == 0) {
        memset(a->out, 0, a->n_tokens * a->n_head * a->head_dim * sizeof(float));
        return CLEAVE_OK;
    }
    void *scratch;
    st = cpu_scratch(d, (size_t)d->n_threads * a->n_kv * sizeof(float), &scratch);
    if (st != CLEAVE_OK) return err_wrap(st, "attention");
    c.scores = scratch;
    threadpool_run(d->pool, a->n_tokens * a->n_head, cpu_attn_task, &c);
    return CLEAVE_OK;
}

/* ---- swiglu, add ------------------------------------------------------- */

typedef struct {
    const float *a, *b;
    float *out;
    size_t n;
    bool simd;
} cpu_ew_ctx;

static void cpu_swiglu_task(void *vc, size_t task, int thread) {
    const cpu_ew_ctx *c = vc;
    size_t i0 = task * CPU_EW_CHUNK, m = cpu_min(CPU_EW_CHUNK, c->n - i0);
    cpu_swiglu_row(c->simd, c->a + i0, c->b + i0, c->out + i0, m);
}

static void cpu_add_task(void *vc, size_t task, int thread) {
    const cpu_ew_ctx *c = vc;
    size_t i0 = task * CPU_EW_CHUNK, m = cpu_min(CPU_EW_CHUNK, c->n - i0);
    cpu_add_row(c->simd, c->out + i0, c->a + i0, m);
}

/* Small vectors stay on the calling thread; a decode step's vectors are a
 * few thousand floats, cheaper to do than to hand out. */
static size_t cpu_ew_tasks(size_t n) {
    return n < 2 * CPU_EW_CHUNK ? 1 : cpu_ceil_div(n, CPU_EW_CHUNK);
}

cleave_status cpu_op_swiglu(be_device *dev, const float *gate, const float *up, float *out,
                            size_t n) {
    cpu_device *d = cpu_dev(dev);
    if (!gate) return cpu_null(d, "swiglu", "gate");
    if (!up) return cpu_null(d, "swiglu", "up");
    if (!out) return cpu_null(d, "swiglu", "out");
    if (n == 0) return cpu_zero(d, "swiglu", "n");
    cpu_ew_ctx c = {gate, up, out, n, d->simd};
    size_t tasks = cpu_ew_tasks(n);
    if (tasks == 1)
        cpu_swiglu_row(d->simd, gate, up, out, n);
    else
        threadpool_run(d->pool, tasks, cpu_swiglu_task, &c);
    return CLEAVE_OK;
}

cleave_status cpu_op_add(be_device *dev, float *y, const float *x, size_t n) {
    cpu_device *d = cpu_dev(dev);
    if (!y) return cpu_null(d, "add", "y");
    if (!x) return cpu_null(d, "add", "x");
    if (n == 0) return cpu_zero(d, "add", "n");
    cpu_ew_ctx c = {x, NULL, y, n, d->simd};
    size_t tasks = cpu_ew_tasks(n);
    if (tasks == 1)
        cpu_add_row(d->simd, y, x, n);
    else
        threadpool_run(d->pool, tasks, cpu_add_task, &c);
    return CLEAVE_OK;
}
