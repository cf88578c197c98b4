/* The CPU device's `sample` op: each row by the algorithm's reference
 * (sample/sample_rows.c), so the op and the host-side glue around it run
 * in CI as they do on a GPU. */
#include "cpu_impl.h"

#include <stdlib.h>

#include "base/mem.h"

cleave_status cpu_sample(be_device *d, const float *logits, size_t ld, size_t n_rows, uint32_t n_vocab,
                         const sample_row *rows, int32_t *tokens, int *outcomes) {
    (void)d;
    cleave_status st = sample_rows_check(logits, ld, n_rows, n_vocab, rows, tokens, outcomes);
    if (st || !n_rows) return st;
    void *scratch = mem_alloc(sample_row_scratch(n_vocab), "sampling scratch");
    if (!scratch) return CLEAVE_ERR_OOM;
    for (size_t i = 0; i < n_rows; i++) {
        tokens[i] = -1;
        outcomes[i] = sample_row_ref(logits + i * ld, n_vocab, &rows[i], scratch, &tokens[i]);
    }
    free(scratch);
    return CLEAVE_OK;
}
