/* One forward pass: the batch's inputs onto the devices, then the pass
 * the placement runs (a recorded decode step, the layer split's
 * pipeline, the tensor split, or block after block), then its logits. */
#include <stdio.h>

#include "engine_internal.h"
#include "base/error.h"
#include "base/mem.h"

/* Token ids onto the devices that look them up: the embedding device, or
 * under a tensor split every active device, each with the ids of its
 * vocab slice (others -1). */
static cleave_status upload_ids(placement *pl, const int32_t *tokens, size_t n) {
    if (pl->plan.mode != CLEAVE_SPLIT_TENSOR) {
        be_device *e = pl->devs[pl->plan.embd_device].dev;
        return be_write(e, pl->devs[pl->plan.embd_device].s.ids, tokens, n * sizeof(int32_t));
    }
    for (size_t d = 0; d < pl->n_dev; d++) {
        engine_device *D = &pl->devs[d];
        if (!D->active) continue;
        int32_t lo = (int32_t)pl->plan.vocab_rows[d].lo, hi = (int32_t)pl->plan.vocab_rows[d].hi;
        for (size_t i = 0; i < n; i++)
            D->ids_host[i] = tokens[i] >= lo && tokens[i] < hi ? tokens[i] - lo : -1;
        TRY(be_write(D->dev, D->s.ids, D->ids_host, n * sizeof(int32_t)));
    }
    return CLEAVE_OK;
}

/* With sequence regions: each token's cells [lo, hi), its sequence's
 * region (a run of one sequence's tokens asks once). */
static cleave_status token_windows(placement *pl, const int32_t *seq, size_t n) {
    if (n > pl->win_cap) {
        int32_t *w = mem_realloc(pl->win_host, 2 * n * sizeof *w, "cell windows");
        if (!w) return CLEAVE_ERR_OOM;
        pl->win_host = w, pl->win_cap = n;
    }
    uint32_t lo = 0, hi = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || seq[i] != seq[i - 1]) kv_cells_window(pl->cells, seq[i], &lo, &hi);
        pl->win_host[2 * i] = (int32_t)lo, pl->win_host[2 * i + 1] = (int32_t)hi;
    }
    return CLEAVE_OK;
}

cleave_status engine_forward(placement *pl, const int32_t *tokens, const int32_t *pos,
                             const int32_t *seq, const int32_t *cells, size_t n, size_t first_out,
                             float *logits_host) {
    const model_hparams *hp = &pl->model->hp;
    step_trace *tr = pl->trace.on ? &pl->trace : NULL;
    if (tr) step_trace_begin(tr, n);
    TRY(upload_ids(pl, tokens, n));
    pl->batch_seq_runs = n > 0;
    for (size_t i = 1; i < n; i++) pl->batch_seq_runs += seq[i] != seq[i - 1];
    if (kv_cells_regions(pl->cells)) TRY(token_windows(pl, seq, n));
    for (size_t i = 0; i < pl->n_dev; i++) {
        if (!pl->devs[i].active) continue;
        be_device *d = pl->devs[i].dev;
        engine_scratch *s = &pl->devs[i].s;
        TRY(be_write(d, s->pos, pos, n * sizeof(int32_t)));
        TRY(be_write(d, s->seq, seq, n * sizeof(int32_t)));
        TRY(be_write(d, s->cells, cells, n * sizeof(int32_t)));
        if (kv_cells_regions(pl->cells)) TRY(be_write(d, s->win, pl->win_host, 2 * n * sizeof(int32_t)));
    }
    TRY(kv_store_sync_cells(&pl->store, pl->cells));
    for (size_t i = 0; i < pl->n_dev; i++)
        if (pl->devs[i].active) be_pass_begin(pl->devs[i].dev, n);
    if (tr) {
        TRY(engine_sync_all(pl));
        step_trace_phase(tr, STEP_INPUTS);
    }

    bool tensor = pl->plan.mode == CLEAVE_SPLIT_TENSOR, replayed = false;
    if (pl->plan.mode == CLEAVE_SPLIT_LAYER && pl->bounce && pl->n_ubatch && n > pl->n_ubatch) {
        TRY(engine_pipeline_forward(pl, n, first_out));
    } else if (engine_graph_takes(pl, n, first_out)) {
        cleave_status st = engine_forward_graph(pl, n);
        replayed = !st;
        if (st) {
            /* Recording failed: say so once, then run op by op for good. */
            fprintf(stderr, "cleave: decode graph unavailable (%s); running op by op\n",
                    cleave_last_error());
            pl->graphs_off = true;
            TRY(engine_sync_all(pl));
            TRY(tensor ? engine_tensor_body(pl, n, first_out, false)
                       : engine_layer_body(pl, n, first_out, false));
        }
    } else {
        TRY(tensor ? engine_tensor_body(pl, n, first_out, false) : engine_layer_body(pl, n, first_out, false));
    }
    if (tr) {
        TRY(engine_sync_all(pl));
        step_trace_phase(tr, STEP_BODY);
    }
    if (pl->sample_smp) {
        TRY(engine_sample_rows(pl, n - first_out, logits_host));
    } else if (tensor) {
        TRY(engine_tensor_logits(pl, n - first_out, logits_host));
    } else {
        engine_device *H = &pl->devs[pl->plan.head_device];
        TRY(be_read(H->dev, logits_host, H->s.logits, (n - first_out) * hp->n_vocab * sizeof(float)));
    }
    TRY(engine_sync_all(pl));
    if (tr) {
        step_trace_phase(tr, STEP_LOGITS);
        step_trace_end(tr, replayed);
    }
    return CLEAVE_OK;
}

