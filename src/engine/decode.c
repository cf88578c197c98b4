/* The one decode path: cleave_decode (a run of one sequence's tokens) and
 * cleave_decode_batch (tokens of several sequences) both come here.
 *
 * Every cell the call needs is reserved before the first pass, so a call
 * the cache cannot take is refused with CLEAVE_ERR_CONTEXT_FULL and
 * changes nothing. Only some tokens need logits (each sequence's last, or
 * every token for cleave_decode's all_logits), so the batch is reordered
 * to put those at the end, where the lm head runs on a suffix of rows.
 * Reordering is safe: a pass stores every token's K/V before attention
 * and the mask works from positions and sequences, not from batch order;
 * and moving a sequence's highest position later never puts it before one
 * of its own earlier positions when the batch is split into passes. */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "base/error.h"
#include "base/mem.h"

void engine_unpin_logits(struct cleave_context *c) {
    if (c->logits_pinned_by) be_host_unregister(c->logits_pinned_by, c->logits);
    c->logits_pinned_by = NULL;
}

cleave_status engine_reserve_logits(struct cleave_context *c, size_t rows) {
    if (rows <= c->logits_cap_rows) return CLEAVE_OK;
    size_t bytes = rows * c->model->hp.n_vocab * sizeof(float);
    engine_unpin_logits(c);
    float *p = mem_realloc(c->logits, bytes, "logits");
    if (!p) return CLEAVE_ERR_OOM;
    c->logits = p;
    c->logits_cap_rows = rows;
    /* page-locked, so each step's logits come back at the link's rate (a
     * batch of 32 sequences reads 16 MB of them for a 128k vocabulary);
     * where no device can, they stay pageable */
    for (size_t d = 0; d < c->n_dev && !c->logits_pinned_by; d++)
        if (be_host_register(c->devs[d], c->logits, bytes)) c->logits_pinned_by = c->devs[d];
    return CLEAVE_OK;
}

cleave_status engine_reserve_logits_row(struct cleave_context *c) {
    TRY(engine_reserve_logits(c, 1));
    if (!c->row_of_cap) {
        if (!(c->row_of = mem_alloc(sizeof *c->row_of, "logits rows"))) return CLEAVE_ERR_OOM;
        c->row_of_cap = 1;
    }
    return CLEAVE_OK;
}

cleave_status engine_keep_logits_row(struct cleave_context *c, const float *row) {
    TRY(engine_reserve_logits_row(c));
    memcpy(c->logits, row, (size_t)c->model->hp.n_vocab * sizeof *row);
    c->row_of[0] = 0, c->logits_rows = 1, c->last_n = 1;
    return CLEAVE_OK;
}

static cleave_status check(const cleave_context *c, const int32_t *tokens, const int32_t *pos,
                           const int32_t *seq, size_t n) {
    const model_hparams *hp = &c->model->hp;
    uint32_t n_vocab = hp->n_vocab;
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= n_vocab)
            return err_set(CLEAVE_ERR_INVALID_ARG, "token %d at index %zu is outside the vocabulary (%u)",
                           tokens[i], i, n_vocab);
        if (pos[i] < 0 || seq[i] < 0)
            return err_set(CLEAVE_ERR_INVALID_ARG, "decode: token %zu has a negative position or sequence", i);
        /* attention is full, so a sliding-window model is exact only while
         * no key can lie a window behind a query: positions below the window */
        if (hp->n_swa && !hp->swa_pattern && (uint32_t)pos[i] >= hp->n_swa)
            return err_set(CLEAVE_ERR_CONTEXT_FULL,
                           "decode: position %d is past the model's sliding window of %u tokens "
                           "(%s.attention.sliding_window); cleave has no sliding-window attention",
                           pos[i], hp->n_swa, hp->arch_name);
    }
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
 * (ties: the later index). */
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

/* Cells for every token in batch order: runs of one sequence's
 * consecutive positions take theirs in one call. All or none. */
static cleave_status reserve(kv_cells *t, const size_t *order, const int32_t *pos, const int32_t *seq, size_t n,
                             int32_t *cells) {
    for (size_t a = 0; a < n;) {
        size_t b = a + 1;
        while (b < n && seq[order[b]] == seq[order[a]] && pos[order[b]] == pos[order[a]] + (int32_t)(b - a)) b++;
        cleave_status st = kv_cells_alloc(t, b - a, seq[order[a]], pos[order[a]], cells + a);
        if (st) {
            kv_cells_release(t, cells, a);
            return err_wrap(st, "%zu tokens do not fit (use a larger context with -c)", n);
        }
        a = b;
    }
    return CLEAVE_OK;
}

/* The batch of n tokens, in passes of n_batch. all_logits: every token's
 * logits are kept, else each sequence's last. progress: report each pass
 * of a multi-pass call to the context's callback (a prompt). */
static cleave_status decode(cleave_context *c, const int32_t *tokens, const int32_t *pos, const int32_t *seq,
                            size_t n, bool all_logits, bool progress, cleave_sampler *const *samplers,
                            int32_t *sampled) {
    cleave_status st = check(c, tokens, pos, seq, n);
    if (st) return st;
    placement *pl = c->pl;
    size_t nb = pl->plan.n_batch, n_keep = 0, n_vocab = c->model->hp.n_vocab;
    bool *keep = mem_alloc(n * sizeof *keep, "batch logits");
    size_t *order = mem_alloc(n * sizeof *order, "batch order");
    int32_t *cells = mem_alloc(n * sizeof *cells, "batch cells");
    int32_t *t = mem_alloc(nb * 3 * sizeof(int32_t), "batch");
    /* sampled where the logits are: one pass, one head device that can */
    bool dev_sample = samplers && n <= nb && engine_samples_on_device(pl);
    cleave_sampler **row_smp = dev_sample ? mem_alloc(n * sizeof *row_smp, "rows' samplers") : NULL;
    int32_t *row_tok = dev_sample ? mem_alloc(n * sizeof *row_tok, "rows' tokens") : NULL;
    if (sampled)
        for (size_t i = 0; i < n; i++) sampled[i] = -1;
    if (c->row_of_cap < n) {
        int32_t *r = mem_realloc(c->row_of, n * sizeof *r, "batch logits rows");
        if (r) c->row_of = r, c->row_of_cap = n;
    }
    size_t reserved = 0, done = 0;
    if (!keep || !order || !cells || !t || c->row_of_cap < n || (dev_sample && (!row_smp || !row_tok))) {
        st = CLEAVE_ERR_OOM;
        goto out;
    }
    if (all_logits) {
        for (size_t i = 0; i < n; i++) keep[i] = true;
    } else if ((st = mark_last(pos, seq, n, keep))) {
        goto out;
    }
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        if (!keep[i]) order[at++] = i;
    for (size_t i = 0; i < n; i++)
        if (keep[i]) order[at++] = i, n_keep++;
    if ((st = engine_reserve_logits(c, n_keep))) goto out;
    if ((st = reserve(&c->cells, order, pos, seq, n, cells))) goto out;
    reserved = n;
    int32_t *bt = t, *bp = t + nb, *bs = t + 2 * nb;
    size_t first_kept = n - n_keep, row = 0;
    for (size_t i = 0; i < n; i++) c->row_of[i] = -1;
    for (size_t b0 = 0; !st && b0 < n; b0 += nb) {
        size_t m = n - b0 < nb ? n - b0 : nb;
        for (size_t k = 0; k < m; k++) {
            size_t i = order[b0 + k];
            bt[k] = tokens[i], bp[k] = pos[i], bs[k] = seq[i];
        }
        /* the kept tokens are this pass's suffix, if any are in it; the lm
         * head runs on at least one row (discarded) */
        size_t first_out = b0 + m > first_kept ? (first_kept > b0 ? first_kept - b0 : 0) : m - 1;
        if (dev_sample) {
            for (size_t k = first_out; k < m; k++) row_smp[k - first_out] = samplers[order[b0 + k]];
            pl->sample_smp = row_smp, pl->sample_out = row_tok;
        }
        st = engine_forward(pl, bt, bp, bs, cells + b0, m, first_out, c->logits + row * n_vocab);
        pl->sample_smp = NULL, pl->sample_out = NULL;
        if (st) break;
        done = b0 + m;
        if (b0 + m > first_kept)
            for (size_t k = first_out; k < m; k++) {
                size_t i = order[b0 + k];
                c->row_of[i] = (int32_t)row++;
                if (dev_sample) {
                    sampled[i] = row_tok[k - first_out];
                    if (sampled[i] >= 0) c->row_of[i] = -1; /* its logits stayed on the device */
                } else if (samplers && samplers[i]) {
                    sampled[i] = CLEAVE_TOKEN_SAMPLE_ON_HOST;
                }
            }
        if (progress && pl->progress && n > nb && !pl->progress((float)done / (float)n, pl->progress_user))
            st = err_set(CLEAVE_ERR_INVALID_ARG, "decode cancelled after %zu of %zu tokens", done, n);
    }
out:
    /* the passes not run give their cells back */
    if (st && reserved > done) kv_cells_release(&c->cells, cells + done, reserved - done);
    free(keep);
    free(order);
    free(cells);
    free(t);
    free(row_smp);
    free(row_tok);
    c->logits_rows = st ? 0 : n_keep;
    c->last_n = st ? 0 : (int32_t)n;
    return st;
}

cleave_status cleave_decode_batch(cleave_context *c, const int32_t *tokens, const int32_t *pos,
                                  const int32_t *seq, size_t n) {
    if (!c || !tokens || !pos || !seq) return err_set(CLEAVE_ERR_INVALID_ARG, "decode batch: null argument");
    if (n == 0) return err_set(CLEAVE_ERR_INVALID_ARG, "decode batch: no tokens");
    return decode(c, tokens, pos, seq, n, false, false, NULL, NULL);
}

cleave_status cleave_decode_batch_sample(cleave_context *c, const int32_t *tokens, const int32_t *pos,
                                         const int32_t *seq, size_t n, cleave_sampler *const *samplers,
                                         int32_t *sampled) {
    if (!c || !tokens || !pos || !seq || !samplers || !sampled)
        return err_set(CLEAVE_ERR_INVALID_ARG, "decode batch sample: null argument");
    if (n == 0) return err_set(CLEAVE_ERR_INVALID_ARG, "decode batch sample: no tokens");
    return decode(c, tokens, pos, seq, n, false, false, samplers, sampled);
}

cleave_status cleave_decode(cleave_context *c, const int32_t *tokens, size_t n, int32_t pos0, int32_t seq,
                            bool all_logits) {
    if (!c || (!tokens && n)) return err_set(CLEAVE_ERR_INVALID_ARG, "decode: null argument");
    if (n == 0) return err_set(CLEAVE_ERR_INVALID_ARG, "decode: no tokens");
    if (pos0 < 0 || seq < 0) return err_set(CLEAVE_ERR_INVALID_ARG, "decode: negative position or sequence");
    if ((size_t)pos0 + n > INT32_MAX) return err_set(CLEAVE_ERR_INVALID_ARG, "decode: positions past 2^31");
    int32_t *pos = mem_alloc(n * sizeof *pos, "decode positions");
    int32_t *seqs = mem_alloc(n * sizeof *seqs, "decode sequences");
    cleave_status st = pos && seqs ? CLEAVE_OK : CLEAVE_ERR_OOM;
    for (size_t i = 0; !st && i < n; i++) pos[i] = pos0 + (int32_t)i, seqs[i] = seq;
    if (!st) st = decode(c, tokens, pos, seqs, n, all_logits, true, NULL, NULL);
    free(pos);
    free(seqs);
    return st;
}

const float *cleave_get_logits(cleave_context *c, int32_t i) {
    if (!c || c->logits_rows == 0) return NULL;
    if (i < 0) i += c->last_n;
    if (i < 0 || i >= c->last_n || c->row_of[i] < 0) return NULL;
    return c->logits + (size_t)c->row_of[i] * c->model->hp.n_vocab;
}
