/* Sampling a pass's output rows on the device that holds their logits
 * (cleave_decode_batch_sample): the rows' samplers become sample_rows.h
 * rows, the device's `sample` op chooses, and only the tokens come back;
 * a row the device hands back has its logits read, for the caller to
 * sample on the host as after cleave_decode_batch. */
#include "engine_internal.h"

#include <stdlib.h>

#include "base/error.h"
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
    sample_row *row = mem_calloc(rows, sizeof *row, "sampled rows");
    int32_t *tok = mem_alloc(rows * sizeof *tok, "sampled tokens");
    int *out = mem_alloc(rows * sizeof *out, "sampled outcomes");
    bool *fits = mem_alloc(rows * sizeof *fits, "sampled rows' windows");
    int32_t *pen_tok = mem_alloc(rows * SAMPLE_ROW_MAX_PEN * sizeof *pen_tok, "penalized tokens");
    uint32_t *pen_cnt = mem_alloc(rows * SAMPLE_ROW_MAX_PEN * sizeof *pen_cnt, "penalty counts");
    cleave_status st = row && tok && out && fits && pen_tok && pen_cnt ? CLEAVE_OK : CLEAVE_ERR_OOM;
    if (st) { /* no sampler touched */
        free(row), free(tok), free(out), free(fits), free(pen_tok), free(pen_cnt);
        return st;
    }
    for (size_t r = 0; r < rows; r++) {
        cleave_sampler *s = pl->sample_smp[r];
        /* a row without a sampler is sampled greedily and the choice dropped */
        fits[r] = s && sampler_row_prepare(s, &row[r], pen_tok + r * SAMPLE_ROW_MAX_PEN,
                                           pen_cnt + r * SAMPLE_ROW_MAX_PEN);
    }
    st = be_sample(H->dev, H->s.logits, nv, rows, (uint32_t)nv, row, tok, out);
    for (size_t r = 0; r < rows; r++) {
        cleave_sampler *s = pl->sample_smp[r];
        bool here = !st && s && fits[r] && out[r] == SAMPLE_ROW_OK;
        if (here) {
            sampler_row_commit(s, tok[r]);
            pl->sample_out[r] = tok[r];
            continue;
        }
        if (s) sampler_row_abandon(s);
        pl->sample_out[r] = s ? CLEAVE_TOKEN_SAMPLE_ON_HOST : -1;
        if (!st) st = be_read(H->dev, logits_host + r * nv, H->s.logits + r * nv, nv * sizeof(float));
    }
    free(row), free(tok), free(out), free(fits), free(pen_tok), free(pen_cnt);
    return st;
}
