/* Whole-tensor conversion on several threads, for the quantize tool and
 * the generator: rows are handed out in chunks from a shared counter, each
 * worker widens its source rows to f32 (when they are not f32 already) and
 * quantizes them with the single-threaded row quantizer, so the bytes do
 * not depend on the thread count. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "quant.h"

#define CHUNK_WEIGHTS (64 * 1024) /* weights a worker takes at a time */

typedef struct {
    cleave_type dst_type, src_type;
    uint8_t *dst;
    const uint8_t *src;
    size_t n_rows, n_per_row, dst_row, src_row, chunk_rows;
    atomic_size_t next, done;
    atomic_bool stop;
    atomic_bool oom;
} conv_job;

/* Converts chunks until none is left; false when its buffer could not be
 * had (the other workers finish the rows). */
static bool convert_chunks(conv_job *j, bool report, cleave_progress_fn progress, void *user) {
    float *row = NULL;
    if (j->src_type != CLEAVE_TYPE_F32) {
        row = mem_alloc(j->n_per_row * sizeof(float), "quantize row buffer");
        if (!row) return false;
    }
    for (;;) {
        if (atomic_load(&j->stop)) break;
        size_t r0 = atomic_fetch_add(&j->next, j->chunk_rows);
        if (r0 >= j->n_rows) break;
        size_t r1 = r0 + j->chunk_rows < j->n_rows ? r0 + j->chunk_rows : j->n_rows;
        for (size_t r = r0; r < r1; r++) {
            const void *s = j->src + r * j->src_row;
            const float *x = s;
            if (row) {
                quant_dequantize_row(j->src_type, s, row, j->n_per_row);
                x = row;
            }
            quant_quantize_row(j->dst_type, x, j->dst + r * j->dst_row, j->n_per_row);
        }
        size_t done = atomic_fetch_add(&j->done, r1 - r0) + (r1 - r0);
        if (report && progress && !progress((float)((double)done / (double)j->n_rows), user))
            atomic_store(&j->stop, true);
    }
    free(row);
    return true;
}

static void *worker(void *arg) {
    conv_job *j = arg;
    if (!convert_chunks(j, false, NULL, NULL)) atomic_store(&j->oom, true);
    return NULL;
}

cleave_status quant_convert_rows(cleave_type dst_type, void *dst, cleave_type src_type,
                                 const void *src, size_t n_rows, size_t n_per_row, int n_threads,
                                 cleave_progress_fn progress, void *progress_user) {
    size_t dst_row = quant_row_bytes(dst_type, n_per_row), src_row = quant_row_bytes(src_type, n_per_row);
    if (!quant_type_supported(dst_type) || !quant_type_supported(src_type))
        return err_set(CLEAVE_ERR_INVALID_ARG, "convert rows: unsupported type %s -> %s",
                       cleave_type_name(src_type), cleave_type_name(dst_type));
    if (!dst_row || !src_row)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "convert rows: a row of %zu weights is not a whole number of %s or %s blocks",
                       n_per_row, cleave_type_name(src_type), cleave_type_name(dst_type));
    if (n_rows && (!dst || !src)) return err_set(CLEAVE_ERR_INVALID_ARG, "convert rows: NULL buffer");
    conv_job j = {.dst_type = dst_type, .src_type = src_type, .dst = dst, .src = src,
                  .n_rows = n_rows, .n_per_row = n_per_row, .dst_row = dst_row, .src_row = src_row};
    j.chunk_rows = n_per_row >= CHUNK_WEIGHTS ? 1 : CHUNK_WEIGHTS / n_per_row;
    atomic_init(&j.next, 0);
    atomic_init(&j.done, 0);
    atomic_init(&j.stop, false);
    atomic_init(&j.oom, false);
    if (n_threads < 1) n_threads = 1;
    size_t n_chunks = (n_rows + j.chunk_rows - 1) / j.chunk_rows;
    if ((size_t)n_threads > n_chunks) n_threads = n_chunks ? (int)n_chunks : 1;

    pthread_t *tids = n_threads > 1 ? mem_alloc((size_t)(n_threads - 1) * sizeof *tids, "quantize threads") : NULL;
    int started = 0;
    for (int t = 0; tids && t < n_threads - 1; t++, started++)
        if (pthread_create(&tids[t], NULL, worker, &j) != 0) break; /* fewer threads still finish */
    if (!convert_chunks(&j, true, progress, progress_user)) atomic_store(&j.oom, true);
    for (int t = 0; t < started; t++) pthread_join(tids[t], NULL);
    free(tids);
    if (atomic_load(&j.stop)) return err_set(CLEAVE_ERR_IO, "quantize: cancelled");
    /* a worker without a row buffer leaves its rows to the others; only
     * rows nobody converted are an error */
    if (atomic_load(&j.done) < n_rows)
        return err_set(CLEAVE_ERR_OOM, "quantize: no memory for a row buffer");
    err_clear();
    return CLEAVE_OK;
}
