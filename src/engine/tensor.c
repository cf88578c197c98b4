/* The tensor split's forward pass. Every device with a share holds the
 * whole residual stream x and runs every block on its slice: its kv heads
 * (and their query heads) for attention, its FFN rows for the FFN. The o
 * and down projections take the matching input columns, so each device
 * produces a partial n x n_embd sum; an all-reduce adds them and every
 * device applies the same residual add and norm. The lm head is split by
 * vocab rows and the logits are gathered on the host.
 *
 * The embedding table is split by vocab rows too: each device looks up its
 * own tokens and an all-reduce assembles the rows, so a step needs the
 * host only for its inputs and the logits, and a decode step records as
 * one graph per device (the all-reduce kernels of src/comm meet in them). */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "engine_internal.h"
#include "base/error.h"
#include "base/mem.h"


static size_t range_len(plan_range r) { return r.hi - r.lo; }

/* The partial sums of the devices that computed them (attention: those
 * with kv heads; FFN: those with rows) added into the residual stream x of
 * every active device, then h = rms_norm(x) * the norm of each device's
 * slice of layer l that comes next (norm_of(slice)). One fused kernel
 * where the communicator has it for this shape, else the all-reduce and
 * then each device's add and norm. */
static cleave_status reduce_add_norm(placement *pl, size_t n, uint32_t l,
                                     bool attention) {
    const model_hparams *hp = &pl->model->hp;
    float *bufs[CLEAVE_MAX_DEVICES], *xs[CLEAVE_MAX_DEVICES], *hs[CLEAVE_MAX_DEVICES];
    const float *ws[CLEAVE_MAX_DEVICES];
    bool has[CLEAVE_MAX_DEVICES];
    for (size_t d = 0; d < pl->n_dev; d++) {
        engine_device *D = &pl->devs[d];
        bufs[d] = D->active ? D->s.part : NULL;
        xs[d] = D->s.x, hs[d] = D->s.h;
        ws[d] = D->active ? (attention ? pl->slices[d][l].ffn_norm : pl->slices[d][l].next_norm) : NULL;
        has[d] = attention ? range_len(pl->plan.kv_heads[d]) > 0 : range_len(pl->plan.ff_rows[d]) > 0;
    }
    if (comm_can_fuse(pl->comm, n, hp->n_embd))
        return comm_all_reduce_add_norm(pl->comm, bufs, has, xs, ws, hs, n, hp->n_embd, hp->norm_eps);
    TRY(comm_all_reduce_sum(pl->comm, bufs, has, n * hp->n_embd));
    for (size_t d = 0; d < pl->n_dev; d++) {
        engine_device *D = &pl->devs[d];
        if (D->active) TRY(engine_add_norm(pl, D->dev, D->s.x, D->s.part, ws[d], D->s.h, n));
    }
    return CLEAVE_OK;
}

/* The token embeddings: each device looks up the tokens of its vocab
 * slice (zero rows for the others), an all-reduce assembles the rows on
 * every device, and each norms them. */
static cleave_status embed(placement *pl, size_t n) {
    const model_hparams *hp = &pl->model->hp;
    float *bufs[CLEAVE_MAX_DEVICES];
    bool has[CLEAVE_MAX_DEVICES];
    for (size_t d = 0; d < pl->n_dev; d++) {
        engine_device *D = &pl->devs[d];
        has[d] = D->active && range_len(pl->plan.vocab_rows[d]) > 0;
        bufs[d] = D->active ? D->s.x : NULL;
        if (has[d]) TRY(be_get_rows(D->dev, &D->tok_embd, D->s.ids, n, D->s.x));
    }
    TRY(comm_all_reduce_sum(pl->comm, bufs, has, n * hp->n_embd));
    for (size_t d = 0; d < pl->n_dev; d++) {
        engine_device *D = &pl->devs[d];
        if (D->active)
            TRY(be_rms_norm(D->dev, D->s.x, pl->slices[d][0].attn_norm, D->s.h, n,
                                      hp->n_embd, hp->norm_eps));
    }
    return CLEAVE_OK;
}

cleave_status engine_tensor_body(placement *pl, size_t n, size_t first_out, bool graph) {
    const model_hparams *hp = &pl->model->hp;
    size_t G = hp->n_head / hp->n_head_kv;
    TRY(embed(pl, n));
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        for (size_t d = 0; d < pl->n_dev; d++) {
            size_t heads = range_len(pl->plan.kv_heads[d]);
            if (pl->devs[d].active && heads)
                TRY(engine_attention(pl, &pl->slices[d][l], &pl->devs[d].s, l, n, heads * G, heads,
                                     graph, pl->devs[d].s.part));
        }
        TRY(reduce_add_norm(pl, n, l, true));
        for (size_t d = 0; d < pl->n_dev; d++)
            if (pl->devs[d].active && range_len(pl->plan.ff_rows[d]))
                TRY(engine_ffn(pl, &pl->slices[d][l], &pl->devs[d].s, n, pl->devs[d].s.part));
        TRY(reduce_add_norm(pl, n, l, false));
    }
    /* each device's vocab rows of the logits of the wanted rows */
    for (size_t d = 0; d < pl->n_dev; d++) {
        engine_device *D = &pl->devs[d];
        if (D->active && range_len(pl->plan.vocab_rows[d]))
            TRY(be_matmul(D->dev, &D->output, D->s.h + first_out * hp->n_embd,
                                    n - first_out, NULL, D->s.logits));
    }
    return CLEAVE_OK;
}

cleave_status engine_tensor_logits(placement *pl, size_t rows, float *logits_host) {
    size_t n_vocab = pl->model->hp.n_vocab;
    for (size_t d = 0; d < pl->n_dev; d++) {
        engine_device *D = &pl->devs[d];
        size_t v0 = pl->plan.vocab_rows[d].lo, nv = range_len(pl->plan.vocab_rows[d]);
        if (!D->active || !nv) continue;
        if (pl->n_dev == 1 || nv == n_vocab) { /* the whole row: straight in */
            TRY(be_read(D->dev, logits_host, D->s.logits, rows * nv * sizeof(float)));
            continue;
        }
        float *tmp = mem_alloc(rows * nv * sizeof(float), "logits slice");
        if (!tmp) return CLEAVE_ERR_OOM;
        cleave_status st = be_read(D->dev, tmp, D->s.logits, rows * nv * sizeof(float));
        for (size_t r = 0; !st && r < rows; r++)
            memcpy(logits_host + r * n_vocab + v0, tmp + r * nv, nv * sizeof(float));
        free(tmp);
        TRY(st);
    }
    return CLEAVE_OK;
}
