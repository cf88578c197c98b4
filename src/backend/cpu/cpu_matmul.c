/* The CPU device's matmul, y[n][ne1] = x[n][ne0] W^T (+ bias), in two
 * families. f32/f16/bf16 weights take f32 activations: one activation row
 * streams each weight row once through a typed dot (decode, memory-bound);
 * batches run register tiles over row blocks that stay in L2 (prefill).
 * Block-quantized weights take int8 activations, quantized once per call
 * (cpu_qdot.h): every batch size runs the same per-pair integer dot, so a
 * token's logits are the same alone or inside a batch, decode streams the
 * weights at memory speed, and prefill tiles MR activation rows per
 * unpacked weight block. */
#include <string.h>

#include "cpu_dot.h"
#include "cpu_impl.h"
#include "cpu_qdot.h"
#include "base/error.h"
#include "quant/quant.h"

/* Activation rows from which register tiles beat one streamed dot per row. */
#define CPU_MM_TILE_MIN_N 2
/* Target bytes of weights one GEMM task works on: stays in L2 while the
 * activation rows stream past it. */
#define CPU_MM_PANEL_BYTES    (96u * 1024u)
#define CPU_MM_PANEL_MAX_ROWS 48
/* Activation rows per GEMM task (a multiple of the 4-row tile). */
#define CPU_MM_XBLOCK 64
/* Below this much weight data a matmul runs on the calling thread alone:
 * the dispatch would cost more than it saves. */
#define CPU_MM_SERIAL_BYTES (16u * 1024u)
/* Batches up to this many rows take the decode split (all rows per task). */
#define CPU_MM_DECODE_MAX_N 8
/* Activation elements from which quantizing them is split over the pool. */
#define CPU_MM_QUANT_CHUNK 65536

/* ---- f32, f16, bf16 ---------------------------------------------------- */

typedef struct {
    const char *w;
    size_t ne0, ne1, nb1;
    const float *x, *bias;
    float *y;
    size_t n;
    bool simd;
    cpu_dot_fn dot;
    size_t rows_per_task; /* weight rows per task */
    size_t n_xb, xb_rows; /* activation blocks per row block (GEMM path) */
    cleave_type type;
} cpu_mm_ctx;

/* One streamed dot product per (weight row, activation row): the decode
 * shape, where reading each row once at full bandwidth is all that matters. */
static void cpu_mm_dot_task(void *vc, size_t task, int thread) {
    const cpu_mm_ctx *c = vc;
    size_t r0 = task * c->rows_per_task, r1 = cpu_min(c->ne1, r0 + c->rows_per_task);
    for (size_t r = r0; r < r1; r++) {
        const char *row = c->w + r * c->nb1;
        float b = c->bias ? c->bias[r] : 0.0f;
        for (size_t i = 0; i < c->n; i++)
            c->y[i * c->ne1 + r] = c->dot(row, c->x + i * c->ne0, c->ne0) + b;
    }
}

/* Tiles read the weights as stored and convert them in registers: for
 * f16/bf16 that was measured faster at every batch size than converting
 * to an f32 panel first (the tiles are L2-bound and f16 is half the bytes). */
static void cpu_mm_gemm_task(void *vc, size_t task, int thread) {
    const cpu_mm_ctx *c = vc;
    size_t p = task / c->n_xb, xb = task % c->n_xb;
    size_t r0 = p * c->rows_per_task, nr = cpu_min(c->rows_per_task, c->ne1 - r0);
    size_t i0 = xb * c->xb_rows, ni = cpu_min(c->xb_rows, c->n - i0);
    float *y = c->y + i0 * c->ne1 + r0;
    cpu_gemm(c->simd, c->type, c->x + i0 * c->ne0, c->ne0, ni, c->w + r0 * c->nb1, c->nb1, nr,
             c->ne0, y, c->ne1);
    if (c->bias)
        for (size_t i = 0; i < ni; i++)
            for (size_t r = 0; r < nr; r++)
                y[i * c->ne1 + r] += c->bias[r0 + r];
}

static void cpu_matmul_float(cpu_device *d, const be_mat *w, const float *x, size_t n,
                             const float *bias, float *y) {
    cpu_mm_ctx c = {.w = w->data,
                    .ne0 = w->ne0,
                    .ne1 = w->ne1,
                    .nb1 = w->nb1,
                    .x = x,
                    .bias = bias,
                    .y = y,
                    .n = n,
                    .simd = d->simd,
                    .type = w->type};
    size_t nt = (size_t)d->n_threads;
    if (n < CPU_MM_TILE_MIN_N) {
        c.dot = cpu_dot_for(w->type, d->simd);
        /* Several tasks per thread so a thread slowed by a neighbour on a
         * shared machine does not hold the whole op up. */
        c.rows_per_task = cpu_ceil_div(w->ne1, nt * 8);
        if (c.rows_per_task < 16) c.rows_per_task = 16;
        if (w->ne1 * w->nb1 * n < CPU_MM_SERIAL_BYTES) c.rows_per_task = w->ne1;
        threadpool_run(d->pool, cpu_ceil_div(w->ne1, c.rows_per_task), cpu_mm_dot_task, &c);
        return;
    }
    /* Rows per task: a multiple of the 3-row tile whose weights stay in L2
     * while the activation blocks pass, fewer when that leaves threads idle. */
    size_t rows = CPU_MM_PANEL_BYTES / w->nb1 / 3 * 3;
    if (rows < 3) rows = 3;
    if (rows > CPU_MM_PANEL_MAX_ROWS) rows = CPU_MM_PANEL_MAX_ROWS;
    c.xb_rows = n <= CPU_MM_XBLOCK + CPU_MM_XBLOCK / 2 ? n : CPU_MM_XBLOCK;
    c.n_xb = cpu_ceil_div(n, c.xb_rows);
    while (rows > 3 && cpu_ceil_div(w->ne1, rows) * c.n_xb < 4 * nt)
        rows = (rows / 2 + 2) / 3 * 3;
    c.rows_per_task = rows;
    threadpool_run(d->pool, cpu_ceil_div(w->ne1, rows) * c.n_xb, cpu_mm_gemm_task, &c);
}

/* ---- block-quantized weights ------------------------------------------- */

typedef struct {
    const char *w;
    size_t ne0, ne1, nb1;
    const float *x, *bias;
    float *y;
    size_t n;
    bool simd;
    cpu_qkernel k;
    char *xq; /* n quantized activation rows, xs bytes apart */
    size_t xs;
    size_t quant_rows;    /* activation rows per quantization task */
    size_t rows_per_task; /* weight rows per task */
    size_t n_xb, xb_rows; /* activation blocks per row block */
} cpu_qmm_ctx;

static void cpu_qmm_quant_task(void *vc, size_t task, int thread) {
    const cpu_qmm_ctx *c = vc;
    size_t i0 = task * c->quant_rows, i1 = cpu_min(c->n, i0 + c->quant_rows);
    for (size_t i = i0; i < i1; i++)
        cpu_quantize_act(c->simd, c->k.act, c->x + i * c->ne0, c->xq + i * c->xs, c->ne0);
}

static void cpu_qmm_task(void *vc, size_t task, int thread) {
    const cpu_qmm_ctx *c = vc;
    size_t p = task / c->n_xb, xb = task % c->n_xb;
    size_t r0 = p * c->rows_per_task, nr = cpu_min(c->rows_per_task, c->ne1 - r0);
    size_t i0 = xb * c->xb_rows, ni = cpu_min(c->xb_rows, c->n - i0);
    const char *w = c->w + r0 * c->nb1, *xq = c->xq + i0 * c->xs;
    float *y = c->y + i0 * c->ne1 + r0;
    if (c->k.tile) {
        c->k.tile(w, c->nb1, nr, xq, c->xs, ni, c->ne0, y, c->ne1);
    } else { /* the C reference: one dot per pair, the weight row hot in L1 */
        for (size_t r = 0; r < nr; r++)
            for (size_t i = 0; i < ni; i++)
                y[i * c->ne1 + r] = c->k.dot(w + r * c->nb1, xq + i * c->xs, c->ne0);
    }
    if (c->bias)
        for (size_t i = 0; i < ni; i++)
            for (size_t r = 0; r < nr; r++)
                y[i * c->ne1 + r] += c->bias[r0 + r];
}

/* Prefill stays on the integer tiles for every type. Dequantized f32
 * weight panels under cpu_gemm's f32 tiles were measured faster for the
 * 32-wide types (one core, 2048 x 2048, n = 64 and 512: Q4_0 55 vs 42
 * GFLOP/s, Q8_0 64 vs 50, Q5_0 48 vs 28; the 256-wide types are faster as
 * integer tiles: Q4_K 61 vs 52, Q6_K 80 vs 45), but even fed the same
 * quantized activations they agree with the decode dot only to f32
 * rounding, and with int8 activations a last-bit difference can round a
 * later activation the other way: a q8_0 model's logits then depended on
 * the batch by 2e-2 (test_batch_equivalence wants 1e-4). */
static cleave_status cpu_matmul_quant(cpu_device *d, const be_mat *w, const float *x, size_t n,
                                      const float *bias, float *y) {
    cpu_qmm_ctx c = {.w = w->data,
                     .ne0 = w->ne0,
                     .ne1 = w->ne1,
                     .nb1 = w->nb1,
                     .x = x,
                     .bias = bias,
                     .y = y,
                     .n = n,
                     .simd = d->simd,
                     .k = cpu_qkernel_for(w->type, d->simd)};
    c.xs = cpu_act_row_bytes(c.k.act, w->ne0);
    void *scratch;
    cleave_status st = cpu_scratch(d, n * c.xs, &scratch);
    if (st != CLEAVE_OK) return err_wrap(st, "matmul");
    c.xq = scratch;

    /* The activations once for all weight rows and threads. */
    size_t nt = (size_t)d->n_threads;
    c.quant_rows = cpu_ceil_div(CPU_MM_QUANT_CHUNK, w->ne0);
    if (n <= c.quant_rows)
        cpu_qmm_quant_task(&c, 0, 0);
    else
        threadpool_run(d->pool, cpu_ceil_div(n, c.quant_rows), cpu_qmm_quant_task, &c);

    if (n <= CPU_MM_DECODE_MAX_N) {
        /* Decode: every activation row per task, the weights streamed once;
         * several tasks per thread so a thread slowed by a neighbour on a
         * shared machine does not hold the whole op up. */
        c.xb_rows = n, c.n_xb = 1;
        c.rows_per_task = cpu_ceil_div(w->ne1, nt * 8);
        if (c.rows_per_task < 16) c.rows_per_task = 16;
        if (w->ne1 * w->nb1 * n < CPU_MM_SERIAL_BYTES) c.rows_per_task = w->ne1;
    } else {
        /* Prefill: weight rows that stay in L2 while a block of activation
         * rows passes 4 at a time (held in L1), fewer when that leaves
         * threads idle. */
        size_t rows = CPU_MM_PANEL_BYTES / w->nb1;
        if (rows < 4) rows = 4;
        if (rows > CPU_MM_PANEL_MAX_ROWS) rows = CPU_MM_PANEL_MAX_ROWS;
        c.xb_rows = n <= CPU_MM_XBLOCK + CPU_MM_XBLOCK / 2 ? n : CPU_MM_XBLOCK;
        c.n_xb = cpu_ceil_div(n, c.xb_rows);
        while (rows > 4 && cpu_ceil_div(w->ne1, rows) * c.n_xb < 4 * nt)
            rows /= 2;
        c.rows_per_task = rows;
    }
    threadpool_run(d->pool, cpu_ceil_div(w->ne1, c.rows_per_task) * c.n_xb, cpu_qmm_task, &c);
    return CLEAVE_OK;
}

cleave_status cpu_op_matmul(be_device *dev, const be_mat *w, const float *x, size_t n,
                            const float *bias, float *y) {
    cpu_device *d = cpu_dev(dev);
    cleave_status st = cpu_check_mat(d, "matmul", w);
    if (st != CLEAVE_OK) return st;
    if (!x) return cpu_null(d, "matmul", "x");
    if (!y) return cpu_null(d, "matmul", "y");
    if (n == 0) return cpu_zero(d, "matmul", "n");
    if (cpu_act_for(w->type) != CPU_ACT_NONE) return cpu_matmul_quant(d, w, x, n, bias, y);
    cpu_matmul_float(d, w, x, n, bias, y);
    return CLEAVE_OK;
}
