/* Sampling a pass's output rows on the device that holds their logits
 * (cleave_decode_batch_sample): the rows' samplers become sample_rows.h
 * rows, the device's `sample` op chooses, and only the tokens come back;
 * a row the device hands back has its logits read, for the caller to
 * sample on the host as after cleave_decode_batch. */
#include "engine_internal.h"

#include <string.h>

#include "base/mem.h"
#include "base/options.h"
#include "sample/sample_rows.h"

bool engine_samples_on_device(const placement *pl) {
    return !options_get()->host_sampling && pl->plan.mode != CLEAVE_SPLIT_TENSOR &&
           be_has(pl->devs[pl->plan.head_device].dev, BE_CAP_SAMPLE);
}

cleave_status engine_sample_rows(placement *pl, size_t rows, float *logits_host) {
    engine_device *H = &pl->devs[pl->plan.head_device];
    size_t nv = pl->model->hp.n_vocab;
    /* one grow-only block per placement, not six allocations a step:
     * rows, their penalty lists, tokens, outcomes, whether each fits */
    size_t pens = rows * SAMPLE_ROW_MAX_PEN;
    size_t bytes = rows * (sizeof(sample_row) + sizeof(int32_t) + sizeof(int) + sizeof(bool)) +
                   pens * (sizeof(int32_t) + sizeof(uint32_t));
    if (bytes > pl->sample_buf_bytes) {
        void *p = mem_realloc(pl->sample_buf, bytes, "sampled rows");
        if (!p) return CLEAVE_ERR_OOM; /* no sampler touched */
        pl->sample_buf = p, pl->sample_buf_bytes = bytes;
    }
    sample_row *row = pl->sample_buf;
    int32_t *pen_tok = (int32_t *)(row + rows), *tok = pen_tok + pens;
    uint32_t *pen_cnt = (uint32_t *)(tok + rows);
    int *out = (int *)(pen_cnt + pens);
    bool *fits = (bool *)(out + rows);
    for (size_t r = 0; r < rows; r++) {
        cleave_sampler *s = pl->sample_smp[r];
        /* a row without a sampler is sampled greedily and the choice dropped */
        memset(&row[r], 0, sizeof row[r]);
        fits[r] = s && sampler_row_prepare(s, &row[r], pen_tok + r * SAMPLE_ROW_MAX_PEN,
                                           pen_cnt + r * SAMPLE_ROW_MAX_PEN);
    }
    cleave_status st = be_sample(H->dev, H->s.logits, nv, rows, (uint32_t)nv, row, tok, out);
    for (size_t r = 0; r < rows; r++) {
        cleave_sampler *s = pl->sample_smp[r];
        if (!st && s && fits[r] && out[r] == SAMPLE_ROW_OK) {
            sampler_row_commit(s, tok[r]);
            pl->sample_out[r] = tok[r];
            continue;
        }
        if (s) sampler_row_abandon(s);
        pl->sample_out[r] = s ? CLEAVE_TOKEN_SAMPLE_ON_HOST : -1;
        if (!st) st = be_read(H->dev, logits_host + r * nv, H->s.logits + r * nv, nv * sizeof(float));
    }
    return st;
}
