/* The reference of the batched sampling algorithm (sample_rows.h): what a
 * device computes for one row, written plainly. */
#include "sample/sample_rows.h"

#include <stdlib.h>

#include "base/error.h"
#include "sample/sample_math.h"

cleave_status sample_rows_check(const float *logits, size_t ld, size_t n_rows, uint32_t n_vocab,
                                const sample_row *rows, const int32_t *tokens, const int *outcomes) {
    if (!n_rows) return CLEAVE_OK;
    if (!logits || !rows || !tokens || !outcomes)
        return err_set(CLEAVE_ERR_INVALID_ARG, "sample: NULL logits, rows, tokens or outcomes");
    if (!n_vocab || ld < n_vocab)
        return err_set(CLEAVE_ERR_INVALID_ARG, "sample: a vocabulary of %u in rows %zu floats apart", n_vocab, ld);
    for (size_t i = 0; i < n_rows; i++)
        if (rows[i].n_pen > SAMPLE_ROW_MAX_PEN || (rows[i].n_pen && (!rows[i].pen_tok || !rows[i].pen_cnt)))
            return err_set(CLEAVE_ERR_INVALID_ARG, "sample: row %zu has %u penalized tokens (at most %d, given)", i,
                           rows[i].n_pen, SAMPLE_ROW_MAX_PEN);
    return CLEAVE_OK;
}

size_t sample_row_scratch(uint32_t n_vocab) { return (size_t)n_vocab * (sizeof(float) + sizeof(int32_t)); }

static const float *g_rank_logits; /* qsort has no context argument */
static int by_rank(const void *a, const void *b) {
    int32_t ia = *(const int32_t *)a, ib = *(const int32_t *)b;
    float la = g_rank_logits[ia], lb = g_rank_logits[ib];
    return sample_ranks_before(la, ia, lb, ib) ? -1 : sample_ranks_before(lb, ib, la, ia) ? 1 : 0;
}

/* Walks ids[0..n) (weights exp((l - max) / T)) until the running sum
 * passes u times the total; the last one if rounding leaves it short. */
static int32_t draw(const float *l, const int32_t *ids, size_t n, float max, float temp, double u) {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += sample_weight_exp((l[ids[i]] - max) / temp);
    double target = u * sum, cum = 0.0;
    for (size_t i = 0; i < n; i++) {
        cum += sample_weight_exp((l[ids[i]] - max) / temp);
        if (target < cum) return ids[i];
    }
    return ids[n - 1];
}

int sample_row_ref(const float *logits, uint32_t n_vocab, const sample_row *r, void *scratch,
                   int32_t *token) {
    float *l = (float *)scratch;
    int32_t *ids = (int32_t *)(l + n_vocab);
    for (uint32_t i = 0; i < n_vocab; i++) l[i] = sample_clean(logits[i]);
    for (uint32_t k = 0; k < r->n_pen; k++) {
        int32_t t = r->pen_tok[k];
        if (t >= 0 && (uint32_t)t < n_vocab)
            l[t] = sample_penalize(l[t], r->pen_cnt[k], r->repeat_penalty, r->frequency_penalty,
                                   r->presence_penalty);
    }
    size_t live = 0;
    float max = -INFINITY;
    int32_t best = -1;
    for (uint32_t i = 0; i < n_vocab; i++) {
        if (l[i] == -INFINITY) continue;
        ids[live++] = (int32_t)i;
        if (best < 0 || l[i] > max) max = l[i], best = (int32_t)i;
    }
    if (!live) return SAMPLE_ROW_EMPTY;
    if (r->temperature <= 0.0f) {
        *token = best;
        return SAMPLE_ROW_OK;
    }
    bool topk = r->top_k > 0 && (size_t)r->top_k < live;
    if (!topk && r->top_p >= 1.0f && r->min_p <= 0.0f) {
        *token = draw(l, ids, live, max, r->temperature, r->u);
        return SAMPLE_ROW_OK;
    }
    /* the ranked set a device would hold */
    float min_thr = r->min_p > 0.0f ? max + logf(r->min_p) : -INFINITY;
    size_t n;
    if (topk) {
        if (r->top_k > SAMPLE_ROW_CAP) return SAMPLE_ROW_HOST;
        n = (size_t)r->top_k;
    } else if (r->top_p < 1.0f) {
        n = live < SAMPLE_ROW_CAP ? live : SAMPLE_ROW_CAP;
    } else {
        n = 0;
        for (size_t i = 0; i < live; i++) n += l[ids[i]] >= min_thr;
        if (n > SAMPLE_ROW_CAP) return SAMPLE_ROW_HOST;
    }
    g_rank_logits = l;
    qsort(ids, live, sizeof *ids, by_rank);
    /* the set's last place is taken among the logits equal to it by
     * lowest id: a device ranks at most the cap of those too */
    size_t ties = 0;
    for (size_t i = 0; i < live; i++) ties += l[ids[i]] == l[ids[n - 1]];
    if (ties > SAMPLE_ROW_CAP) return SAMPLE_ROW_HOST;
    if (r->top_p < 1.0f && n > 1) {
        /* top-p of the top-k set's mass, or of every live token's */
        size_t over = topk ? n : live;
        double mass = 0.0;
        for (size_t i = 0; i < over; i++) mass += sample_weight_exp(l[ids[i]] - max);
        double target = (double)r->top_p * mass, cum = 0.0;
        size_t cut = 0;
        while (cut < n) {
            cum += sample_weight_exp(l[ids[cut++]] - max);
            if (cum >= target) break;
        }
        if (cum < target && !topk) return SAMPLE_ROW_HOST; /* the cut lies past the cap */
        n = cut;
    }
    if (r->min_p > 0.0f && n > 1) {
        size_t keep = 0;
        while (keep < n && l[ids[keep]] >= min_thr) keep++;
        n = keep;
    }
    *token = draw(l, ids, n, max, r->temperature, r->u);
    return SAMPLE_ROW_OK;
}
