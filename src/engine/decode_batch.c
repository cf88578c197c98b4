/* cleave_decode_batch: tokens of several sequences in one pass. Only the
 * last token of each sequence needs logits, so the batch is reordered to
 * put those tokens at the end, where the lm head runs on a suffix of rows.
 * Reordering is safe: a pass stores every token's K/V before attention and
 * the mask works from positions and sequences, not from batch order; and
 * moving a sequence's highest position later never puts it before one of
 * its own earlier positions when the batch is split into passes. */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "base/error.h"
#include "base/mem.h"

static cleave_status check(cleave_context *c, const int32_t *tokens, const int32_t *pos,
                           const int32_t *seq, size_t n) {
    if (!c || !tokens || !pos || !seq) return err_set(CLEAVE_ERR_INVALID_ARG, "decode batch: null argument");
    if (n == 0) return err_set(CLEAVE_ERR_INVALID_ARG, "decode batch: no tokens");
    uint32_t n_vocab = c->model->hp.n_vocab;
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= n_vocab)
            return err_set(CLEAVE_ERR_INVALID_ARG, "token %d at index %zu is outside the vocabulary (%u)",
                           tokens[i], i, n_vocab);
        if (pos[i] < 0 || seq[i] < 0)
            return err_set(CLEAVE_ERR_INVALID_ARG, "decode batch: token %zu has a negative position or sequence", i);
    }
    if (n > c->kv.n_ctx - c->kv.n_used)
        return err_set(CLEAVE_ERR_CONTEXT_FULL,
                       "%zu tokens do not fit in the context: %u cells, %u in use, %u free "
                       "(use a larger context with -c)",
                       n, c->kv.n_ctx, c->kv.n_used, c->kv.n_ctx - c->kv.n_used);
    return CLEAVE_OK;
}

typedef struct tok_key {
    int32_t seq, pos;
    size_t i;
} tok_key;

static int by_seq_pos(const void *a, const void *b) {
    const tok_key *x = a, *y = b;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
    if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* keep[i]: token i holds its sequence's highest position in the batch
 * (ties: the later index) */
static cleave_status mark_last(const int32_t *pos, const int32_t *seq, size_t n, bool *keep) {
    tok_key *k = mem_alloc(n * sizeof *k, "batch sort");
    if (!k) return CLEAVE_ERR_OOM;
    for (size_t i = 0; i < n; i++) k[i] = (tok_key){seq[i], pos[i], i}, keep[i] = false;
    qsort(k, n, sizeof *k, by_seq_pos);
    for (size_t j = 0; j < n; j++)
        if (j + 1 == n || k[j + 1].seq != k[j].seq) keep[k[j].i] = true;
    free(k);
    return CLEAVE_OK;
}

cleave_status cleave_decode_batch(cleave_context *c, const int32_t *tokens, const int32_t *pos,
                                  const int32_t *seq, size_t n) {
    cleave_status st = check(c, tokens, pos, seq, n);
    if (st) return st;
    size_t nb = c->plan.n_batch, n_keep = 0, n_vocab = c->model->hp.n_vocab;
    bool *keep = mem_alloc(n * sizeof *keep, "batch logits");
    size_t *order = mem_alloc(n * sizeof *order, "batch order");
    int32_t *t = mem_alloc(nb * 4 * sizeof(int32_t), "batch");
    if (c->row_of_cap < n) {
        int32_t *r = mem_realloc(c->row_of, n * sizeof *r, "batch logits rows");
        if (r) c->row_of = r, c->row_of_cap = n;
    }
    if (!keep || !order || !t || c->row_of_cap < n) {
        st = CLEAVE_ERR_OOM;
        goto out;
    }
    if ((st = mark_last(pos, seq, n, keep))) goto out;
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        if (!keep[i]) order[at++] = i;
    for (size_t i = 0; i < n; i++)
        if (keep[i]) order[at++] = i, n_keep++;
    if ((st = engine_reserve_logits(c, n_keep))) goto out;
    int32_t *bt = t, *bp = t + nb, *bs = t + 2 * nb, *cells = t + 3 * nb;
    size_t first_kept = n - n_keep, row = 0;
    for (size_t i = 0; i < n; i++) c->row_of[i] = -1;
    for (size_t b0 = 0; !st && b0 < n; b0 += nb) {
        size_t m = n - b0 < nb ? n - b0 : nb, got = 0;
        for (size_t k = 0; k < m; k++) {
            size_t i = order[b0 + k];
            bt[k] = tokens[i], bp[k] = pos[i], bs[k] = seq[i];
            if ((st = kv_alloc_cells(&c->kv, 1, seq[i], pos[i], &cells[k]))) break;
            got++;
        }
        /* the kept tokens are this pass's suffix, if any are in it */
        size_t first_out = b0 + m > first_kept ? (first_kept > b0 ? first_kept - b0 : 0) : m - 1;
        if (!st) st = engine_forward(c, bt, bp, bs, cells, m, first_out, c->logits + row * n_vocab);
        if (st) {
            kv_release_cells(&c->kv, cells, got);
            break;
        }
        if (b0 + m > first_kept)
            for (size_t k = first_out; k < m; k++) c->row_of[order[b0 + k]] = (int32_t)row++;
    }
out:
    free(keep);
    free(order);
    free(t);
    if (c) {
        c->logits_rows = st ? 0 : n_keep;
        c->logits_mapped = !st;
        c->logits_all = false;
        c->last_n = st ? 0 : (int32_t)n;
    }
    return st;
}
